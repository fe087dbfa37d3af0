"""`join` reads its settings through the node config: file < DISTRO_NODE_* env < flags, with join's local
defaults (loopback, free ports, no persistent state) only where no layer set a field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from distro_node.node.peer.manifest import RoundSettings
from distro_node.node.peer.settings import DEMO_DISTRO_LR, founder_manifest, load_join_settings

CLI = [sys.executable, "-m", "distro_node.node.cli.main", "join"]


def test_no_config_keeps_the_local_defaults() -> None:
    s = load_join_settings(None, {}, env={})
    assert s.config.network.listen == ("/ip4/127.0.0.1/tcp/0",)
    assert s.config.metrics.port == 0
    assert (s.data_dir, s.key_file, s.checkpoint_dir) == (None, None, None)
    manifest = founder_manifest(s, RoundSettings())
    assert (manifest.batch_size, manifest.seq_len) == (4, 32)
    assert manifest.settings["schedule"]["lr"] == DEMO_DISTRO_LR


def test_layers_file_env_flags(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    config.write_text(f'data_dir = "{tmp_path / "d"}"\n[metrics]\nport = 9500\n[run]\nbatch_size = 2\n'
                      "[checkpoint]\nevery_steps = 7\n")
    env = {"DISTRO_NODE_METRICS__PORT": "9600", "DISTRO_NODE_NETWORK__LISTEN": "/ip4/0.0.0.0/tcp/4747"}
    s = load_join_settings(config, {"metrics.port": 9700, "run.seq_len": 16}, env=env)
    assert s.config.metrics.port == 9700
    assert s.config.network.listen == ("/ip4/0.0.0.0/tcp/4747",)
    assert s.key_file == tmp_path / "d" / "identity.key"
    assert s.checkpoint_dir == tmp_path / "d" / "checkpoints"
    assert s.config.checkpoint.every_steps == 7
    manifest = founder_manifest(s, RoundSettings())
    assert (manifest.batch_size, manifest.seq_len) == (2, 16)


@pytest.mark.parametrize(("argv", "env", "field"), [
    (["--config", "{tmp}/bad.toml"], {}, "bogus"),
    ([], {"DISTRO_NODE_METRICS__PORT": "99999"}, "metrics.port"),
    (["--metrics-port", "-1"], {}, "metrics.port"),
    (["--listen", "not-an-addr"], {}, "network.listen"),
])
def test_bad_config_exits_2_naming_the_field(tmp_path: Path, argv: list[str], env: dict[str, str],
                                             field: str) -> None:
    (tmp_path / "bad.toml").write_text("bogus = 1\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin", **env}, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"error: {field}" in done.stderr


PEER_ID = "12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"


@pytest.mark.parametrize(("bootstrap", "listen"), [
    ((), "/ip4/127.0.0.1/tcp/0"),  # a founder keeps to loopback until told
    ((f"/ip4/127.0.0.1/tcp/4001/p2p/{PEER_ID}",), "/ip4/127.0.0.1/tcp/0"),  # a local swarm
    ((f"/ip4/203.0.113.7/tcp/4001/p2p/{PEER_ID}",), "/ip4/0.0.0.0/tcp/0"),  # peers on other machines
])
def test_join_listens_on_all_interfaces_only_when_its_bootstrap_peer_is_elsewhere(
        bootstrap: tuple[str, ...], listen: str) -> None:
    s = load_join_settings(None, {"network.bootstrap": bootstrap or None}, env={})
    assert s.config.network.listen == (listen,)
    given = load_join_settings(None, {"network.bootstrap": bootstrap or None,
                                      "network.listen": ("/ip4/127.0.0.1/tcp/5000",)}, env={})
    assert given.config.network.listen == ("/ip4/127.0.0.1/tcp/5000",)


def test_upnp_is_on_unless_no_upnp_is_given() -> None:
    from distro_node.node.cli.join import _flags
    from distro_node.node.cli.main import build_parser

    def upnp(*argv: str) -> bool:
        args = build_parser().parse_args(["join", *argv])
        return load_join_settings(None, _flags(args), env={}).config.network.upnp

    assert upnp() is True
    assert upnp("--no-upnp") is False
