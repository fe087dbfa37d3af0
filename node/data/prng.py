"""Counter-based random integers whose values are fixed by this file alone.

Every peer must build the same corpus and pick the same windows for a given (run, step, peer), yet peers run
different numpy and torch versions on different CPUs. Neither library promises stable random streams across
versions, and SIMD transcendental functions differ in the last bit between CPUs. So everything that decides
*which tokens* the data holds uses only sha256 and 64-bit integer arithmetic (splitmix64), which every
platform evaluates identically.
"""

from __future__ import annotations

import hashlib

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def derive_key(*parts: bytes | str | int) -> bytes:
    """sha256 over length-prefixed parts, so ("ab", "c") and ("a", "bc") can never collide."""
    h = hashlib.sha256(b"distro-node/data/v1")
    for part in parts:
        if isinstance(part, str):
            raw = b"s" + part.encode()
        elif isinstance(part, int):
            if part < 0:
                raise ValueError(f"key integers must be non-negative, got {part}")
            raw = b"i" + part.to_bytes((part.bit_length() + 8) // 8, "little")
        else:
            raw = b"b" + bytes(part)
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h.digest()


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijection on 64-bit integers with full avalanche."""
    z = (z ^ (z >> _S30)) * _MUL1
    z = (z ^ (z >> _S27)) * _MUL2
    return z ^ (z >> _S31)


def random_u64(key: bytes, start: int, count: int) -> np.ndarray:
    """Elements ``start .. start + count`` of the key's stream: any slice can be drawn without the rest."""
    base = np.uint64(int.from_bytes(key[:8], "little"))
    counters = np.arange(start + 1, start + count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return _mix(base + counters * _GOLDEN)


def random_below(key: bytes, bound: int | np.ndarray, count: int, start: int = 0) -> np.ndarray:
    """Integers in [0, bound) (bound may be per element); the modulo bias is below bound / 2**64."""
    return (random_u64(key, start, count) % np.asarray(bound, dtype=np.uint64)).astype(np.int64)
