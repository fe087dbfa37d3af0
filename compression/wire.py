"""Payload <-> bytes. ``decode`` is the only path by which peer bytes become tensors.

Decoding follows the validation order of threats.md: size cap, capped unpack, header schema and bindings
(run, peer, layout, settings, step), exact field lengths from the LOCAL spec (which fixes the tensor set and
each tensor's byte range), indices, values; tensors are built only after every check passed. Every
rejection is a :class:`PayloadError`. The byte layout is described in :mod:`.envelope`.
"""

from __future__ import annotations

import msgpack
import numpy as np
import torch

from .envelope import (
    F_INDICES,
    F_SCALE,
    F_VALUES,
    K_LAYOUT,
    K_PEER_ID,
    K_RUN_ID,
    K_SETTINGS,
    K_STEP,
    K_STRATEGY,
    K_VERSION,
    MAX_PEER_ID_LEN,
    MAX_RUN_ID_LEN,
    check_fields,
    check_header,
    max_encoded_nbytes,
    plan_for,
    unpack,
)
from .errors import PayloadError
from .indices import INDEX_CODECS
from .payload import FORMAT_VERSION, Header, Payload, SparseTensor
from .spec import PayloadSpec, TensorSpec
from .values import VALUE_CODECS

__all__ = ["decode", "encode", "max_encoded_nbytes"]


def _to_numpy(t: torch.Tensor, dtype: torch.dtype) -> np.ndarray:
    return t.detach().to("cpu", dtype).contiguous().numpy()


def _canonical(
    spec: TensorSpec, st: SparseTensor, *, allow_invalid: bool
) -> tuple[np.ndarray | None, np.ndarray]:
    """Indices sorted within each chunk (values permuted alike); None for dense tensors."""
    shape = (spec.n_chunks, spec.k)
    values = _to_numpy(st.values, torch.float32)
    if values.shape != shape:
        raise ValueError(f"tensor {spec.name!r}: values shape {values.shape}, expected {shape}")
    if not allow_invalid and not bool(np.isfinite(values).all()):
        raise ValueError(f"tensor {spec.name!r}: non-finite values would be rejected by every peer")
    if st.indices is None:
        if not spec.dense:
            raise ValueError(f"tensor {spec.name!r}: indices are required when k < chunk_numel")
        return None, values
    indices = _to_numpy(st.indices, torch.int64)
    if indices.shape != shape:
        raise ValueError(f"tensor {spec.name!r}: indices shape {indices.shape}, expected {shape}")
    if spec.k > 1 and bool((np.diff(indices, axis=1) < 0).any()):
        order = np.argsort(indices, axis=1, kind="stable")
        indices = np.take_along_axis(indices, order, axis=1)
        values = np.take_along_axis(values, order, axis=1)
    if not allow_invalid or spec.dense:
        bad_range = bool(indices.size) and (int(indices.min()) < 0 or int(indices.max()) >= spec.chunk_numel)
        if bad_range or (spec.k > 1 and bool((np.diff(indices, axis=1) == 0).any())):
            raise ValueError(f"tensor {spec.name!r}: indices must be unique and in [0, {spec.chunk_numel})")
    if spec.dense:
        return None, values  # sorted, unique and in range with k == chunk_numel: exactly 0..n-1
    return indices, values


def encode(header: Header, payload: Payload, spec: PayloadSpec, *, allow_invalid: bool = False) -> bytes:
    """Serialize one payload. Raises ValueError for local mistakes (shapes, header not matching ``spec``).

    ``allow_invalid`` skips the content checks (header bindings, index range and uniqueness, finite values)
    so that tests and the fault injector can produce the bad payloads a faulty peer would send; the
    structure (tensor set, shapes) is still required.
    """
    if type(header.run_id) is not bytes or type(header.peer_id) is not str or type(header.step) is not int:
        raise ValueError("header run_id must be bytes, peer_id str, step int")
    if not -(2**63) <= header.step < 2**64:
        raise ValueError(f"header step {header.step} does not fit a msgpack integer")
    if not allow_invalid:
        problems = [
            name
            for name, ok in (
                ("version", header.version == FORMAT_VERSION),
                ("strategy", header.strategy == spec.strategy),
                ("layout_digest", header.layout_digest == spec.layout_digest),
                ("settings_digest", header.settings_digest == spec.settings_digest()),
                ("run_id length", len(header.run_id) <= MAX_RUN_ID_LEN),
                ("peer_id length", len(header.peer_id.encode()) <= MAX_PEER_ID_LEN),
                ("step", header.step >= 0),
            )
            if not ok
        ]
        if problems:
            raise ValueError(f"header does not match the payload spec: {', '.join(problems)}")
    names = {t.name for t in spec.tensors}
    if set(payload.tensors) != names:
        raise ValueError(f"payload tensors differ from the spec: {sorted(set(payload.tensors) ^ names)[:5]}")
    plan = plan_for(spec)
    index_codec = INDEX_CODECS[spec.index_codec]
    value_codec = VALUE_CODECS[spec.value_codec]
    parts: dict[str, list[bytes]] = {key: [] for key in plan.totals}
    for t, sizes in zip(spec.tensors, plan.sizes, strict=True):
        indices, values = _canonical(t, payload.tensors[t.name], allow_invalid=allow_invalid)
        value_bytes, scale = value_codec.encode(values.reshape(-1))
        got = {F_VALUES: value_bytes}
        if indices is not None:
            got[F_INDICES] = index_codec.encode(indices, t.chunk_numel)
        if scale is not None:
            got[F_SCALE] = scale
        want = {F_INDICES: sizes.indices, F_VALUES: sizes.values, F_SCALE: sizes.scale}
        for key in sorted(got.keys() | plan.totals.keys()):
            part = got.get(key, b"")
            # Tensors are split by position on decode, so a codec writing one byte too many or too few would
            # shift every later tensor: refuse here, where it can only be our own bug.
            if key not in plan.totals or len(part) != want[key]:
                raise ValueError(
                    f"tensor {t.name!r}: {key!r} field has {len(part)} bytes, expected {want[key]}"
                )
            parts[key].append(part)
    doc: dict[str, object] = {
        K_VERSION: header.version,
        K_RUN_ID: header.run_id,
        K_STEP: header.step,
        K_PEER_ID: header.peer_id,
        K_STRATEGY: header.strategy,
        K_LAYOUT: header.layout_digest,
        K_SETTINGS: header.settings_digest,
    }
    for key, chunks in parts.items():
        doc[key] = b"".join(chunks)
    return msgpack.packb(doc, use_bin_type=True)


