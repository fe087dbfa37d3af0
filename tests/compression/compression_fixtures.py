"""Builders shared by the compression tests: small specs, random valid payloads, envelope surgery."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import numpy as np
import torch
from distro_node.compression.layout import model_layout
from distro_node.compression.payload import Header, Payload, PayloadSpec, SparseTensor, TensorSpec
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
