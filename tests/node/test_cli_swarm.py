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


def run_swarm(tmp_path: Path, *args: str) -> tuple[int, str, str, Path]:
    """`distro-node swarm ARGS` to completion (return code, stdout, stderr, run dir); on a timeout it is
    interrupted like a user's Ctrl-C, which makes the launcher stop its peers by pid."""
    run_dir = tmp_path / "run"
    argv = [sys.executable, "-m", "distro_node.node.cli.main", "swarm", *args, "--run-dir", str(run_dir),
            "--timeout", "200"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLCONFIGDIR": str(tmp_path / "mpl")}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    return proc.returncode, out, err, run_dir


def test_swarm_of_two_runs_summarises_and_agrees(tmp_path: Path) -> None:
    rc, out, err, run_dir = run_swarm(tmp_path, "--peers", "2", "--steps", "8")
    assert rc == 0, out + err
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


def test_swarm_console_prints_the_ban(tmp_path: Path) -> None:
    """A peer run with --fault scale=100 (bf16 values carry magnitudes) is banned; the console says so."""
    rc, out, err, run_dir = run_swarm(tmp_path, "--peers", "4", "--steps", "12", "--values", "bf16",
                                      "--fault", "3:scale=100", "--round-timeout", "5")
    assert rc == 0, out + err
    first = [line for line in out.splitlines() if line.startswith("ban: peer3 (")]
    assert len(first) == 1 and "low_score" in first[0] and "after step" in first[0], out
    assert "weights identical on every honest peer: yes" in out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["faults"] == {"peer3": "scale=100"}
    assert set(summary["bans"]) == {"peer3"}
    assert {"peer0", "peer1", "peer2"} <= set(summary["bans"]["peer3"])
