"""The strategies through the real codec (encode -> bytes -> decode), as a node runs them."""

from __future__ import annotations

import pytest
import torch
from distro_node.compression.payload import Header, Payload
from distro_node.optimizer import (
    AdamWConfig,
    CocktailConfig,
    DilocoConfig,
    DistroConfig,
    ScheduleConfig,
    Strategy,
    build_strategy,
)
from optimizer_support import Toy, identical, run_peers

wire = pytest.importorskip("distro_node.compression.wire")
RUN = b"run-1"


def through_wire(strategy: Strategy) -> object:
    spec = strategy.spec()
    counter = {"n": 0}

    def exchange(payload: Payload, codec: str) -> Payload:
        assert codec == spec.value_codec
        peer = f"peer-{counter['n']}"
        counter["n"] += 1
        header = Header(
            run_id=RUN,
            step=0,
            peer_id=peer,
            strategy=spec.strategy,
            layout_digest=spec.layout_digest,
            settings_digest=spec.settings_digest(),
        )
        _, decoded = wire.decode(wire.encode(header, payload, spec), spec, run_id=RUN, sender=peer)
        return decoded

    return exchange


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("distro", DistroConfig(chunk=8, topk=3, overlapped=True, value_codec="1bit")),
        ("distro", DistroConfig(chunk=8, topk=2, update="adam", value_codec="int8", index_codec="packed")),
        ("adamw", AdamWConfig(schedule=ScheduleConfig(lr=1e-2))),
        ("diloco", DilocoConfig(inner_steps=2, value_codec="bf16")),
        ("cocktail", CocktailConfig(subset_ratio=0.5, topk_ratio=0.5)),
    ],
)
def test_replicas_identical_through_codec(name: str, config: object) -> None:
    models = [Toy() for _ in range(3)]
    strategies = [build_strategy(name, m, config) for m in models]  # type: ignore[arg-type]
    exchange = through_wire(strategies[0])
    run_peers(models, strategies, range(6), strategies[0].spec().value_codec, exchange=exchange)  # type: ignore[arg-type]
    assert identical(models[0], models[1]) and identical(models[0], models[2])
    assert not identical(models[0], Toy())


def test_one_bit_decodes_to_signs() -> None:
    model = Toy()
    strategy = build_strategy("distro", model, DistroConfig(chunk=8, topk=3, value_codec="1bit"))
    for p in model.parameters():
        p.grad = torch.randn(p.shape)
    payload = strategy.prepare(0)
    decoded = through_wire(strategy)(payload, "1bit")  # type: ignore[operator]
    for name, entry in decoded.tensors.items():
        expected = torch.where(payload.tensors[name].values >= 0, 1.0, -1.0)
        assert torch.equal(entry.values, expected)
