"""The simulated swarm: real codec on the path, replicas bit-identical, loss going down."""

from __future__ import annotations

import pytest
import torch
from distro_node.node.sim.experiment import (
    ExperimentConfig,
    ExperimentConfigError,
    build_swarm,
    run_experiment,
)

FAST = {"batch_size": 4, "seq_len": 32}


def _distro(**settings: object) -> dict[str, object]:
    return {"schedule": {"lr": 3e-3}, **settings}


@pytest.mark.parametrize("strategy", ["distro", "adamw", "cocktail"])
def test_replicas_identical_every_step(strategy: str) -> None:
    settings = _distro(value_codec="1bit", overlapped=True) if strategy == "distro" else {}
    swarm, _ = build_swarm(ExperimentConfig(strategy=strategy, settings=settings, peers=4, **FAST))
    for _ in range(20 if strategy == "distro" else 6):
        report = swarm.step()
        assert report.rejected == 0
        assert len(set(swarm.hashes())) == 1, f"replicas diverged at step {report.step}"


def test_diloco_identical_after_outer_step() -> None:
    cfg = ExperimentConfig(strategy="diloco", settings={"inner_steps": 4}, peers=3, **FAST)
    swarm, _ = build_swarm(cfg)
    for _ in range(3):
        swarm.step()
    assert len(set(swarm.hashes())) == 3, "inner steps are local, so peers differ before the outer step"
    report = swarm.step()
    assert report.payload_bytes > 0
    assert len(set(swarm.hashes())) == 1


def test_payload_goes_through_the_wire_and_loss_falls() -> None:
    cfg = ExperimentConfig(strategy="distro", settings=_distro(), peers=2, steps=40, eval_batches=2, **FAST)
    result = run_experiment(cfg)
    assert result.replicas_identical
    first = sum(h["loss"] for h in result.history[:5]) / 5
    last = sum(h["loss"] for h in result.history[-5:]) / 5
    assert last < first - 0.1
    assert result.loss_floor is not None and result.final_eval_loss > result.loss_floor
    # k=4 of each 64x64 chunk with 1-bit values and enum indices: far below a dense bf16 gradient.
    assert result.reduction > 100


def test_corrupted_bytes_are_rejected_not_applied() -> None:
    def corrupt(step: int, peer_id: str, data: bytes) -> bytes:
        return data[:-7] if peer_id == "peer-001" else data

    swarm, _ = build_swarm(ExperimentConfig(strategy="distro", peers=3, **FAST), wire_filter=corrupt)
    report = swarm.step()
    assert report.rejected == 1
    assert len(set(swarm.hashes())) == 1


def test_bad_experiment_settings_name_the_field() -> None:
    with pytest.raises(ExperimentConfigError, match="peers"):
        ExperimentConfig(peers=0)
    with pytest.raises(ExperimentConfigError, match="seq_len"):
        build_swarm(ExperimentConfig(seq_len=10_000))


def test_same_config_same_run() -> None:
    cfg = ExperimentConfig(strategy="distro", peers=2, steps=3, eval_batches=1, **FAST)
    a, b = run_experiment(cfg), run_experiment(cfg)
    assert [h["loss"] for h in a.history] == [h["loss"] for h in b.history]
    assert torch.isfinite(torch.tensor(a.final_eval_loss))
