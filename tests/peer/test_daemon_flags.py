"""`join`'s founder flags for the schedule and clipping reach the run manifest (so joiners follow them), and
the local flags (device, precision, grad accumulation, data path) never do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from distro_node.node.cli.join import _flags
from distro_node.node.cli.main import build_parser
from distro_node.node.peer.manifest import ManifestError, RoundSettings, RunManifest
from distro_node.node.peer.settings import DEMO_DISTRO_LR, founder_manifest, load_join_settings
from distro_node.node.peer.trainer import Trainer
from distro_node.optimizer.schedule import lr_at
from distro_node.protocol.identity import load_or_create_identity, peer_id_of

CLI = [sys.executable, "-m", "distro_node.node.cli.main", "join"]


def manifest_for(argv: list[str]) -> RunManifest:
    args = build_parser().parse_args(["join", *argv])
    return founder_manifest(load_join_settings(None, _flags(args), env={}), RoundSettings())


def test_schedule_and_clip_flags_reach_the_manifest() -> None:
    manifest = manifest_for(["--schedule", "cosine", "--warmup-steps", "5", "--total-steps", "100",
                             "--min-lr-ratio", "0.2", "--grad-clip", "0.5"])
    schedule = manifest.settings["schedule"]
    assert (schedule["kind"], schedule["warmup_steps"], schedule["total_steps"]) == ("cosine", 5, 100)
    assert schedule["min_lr_ratio"] == 0.2
    assert schedule["lr"] == DEMO_DISTRO_LR  # other schedule fields do not drop the demo learning rate
    assert manifest.grad_clip == 0.5
    # A joiner builds its strategy from the manifest alone and gets the same schedule.
    joined = RunManifest.from_bytes(manifest.to_bytes())
    strategy = Trainer(joined, "joiner").strategy
    config = strategy.config.schedule  # type: ignore[attr-defined]
    assert lr_at(config, 0) == pytest.approx(DEMO_DISTRO_LR / 5)
    assert lr_at(config, 100) == pytest.approx(DEMO_DISTRO_LR * 0.2)
    assert Trainer(joined, "joiner").manifest.grad_clip == 0.5


def test_explicit_lr_wins_and_defaults_leave_the_manifest_as_before() -> None:
    assert manifest_for(["--lr", "0.01", "--warmup-steps", "3"]).settings["schedule"]["lr"] == 0.01
    default = manifest_for([])
    assert default.settings == {"schedule": {"decay_steps": 0, "kind": "constant", "lr": DEMO_DISTRO_LR,
                                             "min_lr_ratio": 0.1, "total_steps": 0, "warmup_steps": 0}}
    assert default.grad_clip == 1.0


def test_local_flags_stay_out_of_the_manifest() -> None:
    base = manifest_for([])
    local = manifest_for(["--device", "cpu", "--precision", "bf16", "--grad-accum", "2"])
    assert local.to_bytes().replace(local.nonce.encode(), b"") == base.to_bytes().replace(base.nonce.encode(),
                                                                                           b"")


def test_cosine_without_a_horizon_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"run\.strategy_settings\.schedule\.total_steps"):
        manifest_for(["--schedule", "cosine", "--warmup-steps", "10"])


def test_help_explains_every_new_flag() -> None:
    text = build_parser()._subparsers._group_actions[0].choices["join"].format_help()  # type: ignore[union-attr]
    for flag, field in [("--device", "[device]"), ("--precision", "[precision]"),
                        ("--grad-accum", "[run.grad_accum]"), ("--data-path", "[run.data.path]"),
                        ("--data-kind", "[run.data.kind]"), ("--grad-clip", "[run.grad_clip]"),
                        ("--schedule", "schedule.kind]"), ("--warmup-steps", "schedule.warmup_steps]"),
                        ("--total-steps", "schedule.total_steps]"),
                        ("--min-lr-ratio", "schedule.min_lr_ratio]")]:
        assert flag in text and field in text.replace("\n", "").replace(" ", ""), flag


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has CUDA: --device cuda is valid here")
@pytest.mark.parametrize(("argv", "message"), [
    (["--device", "cuda"], "error: device: 'cuda' is not available"),
    (["--grad-accum", "3"], "error: run.grad_accum: 3 does not divide the run's batch_size 4"),
    (["--data-kind", "text"], "error: run.data.path: is required"),
])
def test_bad_local_settings_exit_2_before_the_network(tmp_path: Path, argv: list[str], message: str) -> None:
    done = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr


def test_an_open_run_founded_with_a_kept_key_names_it_as_the_chain_root(tmp_path: Path) -> None:
    key = tmp_path / "founder.key"
    keyed = manifest_for(["--key-file", str(key)])
    own = str(peer_id_of(load_or_create_identity(key)))
    assert (keyed.founder, keyed.genesis, keyed.chain_root) == ("", own, own)
    assert RunManifest.from_bytes(keyed.to_bytes()).genesis == own  # in the run id: a joiner checks it
    assert b"genesis" not in manifest_for([]).to_bytes()  # a fresh identity per process names no root
    permissioned = manifest_for(["--key-file", str(key), "--admission", "permissioned"])
    assert (permissioned.founder, permissioned.genesis, permissioned.chain_root) == (own, "", own)
    with pytest.raises(ManifestError, match="genesis"):
        RunManifest(founder=own, genesis=own)
    with pytest.raises(ManifestError, match="genesis"):
        RunManifest(genesis="not-a-peer-id")


def test_max_included_reaches_the_manifest_and_the_round_machine() -> None:
    """K is replicated (part of the run id): a founder's flag goes into the manifest's rounds, a joiner's
    round machine takes it from there; at its default (0: all) it stays out of the bytes, so older run ids
    hold, and spelling it out at 0 is not canonical."""
    args = build_parser().parse_args(["join", "--max-included", "8"])
    bounded = founder_manifest(load_join_settings(None, _flags(args), env={}), None)
    joined = RunManifest.from_bytes(bounded.to_bytes())
    assert joined.rounds.max_included == 8
    assert joined.round_config(1 << 20).max_included == 8
    default = manifest_for([])
    assert b"max_included" not in default.to_bytes() and default.round_config(1 << 20).max_included == 0
    doc = json.loads(default.to_bytes())
    doc["rounds"]["max_included"] = 0
    with pytest.raises(ManifestError, match="canonical"):
        RunManifest.from_bytes(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    with pytest.raises(ManifestError) as bad:
        RunManifest(rounds=RoundSettings(max_included=-1))
    assert bad.value.field == "rounds.max_included"
