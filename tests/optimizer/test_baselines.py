"""AdamW all-reduce, DiLoCo and CocktailSGD on the same interface: determinism, semantics, checkpoints."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
import torch
from distro_node.optimizer import (
    AdamWAllReduce,
    AdamWConfig,
    CocktailConfig,
    CocktailSGD,
    DiLoCo,
    DilocoConfig,
    DisTrO,
    DistroConfig,
    ScheduleConfig,
    Strategy,
    build_strategy,
)
from distro_node.optimizer.cocktail import random_subset, subset_seed
from optimizer_support import Toy, identical, local_step, params_of, run_peers

FACTORIES: dict[str, tuple[Callable[[torch.nn.Module], Strategy], str]] = {
    "adamw": (lambda m: AdamWAllReduce(m, AdamWConfig(schedule=ScheduleConfig(lr=1e-2))), "bf16"),
    "diloco": (lambda m: DiLoCo(m, DilocoConfig(inner_steps=3, schedule=ScheduleConfig(lr=1e-2))), "fp32"),
    "cocktail": (lambda m: CocktailSGD(m, CocktailConfig(subset_ratio=0.5, topk_ratio=0.5)), "int8"),
    "cocktail-1bit": (
        lambda m: CocktailSGD(m, CocktailConfig(value_codec="1bit", nesterov=True, weight_decay=0.1)),
        "1bit",
    ),
    "distro": (lambda m: DisTrO(m, DistroConfig(chunk=8, value_codec="1bit")), "1bit"),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_replicas_bit_identical(name: str) -> None:
    factory, codec = FACTORIES[name]
    models = [Toy() for _ in range(3)]
    strategies = [factory(m) for m in models]
    run_peers(models, strategies, range(6), codec)  # 6 steps = 2 DiLoCo rounds, ending on an outer step
    assert identical(models[0], models[1]) and identical(models[0], models[2])
    assert not identical(models[0], Toy())


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_state_dict_round_trip(name: str) -> None:
    factory, codec = FACTORIES[name]
    models = [Toy() for _ in range(2)]
    strategies = [factory(m) for m in models]
    run_peers(models, strategies, range(4), codec)
    buf = io.BytesIO()
    torch.save([(m.state_dict(), s.state_dict()) for m, s in zip(models, strategies, strict=True)], buf)
    run_peers(models, strategies, range(4, 9), codec)
    buf.seek(0)
    restored_models, restored = [], []
    for model_state, strategy_state in torch.load(buf, weights_only=True):
        m = Toy(seed=5)
        m.load_state_dict(model_state)
        s = factory(m)
        s.load_state_dict(strategy_state)
        restored_models.append(m)
        restored.append(s)
    run_peers(restored_models, restored, range(4, 9), codec)
    for a, b in zip(models, restored_models, strict=True):
        assert identical(a, b)


def test_adamw_is_torch_adamw_on_mean_gradient() -> None:
    config = AdamWConfig(schedule=ScheduleConfig(lr=1e-2))
    models = [Toy() for _ in range(2)]
    strategies = [AdamWAllReduce(m, config) for m in models]
    payloads = {
        f"p{i}": local_step(m, s, i, 0) for i, (m, s) in enumerate(zip(models, strategies, strict=True))
    }
    assert all(p is not None for p in payloads.values())
    reference = Toy()
    trainable = [p for p in reference.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, foreach=False)
    for (name, p), q in zip(models[0].named_parameters(), reference.parameters(), strict=True):
        if p.requires_grad:
            q.grad = (models[0].get_parameter(name).grad + models[1].get_parameter(name).grad) / 2
    opt.step()
    strategies[0].apply(0, payloads)
    for p, q in zip(models[0].parameters(), reference.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-7)
    assert strategies[0].spec().value_codec == "bf16"
    assert all(t.dense and t.n_chunks == 1 for t in strategies[0].spec().tensors)


def test_diloco_round() -> None:
    config = DilocoConfig(inner_steps=4, schedule=ScheduleConfig(lr=1e-2))
    models = [Toy() for _ in range(3)]
    strategies = [DiLoCo(m, config) for m in models]
    start = params_of(models[0])
    for step in range(3):
        payloads = [
            local_step(m, s, i, step) for i, (m, s) in enumerate(zip(models, strategies, strict=True))
        ]
        assert payloads == [None, None, None]
        for s in strategies:
            s.apply(step, {})
    assert not identical(models[0], models[1])  # inner steps are local
    sent = {f"p{i}": local_step(m, s, i, 3) for i, (m, s) in enumerate(zip(models, strategies, strict=True))}
    # pseudo-gradient = global (start) - local after the 4th inner step
    for name, p in models[0].named_parameters():
        if p.requires_grad:
            expected = (start[name] - p.detach()).reshape(1, -1)
            assert torch.equal(sent["p0"].tensors[name].values, expected)  # type: ignore[union-attr]
    for s in strategies:
        s.apply(3, sent)  # type: ignore[arg-type]
    assert identical(models[0], models[1]) and identical(models[0], models[2])
    # first outer step from zero momentum with Nesterov: theta - lr * (1 + mu) * mean
    for name, p in models[0].named_parameters():
        if p.requires_grad:
            mean = sum(sent[k].tensors[name].values for k in sorted(sent)) / 3  # type: ignore[union-attr]
            expected = start[name] - 0.7 * 1.9 * mean.reshape(p.shape)
            assert torch.allclose(p, expected, atol=1e-6)


def test_cocktail_subset_is_shared_and_payload_shape() -> None:
    a = random_subset(1000, 100, subset_seed(0, 5, "w1"))
    assert torch.equal(a, random_subset(1000, 100, subset_seed(0, 5, "w1")))
    assert not torch.equal(a, random_subset(1000, 100, subset_seed(0, 6, "w1")))
    assert len(set(a.tolist())) == 100
    strategy = CocktailSGD(Toy(), CocktailConfig(subset_ratio=0.25, topk_ratio=0.5))
    spec = {t.name: t for t in strategy.spec().tensors}
    assert (spec["w1"].n_chunks, spec["w1"].chunk_numel, spec["w1"].k) == (1, 32, 16)
    assert (spec["gain"].chunk_numel, spec["gain"].k) == (1, 1)


def test_cocktail_error_feedback_keeps_unsent() -> None:
    model = Toy()
    strategy = CocktailSGD(model, CocktailConfig(subset_ratio=0.5, topk_ratio=0.25))
    payload = local_step(model, strategy, 0, 0)
    assert payload is not None
    for name, p in model.named_parameters():
        if p.requires_grad:
            sent = float(payload.tensors[name].values.double().pow(2).sum())
            kept = float(strategy._error[name].double().pow(2).sum())
            assert kept + sent == pytest.approx(float(p.grad.double().pow(2).sum()), rel=1e-5)


@pytest.mark.parametrize("name", ["distro", "adamw", "diloco", "cocktail"])
def test_build_by_name(name: str) -> None:
    strategy = build_strategy(name, Toy(), None)
    assert strategy.name == name and strategy.spec().strategy == name
