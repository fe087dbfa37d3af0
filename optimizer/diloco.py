"""Baseline: local SGD / DiLoCo (seed 001).

Each peer runs an inner AdamW on its own gradients for ``H = inner_steps`` steps; on the outer step
(``step % H == H - 1``) it sends the pseudo-gradient ``theta_global - theta_local``, and every peer averages
the pseudo-gradients, resets to the shared ``theta_global`` and takes an outer Nesterov SGD step (lr 0.7,
momentum 0.9, not decayed, as in the seed). The outer state is built from the average only, so all peers end
every outer step bit-identical; the inner AdamW state is local (as in DiLoCo) and is never reset.

Where the gradient of the outer step goes: ``prepare`` on an outer step first takes the inner AdamW step with
it, then measures the pseudo-gradient, so a round uses all ``H`` gradients (the local weights it changes are
overwritten by the outer step right after). On inner steps ``prepare`` returns None and ``apply`` takes the
inner step.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from distro_node.compression.payload import Payload, PayloadSpec, SparseTensor

from .aggregate import check_payloads, entries_for, mean_dense
from .base import Strategy
from .config import DilocoConfig
from .errors import StateError, StepOrderError
from .params import clone_tensors, copy_into, dense_specs, flat_payload_spec, trainable
from .schedule import lr_at

STATE_VERSION = 1


class DiLoCo(Strategy):
    """Inner AdamW every step, outer Nesterov SGD on the mean pseudo-gradient every ``inner_steps`` steps."""

    name = "diloco"

    def __init__(
        self,
        model: torch.nn.Module | Iterable[tuple[str, torch.nn.Parameter]],
        config: DilocoConfig | None = None,
    ) -> None:
        self.config = config or DilocoConfig()
        self._params = trainable(model)
        self._specs = dense_specs(self._params)
        self._spec = flat_payload_spec(self.name, self._params, self._specs, self.config)
        self._inner = torch.optim.AdamW(
            [p for _, p in self._params],
            lr=lr_at(self.config.schedule, 0),
            betas=(self.config.inner_beta1, self.config.inner_beta2),
            eps=self.config.inner_eps,
            weight_decay=self.config.inner_weight_decay,
            foreach=False,
        )
        self._global = {name: p.detach().clone() for name, p in self._params}
        self._momentum = {name: torch.zeros_like(p, dtype=torch.float32) for name, p in self._params}
        self._inner_done_step: int | None = None

    def spec(self) -> PayloadSpec:
        return self._spec

    def is_outer(self, step: int) -> bool:
        return step % self.config.inner_steps == self.config.inner_steps - 1

    def _inner_step(self, step: int) -> None:
        if self._inner_done_step == step:
            return
        for group in self._inner.param_groups:
            group["lr"] = lr_at(self.config.schedule, step)
        self._inner.step()
        self._inner_done_step = step

    @torch.no_grad()
    def prepare(self, step: int) -> Payload | None:
        if not self.is_outer(step):
            return None
        self._inner_step(step)
        return Payload(
            tensors={
                name: SparseTensor(values=(self._global[name].float() - p.detach().float()).reshape(1, -1))
                for name, p in self._params
            }
        )

    @torch.no_grad()
    def apply(self, step: int, payloads: Mapping[str, Payload]) -> None:
        """Inner step: local AdamW (payloads ignored). Outer step: average, reset, Nesterov. An outer step
        with no payloads resets to the global weights without moving them, the same on every peer."""
        if step < 0:
            return
        if not self.is_outer(step):
            self._inner_step(step)
            return
        if self._inner_done_step != step:
            raise StepOrderError("DiLoCo outer apply without prepare on the same step")
        if payloads:
            check_payloads(self._specs, payloads, self._spec.fingerprint())
        mu, lr = self.config.outer_momentum, self.config.outer_lr
        for name, p in self._params:
            theta = self._global[name]
            if payloads:
                delta = mean_dense(entries_for(name, payloads), p.device).reshape(p.shape)
                buf = self._momentum[name].mul_(mu).add_(delta)
                update = delta.add(buf, alpha=mu) if self.config.nesterov else buf
                theta.sub_(update.to(theta.dtype), alpha=lr)
            p.copy_(theta)

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "inner": self._inner.state_dict(),
            "global": clone_tensors(self._global),
            "momentum": clone_tensors(self._momentum),
            "inner_done_step": self._inner_done_step,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise StateError("not a DiLoCo state dict of a supported version")
        copy_into(self._global, state.get("global"), "global")
        copy_into(self._momentum, state.get("momentum"), "momentum")
        try:
            self._inner.load_state_dict(state["inner"])
        except (ValueError, KeyError, TypeError) as exc:
            raise StateError(f"inner: {exc}") from exc
        done = state.get("inner_done_step")
        if done is not None and (isinstance(done, bool) or not isinstance(done, int)):
            raise StateError("inner_done_step: must be an integer or None")
        self._inner_done_step = done
