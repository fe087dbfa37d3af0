"""The simulated swarm and ``distro-node doctor`` on a CUDA device. Skipped without CUDA; run on a GPU machine
with ``pytest -m gpu``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from distro_node.node.cli.main import main
from distro_node.node.sim.experiment import ExperimentConfig, run_experiment

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("strategy", ["distro", "adamw"])
def test_simulated_swarm_on_cuda_keeps_replicas_identical_and_tracks_cpu(strategy: str) -> None:
    cfg = ExperimentConfig(strategy=strategy, peers=3, steps=8, device="cuda", precision="fp32")
    gpu = run_experiment(cfg)
    assert gpu.replicas_identical
    cpu = run_experiment(ExperimentConfig(strategy=strategy, peers=3, steps=8))
    # Same init, batches and payload rules; only kernel rounding differs between the devices.
    assert gpu.final_eval_loss == pytest.approx(cpu.final_eval_loss, abs=0.05)
    assert gpu.payload_bytes_per_step == pytest.approx(cpu.payload_bytes_per_step, rel=0.05)


def test_simulated_swarm_on_cuda_in_bf16_learns() -> None:
    # precision auto: bf16 autocast on cuda. On CPU the same run goes from 5.56 to 5.01.
    result = run_experiment(ExperimentConfig(peers=2, steps=30, settings={"schedule": {"lr": 3e-3}},
                                             device="cuda"))
    assert result.replicas_identical
    first = result.history[0]["loss"]
    assert result.final_eval_loss < first - 0.3, (first, result.final_eval_loss)


def test_doctor_on_cuda_reports_the_gpu_and_measures_a_step(capsys: pytest.CaptureFixture[str],
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISTRO_NODE_CONFIG", raising=False)
    code = main(["doctor", "--json", "--preset", "tiny", "--device", "cuda",
                 "--listen", "/ip4/127.0.0.1/tcp/0"])
    report = json.loads(capsys.readouterr().out)
    checks = {c["name"]: c for c in report["checks"]}
    assert code == 0, checks
    assert checks["device"]["details"]["chosen"] == "cuda"
    assert checks["compute"]["details"]["how"] == "measured"
    assert "CUDA" in checks["memory"]["details"]["available_source"]