def _check_indices(spec: TensorSpec, idx: np.ndarray) -> None:
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= spec.chunk_numel):
        bad = int(np.argmax(((idx < 0) | (idx >= spec.chunk_numel)).any(axis=1)))
        raise PayloadError(
            "index_range", f"tensor {spec.name!r} chunk {bad}: index outside [0, {spec.chunk_numel})"
        )
    if spec.k < 2:
        return
    steps = np.diff(idx, axis=1)
    if bool((steps <= 0).any()):
        dup = (np.diff(np.sort(idx, axis=1), axis=1) == 0).any(axis=1)
        if bool(dup.any()):
            raise PayloadError(
                "duplicate_index", f"tensor {spec.name!r} chunk {int(np.argmax(dup))}: repeated index"
            )
        bad = int(np.argmax((steps < 0).any(axis=1)))
        raise PayloadError("index_order", f"tensor {spec.name!r} chunk {bad}: indices not sorted ascending")


def decode(
    data: bytes | bytearray | memoryview,
    spec: PayloadSpec,
    *,
    run_id: bytes,
    sender: str | None = None,
    step: int | None = None,
    max_value_norm: float | None = None,
) -> tuple[Header, Payload]:
    """Validate and decode peer bytes against the LOCAL ``spec``; raises only :class:`PayloadError`.

    ``sender`` is the authenticated peer id of the connection (checked against the claimed one), ``step`` the
    step the caller expects, ``max_value_norm`` a bound on the L2 norm of all decoded values together.
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"decode needs bytes, got {type(data).__name__}")
    plan = plan_for(spec)
    size = data.nbytes if isinstance(data, memoryview) else len(data)
    if size > plan.max_nbytes:
        raise PayloadError("too_large", f"{size} bytes, cap for this spec is {plan.max_nbytes}")
    obj = unpack(bytes(data) if isinstance(data, memoryview) else data, plan)
    header = check_header(obj, spec, plan, run_id=run_id, sender=sender, step=step)
    fields = check_fields(obj, plan)

    index_codec = INDEX_CODECS[spec.index_codec]
    all_indices: list[np.ndarray | None] = []
    for t, f in zip(plan.tensors, fields, strict=True):
        if f.indices is None:  # dense: k == chunk_numel, indices are implicitly 0..chunk_numel-1
            all_indices.append(None)
            continue
        try:
            idx = index_codec.decode(f.indices, t.n_chunks, t.chunk_numel, t.k)
        except PayloadError as exc:
            raise PayloadError(exc.reason, f"tensor {t.name!r} indices: {exc.detail}") from None
        _check_indices(t, idx)
        all_indices.append(idx)

    value_codec = VALUE_CODECS[spec.value_codec]
    all_values: list[np.ndarray] = []
    sumsq = 0.0
    for t, f in zip(plan.tensors, fields, strict=True):
        try:
            values = value_codec.decode(f.values, t.count, None if f.scale is None else bytes(f.scale))
        except PayloadError as exc:
            raise PayloadError(exc.reason, f"tensor {t.name!r} values: {exc.detail}") from None
        if not bool(np.isfinite(values).all()):
            raise PayloadError("non_finite", f"tensor {t.name!r}: NaN or Inf among the values")
        # float64 accumulation without BLAS: a threaded dot product stalls badly on a busy machine.
        sumsq += float(np.square(values, dtype=np.float64).sum())
        all_values.append(values)
    if max_value_norm is not None and not sumsq <= max_value_norm * max_value_norm:
        raise PayloadError("norm", f"L2 norm of the values {sumsq**0.5:.6g} exceeds {max_value_norm:.6g}")

    out: dict[str, SparseTensor] = {}
    for t, maybe_idx, values in zip(plan.tensors, all_indices, all_values, strict=True):
        out[t.name] = SparseTensor(
            values=torch.from_numpy(values.reshape(t.n_chunks, t.k)),
            indices=None if maybe_idx is None else torch.from_numpy(maybe_idx),
        )
    return header, Payload(tensors=out, validated_for=spec.fingerprint())
