"""docker/: the image cannot be built here (no Docker engine), so what can be checked without one is:
the Dockerfile's instructions against the issue's requirements and the repository (every package folder is
copied, ports match the container config, torch is the version the project pins), the build-context filter
lets every copied file through, and the two scripts the image runs (entrypoint, health check) behave."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import tomllib
from pathlib import Path

import pytest
from deploy_support import DOCKER, REPO, load_healthcheck
from distro_node.node.config.load import load_config
from distro_node.node.metrics import MetricsServer, NodeMetrics

DOCKERFILE = DOCKER / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def args_of(keyword: str) -> list[str]:
    return [args for kw, args in instructions() if kw == keyword]


def arg_default(name: str) -> str:
    for args in args_of("ARG"):
        key, _, value = args.partition("=")
        if key == name:
            return value
    raise AssertionError(f"no ARG {name}")


def test_base_image_and_torch_are_build_arguments() -> None:
    assert arg_default("BASE_IMAGE") == "python:3.11-slim"
    assert args_of("FROM") == ["${BASE_IMAGE}"]
    assert arg_default("TORCH_INDEX") == "https://download.pytorch.org/whl/cpu"
    # The same torch the project is developed and tested with (the Makefile's install line).
    makefile_pin = re.search(r"pip install --quiet torch==([0-9.]+)", (REPO / "Makefile").read_text())
    assert makefile_pin is not None and arg_default("TORCH_VERSION") == makefile_pin.group(1)
    assert any('--index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"' in run for run in args_of("RUN"))


def test_every_package_folder_is_copied() -> None:
    """pyproject maps import packages onto top-level folders; a folder missing from the image would be an
    ImportError only at run time."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    folders = {path.split("/")[0] for path in pyproject["tool"]["setuptools"]["package-dir"].values()}
    copied = {part for args in args_of("COPY") for part in args.split()[:-1]}
    assert folders <= copied, folders - copied
    sources = {part for args in args_of("COPY") for part in args.split()[:-1]}
    assert {"pyproject.toml", "README.md"} <= sources


