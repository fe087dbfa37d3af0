"""Index codecs: how the ``k`` selected coefficient positions of each chunk become bytes.

Three trade-offs between simplicity and size (k=4 of 4096 per chunk): ``auto`` (whole bytes, 16 bits per
index), ``packed`` (12 bits per index) and ``enum`` (the rank of the k-subset, 44 bits per chunk = 11 bits per
index, the entropy bound). All codecs take and give indices sorted ascending within each chunk: one canonical
encoding per selection, which ``enum`` needs anyway and which makes duplicates cheap to detect.

Codecs only translate; range, order and duplicate checks on decoded indices live in the wire decoder, so they
run once, in the documented order, for every codec.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from functools import lru_cache

import numpy as np

from .bits import pack_uint, packed_nbytes, unpack_uint
from .errors import PayloadError

_RANK_LIMIT = 1 << 63  # ranks are computed in int64
_MAX_TABLE_CELLS = 1 << 20  # binomial table entries, built once per (chunk size, k) with exact integers


class IndexCodec(ABC):
    """Encodes an int64 array ``(n_chunks, k)`` of sorted in-chunk positions."""

    name: str

    def check(self, chunk_numel: int, k: int) -> None:
        """Raise ValueError when this codec cannot carry ``k`` of ``chunk_numel`` positions."""
        if chunk_numel < 1 or not 1 <= k <= chunk_numel:
            raise ValueError(
                f"index codec {self.name!r}: need 1 <= k <= chunk_numel, got k={k} of {chunk_numel}"
            )

    @abstractmethod
    def nbytes(self, n_chunks: int, chunk_numel: int, k: int) -> int:
        """Exact encoded size, computable from the local spec alone (used as the expected length)."""

    @abstractmethod
    def encode(self, indices: np.ndarray, chunk_numel: int) -> bytes:
        """``indices`` int64 ``(n_chunks, k)``, sorted within each chunk, each in ``[0, chunk_numel)``."""

    @abstractmethod
    def decode(self, data: bytes | memoryview, n_chunks: int, chunk_numel: int, k: int) -> np.ndarray:
        """int64 ``(n_chunks, k)``; ``len(data)`` has been checked against :meth:`nbytes` by the caller."""


def _check_fits(indices: np.ndarray, limit: int, codec: str) -> None:
    # Guard our own encoder: a value that does not fit its field would be silently truncated.
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= limit):
        raise ValueError(f"index codec {codec!r}: indices must be in [0, {limit})")


class AutoIndexCodec(IndexCodec):
    """Smallest whole-byte little-endian width: the simplest format, trivially decodable by anyone."""

    name = "auto"

    @staticmethod
    def width(chunk_numel: int) -> int:
        top = chunk_numel - 1
        for w in (1, 2, 4):
            if top < 1 << (8 * w):
                return w
        return 8

    def nbytes(self, n_chunks: int, chunk_numel: int, k: int) -> int:
        return n_chunks * k * self.width(chunk_numel)

    def encode(self, indices: np.ndarray, chunk_numel: int) -> bytes:
        w = self.width(chunk_numel)
        _check_fits(indices, 1 << min(8 * w, 63), self.name)
        return np.ascontiguousarray(indices, dtype=f"<u{w}").tobytes()

    def decode(self, data: bytes | memoryview, n_chunks: int, chunk_numel: int, k: int) -> np.ndarray:
        w = self.width(chunk_numel)
        return np.frombuffer(data, dtype=f"<u{w}").astype(np.int64).reshape(n_chunks, k)


class PackedIndexCodec(IndexCodec):
    """``ceil(log2(chunk_numel))`` bits per index: 25% smaller than u16 for 64x64 chunks."""

    name = "packed"

    @staticmethod
    def width(chunk_numel: int) -> int:
        return (chunk_numel - 1).bit_length()

    def nbytes(self, n_chunks: int, chunk_numel: int, k: int) -> int:
        return packed_nbytes(n_chunks * k, self.width(chunk_numel))

    def encode(self, indices: np.ndarray, chunk_numel: int) -> bytes:
        w = self.width(chunk_numel)
        _check_fits(indices, 1 << w, self.name)
        return pack_uint(indices, w)

    def decode(self, data: bytes | memoryview, n_chunks: int, chunk_numel: int, k: int) -> np.ndarray:
        w = self.width(chunk_numel)
        return unpack_uint(data, n_chunks * k, w).astype(np.int64).reshape(n_chunks, k)


@lru_cache(maxsize=64)
def _binomials(n: int, m: int) -> np.ndarray:
    """``t[j, c] = C(c, j)`` for ``j <= m``, ``c < n``, saturated at ``C(n, m)``.

    Saturation keeps every row non-decreasing (needed by searchsorted) and inside int64 even where ``C(c, j)``
    for some ``j < m`` exceeds it; no valid rank ever reaches the saturated entries.
    """
    cap = math.comb(n, m)
    return np.array([[min(math.comb(c, j), cap) for c in range(n)] for j in range(m + 1)], dtype=np.int64)


def _complement(indices: np.ndarray, n: int) -> np.ndarray:
    """Sorted positions NOT in each row; rows of ``indices`` must be duplicate-free."""
    rows = indices.shape[0]
    mask = np.ones((rows, n), dtype=bool)
    mask[np.arange(rows)[:, None], indices] = False
    return np.nonzero(mask)[1].reshape(rows, n - indices.shape[1])


class EnumIndexCodec(IndexCodec):
    """Rank of the k-subset in the combinatorial number system, ``ceil(log2 C(n, k))`` bits per chunk.

    For ``k > n/2`` the complement (``n - k`` positions) is ranked instead: same count, smaller tables.
    """

    name = "enum"

    @staticmethod
    def _m(chunk_numel: int, k: int) -> int:
        return min(k, chunk_numel - k)

    @staticmethod
    def width(chunk_numel: int, k: int) -> int:
        return (math.comb(chunk_numel, k) - 1).bit_length()

    def check(self, chunk_numel: int, k: int) -> None:
        super().check(chunk_numel, k)
        if math.comb(chunk_numel, k) >= _RANK_LIMIT:
            raise ValueError(
                f"index codec 'enum' cannot carry k={k} of {chunk_numel}: C(n, k) >= 2**63; "
                "use 'packed' or a smaller k"
            )
        if chunk_numel * (self._m(chunk_numel, k) + 1) > _MAX_TABLE_CELLS:
            raise ValueError(
                f"index codec 'enum' is meant for DCT-sized chunks; {chunk_numel} positions would need a "
                "binomial table too large to build per chunk size; use 'packed'"
            )

    def nbytes(self, n_chunks: int, chunk_numel: int, k: int) -> int:
        return packed_nbytes(n_chunks, self.width(chunk_numel, k))

    def encode(self, indices: np.ndarray, chunk_numel: int) -> bytes:
        k = indices.shape[1]
        self.check(chunk_numel, k)
        idx = np.asarray(indices, dtype=np.int64)
        _check_fits(idx, chunk_numel, self.name)
        if k > 1 and bool((np.diff(idx, axis=1) <= 0).any()):
            raise ValueError("index codec 'enum' needs strictly increasing indices within each chunk")
        m = self._m(chunk_numel, k)
        if m < k:
            idx = _complement(idx, chunk_numel)
        table = _binomials(chunk_numel, m)
        ranks = np.zeros(idx.shape[0], dtype=np.int64)
        for j in range(m):
            ranks += table[j + 1][idx[:, j]]
        return pack_uint(ranks.astype(np.uint64), self.width(chunk_numel, k))

    def decode(self, data: bytes | memoryview, n_chunks: int, chunk_numel: int, k: int) -> np.ndarray:
        m = self._m(chunk_numel, k)
        total = math.comb(chunk_numel, k)
        ranks = unpack_uint(data, n_chunks, self.width(chunk_numel, k))
        if ranks.size and int(ranks.max()) >= total:
            bad = int(np.argmax(ranks >= total))
            raise PayloadError(
                "index_range", f"chunk {bad}: subset rank {int(ranks[bad])} >= C({chunk_numel}, {k})"
            )
        r = ranks.astype(np.int64)
        table = _binomials(chunk_numel, m)
        out = np.empty((n_chunks, m), dtype=np.int64)
        for j in range(m - 1, -1, -1):  # greedy from the largest position down
            col = table[j + 1]
            c = np.searchsorted(col, r, side="right") - 1
            out[:, j] = c
            r -= col[c]
        return out if m == k else _complement(out, chunk_numel)


INDEX_CODECS: dict[str, IndexCodec] = {
    codec.name: codec for codec in (AutoIndexCodec(), PackedIndexCodec(), EnumIndexCodec())
}
