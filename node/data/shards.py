"""Open a prepared dataset (``run.data.kind = "shards"``) as a TokenSource over memory-mapped shards.

Everything is checked before training starts, each failure a typed error naming the file: the data manifest
in full (node/data/data_manifest.py), the tokenizer file's sha256, and for every shard its size against the
manifest's token count (before it is mapped), its sha256, every id below the vocabulary size, the count of
end-of-document ids against the manifest's document count, that each split ends on a document end, and the
document index (when data.json names one) against the documents found, since peers that fetch shards on
demand sample from the index alone (node/data/lazy.py).
The shards are read once for this, in bounded slices; training then touches only the pages it samples.

Nothing here needs the ``tokenizers`` package: a peer trains on ids, and the tokenizer is checked by hash.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from distro_node.node.data.data_manifest import (
    DTYPES,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    DataManifest,
    SplitEntry,
)
from distro_node.node.data.errors import DataFileNotFoundError, ShardError, TokenRangeError
from distro_node.node.data.lazy import check_index
from distro_node.node.data.rows import DocumentRows
from distro_node.node.data.source import TokenSource
from distro_node.protocol import digests

# Shards are hashed and scanned in slices of this many bytes, so checking a large one needs little memory.
_SCAN_BYTES = 1 << 24


def manifest_path(path: str | Path) -> Path:
    """``run.data.path`` may name the data manifest or the folder that holds it."""
    path = Path(path)
    return path / MANIFEST_NAME if path.is_dir() else path


def read_manifest(path: str | Path) -> tuple[DataManifest, bytes]:
    """The parsed data manifest and its exact bytes (what a run manifest's ``data.sha256`` is taken over)."""
    path = manifest_path(path)
    if not path.is_file():
        raise DataFileNotFoundError(path)
    with path.open("rb") as f:  # one byte past the cap, so an oversized file is refused, not truncated
        raw = f.read(MAX_MANIFEST_BYTES + 1)
    return DataManifest.from_bytes(raw, path), raw


def file_sha256(path: Path) -> str:
    """Hex sha256, as data.json names files (protocol/digests.py reads the blocks)."""
    return digests.file_sha256(path, _SCAN_BYTES).hex()


def _document_ends(path: Path, tokens: np.ndarray, vocab_size: int, eod_id: int, expected: int) -> np.ndarray:
    """Positions of the end-of-document ids, every id range-checked on the way, slice by slice. Stops as
    soon as more ends turn up than the manifest's count, so what is allocated stays within that count."""
    step = max(1, _SCAN_BYTES // tokens.itemsize)
    found: list[np.ndarray] = []
    count = 0
    for start in range(0, tokens.shape[0], step):
        chunk = tokens[start : start + step]
        if int(chunk.max()) >= vocab_size:
            position = start + int(np.argmax(chunk >= vocab_size))
            raise TokenRangeError(path, position, int(tokens[position]), vocab_size)
        ends = np.flatnonzero(chunk == eod_id)
        count += ends.shape[0]
        if count > expected:
            break
        found.append(ends.astype(np.int64) + start)
    if count != expected:
        more = "more than" if count > expected else f"{count},"
        raise ShardError(path, f"holds {more} end-of-document tokens where the manifest says {expected}")
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def _open_split(folder: Path, manifest: DataManifest, split: SplitEntry, name: str) -> DocumentRows:
    dtype = np.dtype(f"<u{DTYPES[manifest.dtype]}")
    vocab, eod = manifest.tokenizer.vocab_size, manifest.tokenizer.eod_id
    maps: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    offset = 0
    for i, entry in enumerate(split.shards):
        path = folder / entry.file
        if not path.is_file():
            raise ShardError(path, f"{name} shard {i} is missing")
        expected = entry.tokens * dtype.itemsize
        size = path.stat().st_size
        if size != expected:
            state = "short (truncated?)" if size < expected else "longer than the manifest says"
            raise ShardError(path, f"{size} bytes is {state}: the manifest says {entry.tokens} "
                                   f"{manifest.dtype} tokens = {expected} bytes")
        actual = file_sha256(path)
        if actual != entry.sha256:
            raise ShardError(path, f"sha256 is {actual}, the manifest says {entry.sha256} (corrupt or "
                                   "replaced)")
        tokens = np.memmap(path, dtype=dtype, mode="r")
        ends.append(_document_ends(path, tokens, vocab, eod, entry.documents) + offset)
        maps.append(tokens)
        offset += entry.tokens
    last = maps[-1]
    if int(last[last.shape[0] - 1]) != eod:
        raise ShardError(folder / split.shards[-1].file, f"the {name} split does not end with the "
                                                         "end-of-document token (truncated?)")
    doc_ends = np.concatenate(ends) + 1  # exclusive end of each document, its end token included
    starts = np.concatenate([np.zeros(1, np.int64), doc_ends[:-1]])
    return DocumentRows(shards=tuple(maps), starts=starts, lengths=doc_ends - starts)


def open_shards(path: str | Path) -> TokenSource:
    """A prepared dataset as a TokenSource: one row per document, train and held-out as prepared."""
    mpath = manifest_path(path)
    manifest, _raw = read_manifest(mpath)
    folder = mpath.parent
    tokenizer = folder / manifest.tokenizer.file
    if not tokenizer.is_file():
        raise ShardError(tokenizer, f"the dataset's tokenizer (sha256 {manifest.tokenizer.sha256}) is "
                                    "missing")
    size = tokenizer.stat().st_size
    if size != manifest.tokenizer.bytes:
        raise ShardError(tokenizer, f"{size} bytes, the data manifest's tokenizer.bytes is "
                                    f"{manifest.tokenizer.bytes}")
    actual = file_sha256(tokenizer)
    if actual != manifest.tokenizer.sha256:
        raise ShardError(tokenizer, f"sha256 is {actual}, the data manifest's tokenizer.sha256 is "
                                    f"{manifest.tokenizer.sha256}: not the tokenizer of these shards")
    train = _open_split(folder, manifest, manifest.train, "train")
    heldout = _open_split(folder, manifest, manifest.heldout, "heldout")
    if manifest.index is not None:
        check_index(folder / manifest.index.file, manifest, train, heldout)
    return TokenSource(name=f"shards:{folder.name}", vocab_size=manifest.tokenizer.vocab_size, train=train,
                       eval=heldout, tokenizer_sha256=manifest.tokenizer.sha256)
