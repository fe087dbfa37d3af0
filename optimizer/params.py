"""Which tensors a strategy owns, and in which order.

Only trainable parameters, in the model's own order: the order defines the layout digest, so peers built from
the same model code agree on it without exchanging anything.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch
from distro_node.compression.layout import ModelLayout, model_layout
from distro_node.compression.payload import PayloadSpec, TensorSpec

from .config import SettingsDataclass, config_settings
from .errors import StateError

NamedParams = list[tuple[str, torch.nn.Parameter]]


def trainable(model: torch.nn.Module | Iterable[tuple[str, torch.nn.Parameter]]) -> NamedParams:
    """``(name, parameter)`` for every parameter with ``requires_grad``, in model order."""
    pairs = model.named_parameters() if isinstance(model, torch.nn.Module) else model
    out = [(name, p) for name, p in pairs if p.requires_grad]
    if not out:
        raise ValueError("the model has no trainable parameters")
    return out


def layout_of(params: NamedParams, chunk: int) -> ModelLayout:
    return model_layout(((name, tuple(p.shape)) for name, p in params), chunk=chunk)


def dense_specs(params: NamedParams) -> tuple[TensorSpec, ...]:
    """One chunk per tensor holding every element: the dense payload shape of the baselines."""
    return tuple(TensorSpec(name, 1, p.numel(), p.numel()) for name, p in params)


class CodecSettings(SettingsDataclass, Protocol):
    """What every baseline config carries about its wire encoding.

    Read-only properties, because the configs are frozen dataclasses: a plain attribute here would ask for a
    settable one.
    """

    @property
    def index_codec(self) -> str: ...

    @property
    def value_codec(self) -> str: ...


def flat_payload_spec(
    strategy: str, params: NamedParams, specs: tuple[TensorSpec, ...], config: CodecSettings
) -> PayloadSpec:
    """The payload spec of a baseline strategy: flattened tensors, the config's codecs and every setting
    (so two peers with any differing setting get different settings digests)."""
    return PayloadSpec(
        strategy=strategy,
        tensors=specs,
        layout_digest=flat_layout_digest(params),
        settings=config_settings(config),
        index_codec=config.index_codec,
        value_codec=config.value_codec,
    )


def flat_layout_digest(params: NamedParams) -> bytes:
    """Layout digest for strategies that send whole flattened tensors (the baselines)."""
    numels = [p.numel() for _, p in params]
    return model_layout(((n, (p.numel(),)) for n, p in params), chunk=max(numels)).digest()


def grad_of(p: torch.Tensor) -> torch.Tensor:
    """The parameter's gradient in float32; zeros for a parameter that got no gradient this step (unused
    in the forward pass), so every tensor still appears in the payload."""
    if p.grad is None:
        return torch.zeros(p.shape, dtype=torch.float32, device=p.device)
    return p.grad.detach().to(torch.float32)


def clone_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached copies, so a state dict does not alias live optimizer state that later steps mutate."""
    return {name: t.detach().clone() for name, t in tensors.items()}


def copy_into(target: dict[str, torch.Tensor], source: object, what: str) -> None:
    """Copy ``source[name]`` into ``target[name]`` for every name, after checking that names and shapes match
    exactly (a checkpoint of another model must fail loudly, not load partially)."""
    if not isinstance(source, dict) or set(source) != set(target):
        raise StateError(f"{what}: tensor names do not match this model")
    for name, dst in target.items():
        src = source[name]
        if not isinstance(src, torch.Tensor) or tuple(src.shape) != tuple(dst.shape):
            raise StateError(f"{what}[{name!r}]: expected a tensor of shape {tuple(dst.shape)}")
    for name, dst in target.items():
        dst.copy_(source[name])
