"""Rows of unequal length over memory-mapped shards: one row per document of a prepared dataset.

Why documents as rows: sampling never lets a window span two rows (node/data/sampling.py), so a window
never crosses a document boundary and the model is never asked to predict the first token of one document
from the end of an unrelated one. The cost, chosen knowingly: a document shorter than a window (seq_len + 1
tokens, its end-of-document token included) is never trained on; ``coverage`` says how much that leaves out.

Shards are fixed-size slices of one token stream, so a document may start in one shard and end in the next;
``read`` stitches the two pieces. Nothing is copied at load time: a row table (start and length, 16 bytes
per document) is all that lives in memory besides the maps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, eq=False)
class DocumentRows:
    """Documents laid end to end over ``shards``; row ``i`` is document ``i``, its end-of-document token
    included. Built by node/data/shards.py after every shard was checked."""

    # The maps, or (node/data/lazy.py) a sequence that opens a shard only once it was fetched and verified.
    shards: Sequence[np.ndarray]
    starts: np.ndarray  # int64 (documents,): offset of each document in the concatenated shards
    lengths: np.ndarray  # int64 (documents,): tokens of each document
    # Tokens per shard when ``shards`` must not be touched to learn them (shards not fetched yet).
    sizes: tuple[int, ...] | None = None
    # Cumulative window counts per (window length, stride), filled by sampling.py (which owns the rule) on
    # first use: it needs them on every step, and a corpus may hold millions of documents.
    window_cache: dict[tuple[int, int], np.ndarray] = field(default_factory=dict, repr=False)
    _bounds: np.ndarray = field(init=False, repr=False)  # int64 (shards + 1,): where each shard starts

    def __post_init__(self) -> None:
        known = self.sizes if self.sizes is not None else [s.shape[0] for s in self.shards]
        sizes = np.array(known, dtype=np.int64)
        object.__setattr__(self, "_bounds", np.concatenate([np.zeros(1, np.int64), np.cumsum(sizes)]))

    @property
    def rows(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())

    def read(self, row: int, offset: int, count: int) -> np.ndarray:
        """``count`` tokens of document ``row`` from ``offset`` (the caller keeps them inside the row)."""
        begin = int(self.starts[row]) + offset
        end = begin + count
        bounds = self._bounds
        first = int(np.searchsorted(bounds, begin, side="right")) - 1
        pieces = []
        shard = first
        while begin < end:
            lo, hi = int(bounds[shard]), int(bounds[shard + 1])
            take = min(end, hi)
            pieces.append(self.shards[shard][begin - lo : take - lo])
            begin = take
            shard += 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def shards_of(self, row: int, offset: int, count: int) -> range:
        """The shards ``read(row, offset, count)`` touches: what must be on disk before that read."""
        begin = int(self.starts[row]) + offset
        first = int(np.searchsorted(self._bounds, begin, side="right")) - 1
        last = int(np.searchsorted(self._bounds, begin + count - 1, side="right")) - 1
        return range(first, last + 1)

    def coverage(self, seq_len: int) -> float:
        """Fraction of tokens inside documents long enough for one window of ``seq_len`` + 1 tokens."""
        total = self.tokens
        usable = int(self.lengths[self.lengths > seq_len].sum())
        return usable / total if total else 0.0
