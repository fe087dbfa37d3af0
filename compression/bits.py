"""Fixed-width bit packing of unsigned integers, LSB first, shared by the packed and enum index codecs.

Values go through numpy's ``unpackbits``/``packbits`` in batches rather than a per-value Python loop, so
a 1.2B-parameter payload (about a million fields) packs in tens of milliseconds, and the temporary bit
matrix stays bounded (64 bytes per value of the current batch) whatever the payload size.
"""

from __future__ import annotations

import numpy as np

from .errors import PayloadError

# A multiple of 8, so that every batch but the last ends on a byte boundary and batches concatenate as bytes.
_BATCH = 1 << 16


def packed_nbytes(count: int, width: int) -> int:
    """Bytes needed for ``count`` fields of ``width`` bits, padded with zero bits to a whole byte."""
    return (count * width + 7) // 8


def pack_uint(values: np.ndarray, width: int) -> bytes:
    """Pack each value's low ``width`` bits (0..64); the caller guarantees the values fit."""
    if not 0 <= width <= 64:
        raise ValueError(f"bit width must be in [0, 64], got {width}")
    flat = np.ascontiguousarray(values, dtype="<u8").reshape(-1)
    if width == 0 or flat.size == 0:
        return b""
    parts: list[bytes] = []
    for start in range(0, flat.size, _BATCH):
        batch = flat[start : start + _BATCH]
        bits = np.unpackbits(batch.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")[:, :width]
        parts.append(np.packbits(bits.reshape(-1), bitorder="little").tobytes())
    return b"".join(parts)


def unpack_uint(data: bytes | memoryview, count: int, width: int) -> np.ndarray:
    """Inverse of :func:`pack_uint`, as uint64; the caller has already checked ``len(data)``.

    Padding bits must be zero, so every payload has exactly one byte encoding (a hash of the bytes then
    identifies the content, which equivocation detection relies on).
    """
    if not 0 <= width <= 64:
        raise ValueError(f"bit width must be in [0, 64], got {width}")
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size != packed_nbytes(count, width):
        raise ValueError(f"expected {packed_nbytes(count, width)} bytes, got {raw.size}")
    out = np.zeros(count, dtype=np.uint64)
    if width == 0 or count == 0:
        return out
    tail_bits = (count * width) % 8
    if tail_bits and int(raw[-1]) >> tail_bits:
        raise PayloadError("malformed", "nonzero padding bits after the last packed field")
    for start in range(0, count, _BATCH):
        n = min(_BATCH, count - start)
        first = start * width // 8
        bits = np.unpackbits(raw[first : first + packed_nbytes(n, width)], bitorder="little", count=n * width)
        full = np.zeros((n, 64), dtype=np.uint8)
        full[:, :width] = bits.reshape(n, width)
        out[start : start + n] = np.packbits(full, axis=1, bitorder="little").view("<u8").reshape(-1)
    return out
