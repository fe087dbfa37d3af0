"""bench/exchange.py's hivemind side still runs (2 peers, 2 rounds, 100 kB) where hivemind is installed.

hivemind lives in its own venv (.venv-hivemind/, see bench/_exchange_hivemind.py); creating it takes
minutes and a package index, so this test uses an existing one and is skipped without it. The bench kills
every hivemind process group it starts; the subprocess timeout bounds the whole run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HIVEMIND_PYTHON = REPO / ".venv-hivemind" / "bin" / "python"


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(not HIVEMIND_PYTHON.exists(), reason="no .venv-hivemind (bench/exchange.py creates it)")
def test_exchange_bench_hivemind_side(tmp_path: Path) -> None:
    out = tmp_path / "exchange.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "exchange.py"), "--peers", "2", "--rounds", "2",
         "--size", "100000", "--wall", "120", "--hivemind-python", str(HIVEMIND_PYTHON), "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=390, check=False,
    )
    assert out.exists(), proc.stdout + proc.stderr
    hm = json.loads(out.read_text())["hivemind"]
    assert hm["status"] == "measured" and hm["version"] == "1.1.12" and hm["venv"] == "given", hm
    stream = next(r for r in hm["bulk"] if r["mode"] == "stream")
    assert stream["peers"] == 2 and stream["payload_bytes"] == 100_000, stream
    assert 0 < stream["median_round_s"] <= stream["p90_round_s"], stream
    assert {r["mode"] for r in hm["bulk"]} == {"stream", "unary"}
    # The payload-sized tensor, then the tiny and small gradients: each measured or failed with a reason.
    assert [r["numel"] for r in hm["allreduce"]] == [25_000, 155_968, 1_049_728]
    for row in hm["allreduce"]:
        assert ("median_allreduce_s" in row) != ("error" in row), row