def test_copied_files_exist_and_pass_the_context_filter() -> None:
    allowed = {
        line[1:].rstrip("/")
        for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    for args in args_of("COPY"):
        for source in args.split()[:-1]:
            assert (REPO / source).exists(), source
            assert source in allowed, f"{source} is filtered out of the build context"


def test_runtime_settings() -> None:
    assert args_of("USER") == ["distro"]
    assert re.search(r"useradd .*--uid \"\$\{UID\}\"", " ".join(args_of("RUN")))
    assert args_of("ENTRYPOINT") == ['["distro-node-entrypoint"]']
    assert args_of("CMD") == ['["join"]']
    [healthcheck] = args_of("HEALTHCHECK")
    assert "/usr/local/lib/distro-node/healthcheck.py" in healthcheck
    [volumes] = args_of("VOLUME")
    assert "/var/lib/distro-node" in volumes and "/etc/distro-node/keys" in volumes
    env = " ".join(args_of("ENV"))
    assert "DISTRO_NODE_CONFIG=/etc/distro-node/node.toml" in env
    # No other DISTRO_NODE_* in the image: they would override a mounted config file.
    assert re.findall(r"DISTRO_NODE_\w+", env) == ["DISTRO_NODE_CONFIG"]


def test_exposed_ports_are_the_configured_ones() -> None:
    config = load_config(DOCKER / "node.toml", env={})
    [listen] = config.network.listen
    p2p_port = int(listen.rsplit("/", 1)[1])
    [exposed] = args_of("EXPOSE")
    assert set(exposed.split()) == {f"{p2p_port}/tcp", f"{config.metrics.port}/tcp"}
    assert f"CONTAINER_ANNOUNCE_PORT={p2p_port}" in " ".join(args_of("ENV"))
    assert str(config.data_dir) == "/var/lib/distro-node"
    assert str(config.key_file) == "/etc/distro-node/keys/identity.key"
    assert load_healthcheck().DEFAULT_PORT == config.metrics.port


# --- entrypoint.sh ---------------------------------------------------------------------------------------


def run_entrypoint(tmp_path: Path, env: dict[str, str], args: list[str], ip: str = "172.18.0.5") -> list[str]:
    """Run the entrypoint with stand-ins on PATH: `python` answers the container IP, `distro-node` prints
    its arguments and the announce variable, one per line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake_python = bin_dir / "python"
    fake_python.write_text(f"#!/bin/sh\necho {ip}\n")
    fake_node = bin_dir / "distro-node"
    fake_node.write_text('#!/bin/sh\necho "announce=${DISTRO_NODE_NETWORK__ANNOUNCE_ADDRS:-}"\n'
                         'for a in "$@"; do echo "arg=$a"; done\n')
    for script in (fake_python, fake_node):
        script.chmod(0o755)
    full_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", **env}
    done = subprocess.run(["sh", str(DOCKER / "entrypoint.sh"), *args], env=full_env, capture_output=True,
                          text=True, timeout=30, check=True)
    return done.stdout.splitlines()


def test_entrypoint_announces_the_container_address(tmp_path: Path) -> None:
    out = run_entrypoint(tmp_path, {"CONTAINER_ANNOUNCE_PORT": "4747"}, ["join", "--steps", "5 6"])
    assert out == ["announce=/ip4/172.18.0.5/tcp/4747", "arg=join", "arg=--steps", "arg=5 6"]


def test_entrypoint_keeps_an_operator_address(tmp_path: Path) -> None:
    env = {"CONTAINER_ANNOUNCE_PORT": "4747", "DISTRO_NODE_NETWORK__ANNOUNCE_ADDRS": "/ip4/203.0.113.9/tcp/1"}
    assert run_entrypoint(tmp_path, env, ["join"])[0] == "announce=/ip4/203.0.113.9/tcp/1"


def test_entrypoint_can_be_turned_off_and_skips_loopback(tmp_path: Path) -> None:
    assert run_entrypoint(tmp_path, {"CONTAINER_ANNOUNCE_PORT": ""}, ["join"])[0] == "announce="
    assert run_entrypoint(tmp_path, {"CONTAINER_ANNOUNCE_PORT": "4747"}, ["join"], ip="127.0.1.1")[0] == (
        "announce="
    )


# --- healthcheck.py ---------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_healthcheck_against_a_live_node_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    health = load_healthcheck()
    metrics = NodeMetrics(process_metrics=False)
    with MetricsServer(metrics.registry, port=0) as server:
        port = server.port
        assert health.check(port) is None
        monkeypatch.setenv("DISTRO_NODE_METRICS__PORT", str(port))
        assert health.main() == 0
    # Stopped: the same port now refuses.
    assert health.check(port) is not None
    assert health.main() == 1
    monkeypatch.setenv("DISTRO_NODE_METRICS__PORT", str(free_port()))
    assert health.main() == 1
    monkeypatch.setenv("DISTRO_NODE_METRICS__PORT", "nine")
    assert health.main() == 1


def test_healthcheck_rejects_a_foreign_endpoint() -> None:
    """Something else on the port (another exporter) is not a healthy node."""
    from prometheus_client import CollectorRegistry, Gauge

    health = load_healthcheck()
    registry = CollectorRegistry()
    Gauge("other_up", "not ours", registry=registry).set(1)
    with MetricsServer(registry, port=0) as server:
        problem = health.check(server.port)
    assert problem is not None and "not with distro-node metrics" in problem


def test_scripts_are_executable_and_parse() -> None:
    assert os.access(DOCKER / "entrypoint.sh", os.X_OK)
    subprocess.run(["sh", "-n", str(DOCKER / "entrypoint.sh")], check=True, timeout=30)
