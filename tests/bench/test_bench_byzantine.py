"""bench/byzantine.py still runs an attacked swarm to the end and writes what docs/benchmarks.md quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# node/testbed/adversary_more.py's kinds in one adversary: one swarm instead of five keeps the suite short.
MORE = "withhold+conflicting-claim+replay-goodbye+meta-flood+px-rewrite"

pytestmark = [pytest.mark.network, pytest.mark.timeout(400)]


def test_byzantine_bench_quick(tmp_path: Path) -> None:
    out = tmp_path / "byzantine.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "byzantine.py"), "--attacks", f"forge-list,{MORE}",
         "--steps", "6", "--warm", "1", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=360, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "wrote" in proc.stdout
    configs = {c["attack"]: c for c in json.loads(out.read_text())["configs"]}
    assert set(configs) == {"forge-list", MORE}  # attacked swarms only: the baselines are the same code path
    for c in configs.values():
        assert "error" not in c, c.get("error")
        assert c["honest_hashes_equal_every_step"] and c["honest_banned"] == []
        assert c["honest_steps_per_s"] and "slowdown_vs_all_honest" in c
    more = configs[MORE]
    for events in more["round_events"].values():
        assert events.get("conflicting_claim", 0) > 0, events  # counted, never answered with a resync
        assert events.get("resyncs_requested", 0) == 0, events
        # Every step decided and applied. A round may still stall for a moment (every leader had an epoch):
        # seen once in a CI run on 2 busy cores (epochs up to 6, decided there), never in 13 runs here.
        assert events.get("rounds_decided") == events.get("rounds_applied") == 6, events
    refused = more["requests_refused"]
    assert all(r.get("state_meta", 0) > 0 for r in refused.values()), refused
    assert set(more["adversary_reports"]["attacker0"]) >= {"withhold", "conflicting-claim", "meta-flood"}
