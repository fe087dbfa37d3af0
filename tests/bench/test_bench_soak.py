"""bench/soak.py: its counting rules, and a tiny soak of real daemons (2 peers, 4 rounds) end to end.

The soak's verdict (transport errors, flat memory) is only as good as what it counts, so the stderr
classification and the memory-growth rule are checked on known input; the end-to-end run checks that the
script drives real `join` daemons, samples their RSS and scrapes their /metrics. The script stops its
daemons by pid itself; the subprocess timeout bounds the whole run.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


@pytest.fixture
def soak(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("soak")


def test_soak_classifies_log_lines(soak: ModuleType) -> None:
    text = "\n".join([
        "soaklog DEBUG distro_node.protocol.transfer: fetch of 0a1b2c from 12D3KooWabc failed: reset",
        "soaklog DEBUG distro_node.node.peer.node: fetch failed: no holder delivered",
        "soaklog WARNING distro_node.protocol.gossip: gossip queue to X stuck at 32 RPCs for 5.0s",
        "soaklog ERROR libp2p.host.basic_host: Failed to open stream to peer 12D3KooWabc:",
        "  Error: protocols not supported",
        "Traceback (most recent call last):",
        "soaklog DEBUG distro_node.node.peer.state_sync: no snapshot from X: NOT_READY",
        "soaklog INFO libp2p.network.auto_connector: Auto-connected to 1 new peers",
    ])
    assert soak.stderr_counts(text) == {"fetch_attempt_failed": 1, "payload_not_fetched": 1,
                                        "warning_or_error_log": 2, "traceback": 1}


def test_soak_memory_growth_rule(soak: ModuleType) -> None:
    samples = [{"round": r, "rss_mb": {"a": 300.0 + (5.0 if r >= 50 else 0.0), "b": 300.0 + 0.2 * r}}
               for r in range(0, 200, 10)]
    a, b = soak._growth(samples, ["a", "b"], 50, flat_mb=10.0)
    assert (a["from_round"], a["to_round"], a["growth_mb"], a["flat"]) == (50, 190, 0.0, True)
    assert b["growth_mb"] == pytest.approx(28.0) and b["flat"] is False
    assert b["slope_mb_per_100_rounds"] == pytest.approx(20.0)


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_soak_bench_tiny(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "soak.py"), "--peers", "2", "--rounds", "4", "--sample-every", "2",
         "--memory-from", "1", "--wall", "240", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=290, check=False,
    )
    assert out.exists(), proc.stdout + proc.stderr
    doc = json.loads(out.read_text())
    assert doc["completed"] and doc["rounds_on_all_peers"] == 4, doc["failure"]
    assert doc["hashes_equal_every_round"]
    assert [s["round"] for s in doc["rss_samples"]] == [0, 2, 3]
    assert all(v is not None and v > 50 for s in doc["rss_samples"] for v in s["rss_mb"].values())
    assert {m["peer"] for m in doc["memory"]["per_peer"]} == {"peer0", "peer1"}
    for name in ("peer0", "peer1"):
        scraped = doc["metrics_at_last_round"][name]
        assert scraped["step"] >= 3 and scraped["rounds"]["complete"] >= 4, scraped
    assert doc["transport_errors_total"] == sum(doc["transport_errors_per_peer"].values())
    assert doc["rounds_per_s"] > 0
    assert proc.returncode == (0 if doc["transport_errors_total"] == 0 and doc["memory"]["flat"] else 1)
