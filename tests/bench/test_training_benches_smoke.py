"""The training benchmarks run end to end in a tiny mode and write the fields docs/benchmarks.md quotes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
