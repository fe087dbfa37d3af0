"""The training benchmarks run end to end in a tiny mode and write the fields docs/benchmarks.md quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from bench_import import bench_module

ROOT = Path(__file__).resolve().parents[2]


def test_overhead_bench_writes_its_json(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "overhead.py"),
        "--presets",
        "tiny",
        "--batches",
        "2",
        "--peers",
        "2",
        "--repeats",
        "1",
        "--threads",
        "1",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, timeout=120, capture_output=True)
    row = json.loads(out.read_text())["results"][0]
    for key in (
        "forward_backward_s",
        "prepare_s",
        "apply_s",
        "apply_left_out_s",
        "prepare_plus_apply_fraction",
        "compress_params_per_s",
        "tokens_per_peer_step",
    ):
        assert row[key] > 0


def test_convergence_bench_sweeps_picks_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "convergence.json"
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "convergence.py"),
        "--only",
        "adamw,distro-sign",
        "--steps",
        "3",
        "--peers",
        "2",
        "--batch-size",
        "2",
        "--seq-len",
        "16",
        "--eval-batches",
        "1",
        "--seeds",
        "2",
        "--workers",
        "1",
        "--out",
        str(out),
    ]
    subprocess.run(cmd, check=True, timeout=240, capture_output=True)
    doc = json.loads(out.read_text())
    assert set(doc["summary"]) == {"adamw", "distro-sign"}
    distro = doc["summary"]["distro-sign"]
    assert len(distro["final_eval_loss_per_seed"]) == 2
    assert distro["reduction_vs_dense_bf16"] > 100
    assert out.with_suffix(".png").stat().st_size > 0


def test_convergence_bench_runs_a_given_grid_together_and_gpu_py_reads_its_lines(tmp_path: Path) -> None:
    """The options the GPU run used (bench/gpu.py): a grid per strategy, every seed at once, no scoring; the
    per-run lines it prints are what bench/gpu.py keeps when its time limit ends the bench early."""
    out = tmp_path / "convergence.json"
    cmd = [sys.executable, str(ROOT / "bench" / "convergence.py"), "--only", "adamw,distro-sign",
           "--steps", "3", "--peers", "2", "--batch-size", "2", "--seq-len", "16", "--eval-batches", "1",
           "--seeds", "2", "--workers", "1", "--grid", "adamw=1e-3", "--grid", "distro-sign=3e-3,6e-3",
           "--together", "--no-scoring", "--device", "cpu", "--precision", "bf16", "--out", str(out)]
    done = subprocess.run(cmd, check=True, timeout=240, capture_output=True, text=True)
    doc = json.loads(out.read_text())
    assert sorted((r["label"], r["lr"]) for r in doc["sweep"]) == [
        ("adamw", 1e-3), ("distro-sign", 3e-3), ("distro-sign", 6e-3)]
    assert {r["seed"] for r in doc["extra_seeds"]} == {1} and len(doc["extra_seeds"]) == 2
    assert len(doc["other_seed_runs"]) == 1  # the distro rate not chosen, on seed 1
    assert all(r["config"]["exclusion"] is False for r in doc["sweep"])
    runs = bench_module("gpu").runs_from_log(done.stdout)
    assert len(runs) == 6
    assert {(r["label"], r["seed"]) for r in runs} == {(label, s) for label in ("adamw", "distro-sign")
                                                       for s in (0, 1)}
    bad = subprocess.run([*cmd[:2], "--only", "adamw", "--grid", "adamw=fast"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "--grid" in bad.stderr


def test_bounded_inclusion_bench_reports_the_acceptance_figures(tmp_path: Path) -> None:
    out = tmp_path / "bounded_inclusion.json"
    cmd = [sys.executable, str(ROOT / "bench" / "bounded_inclusion.py"), "--ks", "1", "--peers", "4",
           "--steps", "2", "--batch-size", "2", "--seq-len", "16", "--eval-batches", "1", "--workers", "1",
           "--seeds", "0,1", "--out", str(out)]
    subprocess.run(cmd, check=True, timeout=180, capture_output=True)
    doc = json.loads(out.read_text())
    summary = doc["summary"]
    assert set(summary) == {"0", "1"} and len(doc["runs"]) == 4  # every K at every seed
    assert summary["0"]["loss_ratio_vs_all"] == 1.0 and summary["0"]["max_inclusion_gap"] == 1
    assert summary["0"]["loss_ratio_per_seed"] == [1.0, 1.0]
    losses = summary["1"]["final_eval_loss_per_seed"]
    assert len(losses) == 2 and summary["1"]["final_eval_loss"] == pytest.approx(sum(losses) / 2)
    row = summary["1"]  # fetches K + 2 = 3 of the 4 payloads
    assert row["gap_bound"] == 5 and row["max_inclusion_gap"] <= 5 and row["replicas_identical"]
    assert row["fetched_vs_all"] < 1.0 and set(row["acceptance"]) == {
        "loss_ratio_le_1_02", "gap_le_ceil_n_over_k_plus_1", "fetched_le_1_5_k_payload"}
