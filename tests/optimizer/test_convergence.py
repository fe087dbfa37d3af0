"""Toy convergence of algorithm.md: teacher-student MLP 64-256-64, 4 peers x batch 64, 400 steps, lr 1e-3.

The reference numbers (start 0.433; AdamW 0.0265, DeMo k=32 0.0281, overlapped 1-bit k=32 0.0279) came from a
teacher we cannot reproduce exactly, so the bounds are relative and generous: all three reach a small fraction
of the start, and DeMo stays within a factor of AdamW, as in the reference.
"""

from __future__ import annotations

import pytest
import torch
from distro_node.compression.payload import Payload, SparseTensor
from distro_node.optimizer import AdamWConfig, DistroConfig, ScheduleConfig, Strategy, build_strategy


def mlp(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))


def one_bit(payload: Payload) -> Payload:
    return Payload(
        tensors={
            n: SparseTensor(torch.where(e.values >= 0, 1.0, -1.0), e.indices)
            for n, e in payload.tensors.items()
        }
    )


def train(name: str, config: object, one_bit_values: bool = False) -> tuple[float, float]:
    teacher = mlp(123).requires_grad_(False)
    models = [mlp(0) for _ in range(4)]
    strategies: list[Strategy] = [build_strategy(name, m, config) for m in models]  # type: ignore[arg-type]
    gen = torch.Generator().manual_seed(7)
    x_test = torch.randn(1024, 64, generator=gen)
    y_test = teacher(x_test)
    with torch.no_grad():
        start = float(torch.nn.functional.mse_loss(models[0](x_test), y_test))
    pending: dict[str, Payload] = {}
    overlapped = strategies[0].overlapped
    for step in range(400):
        sent: dict[str, Payload] = {}
        for i, (model, strategy) in enumerate(zip(models, strategies, strict=True)):
            strategy.pre_forward(step)
            model.zero_grad(set_to_none=True)
            x = torch.randn(64, 64, generator=gen)
            torch.nn.functional.mse_loss(model(x), teacher(x)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            strategy.post_backward(step)
            payload = strategy.prepare(step)
            assert payload is not None
            sent[f"p{i}"] = one_bit(payload) if one_bit_values else payload
        for strategy in strategies:
            strategy.apply(step - 1, pending) if overlapped else strategy.apply(step, sent)
        pending = sent
    if overlapped:
        for strategy in strategies:
            strategy.apply(399, pending)
    with torch.no_grad():
        return start, float(torch.nn.functional.mse_loss(models[0](x_test), y_test))


@pytest.mark.slow
def test_toy_convergence() -> None:
    schedule = ScheduleConfig(lr=1e-3)
    start, adamw = train("adamw", AdamWConfig(schedule=schedule, weight_decay=0.0))
    _, demo = train("distro", DistroConfig(topk=32, schedule=schedule, value_codec="fp32"))
    overlapped_config = DistroConfig(topk=32, schedule=schedule, value_codec="1bit", overlapped=True)
    _, overlapped = train("distro", overlapped_config, one_bit_values=True)
    assert adamw < 0.15 * start
    assert demo < 0.15 * start and demo < 2.0 * adamw
    assert overlapped < 0.15 * start and overlapped < 1.5 * demo
