"""Per-peer norm clipping: no single peer may move the aggregate more than a typical peer does.

Why: the DeMo rule averages each coefficient over the peers that chose it, so a peer that scales its values
by 100 owns every coefficient it touches and dominates the sign of the update. Clipping every peer's whole
payload to the median of the peers' L2 norms bounds each peer's influence by what an honest peer sends, as
long as honest peers are a majority. The median is an observed norm (``median_low``), computed in float64
over tensors in layout order and peers in sorted order, so every replica derives the same factors.

With the 1-bit value codec every decoded value is +/-1, all peers of a step have the same norm and clipping
changes nothing: scale attacks are already erased by the wire format, and what is left (sign flips, random
directions) is a matter for per-peer scoring (``agreement.py``), not for the aggregation rule.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

import torch
from distro_node.compression.payload import Payload, SparseTensor, TensorSpec

from .aggregate import Aggregator, PeerEntries


def payload_norm(specs: Sequence[TensorSpec], payload: Payload) -> float:
    """L2 norm of all values of one payload, accumulated in float64 in layout order (replica-independent)."""
    total = 0.0
    for spec in specs:
        values = payload.tensors[spec.name].values
        total += float(values.detach().to("cpu", torch.float64).square().sum())
    return math.sqrt(total)


def clip_factors(norms: Mapping[str, float]) -> dict[str, float]:
    """Per peer ``min(1, median / norm)``; peers at or under the median keep their payload unchanged.

    A zero norm needs no clipping (factor 1). With a zero median (most peers sent nothing) every non-zero
    payload is scaled to zero, which is what "no more than the median peer" means.
    """
    if not norms:
        return {}
    median = statistics.median_low(sorted(norms.values()))
    return {peer: 1.0 if norm <= median else median / norm for peer, norm in norms.items()}


class ClippedAggregator(Aggregator):
    """The DeMo aggregate of payloads each clipped to the median peer norm (see the module docstring)."""

    def __init__(self) -> None:
        self.factors: dict[str, float] = {}

    def begin(self, specs: Sequence[TensorSpec], payloads: Mapping[str, Payload]) -> None:
        norms = {peer: payload_norm(specs, payloads[peer]) for peer in sorted(payloads)}
        self.factors = clip_factors(norms)

    def combine(self, spec: TensorSpec, entries: PeerEntries, device: torch.device) -> torch.Tensor:
        scaled: list[tuple[str, SparseTensor]] = []
        for peer, entry in entries:
            factor = self.factors.get(peer, 1.0)
            if factor != 1.0:
                # float32 multiply by a float32 factor: the same bits on every replica.
                values = entry.values * torch.tensor(factor, dtype=torch.float32)
                entry = SparseTensor(values=values, indices=entry.indices)
            scaled.append((peer, entry))
        return super().combine(spec, scaled, device)


AGGREGATORS: dict[str, type[Aggregator]] = {"mean": Aggregator, "clipped": ClippedAggregator}


def make_aggregator(name: str) -> Aggregator:
    """The aggregator registered as ``name`` (names are validated by ``DistroConfig``)."""
    return AGGREGATORS[name]()
