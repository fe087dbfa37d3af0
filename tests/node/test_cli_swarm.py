"""`distro-node swarm` end to end: two real peers, a summary, summary.json and loss.png, identical weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(300)]


def test_swarm_of_two_runs_summarises_and_agrees(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "distro_node.node.cli", "swarm", "--peers", "2", "--steps", "8",
            "--run-dir", str(run_dir), "--timeout", "200"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLCONFIGDIR": str(tmp_path / "mpl")}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # the launcher stops its peers by pid on Ctrl-C
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    assert proc.returncode == 0, out + err
    assert "summary: 8/8 steps on all 2 peers" in out
    assert "weights identical on every peer: yes" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["weights_agree"] is True
    assert len(set(summary["final_weights_hash"].values())) == 1
    assert summary["steps_completed"] == {"peer0": 8, "peer1": 8}
    assert summary["reduction_vs_dense"] > 100
    assert set(summary["exit_codes"].values()) == {0}
    png = run_dir / "loss.png"
    assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
