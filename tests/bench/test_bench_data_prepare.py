"""bench/data_prepare.py still runs and writes the keys its readers use (a tiny input: this checks the
script, it measures nothing; the figures come from a run on a quiet machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_data_prepare_bench_tiny(tmp_path: Path) -> None:
    out = tmp_path / "data_prepare.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "data_prepare.py"), "--out", str(out), "--megabytes", "0.3",
         "--vocab-size", "1000", "--shard-tokens", "8192", "--eval-fraction", "0.2", "--threads", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wrote" in proc.stdout
    doc = json.loads(out.read_text())
    results = doc["results"]
    assert results["vocab_size"] == 1000 and results["dtype"] == "uint16" and results["shards"] >= 2
    assert set(results["tokens_per_second"]) == {"train_and_shard", "shard_only", "open_verify"}
    assert all(rate > 0 for rate in results["tokens_per_second"].values())
    assert {"timestamp_utc", "command", "git_commit"} <= set(doc["machine"])
