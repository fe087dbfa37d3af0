"""bench/overlap.py still runs end to end over real `join` processes, in its tiny mode (2 peers, 5 steps).

The bench kills its peer processes by pid itself; the subprocess timeout bounds the whole run. Timing figures
on a loaded CI machine are not asserted, only that all three runs completed and the result is well formed.
Each swarm's wall budget covers two process start-ups (torch import, model build, genesis): with two busy
loops beside the suite on 2 cores a start-up took most of the earlier 15 s, so the budget is 45 s a swarm.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.network
@pytest.mark.timeout(170)
def test_overlap_bench_tiny(tmp_path: Path) -> None:
    out = tmp_path / "overlap.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "overlap.py"), "--peers", "2", "--steps", "5", "--warmup", "2",
         "--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--comm-delay", "0.05", "--wall", "45",
         "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=160, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["peers"] == 2 and doc["comm_delay_s"] == 0.05
    for mode in ("calibration_no_delay", "sequential", "overlapped"):
        assert doc[mode]["steps_measured"] == 2 * 3
        assert doc[mode]["step_s"] > 0
    assert doc["communication_s"] >= 0.05
    assert doc["overlapped_over_max"] > 0 and isinstance(doc["meets_target"], bool)
