"""Baseline: CocktailSGD-style compression (seed 003): random subset, then top-k, then quantization.

Per tensor and step, every peer draws the same random subset of ``subset_ratio`` of the coordinates
(a ``torch.Generator`` seeded from sha256 of the run seed, the step and the tensor name, so nothing is
exchanged to agree on it), keeps the ``topk_ratio`` largest magnitudes of ``grad + error`` inside it, and
sends them with indices relative to the subset; the codec quantizes the values (int8 by default, or
1-bit). Error feedback keeps everything not sent (subtracting the unquantized values, as DisTrO does: the
optimizer never sees the codec's rounding).

Optimizer choice: the seed compresses "local model updates"; we keep the exchange synchronous and compress
the error-fed gradient instead, then take SGD with momentum on the average (sum of decoded entries divided
by the number of peers). Momentum is built from the average only, so every peer keeps identical state; a
per-coordinate Adam normalization was not chosen because on a mostly-zero sparse average it inflates the
rare nonzeros.

Caveat: the subset comes from ``torch.randperm``; peers must run the same torch version to draw the same one.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from distro_node.compression.payload import Payload, PayloadSpec, SparseTensor, TensorSpec

from .aggregate import check_payloads, entries_for
from .base import Strategy
from .config import CocktailConfig
from .errors import StateError
from .params import clone_tensors, copy_into, flat_payload_spec, grad_of, trainable
from .schedule import lr_at
from .topk import densify, select_topk

STATE_VERSION = 1


def subset_seed(seed: int, step: int, name: str) -> int:
    """A 63-bit seed that only depends on shared facts, so all peers draw the same subset."""
    digest = hashlib.sha256(f"cocktail:{seed}:{step}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def random_subset(numel: int, size: int, seed: int) -> torch.Tensor:
    """``size`` distinct coordinates of ``range(numel)``, sorted ascending (CPU, int64)."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    return torch.randperm(numel, generator=gen)[:size].sort().values


class CocktailSGD(Strategy):
    """Random + top-k sparsified, quantized, error-fed gradient exchange with momentum SGD."""

    name = "cocktail"

    def __init__(
        self,
        model: torch.nn.Module | Iterable[tuple[str, torch.nn.Parameter]],
        config: CocktailConfig | None = None,
    ) -> None:
        self.config = config or CocktailConfig()
        self._params = trainable(model)
        specs = []
        for name, p in self._params:
            subset = max(1, math.ceil(self.config.subset_ratio * p.numel()))
            k = max(1, min(subset, math.ceil(self.config.topk_ratio * subset)))
            specs.append(TensorSpec(name, 1, subset, k))
        self._specs = tuple(specs)
        self._spec = flat_payload_spec(self.name, self._params, self._specs, self.config)
        self._error = {
            n: torch.zeros(p.numel(), dtype=torch.float32, device=p.device) for n, p in self._params
        }
        self._momentum = {n: torch.zeros_like(e) for n, e in self._error.items()}
        self._subset_cache: tuple[int, dict[str, torch.Tensor]] | None = None
        # step -> what prepare subtracted from the error buffer (subset, values), until applied or withheld.
        self._sent: dict[int, dict[str, tuple[torch.Tensor, torch.Tensor]]] = {}

    def spec(self) -> PayloadSpec:
        return self._spec

    def _subsets(self, step: int) -> dict[str, torch.Tensor]:
        if self._subset_cache is None or self._subset_cache[0] != step:
            subsets = {
                spec.name: random_subset(
                    p.numel(), spec.chunk_numel, subset_seed(self.config.seed, step, spec.name)
                ).to(p.device)
                for (_, p), spec in zip(self._params, self._specs, strict=True)
            }
            self._subset_cache = (step, subsets)
        return self._subset_cache[1]

    @torch.no_grad()
    def prepare(self, step: int) -> Payload:
        subsets = self._subsets(step)
        tensors: dict[str, SparseTensor] = {}
        kept: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for (name, p), spec in zip(self._params, self._specs, strict=True):
            acc = self._error[name].add_(grad_of(p).reshape(-1))
            subset = subsets[name]
            entry = select_topk(acc[subset].reshape(1, -1), spec.k)
            sent = densify(entry, spec.chunk_numel, acc.device).reshape(-1)
            acc.index_add_(0, subset, sent, alpha=-1.0)
            tensors[name] = entry
            kept[name] = (subset, sent)
        self._sent[step] = kept
        for old in sorted(self._sent)[:-2]:
            del self._sent[old]
        return Payload(tensors=tensors)

    @torch.no_grad()
    def withheld(self, step: int) -> None:
        """Left out of the step's list: what was sent goes back into the error buffer (no decay here)."""
        for name, (subset, sent) in self._sent.pop(step, {}).items():
            self._error[name].index_add_(0, subset, sent)

    @torch.no_grad()
    def apply(self, step: int, payloads: Mapping[str, Payload]) -> None:
        """Average the sparse entries over all peers, then momentum SGD with decoupled weight decay."""
        for done in [s for s in self._sent if s <= step]:
            del self._sent[done]
        if step < 0 or not payloads:
            return
        check_payloads(self._specs, payloads, self._spec.fingerprint())
        subsets = self._subsets(step)
        lr = lr_at(self.config.schedule, step)
        mu = self.config.momentum
        n = len(payloads)
        for (name, p), spec in zip(self._params, self._specs, strict=True):
            total = torch.zeros(spec.chunk_numel, dtype=torch.float32, device=p.device)
            for _, entry in entries_for(name, payloads):
                total += densify(entry, spec.chunk_numel, p.device).reshape(-1)
            grad = torch.zeros(p.numel(), dtype=torch.float32, device=p.device)
            grad[subsets[name]] = total / n
            buf = self._momentum[name].mul_(mu).add_(grad)
            update = grad.add(buf, alpha=mu) if self.config.nesterov else buf
            if self.config.weight_decay:
                p.mul_(1.0 - lr * self.config.weight_decay)
            p.sub_(update.reshape(p.shape).to(p.dtype), alpha=lr)

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "error": clone_tensors(self._error),
            "momentum": clone_tensors(self._momentum),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise StateError("not a CocktailSGD state dict of a supported version")
        copy_into(self._error, state.get("error"), "error")
        copy_into(self._momentum, state.get("momentum"), "momentum")
