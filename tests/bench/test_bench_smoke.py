"""The benchmark scripts still run and still write the keys their readers rely on.

Benches are run by hand and rarely, so without this they rot silently when the code they measure changes.
Each runs once in a quick mode, in a subprocess exactly as a person would start it, writing to a temp dir
so the committed results in bench/results/ are never overwritten by CI.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_import import bench_module

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
MACHINE_KEYS = {"timestamp_utc", "command", "python", "torch", "cpu_count", "git_commit"}


def _run(script: str, out: Path, *args: str, timeout: float = 60) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--out", str(out), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wrote" in proc.stdout  # the printed summary reached its end
    doc = json.loads(out.read_text())
    assert MACHINE_KEYS <= set(doc["machine"]), doc["machine"]
    return doc


@pytest.mark.slow
def test_payload_bench_quick(tmp_path: Path) -> None:
    doc = _run("payload.py", tmp_path / "payload.json", "--quick")
    assert doc["n_params"] == 1_204_881_408
    assert {"default", "best_k4_1bit", "encodings", "algorithm_md_comparison", "embedding_tensor"} <= set(doc)
    default = doc["default"]
    assert default is not None and default["k"] == 4
    assert default["bytes_per_step"] > default["body_bytes"] > 0
    assert doc["best_k4_1bit"]["bytes_per_step"] <= default["bytes_per_step"]
    for row in doc["encodings"]:
        if row["valid"]:
            assert row["decode_error"] is None, row
            assert row["body_bytes"] < row["bytes_per_step"] <= row["cap_bytes"], row
    for enc in doc["embedding_tensor"]["encodings"]:
        # What went over the wire in tensor fields is exactly what compression.sizes predicts.
        assert enc["real_field_bytes"] == enc["arithmetic_body_bytes"], enc
        assert enc["indices_round_trip"] is True


@pytest.mark.slow
def test_decode_fuzz_bench_quick(tmp_path: Path) -> None:
    doc = _run("decode_fuzz.py", tmp_path / "fuzz.json", "--count", "1500", "--preset", "tiny")
    assert doc["completed"] == 1500
    outcomes = doc["outcomes"]
    assert outcomes["crashes"] == 0, doc["crash_examples"]
    assert outcomes["accepted_invalid"] == 0, doc["invariant_violations"]
    total = outcomes["accepted_unchanged"] + outcomes["accepted_changed"] + outcomes["rejected_total"]
    assert total == 1500
    assert {"malformed", "schema", "length"} <= set(outcomes["rejected_by_reason"])
    assert {"p50", "p99", "max"} <= set(doc["decode_ms"])
    assert {"before", "after", "growth"} <= set(doc["rss_mb"])
    assert set(doc["pass"]) >= {"no_crashes", "rss_growth_under_target", "p99_under_target"}


@pytest.mark.slow
def test_robustness_bench_smoke(tmp_path: Path) -> None:
    args = ("--quick", "--only", "H6", "B1", "--steps", "16")
    doc = _run("robustness.py", tmp_path / "robustness.json", *args)
    b1 = doc["scenarios"]["B1"]
    assert {"final_eval_loss_mean", "ratio_of_means", "checks", "runs"} <= set(b1)
    assert b1["runs"][0]["attacker_ban_step"].keys() == {"peer-006", "peer-007"}
    assert doc["honest_false_positives"] == 0


@pytest.mark.slow
def test_index_stats_bench_quick(tmp_path: Path) -> None:
    args = ("--preset", "tiny", "--peers", "2", "--steps", "3", "--record", "2")
    # Two simulated runs (two seeds) of the tiny model: slower than the other quick modes on a busy machine.
    doc = _run("index_stats.py", tmp_path / "stats.json", *args, timeout=300)
    recorded = doc["counts"]["recorded"]
    assert len(recorded) == len(doc["counts"]["other_seed"]) == 64 * 64
    # 2 peers x 2 recorded steps x 4 picks in every 64x64 chunk of the tiny model's matrices
    assert sum(recorded) == sum(k["indices"] for k in doc["by_kind"].values()) > 0
    assert sum(recorded) % (2 * 2 * 4) == 0
    costs = doc["table_costs"]
    # no static table beats the in-sample entropy it is bounded by
    assert costs["in_sample_entropy_coded_bits"] <= costs["position_table_other_seed_coded_bits"]
    assert 0.0 <= doc["position_overlap"] <= 1.0
    again = _run("index_stats.py", tmp_path / "again.json", "--costs-from", str(tmp_path / "stats.json"))
    assert again["table_costs"] == costs


@pytest.mark.slow
@pytest.mark.network
def test_swarm_cpu_bench_quick(tmp_path: Path) -> None:
    doc = _run("swarm_cpu.py", tmp_path / "swarm_cpu.json", "--hosts", "3", "--size", "300000",
               "--steps", "2")
    assert doc["hosts"] == 3 and len(doc["steps"]) == 2
    summary = doc["median_after_first"]
    assert summary["cpu_s"] > 0 and summary["other_frames"] > 0
    # Windows are granted in halves: far fewer window updates than the 64 KiB frames that carried the data.
    assert summary["window_updates"] < summary["other_frames"], summary


def _flow(out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(BENCH / "flow.py"), "--out", str(out), "--populations",
                             "home", "--k", "2", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_flow_bench_keeps_each_row_and_extrapolates_from_the_largest_simulated(tmp_path: Path) -> None:
    out = tmp_path / "flow.json"
    # Stopped once its first configuration is in: what it simulated is saved.
    proc = _flow(out, "--sizes", "4,6,8", "--full-max", "8", "--k-max", "8")
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait(timeout=30)
    (saved,) = json.loads(out.read_text())["predictions"]
    assert saved["peers"] == first["peers"] == 4 and saved["seconds"] == first["seconds"]
    # Beyond --full-max and --k-max: the bound times the ratio of the largest N simulated, kept or new.
    proc = _flow(out, "--sizes", "6,8", "--full-max", "6", "--k-max", "6")
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout + stderr
    rows = {(r["k"], r["peers"]): r for r in json.loads(out.read_text())["predictions"]}
    assert set(rows) == {(0, 4), (0, 6), (0, 8), (2, 6), (2, 8)}  # K = 2 at 4: stopped before it
    for k in (0, 2):
        assert not rows[(k, 6)].get("extrapolated") and rows[(k, 8)]["extrapolated"]
        assert rows[(k, 8)]["seconds"] == pytest.approx(
            rows[(k, 8)]["bound_s"] * rows[(k, 6)]["seconds"] / rows[(k, 6)]["bound_s"], rel=1e-3)
    assert all(r["seconds"] > 0 for r in rows.values())


def test_the_flow_models_acknowledgement_cost_is_the_one_the_testbed_measured() -> None:
    """bench/flow.py charges each downloaded byte ``ACK_SHARE`` of the downloader's uplink; it has to lie
    within what bench/acks.py measured on the testbed's lines (bench/results/acks.json)."""
    flow = bench_module("flow")
    measured = json.loads((REPO / "bench" / "results" / "acks.json").read_text())
    low, high = measured["model_ack_share_range"]
    assert low <= flow.ACK_SHARE <= high
    assert flow.line(flow.SLOW).ack == flow.ACK_SHARE


