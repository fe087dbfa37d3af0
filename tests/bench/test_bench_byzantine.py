"""bench/byzantine.py still runs an attacked swarm to the end and writes what docs/benchmarks.md quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.network, pytest.mark.timeout(400)]


def test_byzantine_bench_quick(tmp_path: Path) -> None:
    out = tmp_path / "byzantine.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "byzantine.py"), "--attacks", "forge-list",
         "--steps", "4", "--warm", "1", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=360, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "wrote" in proc.stdout
    configs = {c["attack"]: c for c in json.loads(out.read_text())["configs"]}
    assert set(configs) == {"forge-list"}  # one attacked swarm: the baselines are the same code path
    c = configs["forge-list"]
    assert c["honest_hashes_equal_every_step"] and c["honest_banned"] == []
    assert c["honest_steps_per_s"] and "slowdown_vs_all_honest" in c
