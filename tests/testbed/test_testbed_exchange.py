"""bench/exchange.py --netns runs the exchange peers in shaped namespaces and writes its own result file,
with a round time no faster than the link allows. Skipped without root or ip/tc."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from distro_node.node.testbed.capture import available as capture_available

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.root, pytest.mark.network, pytest.mark.timeout(150)]


def test_exchange_bench_in_namespaces(tmp_path: Path) -> None:
    out = tmp_path / "exchange_netns.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "exchange.py"), "--netns", "home", "--peers", "3", "--rounds",
         "2", "--size", "300000", "--wall", "100", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=140, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads(out.read_text())["profiles"]["home"]["results"]
    assert row["peers"] == 3 and row["slowest_upload_mbit"] == 10.0
    # 2 x 300 kB at 10 Mbit/s take 0.48 s: a round cannot beat its link (it would if shaping were off).
    assert row["bound_s"] == pytest.approx(0.48)
    assert row["median_round_s"] >= 0.9 * row["bound_s"]
    assert 8.0 <= row["peer0_to_peer1_tcp_mbit"] <= 10.2


def test_exchange_bench_at_half_the_profiles_rates(tmp_path: Path) -> None:
    """--rate-scale shapes every link at the fraction asked: the run is named for it, and its round cannot
    beat the slower link."""
    out = tmp_path / "exchange_netns.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "exchange.py"), "--netns", "home", "--rate-scale", "0.5",
         "--peers", "3", "--rounds", "2", "--size", "300000", "--wall", "100", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=140, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads(out.read_text())["profiles"]["home@0.5"]["results"]
    assert row["rate_scale"] == 0.5 and row["links_mbit_down_up"] == [[50.0, 5.0]] * 3
    assert len(row["median_round_s_by_peer"]) == 3
    assert row["bound_s"] == pytest.approx(0.96)  # 2 x 300 kB at 5 Mbit/s
    assert row["median_round_s"] >= 0.9 * row["bound_s"]
    assert 4.0 <= row["peer0_to_peer1_tcp_mbit"] <= 5.1
    # Each author's uplink carried its payload to the 2 others plus frames' headers and the rest, not more
    # than half as much again.
    assert all(2.0 <= u <= 3.0 for u in row["uplink_payloads_per_round"]), row["uplink_payloads_per_round"]
    # Read from each peer's download bucket: a count for every peer (a 50 Mbit/s downlink fed by two 5
    # Mbit/s uplinks has no reason to drop many).
    assert len(row["downlink_drops"]) == 3 and all(0 <= d < 1000 for d in row["downlink_drops"])


def test_a_dilated_exchange_runs_the_swarm_in_slower_time(tmp_path: Path) -> None:
    """--dilate: links at half the rates with queues of the full rates' bytes, and peers whose piece
    protocol waits twice as long; the run is named for it and records the scale. With --capture-uplink."""
    out = tmp_path / "exchange_netns_pieces.json"
    capture = ["--capture-uplink", "1"] if capture_available() is None else []  # tcpdump may be missing
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "exchange.py"), "--netns", "home", "--pieces", "--rate-scale",
         "0.5", "--dilate", "--peers", "3", "--rounds", "2", "--size", "300000", "--wall", "100",
         "--no-hivemind", *capture, "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=140, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = json.loads(out.read_text())["profiles"]["home@0.5+dilated"]
    (row,) = run["results"]
    assert row["rate_scale"] == 0.5 and row["time_scale"] == 2.0
    assert run["tbf"]["5_mbit"].endswith("latency 100ms")
    assert row["median_round_s"] >= 0.9 * row["bound_s"]
    assert row["amplification"] <= 1.05
    # Every peer sent its own first copies, none after its last upload; the round's second part is what
    # follows the last of them (each peer needs that piece, so the median peer ends after it).
    firsts, ends = row["own_first_ends_s_by_peer"], row["serving_ends_s_by_peer"]
    assert len(firsts) == 3 and all(0 < f <= e for f, e in zip(firsts, ends, strict=True))
    assert 0 < row["last_first_copy_s"] <= max(ends)
    assert row["tail_after_last_first_copy_s"] > -0.5
    # --capture-uplink: peer 1's uplink by kind of frame. It served pieces (bulk), acknowledged what it
    # downloaded, and asked for pieces (control); the kinds add up to what was captured.
    if not capture:
        return
    captured = row["uplink_capture"]
    assert captured["peer"] == 1 and captured["frames"] > 100
    assert all(captured["kinds"][k]["frames"] > 0 for k in ("bulk", "control", "ack"))
    assert sum(captured["share"].values()) == pytest.approx(1.0, abs=1e-3)
    assert captured["payloads_per_round"]["bulk"] >= 0.5

