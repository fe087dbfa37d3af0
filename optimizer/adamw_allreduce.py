"""Baseline: AdamW on the dense mean gradient (the DisTrO report's "AdamW + All-Reduce").

Every peer sends its whole clipped gradient; every peer averages the same payloads in sorted peer order and
takes the same torch AdamW step, so replicas stay identical. Used for quality and bytes comparisons only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from distro_node.compression.payload import Payload, PayloadSpec, SparseTensor

from .aggregate import check_payloads, entries_for, mean_dense
from .base import Strategy
from .config import AdamWConfig
from .errors import StateError
from .params import dense_specs, flat_payload_spec, grad_of, trainable
from .schedule import lr_at

STATE_VERSION = 1


class AdamWAllReduce(Strategy):
    """Dense gradient exchange + torch AdamW (betas 0.9/0.95, weight decay 0.1 by default)."""

    name = "adamw"

    def __init__(
        self,
        model: torch.nn.Module | Iterable[tuple[str, torch.nn.Parameter]],
        config: AdamWConfig | None = None,
    ) -> None:
        self.config = config or AdamWConfig()
        self._params = trainable(model)
        self._specs = dense_specs(self._params)
        self._spec = flat_payload_spec(self.name, self._params, self._specs, self.config)
        self._opt = torch.optim.AdamW(
            [p for _, p in self._params],
            lr=lr_at(self.config.schedule, 0),
            betas=(self.config.beta1, self.config.beta2),
            eps=self.config.eps,
            weight_decay=self.config.weight_decay,
            foreach=False,  # one code path everywhere: the same float ops on every peer
        )

    def spec(self) -> PayloadSpec:
        return self._spec

    @torch.no_grad()
    def prepare(self, step: int) -> Payload:
        return Payload(
            tensors={name: SparseTensor(values=grad_of(p).reshape(1, -1).clone()) for name, p in self._params}
        )

    @torch.no_grad()
    def apply(self, step: int, payloads: Mapping[str, Payload]) -> None:
        """Average and step; with no payloads nothing happens (the same on every peer)."""
        if step < 0 or not payloads:
            return
        check_payloads(self._specs, payloads, self._spec.fingerprint())
        saved_grads = [p.grad for _, p in self._params]
        for name, p in self._params:
            mean = mean_dense(entries_for(name, payloads), p.device)
            p.grad = mean.reshape(p.shape).to(p.dtype)
        for group in self._opt.param_groups:
            group["lr"] = lr_at(self.config.schedule, step)
        self._opt.step()
        # Hand the caller back its own gradient tensors: it owns them (and zeroes them next step).
        for (_, p), grad in zip(self._params, saved_grads, strict=True):
            p.grad = grad

    def state_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "adamw": self._opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION or "adamw" not in state:
            raise StateError("not an AdamW state dict of a supported version")
        try:
            self._opt.load_state_dict(state["adamw"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StateError(f"adamw: {exc}") from exc
