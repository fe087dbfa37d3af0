"""Exact payload sizes from a spec alone, and the spec sanity check.

Sizes are pure arithmetic on (chunks, k, codecs): the wire decoder uses them as the expected field lengths,
and benchmarks use them to cost a 1.2B-parameter model without building a single tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

from .indices import INDEX_CODECS
from .payload import PayloadSpec, TensorSpec
from .values import VALUE_CODECS


@dataclass(frozen=True)
class FieldSizes:
    """Byte length of each of one tensor's fields; 0 means it has no such field (a dense tensor: indices)."""

    indices: int
    values: int
    scale: int

    @property
    def total(self) -> int:
        return self.indices + self.values + self.scale


def check_tensor_spec(spec: TensorSpec, index_codec: str, value_codec: str) -> None:
    """Raise ValueError when the codecs cannot carry this tensor (e.g. ``enum`` with C(n, k) >= 2**63)."""
    if index_codec not in INDEX_CODECS:
        raise ValueError(f"unknown index codec {index_codec!r}; known: {sorted(INDEX_CODECS)}")
    if value_codec not in VALUE_CODECS:
        raise ValueError(f"unknown value codec {value_codec!r}; known: {sorted(VALUE_CODECS)}")
    if spec.n_chunks < 1:
        raise ValueError(f"tensor {spec.name!r}: n_chunks must be >= 1, got {spec.n_chunks}")
    if spec.chunk_numel < 1 or not 1 <= spec.k <= spec.chunk_numel:
        raise ValueError(
            f"tensor {spec.name!r}: need 1 <= k <= chunk_numel, got k={spec.k} of {spec.chunk_numel}"
        )
    if not spec.dense:
        try:
            INDEX_CODECS[index_codec].check(spec.chunk_numel, spec.k)
        except ValueError as exc:
            raise ValueError(f"tensor {spec.name!r}: {exc}") from None


def check_payload_spec(spec: PayloadSpec) -> None:
    """Raise ValueError for a spec no payload could satisfy, so misconfiguration fails at startup."""
    names = [t.name for t in spec.tensors]
    if len(set(names)) != len(names):
        raise ValueError("tensor names in a payload spec must be unique")
    if not isinstance(spec.layout_digest, bytes):
        raise ValueError("layout_digest must be bytes")
    for t in spec.tensors:
        check_tensor_spec(t, spec.index_codec, spec.value_codec)


def field_sizes(spec: TensorSpec, index_codec: str, value_codec: str) -> FieldSizes:
    """Exact bytes of each field of one tensor's entry."""
    idx = 0 if spec.dense else INDEX_CODECS[index_codec].nbytes(spec.n_chunks, spec.chunk_numel, spec.k)
    vc = VALUE_CODECS[value_codec]
    return FieldSizes(indices=idx, values=vc.nbytes(spec.count), scale=vc.scale_nbytes)


def tensor_nbytes(spec: TensorSpec, index_codec: str, value_codec: str) -> int:
    """Bytes of index, value and scale fields of one tensor (no envelope overhead)."""
    return field_sizes(spec, index_codec, value_codec).total


def payload_body_nbytes(spec: PayloadSpec) -> int:
    """Sum of :func:`tensor_nbytes` over the spec; the envelope adds ~200 bytes, whatever the tensor count."""
    return sum(tensor_nbytes(t, spec.index_codec, spec.value_codec) for t in spec.tensors)
