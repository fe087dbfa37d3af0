"""Index and value codecs in isolation: sizes, bit layouts, and the spec checks."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from compression_fixtures import random_indices
from distro_node.compression.bits import pack_uint, unpack_uint
from distro_node.compression.errors import PayloadError
from distro_node.compression.indices import INDEX_CODECS
from distro_node.compression.payload import PayloadSpec, TensorSpec
from distro_node.compression.sizes import payload_body_nbytes, tensor_nbytes
from distro_node.compression.values import VALUE_CODECS


def test_index_sizes_for_4_of_4096() -> None:
    assert INDEX_CODECS["auto"].nbytes(10, 4096, 4) == 10 * 4 * 2
    assert INDEX_CODECS["packed"].nbytes(10, 4096, 4) == 10 * 4 * 12 // 8
    # ceil(log2 C(4096, 4)) = 44 bits per chunk = 11 bits per index
    assert (math.comb(4096, 4) - 1).bit_length() == 44
    assert INDEX_CODECS["enum"].nbytes(10, 4096, 4) == 10 * 44 // 8
    assert INDEX_CODECS["auto"].nbytes(1, 256, 1) == 1
    assert INDEX_CODECS["auto"].nbytes(1, 257, 1) == 2
    assert INDEX_CODECS["auto"].nbytes(1, 65537, 1) == 4


@pytest.mark.parametrize("name", sorted(INDEX_CODECS))
@pytest.mark.parametrize(("n", "k"), [(4096, 4), (4096, 1), (64, 32), (64, 60), (60, 59), (5, 4), (1000, 3)])
def test_index_round_trip(name: str, n: int, k: int) -> None:
    rng = np.random.default_rng(n * 100 + k)
    idx = np.sort(random_indices(rng, 50, n, k), axis=1)
    idx[0] = np.arange(k)  # smallest subset (rank 0)
    idx[1] = np.arange(n - k, n)  # largest subset (rank C(n, k) - 1)
    codec = INDEX_CODECS[name]
    data = codec.encode(idx, n)
    assert len(data) == codec.nbytes(50, n, k)
    np.testing.assert_array_equal(codec.decode(data, 50, n, k), idx)


def test_auto_is_little_endian_u16() -> None:
    data = INDEX_CODECS["auto"].encode(np.array([[1, 258]]), 4096)
    assert data == bytes([1, 0, 2, 1])


def test_packed_is_lsb_first() -> None:
    # 12-bit fields 0x123 and 0xABC -> bits LSB first: 0x23, 0xC1, 0xAB
    data = INDEX_CODECS["packed"].encode(np.array([[0x123, 0xABC]]), 4096)
    assert data == bytes([0x23, 0xC1, 0xAB])


def test_enum_rank_is_combinatorial_number() -> None:
    idx = np.array([[3, 10, 11, 4000]])
    rank = math.comb(3, 1) + math.comb(10, 2) + math.comb(11, 3) + math.comb(4000, 4)
    data = INDEX_CODECS["enum"].encode(idx, 4096)
    assert int.from_bytes(data, "little") == rank


def test_enum_rank_out_of_range_rejected() -> None:
    top = math.comb(4096, 4)  # first invalid rank; fits in 44 bits
    data = top.to_bytes(6, "little")[: INDEX_CODECS["enum"].nbytes(1, 4096, 4)]
    with pytest.raises(PayloadError) as err:
        INDEX_CODECS["enum"].decode(data, 1, 4096, 4)
    assert err.value.reason == "index_range"


def test_enum_refuses_subsets_that_do_not_fit_int64() -> None:
    with pytest.raises(ValueError, match="2\\*\\*63"):
        INDEX_CODECS["enum"].check(4096, 32)
    with pytest.raises(ValueError, match="enum"):
        PayloadSpec("distro", (TensorSpec("w", 10, 4096, 32),), b"x" * 32, index_codec="enum")
    # a dense tensor sends no indices, so enum is fine there
    PayloadSpec("distro", (TensorSpec("w", 10, 4096, 4096),), b"x" * 32, index_codec="enum")


@pytest.mark.parametrize(
    "kwargs",
    [{"index_codec": "gzip"}, {"value_codec": "fp8"}],
)
def test_unknown_codecs_rejected_at_spec_construction(kwargs: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="unknown"):
        PayloadSpec("distro", (TensorSpec("w", 1, 16, 4),), b"x" * 32, **kwargs)


@pytest.mark.parametrize(
    "tensor", [TensorSpec("w", 1, 16, 17), TensorSpec("w", 1, 16, 0), TensorSpec("w", 0, 16, 1)]
)
def test_impossible_tensor_specs_rejected(tensor: TensorSpec) -> None:
    with pytest.raises(ValueError, match="'w'"):
        PayloadSpec("distro", (tensor,), b"x" * 32)


def test_bit_packing_padding_must_be_zero() -> None:
    data = pack_uint(np.array([5, 6, 7], dtype=np.uint64), 3)  # 9 bits -> 2 bytes
    np.testing.assert_array_equal(unpack_uint(data, 3, 3), [5, 6, 7])
    with pytest.raises(PayloadError) as err:
        unpack_uint(data[:1] + bytes([data[1] | 0x80]), 3, 3)
    assert err.value.reason == "malformed"


def test_bit_packing_spans_batches() -> None:
    values = np.random.default_rng(0).integers(0, 1 << 44, size=200_003, dtype=np.uint64)
    np.testing.assert_array_equal(unpack_uint(pack_uint(values, 44), values.size, 44), values)


def test_one_bit_layout() -> None:
    codec = VALUE_CODECS["1bit"]
    values = np.array([1.5, -2.0, 0.0, -0.0, -1e-9, 3.0, 3.0, 3.0, -4.0], dtype=np.float32)
    data, scale = codec.encode(values)
    assert scale is None
    # value >= 0 -> bit 1 (-0.0 >= 0 too), LSB first
    assert data == bytes([0b11101101, 0b0])
    np.testing.assert_array_equal(codec.decode(data, 9, None), [1, -1, 1, 1, -1, 1, 1, 1, -1])


def test_int8_scale_field_and_error_bound() -> None:
    codec = VALUE_CODECS["int8"]
    values = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    data, scale = codec.encode(values)
    assert scale is not None and len(scale) == 4 and len(data) == 1000
    (s,) = struct.unpack("<f", scale)
    assert s == pytest.approx(float(np.abs(values).max()) / 127, rel=1e-6)
    decoded = codec.decode(data, 1000, scale)
    assert decoded.dtype == np.float32
    assert float(np.abs(decoded - values).max()) <= s / 2 * 1.001
    zeros, zscale = codec.encode(np.zeros(3, dtype=np.float32))
    np.testing.assert_array_equal(codec.decode(zeros, 3, zscale), np.zeros(3))


@pytest.mark.parametrize(
    ("scale", "payload", "reason"),
    [
        (struct.pack("<f", float("nan")), b"\x01", "non_finite"),
        (struct.pack("<f", -1.0), b"\x01", "value_range"),
        (struct.pack("<f", 1.0), b"\x80", "value_range"),
    ],
)
def test_int8_rejections(scale: bytes, payload: bytes, reason: str) -> None:
    with pytest.raises(PayloadError) as err:
        VALUE_CODECS["int8"].decode(payload, 1, scale)
    assert err.value.reason == reason


def test_bf16_rounds_to_nearest() -> None:
    codec = VALUE_CODECS["bf16"]
    values = np.array([1.0, 1.0 + 2**-9, -3.14159, 1e30], dtype=np.float32)
    data, _ = codec.encode(values)
    assert len(data) == 8
    decoded = codec.decode(data, 4, None)
    assert decoded.dtype == np.float32
    np.testing.assert_allclose(decoded, values, rtol=2**-8)
    assert decoded[0] == 1.0


def test_sizes_without_tensors() -> None:
    t = TensorSpec("w", 294_912, 4096, 4)
    assert tensor_nbytes(t, "auto", "1bit") == 294_912 * 4 * 2 + 294_912 * 4 // 8
    assert tensor_nbytes(t, "packed", "int8") == 294_912 * 4 * 12 // 8 + 294_912 * 4 + 4
    dense = TensorSpec("norm", 32, 64, 64)
    assert tensor_nbytes(dense, "enum", "bf16") == 32 * 64 * 2
    spec = PayloadSpec("distro", (t, dense), b"x" * 32, index_codec="enum", value_codec="fp32")
    assert payload_body_nbytes(spec) == 294_912 * 44 // 8 + 294_912 * 4 * 4 + 32 * 64 * 4
