"""Degraded and malicious peers in the simulated swarm: fast versions of threats.md B1, B7, W3 and W4."""

from __future__ import annotations

import pytest
import torch
from distro_node.compression.errors import PayloadError
from distro_node.compression.payload import Header
from distro_node.compression.wire import decode, encode
from distro_node.node.faults import FaultInjector, FaultSpec
from distro_node.node.sim.experiment import (
    ExperimentConfig,
    ExperimentConfigError,
    build_swarm,
    run_experiment,
)

FAST = {"batch_size": 2, "seq_len": 16, "eval_batches": 2, "settings": {"schedule": {"lr": 3e-3}}}


@pytest.fixture(autouse=True)
def _single_thread() -> None:
    torch.set_num_threads(1)


def _faults(text: str, *indices: int) -> dict[int, FaultSpec]:
    return {i: FaultSpec.parse(text) for i in indices}


@pytest.mark.slow
def test_b1_sign_flippers_banned_fast_and_loss_close_to_honest_only() -> None:
    steps = 40
    attacked = run_experiment(
        ExperimentConfig(peers=8, steps=steps, faults=_faults("sign-flip=100", 6, 7), **FAST)
    )
    honest = run_experiment(ExperimentConfig(peers=6, steps=steps, **FAST))
    assert set(attacked.ban_steps) == {"peer-006", "peer-007"}, attacked.ban_steps
    assert max(attacked.ban_steps.values()) <= 30  # threats.md B1: within 50 steps
    assert honest.ban_steps == {}
    assert attacked.replicas_identical
    assert attacked.final_eval_loss <= 1.05 * honest.final_eval_loss


@pytest.mark.slow
def test_b7_bit_flipping_peer_rejected_or_banned() -> None:
    swarm, _ = build_swarm(ExperimentConfig(peers=8, faults=_faults("bitflip=1e-3", 7), **FAST))
    rejected = 0
    for _ in range(20):
        report = swarm.step()
        rejected += report.rejected
    assert rejected > 0 or "peer-007" in swarm.ban_steps
    assert not set(swarm.ban_steps) - {"peer-007"}, "an honest peer was banned"
    assert len(set(swarm.hashes())) == 1


def test_w3_replayed_payload_rejected_by_step_policy() -> None:
    swarm, _ = build_swarm(ExperimentConfig(peers=2, **FAST))
    spec = swarm.peers[0].strategy.spec()
    swarm.step()
    payload = swarm.peers[0].strategy.prepare(1)
    for sent_step, seen_at in ((1, 2), (1, 1001)):  # the same step later; a step 1000 behind
        header = Header(
            swarm.run_id, sent_step, "peer-000", spec.strategy, spec.layout_digest, spec.settings_digest()
        )
        data = encode(header, payload, spec)
        with pytest.raises(PayloadError) as err:
            decode(data, spec, run_id=swarm.run_id, sender="peer-000", step=seen_at)
        assert err.value.reason == "step"


def test_w3_stale_peer_never_applied() -> None:
    swarm, _ = build_swarm(ExperimentConfig(peers=4, faults=_faults("stale", 3), exclusion=False, **FAST))
    for _ in range(4):
        report = swarm.step()
        assert report.included == 3  # the replayed bytes of the previous step are never applied
    assert report.rejected == 1


def test_w4_equivocation_at_most_one_applied_and_peer_banned() -> None:
    swarm, _ = build_swarm(ExperimentConfig(peers=4, faults=_faults("equivocate", 2), **FAST))
    first = swarm.step()
    assert first.equivocators == ("peer-002",)
    assert first.included == 3  # neither of the two payloads is applied
    assert first.banned == ("peer-002",)
    assert swarm.scores is not None and swarm.scores.record("peer-002").ban_reason == "equivocation"
    second = swarm.step()
    assert second.included == 3 and second.equivocators == ()  # banned: left out before decoding
    assert len(set(swarm.hashes())) == 1


def test_silent_peer_is_penalised_but_not_banned() -> None:
    swarm, _ = build_swarm(ExperimentConfig(peers=4, faults=_faults("silent", 1), **FAST))
    for _ in range(12):
        report = swarm.step()
    assert report.included == 3
    assert swarm.scores is not None
    record = swarm.scores.record("peer-001")
    assert record.missed == 12 and not record.banned


def test_scale_is_erased_by_one_bit_values() -> None:
    swarm, _ = build_swarm(ExperimentConfig(peers=1, **FAST))
    spec = swarm.peers[0].strategy.spec()
    assert spec.value_codec == "1bit"
    payload = swarm.peers[0].strategy.prepare(0)
    header = Header(swarm.run_id, 0, "peer-000", spec.strategy, spec.layout_digest, spec.settings_digest())
    honest = encode(header, payload, spec)
    for text in ("scale=1000", "random-scale=3"):
        assert FaultInjector(FaultSpec.parse(text)).emit(0, header, payload, spec) == [honest]


def test_fault_settings_are_checked() -> None:
    with pytest.raises(ExperimentConfigError, match="faults"):
        ExperimentConfig(peers=2, faults={5: FaultSpec.parse("silent")})
    with pytest.raises(ExperimentConfigError, match="faults"):
        ExperimentConfig(peers=2, faults={1: "silent"})  # type: ignore[dict-item]
