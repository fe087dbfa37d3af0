"""A prepared dataset whose shards arrive on demand: the document table from data.json's index, the tokens
from whatever shards a cache holds verified.

Why a peer can sample without the shards: a batch is a function of (run, step, peer) and of the document
lengths alone (node/data/sampling.py), and the index names every length. So a joiner that fetched only
data.json, the tokenizer and the index builds the very same row table as a peer holding the whole folder,
and its batches are identical; it then asks the swarm for just the shards its next batches read.

Reading a shard that is not held (fetched and hash-verified, node/data/shard_cache.py) raises
:class:`ShardNotReadyError`; nothing here ever maps a file the cache did not admit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import overload

import numpy as np
from distro_node.node.data.data_manifest import DTYPES, INDEX_DTYPE, DataManifest, SplitEntry
from distro_node.node.data.errors import DataError, ShardError
from distro_node.node.data.rows import DocumentRows
from distro_node.node.data.source import TokenSource


class ShardNotReadyError(DataError):
    """A batch would read a shard this peer does not hold verified (a bug in the caller, which must wait
    for the shards of a step first: node/peer/data_feed.py)."""

    def __init__(self, split: str, shard: int) -> None:
        super().__init__(f"{split} shard {shard} is not fetched and verified yet")
        self.split = split
        self.shard = shard


def read_index(path: Path, manifest: DataManifest) -> tuple[np.ndarray, np.ndarray]:
    """(train lengths, held-out lengths), int64, from the index file data.json names; checked by size,
    sha256, and against each split's document and token counts. Errors are ShardError naming the file."""
    entry = manifest.index
    if entry is None:
        raise ShardError(path, "data.json names no document index (prepared before index.u64 existed): "
                               "prepare the dataset again")
    if not path.is_file():
        raise ShardError(path, f"the dataset's document index (sha256 {entry.sha256}) is missing")
    raw = path.read_bytes()
    if len(raw) != entry.bytes:
        raise ShardError(path, f"{len(raw)} bytes, data.json's index.bytes is {entry.bytes}")
    actual = hashlib.sha256(raw).hexdigest()
    if actual != entry.sha256:
        raise ShardError(path, f"sha256 is {actual}, data.json's index.sha256 is {entry.sha256}")
    lengths = np.frombuffer(raw, dtype=INDEX_DTYPE).astype(np.int64)
    train = lengths[: manifest.train.documents]
    heldout = lengths[manifest.train.documents :]
    for name, split, got in (("train", manifest.train, train), ("heldout", manifest.heldout, heldout)):
        shortest = int(got.min()) if got.shape[0] else 0
        if shortest < 2 or int(got.sum()) != split.tokens:  # a document is >= 1 token + its end token
            raise ShardError(path, f"the {name} lengths add up to {int(got.sum())} tokens (shortest "
                                   f"{shortest}), data.json's {name}.tokens is {split.tokens}")
    return train, heldout


def check_index(path: Path, manifest: DataManifest, train: DocumentRows, heldout: DocumentRows) -> None:
    """A peer holding every shard checks the index against the documents it found: a joiner samples from
    the index alone, so an index that disagrees would give it other batches than ours."""
    want_train, want_heldout = read_index(path, manifest)
    if not (np.array_equal(want_train, train.lengths) and np.array_equal(want_heldout, heldout.lengths)):
        raise ShardError(path, "the document lengths it lists differ from the documents in the shards")


class LazyShards(Sequence[np.ndarray]):
    """The shards of one split as a sequence whose items open only through ``opener`` (the cache), which
    raises ShardNotReadyError for a shard it does not hold verified."""

    def __init__(self, count: int, opener: Callable[[int], np.ndarray]) -> None:
        self._count = count
        self._opener = opener

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[np.ndarray]: ...

    def __getitem__(self, index: int | slice) -> np.ndarray | Sequence[np.ndarray]:
        if isinstance(index, slice):
            return [self._opener(i) for i in range(*index.indices(self._count))]
        if not 0 <= index < self._count:
            raise IndexError(index)
        return self._opener(index)

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self._opener(i) for i in range(self._count))


def lazy_rows(split: SplitEntry, lengths: np.ndarray, opener: Callable[[int], np.ndarray]) -> DocumentRows:
    """The same row table open_shards builds, from the index instead of the shards' end tokens."""
    starts = np.concatenate([np.zeros(1, np.int64), np.cumsum(lengths)[:-1]])
    return DocumentRows(shards=LazyShards(len(split.shards), opener), starts=starts, lengths=lengths,
                        sizes=tuple(s.tokens for s in split.shards))


def lazy_source(manifest: DataManifest, index_path: Path, train: Callable[[int], np.ndarray],
                heldout: Callable[[int], np.ndarray], name: str) -> TokenSource:
    """A TokenSource over shards that ``train``/``heldout`` open on demand (from a cache)."""
    train_lengths, heldout_lengths = read_index(index_path, manifest)
    return TokenSource(name=name, vocab_size=manifest.tokenizer.vocab_size,
                       train=lazy_rows(manifest.train, train_lengths, train),
                       eval=lazy_rows(manifest.heldout, heldout_lengths, heldout),
                       tokenizer_sha256=manifest.tokenizer.sha256)


def shard_dtype(manifest: DataManifest) -> np.dtype:
    return np.dtype(f"<u{DTYPES[manifest.dtype]}")


__all__ = ["LazyShards", "ShardNotReadyError", "check_index", "lazy_rows", "lazy_source", "read_index",
           "shard_dtype"]
