"""Robust aggregation (per-peer clipping to the median norm) and leave-one-out agreement scores."""

from __future__ import annotations

import pytest
import torch
from distro_node.compression.errors import PayloadError
from distro_node.compression.payload import Payload, SparseTensor, TensorSpec
from distro_node.optimizer.aggregate import Aggregator, check_payloads
from distro_node.optimizer.agreement import leave_one_out_agreement
from distro_node.optimizer.config import DistroConfig, ScheduleConfig
from distro_node.optimizer.distro import DisTrO
from distro_node.optimizer.errors import ConfigError
from distro_node.optimizer.robust import ClippedAggregator, clip_factors, payload_norm

SPEC = TensorSpec("w", 1, 8, 2)


class Toy(torch.nn.Module):
    """A matrix and a vector: enough for two layout kinds (not imported from conftest, whose module name
    collides with other test folders' conftest when suites run together)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.w = torch.nn.Parameter(torch.randn(8, 8, generator=gen))
        self.b = torch.nn.Parameter(torch.randn(8, generator=gen))


CPU = torch.device("cpu")


def one(indices: list[int], values: list[float]) -> Payload:
    return Payload({"w": SparseTensor(torch.tensor([values]), torch.tensor([indices]))})


def test_default_aggregation_is_clipped_and_validated() -> None:
    assert DistroConfig().aggregation == "clipped"
    assert isinstance(DisTrO(Toy(), DistroConfig()).aggregator, ClippedAggregator)
    assert type(DisTrO(Toy(), DistroConfig(aggregation="mean")).aggregator) is Aggregator
    with pytest.raises(ConfigError) as err:
        DistroConfig(aggregation="median")
    assert err.value.field == "distro.aggregation"


def test_clip_factors_median_low_and_order_independent() -> None:
    norms = {"a": 1.0, "b": 2.0, "c": 200.0, "d": 3.0}
    assert clip_factors(norms) == {"a": 1.0, "b": 1.0, "c": 2.0 / 200.0, "d": 2.0 / 3.0}
    assert clip_factors(dict(reversed(norms.items()))) == clip_factors(norms)
    assert clip_factors({"a": 0.0, "b": 0.0, "c": 5.0}) == {"a": 1.0, "b": 1.0, "c": 0.0}
    assert clip_factors({}) == {}


def test_clipping_bounds_a_scaled_peer() -> None:
    payloads = {
        "a": one([1, 2], [1.0, 1.0]),
        "b": one([1, 3], [1.0, -1.0]),
        "c": one([1, 2], [-100.0, -100.0]),
    }
    clipped = ClippedAggregator()
    clipped.begin([SPEC], payloads)
    entries = [(p, payloads[p].tensors["w"]) for p in sorted(payloads)]
    out = clipped.combine(SPEC, entries, CPU)
    plain = Aggregator().combine(SPEC, entries, CPU)
    assert plain[0, 1] < -30  # the mean is owned by the scaled peer
    assert out[0, 1] == pytest.approx(1.0 / 3.0)  # clipped to norm sqrt(2): (1 + 1 - 1) / 3
    assert out[0, 2] == pytest.approx(0.0)
    assert payload_norm([SPEC], payloads["c"]) == pytest.approx(100 * 2**0.5)


def test_clipped_equals_mean_for_one_bit_values() -> None:
    gen = torch.Generator().manual_seed(0)
    payloads = {}
    for i in range(5):
        idx = torch.randperm(8, generator=gen)[:2].sort().values
        signs = torch.sign(torch.randn(1, 2, generator=gen))
        payloads[f"p{i}"] = Payload({"w": SparseTensor(signs, idx[None])})
    entries = [(p, payloads[p].tensors["w"]) for p in sorted(payloads)]
    clipped = ClippedAggregator()
    clipped.begin([SPEC], payloads)
    assert torch.equal(clipped.combine(SPEC, entries, CPU), Aggregator().combine(SPEC, entries, CPU))


def test_one_vote_per_peer_per_coefficient() -> None:
    """A repeated index would give a peer two votes: it is rejected before aggregation (and on decode)."""
    with pytest.raises(PayloadError) as err:
        check_payloads([SPEC], {"a": one([2, 2], [1.0, 1.0])})
    assert err.value.reason == "duplicate_index"


def _replica_weights(aggregation: str, scaled_peer: bool) -> list[torch.Tensor]:
    config = DistroConfig(
        chunk=4, topk=2, value_codec="fp32", aggregation=aggregation, schedule=ScheduleConfig(lr=0.01)
    )
    peers = [Toy(seed=0) for _ in range(3)]
    strategies = [DisTrO(m, config) for m in peers]
    for step in range(4):
        payloads = {}
        for i, (model, strategy) in enumerate(zip(peers, strategies, strict=True)):
            gen = torch.Generator().manual_seed(100 * step + i)
            for p in model.parameters():
                if p.requires_grad:
                    p.grad = torch.randn(p.shape, generator=gen)
            payload = strategy.prepare(step)
            if scaled_peer and i == 2:
                scaled = {n: SparseTensor(e.values * 1e3, e.indices) for n, e in payload.tensors.items()}
                payload = Payload(scaled)
            payloads[f"peer-{i}"] = payload
        for strategy in strategies:
            strategy.apply(step, payloads)
    return [torch.cat([p.detach().reshape(-1) for p in m.parameters()]) for m in peers]


def test_replicas_bit_identical_with_clipping() -> None:
    weights = _replica_weights("clipped", scaled_peer=True)
    assert all(torch.equal(weights[0], w) for w in weights[1:])
    assert torch.isfinite(weights[0]).all()


def test_agreement_leave_one_out() -> None:
    """Two honest peers agree on coefficient 1; the flipper contradicts both; nobody shares coefficient 5."""
    payloads = {
        "h1": one([1, 2], [1.0, 1.0]),
        "h2": one([1, 2], [2.0, 3.0]),
        "h3": one([1, 4], [1.0, -1.0]),
        "flip": one([1, 5], [-100.0, 7.0]),
    }
    scores = leave_one_out_agreement([SPEC], payloads)
    assert (scores["h1"].agree, scores["h1"].disagree, scores["h1"].sent) == (2, 0, 2)
    assert scores["flip"].score == -0.5  # coefficient 1 contradicted (1 of 2 sent), 5 unshared
    assert scores["h3"].score == 0.5 and scores["h3"].overlap == 0.5
    assert leave_one_out_agreement([SPEC], {"solo": one([1, 2], [1.0, 1.0])})["solo"].score == 0.0


def test_agreement_is_not_fooled_by_scale_or_self_inclusion() -> None:
    """A loud flipper does not drag honest peers negative: votes are signs, one per peer."""
    payloads = {f"h{i}": one([1, 2], [1.0, 1.0]) for i in range(3)}
    payloads["loud"] = one([1, 2], [-1e6, -1e6])
    scores = leave_one_out_agreement([SPEC], payloads)
    assert all(scores[f"h{i}"].score == 1.0 for i in range(3))
    assert scores["loud"].score == -1.0