def test_flow_validation_reads_a_file_that_gathers_several_runs(tmp_path: Path) -> None:
    """A result file of several bench/exchange.py runs side by side (``runs``, each naming its profile), as
    results/exchange_netns_congestion.json: each run's rows are checked, against the links it had."""
    flow = bench_module("flow")
    row = {"peers": 2, "payload_bytes": 200_000, "median_round_s": 0.5, "rate_scale": 0.5,
           "links_mbit_down_up": [[50.0, 5.0], [50.0, 5.0]], "tcp_congestion": "cubic"}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [{"profile": "home@0.5+cubic", "results": [row]},
                                         {"note": "no profile: not a run"}]}))
    (got,) = flow.validation([path])
    assert got["profile"] == "home@0.5+cubic" and got["tcp_congestion"] == "cubic"
    # One payload of 200 kB each way over a 5 Mbit/s uplink at TCP rate: the bound, and the model above it.
    assert got["bound_s"] == pytest.approx(200_000 / (5e6 / 8 * flow.EFFICIENCY), abs=1e-3)
    assert got["bound_s"] <= got["model_s"] <= 1.5 * got["bound_s"]
    assert got["bound_s"] <= got["model_median_s"] <= got["model_s"]
    assert got["error_median"] == round(got["model_median_s"] / 0.5 - 1, 3)


@pytest.mark.parametrize("extra", [["--rate-scale", "0.5"], ["--pieces"], ["--pieces", "--rate-scale", "1"]])
def test_exchange_dilate_without_pieces_or_a_rate_scale_is_refused(
        extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    exchange = bench_module("exchange")
    with pytest.raises(SystemExit) as exited:
        exchange.main(["--netns", "home", "--dilate", *extra])
    assert exited.value.code == 2
    assert "--dilate needs --pieces and a --rate-scale below 1" in capsys.readouterr().err


def test_flow_validation_models_a_dilated_run_with_its_dilated_settings(tmp_path: Path) -> None:
    """A run of bench/exchange.py --dilate is checked against the model with the daemons' settings dilated
    alike (PiecesConfig.dilated), and its row says so."""
    flow = bench_module("flow")
    from distro_node.protocol.pieces_wire import PiecesConfig

    links = [[250.0, 250.0], [25.0, 2.5], [5.0, 0.5]]
    row = {"peers": 3, "payload_bytes": 300_000, "median_round_s": 9.0, "rate_scale": 0.25, "time_scale": 4.0,
           "links_mbit_down_up": links}
    path = tmp_path / "dilated.json"
    path.write_text(json.dumps({"profiles": {"mixed@0.25+dilated": {"results": [row]}}}))
    (got,) = flow.validation([path])
    assert got["time_scale"] == 4.0
    lines = [flow.line(flow.TestbedLink(down, up)) for down, up in links]
    want = flow.run_one(lines, 0, flow.TESTBED_LATENCY, 300_000, pieces=PiecesConfig().dilated(4.0))
    assert got["model_s"] == want["seconds"]


def test_exchange_capture_uplink_without_netns_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    exchange = bench_module("exchange")
    with pytest.raises(SystemExit) as exited:
        exchange.main(["--capture-uplink", "1"])
    assert exited.value.code == 2
    assert "--capture-uplink needs --netns PROFILE" in capsys.readouterr().err
