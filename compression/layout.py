"""How each parameter tensor is cut into DCT chunks.

The layout is a pure function of tensor names, shapes and the target chunk size, so every peer derives the
same one locally; its digest travels in each payload header to catch peers running a different model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def split_size(size: int, target: int) -> int:
    """Largest divisor of ``size`` that is <= ``target`` (``size`` itself when it is smaller).

    A prime size above the target gives 1: a known weakness of the scheme, kept for compatibility.
    """
    if size < 1 or target < 1:
        raise ValueError(f"split_size needs positive sizes, got size={size} target={target}")
    if size <= target:
        return size
    for n in range(target, 0, -1):
        if size % n == 0:
            return n
    return 1  # unreachable: 1 divides everything


@dataclass(frozen=True)
class TensorLayout:
    """Chunking of one tensor.

    ``block`` is ``(n,)`` for vectors (and scalars, seen as length-1 vectors) and ``(n1, n2)`` for tensors
    with two or more dims, where the last two dims are chunked and leading dims are a batch.
    """

    name: str
    shape: tuple[int, ...]
    block: tuple[int, ...]

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def chunk_numel(self) -> int:
        n = 1
        for b in self.block:
            n *= b
        return n

    @property
    def n_chunks(self) -> int:
        return self.numel // self.chunk_numel


@dataclass(frozen=True)
class ModelLayout:
    """Ordered chunking of every trainable tensor of a model."""

    tensors: tuple[TensorLayout, ...]
    chunk: int

    def __post_init__(self) -> None:
        names = [t.name for t in self.tensors]
        if len(set(names)) != len(names):
            raise ValueError("tensor names in a layout must be unique")

    @property
    def numel(self) -> int:
        return sum(t.numel for t in self.tensors)

    def by_name(self) -> dict[str, TensorLayout]:
        return {t.name: t for t in self.tensors}

    def digest(self) -> bytes:
        """sha256 over names, shapes and blocks: equal digests mean compatible payloads."""
        doc = [[t.name, list(t.shape), list(t.block)] for t in self.tensors]
        return hashlib.sha256(json.dumps(doc, separators=(",", ":")).encode()).digest()


def tensor_layout(name: str, shape: Sequence[int], chunk: int) -> TensorLayout:
    shape = tuple(int(s) for s in shape)
    if any(s < 1 for s in shape):
        raise ValueError(f"tensor {name!r} has an empty dimension: {shape}")
    if len(shape) == 0:
        block: tuple[int, ...] = (1,)
    elif len(shape) == 1:
        block = (split_size(shape[0], chunk),)
    else:
        block = (split_size(shape[-2], chunk), split_size(shape[-1], chunk))
    return TensorLayout(name=name, shape=shape, block=block)


def model_layout(named_shapes: Iterable[tuple[str, Sequence[int]]], chunk: int = 64) -> ModelLayout:
    """Layout for ``(name, shape)`` pairs in the given order (use the model's parameter order)."""
    return ModelLayout(tensors=tuple(tensor_layout(n, s, chunk) for n, s in named_shapes), chunk=chunk)
