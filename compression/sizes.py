"""Exact payload sizes from a spec alone.

Sizes are pure arithmetic on (chunks, k, codecs): the wire decoder uses them as the expected field lengths,
and benchmarks use them to cost a 1.2B-parameter model without building a single tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

from .indices import INDEX_CODECS
from .spec import PayloadSpec, TensorSpec
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
