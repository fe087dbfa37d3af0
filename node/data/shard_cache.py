"""The shards a peer fetched on demand, in one folder within a byte budget, least recently used first out.

Why a budget: a joiner without the dataset needs only the shards its own batches read, and a dataset may be
far larger than a peer's disk; it should hold what its next steps need and let the rest go. Why never evict
what is about to be read: a shard a coming step needs would be fetched again at once (``make_room`` takes the
indexes to keep). Why a floor: a budget below the largest shard can never hold one batch's data, so it is
refused at start with the field's name instead of failing at the first fetch.

Only shards whose bytes were hashed against data.json are admitted (``admit`` after protocol/blobs.py
verified the file, ``scan`` re-hashes what a previous run left behind), and ``open`` maps only admitted ones:
the trainer never reads an unverified byte. ``open`` runs in the trainer's worker thread, eviction in trio,
so the state is under a lock; a map already handed out stays valid after its file is unlinked.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
from distro_node.node.data.data_manifest import Blob
from distro_node.node.data.errors import DataError, DataSettingError
from distro_node.node.data.lazy import ShardNotReadyError
from distro_node.node.data.shards import file_sha256

CACHE_FIELD = "run.data.cache_bytes"


class CacheFullError(DataError):
    """The shards one step needs do not fit the budget together (``field``: the budget's config field)."""

    def __init__(self, needed: int, budget: int) -> None:
        super().__init__(f"{CACHE_FIELD}: one step's shards need {needed} bytes at once, more than the "
                         f"budget of {budget} bytes: raise --data-cache-bytes")
        self.field = CACHE_FIELD


class ShardCache:
    """Shards ``blobs[i]`` (one split, in stream order) held in ``folder`` within ``budget`` bytes."""

    def __init__(self, folder: Path, budget: int, blobs: Sequence[Blob], dtype: np.dtype,
                 split: str = "train", on_evict: Callable[[Blob], None] | None = None) -> None:
        largest = max((b.size for b in blobs), default=0)
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < largest:
            raise DataSettingError(CACHE_FIELD, f"{budget!r} bytes is smaller than the largest shard "
                                                f"({largest} bytes): no batch could be held")
        self.folder = folder
        self.budget = budget
        self.blobs = tuple(blobs)
        self.split = split
        self._dtype = dtype
        self._on_evict = on_evict
        self._held: OrderedDict[int, None] = OrderedDict()  # least recently used first
        self._maps: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()
        folder.mkdir(parents=True, exist_ok=True)

    def path(self, index: int) -> Path:
        return self.folder / self.blobs[index].file

    @property
    def used(self) -> int:
        with self._lock:
            return sum(self.blobs[i].size for i in self._held)

    def held(self) -> list[int]:
        with self._lock:
            return list(self._held)

    def holds(self, index: int) -> bool:
        with self._lock:
            return index in self._held

    def scan(self) -> list[int]:
        """Admit the shards a previous run of this cache left, each re-hashed (a file that fails is
        deleted); stops admitting once the budget is full. Returns the indexes admitted."""
        admitted = []
        for i, blob in enumerate(self.blobs):
            path = self.path(i)
            if not path.is_file():
                continue
            ok = path.stat().st_size == blob.size and file_sha256(path) == blob.sha256
            if ok and self.used + blob.size <= self.budget:
                self.admit(i)
                admitted.append(i)
            else:
                path.unlink(missing_ok=True)
        return admitted

    def make_room(self, size: int, keep: Iterable[int]) -> list[int]:
        """Evict least recently used shards outside ``keep`` until ``size`` more bytes fit; raises
        CacheFullError when even that cannot make room. Returns the evicted indexes."""
        keep = set(keep)
        evicted: list[int] = []
        with self._lock:
            used = sum(self.blobs[i].size for i in self._held)
            for i in list(self._held):
                if used + size <= self.budget:
                    break
                if i in keep:
                    continue
                used -= self.blobs[i].size
                evicted.append(i)
            if used + size > self.budget:
                raise CacheFullError(used + size, self.budget)
            for i in evicted:
                del self._held[i]
                self._maps.pop(i, None)
        for i in evicted:
            self.path(i).unlink(missing_ok=True)
            if self._on_evict is not None:
                self._on_evict(self.blobs[i])
        return evicted

    def admit(self, index: int) -> None:
        """Hold shard ``index``: its file was just verified against data.json (protocol/blobs.py)."""
        with self._lock:
            self._held[index] = None
            self._held.move_to_end(index)

    def touch(self, index: int) -> None:
        with self._lock:
            if index in self._held:
                self._held.move_to_end(index)

    def open(self, index: int) -> np.ndarray:
        """The shard's tokens, mapped; ShardNotReadyError unless it is held (verified)."""
        with self._lock:
            if index not in self._held:
                raise ShardNotReadyError(self.split, index)
            self._held.move_to_end(index)
            tokens = self._maps.get(index)
            if tokens is None:
                tokens = np.memmap(self.path(index), dtype=self._dtype, mode="r")
                self._maps[index] = tokens
            return tokens


__all__ = ["CACHE_FIELD", "CacheFullError", "ShardCache"]
