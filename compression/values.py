"""Value codecs: how the selected coefficients become bytes.

Decoding always yields float32, so aggregation code never depends on the wire precision. Codecs reject only
what is impossible in their own format (a negative int8 scale, the unused int8 code -128); finiteness and the
norm bound are checked once, for every codec, by the wire decoder.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod

import numpy as np
import torch

from .errors import PayloadError


class ValueCodec(ABC):
    """Encodes a flat float32 array; ``scale_nbytes > 0`` means a separate per-tensor scale field."""

    name: str
    item_bits: int
    scale_nbytes: int = 0

    def nbytes(self, count: int) -> int:
        """Exact size of the value field (without the scale field)."""
        return (count * self.item_bits + 7) // 8

    @abstractmethod
    def encode(self, values: np.ndarray) -> tuple[bytes, bytes | None]:
        """``(value bytes, scale bytes or None)`` for a flat float32 array."""

    @abstractmethod
    def decode(self, data: bytes | memoryview, count: int, scale: bytes | None) -> np.ndarray:
        """Flat, writable float32 array of ``count`` values; field lengths are already checked."""


class Fp32Codec(ValueCodec):
    name = "fp32"
    item_bits = 32

    def encode(self, values: np.ndarray) -> tuple[bytes, bytes | None]:
        return np.ascontiguousarray(values, dtype="<f4").tobytes(), None

    def decode(self, data: bytes | memoryview, count: int, scale: bytes | None) -> np.ndarray:
        return np.frombuffer(data, dtype="<f4", count=count).astype(np.float32)


class Bf16Codec(ValueCodec):
    """Half the bytes of fp32 with fp32's range, so no scale is needed."""

    name = "bf16"
    item_bits = 16

    def encode(self, values: np.ndarray) -> tuple[bytes, bytes | None]:
        # torch rounds to nearest-even and keeps NaN a NaN; a bit-shift in numpy would do neither.
        t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(torch.bfloat16)
        return t.view(torch.int16).numpy().astype("<i2").tobytes(), None

    def decode(self, data: bytes | memoryview, count: int, scale: bytes | None) -> np.ndarray:
        high = np.frombuffer(data, dtype="<u2", count=count).astype(np.uint32)
        return (high << 16).view(np.float32)


class Int8Codec(ValueCodec):
    """Symmetric absmax quantization: q in [-127, 127], value = q * scale (error <= scale / 2)."""

    name = "int8"
    item_bits = 8
    scale_nbytes = 4

    def encode(self, values: np.ndarray) -> tuple[bytes, bytes | None]:
        v = np.asarray(values, dtype=np.float32)
        absmax = float(np.abs(v).max()) if v.size else 0.0
        scale = np.float32(absmax / 127.0)
        if scale > 0 and np.isfinite(scale):
            q = np.clip(np.rint(v / scale), -127, 127).astype(np.int8)
        else:
            q = np.zeros(v.shape, dtype=np.int8)
        return q.tobytes(), struct.pack("<f", scale)

    def decode(self, data: bytes | memoryview, count: int, scale: bytes | None) -> np.ndarray:
        if scale is None or len(scale) != self.scale_nbytes:
            raise PayloadError("length", "int8 values need a 4-byte scale")
        (s,) = struct.unpack("<f", scale)
        if not np.isfinite(s):
            raise PayloadError("non_finite", f"int8 scale is {s}")
        if s < 0:
            raise PayloadError("value_range", f"int8 scale is negative ({s})")
        q = np.frombuffer(data, dtype=np.int8, count=count)
        if q.size and int(q.min()) == -128:
            raise PayloadError("value_range", "int8 code -128 is outside the symmetric range [-127, 127]")
        # A hostile finite scale can push q * s past float32's range; the caller rejects the resulting Inf
        # as non_finite, so numpy's overflow warning would only be log noise a peer can trigger at will.
        with np.errstate(over="ignore"):
            return q.astype(np.float32) * np.float32(s)


class OneBitCodec(ValueCodec):
    """Sign votes: bit 1 means value >= 0 (decodes to +1.0), bit 0 to -1.0; 8 per byte, LSB first."""

    name = "1bit"
    item_bits = 1

    def encode(self, values: np.ndarray) -> tuple[bytes, bytes | None]:
        bits = np.asarray(values, dtype=np.float32).reshape(-1) >= 0
        return np.packbits(bits, bitorder="little").tobytes(), None

    def decode(self, data: bytes | memoryview, count: int, scale: bytes | None) -> np.ndarray:
        raw = np.frombuffer(data, dtype=np.uint8)
        tail = count % 8
        if tail and int(raw[-1]) >> tail:
            raise PayloadError("malformed", "nonzero padding bits after the last sign bit")
        bits = np.unpackbits(raw, count=count, bitorder="little")
        return bits.astype(np.float32) * np.float32(2.0) - np.float32(1.0)


VALUE_CODECS: dict[str, ValueCodec] = {
    codec.name: codec for codec in (Fp32Codec(), Bf16Codec(), Int8Codec(), OneBitCodec())
}
