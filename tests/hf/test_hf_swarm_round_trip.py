"""The acceptance round trip: a Llama made with transformers is imported by a real 3-peer `distro-node swarm`
(`--init-from`), trained 20 steps, exported with `distro-node export`, and reloaded in transformers: its
logits equal our model's on the trained weights and differ from the imported ones."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from distro_node.node.checkpoint.store import load_latest
from distro_node.node.hf.convert import load_hf_checkpoint
from hf_support import TOLERANCE, fixed_batch, hf_logits, make_hf_model, our_logits, save_hf_model

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(600)]

CLI = [sys.executable, "-m", "distro_node.node.cli.main"]
STEPS = 20


def run_cli(args: list[str], tmp_path: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """One `distro-node` command to completion; on a timeout it gets SIGINT like a user's Ctrl-C (the swarm
    launcher then stops its peers by pid), then SIGKILL."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLCONFIGDIR": str(tmp_path / "mpl")}
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_import_train_export_reload(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    original = make_hf_model(seed=11)
    imported_dir = save_hf_model(original, tmp_path / "imported")
    imported = load_hf_checkpoint(imported_dir)

    run_dir = tmp_path / "run"
    swarm = run_cli(["swarm", "--peers", "3", "--steps", str(STEPS), "--init-from", str(imported_dir),
                     "--run-dir", str(run_dir), "--timeout", "420"], tmp_path, timeout=480)
    assert swarm.returncode == 0, swarm.stdout + swarm.stderr
    assert f"summary: {STEPS}/{STEPS} steps on all 3 peers" in swarm.stdout, swarm.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["weights_agree"] is True and summary["preset"] is None
    final_hash = summary["final_weights_hash"]["peer0"]
    events = [json.loads(line) for line in (run_dir / "peer0.jsonl").read_text().splitlines()]
    joined = next(e for e in events if e.get("event") == "joined")
    assert joined["weights_hash"] == imported.sha256  # genesis was the imported checkpoint

    ckpt = load_latest(run_dir / "peer0" / "checkpoints")
    assert ckpt is not None and ckpt.step == STEPS and ckpt.extra["weights_hash"] == final_hash

    out = tmp_path / "exported"
    export = run_cli(["export", "--format", "hf", str(out), "--data-dir", str(run_dir / "peer0")], tmp_path,
                     timeout=120)
    assert export.returncode == 0, export.stdout + export.stderr
    assert final_hash in export.stdout

    reloaded = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tokens = fixed_batch()
    ours = our_logits(imported.config, ckpt.model_state, tokens)
    theirs = hf_logits(reloaded, tokens)
    before = hf_logits(original, tokens)
    diff = float((ours - theirs).abs().max())
    moved = float((theirs - before).abs().max())
    print(f"\nround trip: max |logit diff| ours vs transformers {diff:.3g}; trained vs imported {moved:.3g}")
    assert diff <= TOLERANCE
    assert moved > 1e-2  # 20 steps of training changed what the model computes
    assert not torch.equal(ckpt.model_state["embed"], imported.state["embed"])
