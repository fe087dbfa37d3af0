"""Top-k selection per chunk and its inverse (scatter back to a dense coefficient block)."""

from __future__ import annotations

import torch
from distro_node.compression.payload import SparseTensor


def clamp_k(k: int, chunk_numel: int) -> int:
    """k clamped to [1, chunk_numel], as in the reference: asking for more than a chunk holds means 'all'."""
    return max(1, min(int(k), int(chunk_numel)))


def select_topk(coeffs: torch.Tensor, k: int) -> SparseTensor:
    """The ``k`` largest-magnitude coefficients of each row of ``coeffs`` (``(n_chunks, chunk_numel)``).

    Indices are returned sorted ascending within each chunk: the choice is the same set either way, and sorted
    indices make the wire codec's delta/entropy coding effective and the payload canonical. When ``k`` covers
    the whole chunk the entry is dense (``indices is None``), which is what ``TensorSpec.dense`` expects.
    """
    chunk_numel = coeffs.shape[1]
    k = clamp_k(k, chunk_numel)
    if k == chunk_numel:
        return SparseTensor(values=coeffs.detach().to(torch.float32).clone(), indices=None)
    idx = coeffs.abs().topk(k, dim=1, largest=True, sorted=False).indices
    idx = idx.sort(dim=1).values
    return SparseTensor(values=coeffs.gather(1, idx).to(torch.float32), indices=idx.to(torch.int64))


def densify(entry: SparseTensor, chunk_numel: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Dense ``(n_chunks, chunk_numel)`` float32 block: the entry's values at its indices, zeros elsewhere.

    ``scatter_`` (not ``scatter_add_``) with indices that are unique per row writes each slot once, so the
    result is bit-exact and deterministic on every device, including CUDA in deterministic mode.
    """
    values = entry.values.to(device=device, dtype=torch.float32)
    if entry.indices is None:
        return values.clone()
    out = torch.zeros(values.shape[0], chunk_numel, dtype=torch.float32, device=values.device)
    return out.scatter_(1, entry.indices.to(device=values.device, dtype=torch.int64), values)
