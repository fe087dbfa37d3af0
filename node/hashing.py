"""Weights hash: the fingerprint every announcement carries so divergent replicas are found in one round."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import torch


def tensors_hash(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """sha256 over names, dtypes, shapes and raw bytes, in the given order; hex digest.

    Raw bytes (not values) so that bit-level divergence, e.g. -0.0 vs 0.0 or a last-ulp difference, is seen.
    """
    h = hashlib.sha256()
    for name, t in named:
        t = t.detach().to("cpu").contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(repr(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().data)  # the tensor's own buffer, not a copy
    return h.hexdigest()


def model_hash(model: torch.nn.Module) -> str:
    """Hash of every parameter and buffer of ``model`` in registration order."""
    return tensors_hash(list(model.state_dict().items()))
