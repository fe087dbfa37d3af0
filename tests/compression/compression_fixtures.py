"""Builders shared by the compression tests: small specs, random valid payloads, envelope surgery."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import numpy as np
import torch
from distro_node.compression.envelope import F_INDICES, F_SCALE, F_VALUES
from distro_node.compression.layout import model_layout
from distro_node.compression.payload import Header, Payload, PayloadSpec, SparseTensor, TensorSpec
from distro_node.compression.sizes import field_sizes
from distro_node.compression.wire import encode

RUN_ID = bytes(range(32))
PEER = "12D3KooWPeerA"
STEP = 7

SMALL_SHAPES: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("embed.weight", (128, 64)),
    ("layer.0.attn.weight", (64, 96)),
    ("layer.0.norm.weight", (64,)),
    ("conv.weight", (3, 16, 32)),
    ("bias", (5,)),
    ("tiny", (3,)),
    ("gain", ()),
)


def spec_from_shapes(
    shapes: Sequence[tuple[str, tuple[int, ...]]],
    *,
    k: int = 4,
    chunk: int = 16,
    index_codec: str = "auto",
    value_codec: str = "fp32",
) -> PayloadSpec:
    layout = model_layout(shapes, chunk=chunk)
    tensors = tuple(
        TensorSpec(t.name, t.n_chunks, t.chunk_numel, min(k, t.chunk_numel)) for t in layout.tensors
    )
    return PayloadSpec(
        strategy="distro",
        tensors=tensors,
        layout_digest=layout.digest(),
        settings={"k": k, "chunk": chunk},
        index_codec=index_codec,
        value_codec=value_codec,
    )


def small_spec(index_codec: str = "auto", value_codec: str = "fp32", k: int = 4) -> PayloadSpec:
    return spec_from_shapes(SMALL_SHAPES, k=k, index_codec=index_codec, value_codec=value_codec)


def random_indices(rng: np.random.Generator, n_chunks: int, chunk_numel: int, k: int) -> np.ndarray:
    """k distinct positions per chunk, in random (unsorted) order."""
    return np.argsort(rng.random((n_chunks, chunk_numel)), axis=1)[:, :k].astype(np.int64)


def random_payload(spec: PayloadSpec, seed: int = 0, scale: float = 1.0) -> Payload:
    rng = np.random.default_rng(seed)
    tensors: dict[str, SparseTensor] = {}
    for t in spec.tensors:
        values = torch.from_numpy((rng.standard_normal((t.n_chunks, t.k)) * scale).astype(np.float32))
        if t.dense:
            tensors[t.name] = SparseTensor(values=values)
        else:
            idx = torch.from_numpy(random_indices(rng, t.n_chunks, t.chunk_numel, t.k))
            tensors[t.name] = SparseTensor(values=values, indices=idx)
    return Payload(tensors=tensors)


def header_for(spec: PayloadSpec, *, step: int = STEP, peer: str = PEER, run_id: bytes = RUN_ID) -> Header:
    return Header(
        run_id=run_id,
        step=step,
        peer_id=peer,
        strategy=spec.strategy,
        layout_digest=spec.layout_digest,
        settings_digest=spec.settings_digest(),
    )


def valid_bytes(spec: PayloadSpec, seed: int = 0) -> bytes:
    return encode(header_for(spec), random_payload(spec, seed), spec)


def repack(data: bytes, edit: Callable[[dict[str, Any]], object]) -> bytes:
    """Unpack a (trusted, test-made) payload, let ``edit`` mutate the document in place, pack it again."""
    doc = msgpack.unpackb(data, raw=False)
    edit(doc)
    return msgpack.packb(doc, use_bin_type=True)


def sparse_names(spec: PayloadSpec) -> list[str]:
    return [t.name for t in spec.tensors if not t.dense]


def tensor_span(spec: PayloadSpec, name: str, key: str) -> slice:
    """Byte range of tensor ``name`` inside the bin of field ``key`` (F_INDICES, F_VALUES or F_SCALE).

    Recomputed here from ``field_sizes`` rather than taken from the decoder's plan, so tests that edit one
    tensor's bytes also check that the decoder splits the concatenated fields where the encoder joined them.
    """
    start = 0
    for t in spec.tensors:
        s = field_sizes(t, spec.index_codec, spec.value_codec)
        n = {F_INDICES: s.indices, F_VALUES: s.values, F_SCALE: s.scale}[key]
        if t.name == name:
            return slice(start, start + n)
        start += n
    raise KeyError(name)


def get_part(doc: dict[str, Any], spec: PayloadSpec, name: str, key: str) -> bytes:
    """One tensor's bytes of field ``key`` in an unpacked (trusted, test-made) document."""
    return bytes(doc[key][tensor_span(spec, name, key)])


def set_part(doc: dict[str, Any], spec: PayloadSpec, name: str, key: str, new: bytes) -> None:
    """Replace one tensor's bytes of field ``key`` (``new`` may have another length)."""
    span = tensor_span(spec, name, key)
    doc[key] = doc[key][: span.start] + new + doc[key][span.stop :]
