"""Shared helpers of the optimizer tests: a tiny model with every parameter kind, codec emulation, and a
multi-peer loop. A uniquely named module (not conftest) so test files elsewhere cannot shadow it."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from distro_node.compression.payload import Payload, SparseTensor
from distro_node.optimizer.base import Strategy


class Toy(torch.nn.Module):
    """Matrix, vector, 0-d and 3-D parameters, so every layout branch is exercised."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.w1 = torch.nn.Parameter(torch.randn(16, 8, generator=gen) * 0.3)
        self.b1 = torch.nn.Parameter(torch.randn(16, generator=gen) * 0.1)
        self.mix = torch.nn.Parameter(torch.randn(2, 4, 4, generator=gen) * 0.3)
        self.gain = torch.nn.Parameter(torch.tensor(1.0))
        self.w2 = torch.nn.Parameter(torch.randn(4, 16, generator=gen) * 0.3)
        self.frozen = torch.nn.Parameter(torch.ones(3), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ self.w1.T + self.b1)
        y = h @ self.w2.T
        y = y + (y @ self.mix[0]) * 0.1 - (y @ self.mix[1]) * 0.05
        return y * self.gain


def batch(peer: int, step: int, n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + peer)
    x = torch.randn(n, 8, generator=gen)
    return x, torch.sin(x[:, :4]) + 0.1 * torch.randn(n, 4, generator=gen)


def emulate_codec(payload: Payload, codec: str) -> Payload:
    """What every peer decodes for ``payload``: 1bit -> +-1 (0 counts as +1), int8 -> per-tensor absmax,
    bf16 -> rounded, fp32 -> unchanged. Values are copied so receivers never alias sender state."""

    def quantize(v: torch.Tensor) -> torch.Tensor:
        if codec == "1bit":
            return torch.where(v >= 0, 1.0, -1.0).to(torch.float32)
        if codec == "bf16":
            return v.to(torch.bfloat16).to(torch.float32)
        if codec == "int8":
            scale = v.abs().max() / 127.0
            return v.clone() if float(scale) == 0.0 else (torch.round(v / scale) * scale).to(torch.float32)
        return v.clone()

    return Payload(
        tensors={
            name: SparseTensor(
                values=quantize(e.values), indices=None if e.indices is None else e.indices.clone()
            )
            for name, e in payload.tensors.items()
        }
    )


def params_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def identical(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))


def local_step(model: torch.nn.Module, strategy: Strategy, peer: int, step: int) -> Payload | None:
    """The caller's half of a step: hooks, forward/backward, clip, prepare."""
    strategy.pre_forward(step)
    model.zero_grad(set_to_none=True)
    x, y = batch(peer, step)
    torch.nn.functional.mse_loss(model(x), y).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    strategy.post_backward(step)
    return strategy.prepare(step)


def run_peers(
    models: list[torch.nn.Module],
    strategies: list[Strategy],
    steps: range,
    codec: str,
    exchange: Callable[[Payload, str], Payload] | None = None,
) -> None:
    """Every peer computes its own gradient, payloads go through the codec, and every peer applies the same
    set (given to each peer in a different insertion order, to prove the order does not matter)."""
    exchange = exchange or emulate_codec
    overlapped = strategies[0].overlapped
    pending: Mapping[str, Payload] = {}
    for step in steps:
        sent = {}
        for i, (model, strategy) in enumerate(zip(models, strategies, strict=True)):
            payload = local_step(model, strategy, i, step)
            if payload is not None:
                sent[f"peer-{i}"] = exchange(payload, codec)
        todo, apply_step = (pending, step - 1) if overlapped else (sent, step)
        for i, strategy in enumerate(strategies):
            keys = sorted(todo)
            rotated = keys[i % max(1, len(keys)) :] + keys[: i % max(1, len(keys))]
            strategy.apply(apply_step, {k: todo[k] for k in rotated})
        pending = sent
    if overlapped:
        for strategy in strategies:
            strategy.apply(steps[-1], pending)
