"""Combining every peer's payload entry for one tensor into one coefficient block.

This is the seam for robust aggregation: a later ``Aggregator`` subclass can clip each peer's contribution by
norm (``begin`` sees every payload first, so whole-payload statistics are available) or count one vote per
coefficient, without touching the strategies that use it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from distro_node.compression.dct import from_chunks, from_sparse_chunks, sparse_is_cheaper
from distro_node.compression.errors import PayloadError
from distro_node.compression.layout import TensorLayout
from distro_node.compression.payload import Payload, SparseTensor, TensorSpec

from .topk import densify

PeerEntries = Sequence[tuple[str, SparseTensor]]


def check_entry(spec: TensorSpec, entry: SparseTensor, peer: str) -> None:
    """Reject an entry that would make ``apply`` fail halfway or differ between peers.

    The codec validates on decode too; checking again here keeps the optimizer safe when it is fed payloads
    built in memory (simulator, tests) and costs little next to the update itself.
    """
    where = f"peer {peer!r} tensor {spec.name!r}"
    values = entry.values
    if not isinstance(values, torch.Tensor) or values.dtype != torch.float32:
        raise PayloadError("dtype", f"{where}: values must be a float32 tensor")
    if tuple(values.shape) != (spec.n_chunks, spec.k):
        raise PayloadError(
            "length", f"{where}: values shape {tuple(values.shape)} != {(spec.n_chunks, spec.k)}"
        )
    if not bool(torch.isfinite(values).all()):
        raise PayloadError("non_finite", f"{where}: values contain NaN or infinity")
    indices = entry.indices
    if indices is None:
        if not spec.dense:
            raise PayloadError("schema", f"{where}: sparse tensor sent without indices")
        return
    if not isinstance(indices, torch.Tensor) or indices.dtype != torch.int64:
        raise PayloadError("dtype", f"{where}: indices must be an int64 tensor")
    if tuple(indices.shape) != tuple(values.shape):
        raise PayloadError("length", f"{where}: indices shape {tuple(indices.shape)} != values shape")
    if indices.numel() and (int(indices.min()) < 0 or int(indices.max()) >= spec.chunk_numel):
        raise PayloadError("index_range", f"{where}: index outside [0, {spec.chunk_numel})")
    if spec.k > 1:
        ordered = indices.sort(dim=1).values
        if bool((ordered[:, 1:] == ordered[:, :-1]).any()):
            raise PayloadError("duplicate_index", f"{where}: an index repeats within a chunk")


def check_payloads(
    specs: Sequence[TensorSpec], payloads: Mapping[str, Payload], fingerprint: bytes | None = None
) -> None:
    """Validate every payload completely before any weight is touched, so a bad payload cannot leave the
    model half-updated (which would desynchronize this replica from the others). Payloads the codec already
    validated against the same spec (``fingerprint``) only get the cheap tensor-set check."""
    names = {s.name for s in specs}
    for peer, payload in payloads.items():
        if set(payload.tensors) != names:
            raise PayloadError("tensor_set", f"peer {peer!r}: tensor names do not match the local layout")
        if fingerprint is not None and payload.validated_for == fingerprint:
            continue
        for spec in specs:
            check_entry(spec, payload.tensors[spec.name], peer)


class Aggregator:
    """DeMo aggregation: per coefficient, the mean over the peers that selected it; unselected coefficients 0.

    Peers arrive in sorted id order and are accumulated one after the other with plain dense additions, so
    the float operations, hence the bits, are the same on every replica and every device.
    """

    def begin(self, specs: Sequence[TensorSpec], payloads: Mapping[str, Payload]) -> None:
        """Hook called once per apply, after validation and before any ``combine``; robust variants can
        compute per-peer statistics over the whole payload here."""

    def combine(self, spec: TensorSpec, entries: PeerEntries, device: torch.device) -> torch.Tensor:
        """``(n_chunks, chunk_numel)`` float32 aggregate of one tensor.

        ``entries`` arrive in sorted peer order."""
        total = torch.zeros(spec.n_chunks, spec.chunk_numel, dtype=torch.float32, device=device)
        count = torch.zeros_like(total)
        for _, entry in entries:
            if entry.indices is None:
                total += entry.values.to(device=device, dtype=torch.float32)
                count += 1.0
            elif device.type == "cpu":
                # In place, one peer at a time: indices are unique within a row, so each slot receives one
                # addition per call and the peer order fixes the float result.
                idx = entry.indices.to(device=device)
                total.scatter_add_(1, idx, entry.values.to(device=device, dtype=torch.float32))
                count.scatter_add_(1, idx, torch.ones_like(entry.values, dtype=torch.float32, device=device))
            else:  # dense adds: the same bits under torch's deterministic mode on accelerators
                total += densify(entry, spec.chunk_numel, device)
                count += torch.zeros_like(total).scatter_(1, entry.indices.to(device=device), 1.0)
        return torch.where(count > 0, total / count.clamp_min(1.0), total)


def aggregate_to_dense(coeffs: torch.Tensor, entries: PeerEntries, layout: TensorLayout) -> torch.Tensor:
    """Inverse DCT of an aggregate, using only the coefficients the peers sent when that is cheaper.

    The aggregate is non-zero only where some peer selected a coefficient, so its inverse is a sum over the
    peers' concatenated indices, each occurrence weighted by ``coeff / occurrences`` (a coefficient chosen
    by two peers appears twice). Every replica runs the same operations, so the bits agree.
    """
    sparse = [e.indices for _, e in entries]
    if not sparse or any(i is None for i in sparse):
        return from_chunks(coeffs, layout)
    idx = torch.cat([i.to(coeffs.device) for i in sparse if i is not None], dim=1)
    if not sparse_is_cheaper(idx.shape[1], layout):
        return from_chunks(coeffs, layout)
    occurrences = torch.zeros_like(coeffs).scatter_add_(1, idx, torch.ones_like(idx, dtype=coeffs.dtype))
    weights = coeffs.gather(1, idx) / occurrences.gather(1, idx)
    return from_sparse_chunks(idx, weights, layout)


def mean_dense(entries: PeerEntries, device: torch.device) -> torch.Tensor:
    """Plain mean over peers of dense entries (the baselines' all-reduce), summed in sorted peer order."""
    total: torch.Tensor | None = None
    for _, entry in entries:
        values = entry.values.to(device=device, dtype=torch.float32)
        total = values.clone() if total is None else total.add_(values)
    if total is None:
        raise ValueError("mean_dense needs at least one entry")
    return total / len(entries)


def entries_for(name: str, payloads: Mapping[str, Payload]) -> list[tuple[str, SparseTensor]]:
    """One tensor's entries from every peer, in sorted peer-id order (the order every replica must use)."""
    return [(peer, payloads[peer].tensors[name]) for peer in sorted(payloads)]
