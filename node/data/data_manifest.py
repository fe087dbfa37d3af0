"""The data manifest (data.json): what a prepared dataset holds, every file named by its sha256.

A run manifest names this file by its sha256, and this file names the tokenizer and every shard by theirs,
so one hash pins every token a run trains on. File names are local conveniences; the hashes and sizes
(:meth:`DataManifest.blobs`) are what a peer asks the swarm for when files are fetched instead of copied
(protocol/blobs.py fetches by sha256 and size), and the token and document counts check what arrives.

The file may come from elsewhere, so :meth:`DataManifest.from_bytes` checks all of it before anything uses
a number in it: a byte cap on the file, exact key sets, types, ranges, fixed shard sizes, totals that add
up, and file names that cannot leave the dataset's folder. Every failure is a :class:`DataManifestError`
naming the path and the field.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from distro_node.node.data.errors import DataManifestError

FORMAT = "distro-node/shards"
VERSION = 1
MANIFEST_NAME = "data.json"
# ~150 bytes per shard entry: room for ~400k shards (6.7T tokens at the default 16M tokens per shard).
MAX_MANIFEST_BYTES = 64 << 20
MAX_SHARD_TOKENS = 1 << 31
# The largest vocabulary a dataset may have: it sizes the model's embedding (the biggest public tokenizers
# have ~256k ids), and a run manifest from a stranger must not make a joiner allocate more.
MAX_VOCAB = 1 << 21
# The most a tokenizer file may be: the largest public ones (250k-token vocabularies) are ~20 MB.
MAX_TOKENIZER_BYTES = 256 << 20
DTYPES: dict[str, int] = {"uint16": 2, "uint32": 4}  # itemsize; always little-endian on disk
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True)
class ShardEntry:
    """One shard: a raw little-endian array of ``tokens`` ids in which ``documents`` documents end."""

    file: str
    sha256: str
    tokens: int
    documents: int


@dataclass(frozen=True)
class SplitEntry:
    """A split (train or held-out): its shards in stream order and their totals."""

    documents: int
    tokens: int
    shards: tuple[ShardEntry, ...]


@dataclass(frozen=True)
class Blob:
    """A file of the dataset as content: what a fetch asks for and checks."""

    file: str
    sha256: str
    size: int  # bytes


@dataclass(frozen=True)
class TokenizerEntry:
    file: str
    sha256: str
    bytes: int
    vocab_size: int
    eod_id: int
    eod_token: str


@dataclass(frozen=True)
class IndexEntry:
    """The document lengths of both splits (train then held-out, little-endian uint64, its end token
    included): what a peer that fetches shards on demand needs to know which shard a batch reads before it
    holds any shard (node/data/lazy.py). Optional: a dataset prepared before it existed has none."""

    file: str
    sha256: str
    bytes: int


INDEX_DTYPE = "<u8"


@dataclass(frozen=True)
class DataManifest:
    """A prepared dataset. Documents are whole: each ends with ``tokenizer.eod_id`` and none is empty, and
    a document is held out when the first 8 bytes (little-endian) of sha256("distro-node/heldout/v1" + its
    UTF-8 text) are below ``eval_fraction`` x 2**64 (node/data/prepare.py)."""

    tokenizer: TokenizerEntry
    dtype: str
    shard_tokens: int
    eval_fraction: float
    train: SplitEntry
    heldout: SplitEntry
    format: str = FORMAT
    version: int = VERSION
    index: IndexEntry | None = None  # left out of the bytes when None: older data.json files stay valid

    def to_bytes(self) -> bytes:
        """Indented JSON with sorted keys: readable, and one byte form for one dataset."""
        doc = asdict(self)
        if self.index is None:
            del doc["index"]
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()

    @property
    def files(self) -> list[str]:
        return [blob.file for blob in self.blobs()]

    def blobs(self) -> list[Blob]:
        """Every file this manifest names (tokenizer first, then train and held-out shards in order)."""
        itemsize = DTYPES[self.dtype]
        t = self.tokenizer
        shards = [s for split in (self.train, self.heldout) for s in split.shards]
        index = [] if self.index is None else [Blob(self.index.file, self.index.sha256, self.index.bytes)]
        return [Blob(t.file, t.sha256, t.bytes), *index] + [
            Blob(s.file, s.sha256, s.tokens * itemsize) for s in shards
        ]

    def shard_blobs(self, split: str = "train") -> list[Blob]:
        """One split's shards as blobs, in stream order (what a peer fetching on demand asks for)."""
        itemsize = DTYPES[self.dtype]
        entry = self.train if split == "train" else self.heldout
        return [Blob(s.file, s.sha256, s.tokens * itemsize) for s in entry.shards]

    @classmethod
    def from_bytes(cls, data: bytes, path: Path | None = None) -> DataManifest:
        return _Parser(path).manifest(data)


class _Parser:
    """Strict reading of a data manifest; every error names ``path`` and the dotted field."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def fail(self, field: str, detail: str) -> DataManifestError:
        return DataManifestError(self.path, field, detail)

    def table(self, doc: Any, field: str, cls: type,
              optional: frozenset[str] = frozenset()) -> dict[str, Any]:
        keys = {f.name for f in fields(cls)}
        if not isinstance(doc, dict) or not keys - optional <= set(doc) <= keys:
            got = sorted(doc) if isinstance(doc, dict) else type(doc).__name__
            raise self.fail(field or "(top)", f"expected exactly the keys {sorted(keys)}, got {got}")
        return doc

    def integer(self, value: Any, field: str, low: int, high: int) -> int:
        if type(value) is not int or not low <= value <= high:
            raise self.fail(field, f"must be an integer in [{low}, {high}], got {value!r}")
        return value

    def text(self, value: Any, field: str, pattern: re.Pattern[str] | None = None) -> str:
        if not isinstance(value, str) or (pattern is not None and not pattern.fullmatch(value)):
            what = f"a string matching {pattern.pattern}" if pattern is not None else "a string"
            raise self.fail(field, f"must be {what}, got {value!r:.80}")
        return value

    def manifest(self, data: bytes) -> DataManifest:
        if len(data) > MAX_MANIFEST_BYTES:
            raise self.fail("(file)", f"{len(data)} bytes, more than the cap of {MAX_MANIFEST_BYTES}")
        try:
            doc = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self.fail("(file)", f"not JSON: {str(exc)[:160]}") from None
        doc = self.table(doc, "", DataManifest, frozenset({"index"}))
        if doc["format"] != FORMAT:
            raise self.fail("format", f"must be {FORMAT!r}, got {doc['format']!r:.80}")
        self.integer(doc["version"], "version", VERSION, VERSION)
        tokenizer = self.tokenizer(doc["tokenizer"])
        dtype = self.text(doc["dtype"], "dtype")
        wanted = "uint16" if tokenizer.vocab_size <= 1 << 16 else "uint32"
        if dtype != wanted:
            raise self.fail("dtype", f"must be {wanted} for vocab_size {tokenizer.vocab_size}, "
                                     f"got {dtype!r:.20}")
        shard_tokens = self.integer(doc["shard_tokens"], "shard_tokens", 1, MAX_SHARD_TOKENS)
        fraction = doc["eval_fraction"]
        if not isinstance(fraction, float) or not (math.isfinite(fraction) and 0 < fraction < 1):
            raise self.fail("eval_fraction", f"must be a number in (0, 1), got {fraction!r:.40}")
        train = self.split(doc["train"], "train", shard_tokens)
        heldout = self.split(doc["heldout"], "heldout", shard_tokens)
        index = None if "index" not in doc else self.index(doc["index"], train, heldout)
        manifest = DataManifest(tokenizer, dtype, shard_tokens, fraction, train, heldout, index=index)
        names = manifest.files
        if len(set(names)) != len(names) or MANIFEST_NAME in names:
            raise self.fail("files", f"file names must be distinct and not {MANIFEST_NAME}")
        return manifest

    def tokenizer(self, doc: Any) -> TokenizerEntry:
        doc = self.table(doc, "tokenizer", TokenizerEntry)
        vocab_size = self.integer(doc["vocab_size"], "tokenizer.vocab_size", 2, MAX_VOCAB)
        return TokenizerEntry(
            file=self.text(doc["file"], "tokenizer.file", _FILE_NAME),
            sha256=self.text(doc["sha256"], "tokenizer.sha256", _SHA256_HEX),
            bytes=self.integer(doc["bytes"], "tokenizer.bytes", 1, MAX_TOKENIZER_BYTES),
            vocab_size=vocab_size,
            eod_id=self.integer(doc["eod_id"], "tokenizer.eod_id", 0, vocab_size - 1),
            eod_token=self.text(doc["eod_token"], "tokenizer.eod_token"),
        )

    def index(self, doc: Any, train: SplitEntry, heldout: SplitEntry) -> IndexEntry:
        doc = self.table(doc, "index", IndexEntry)
        size = 8 * (train.documents + heldout.documents)
        return IndexEntry(
            file=self.text(doc["file"], "index.file", _FILE_NAME),
            sha256=self.text(doc["sha256"], "index.sha256", _SHA256_HEX),
            bytes=self.integer(doc["bytes"], "index.bytes", size, size),
        )

    def split(self, doc: Any, name: str, shard_tokens: int) -> SplitEntry:
        doc = self.table(doc, name, SplitEntry)
        raw = doc["shards"]
        if not isinstance(raw, list) or not raw:
            raise self.fail(f"{name}.shards", "must be a non-empty list")
        shards = []
        for i, entry in enumerate(raw):
            where = f"{name}.shards[{i}]"
            entry = self.table(entry, where, ShardEntry)
            tokens = self.integer(entry["tokens"], f"{where}.tokens", 1, shard_tokens)
            if i < len(raw) - 1 and tokens != shard_tokens:
                raise self.fail(f"{where}.tokens", f"every shard but the last holds shard_tokens "
                                                   f"({shard_tokens}), got {tokens}")
            shards.append(ShardEntry(
                file=self.text(entry["file"], f"{where}.file", _FILE_NAME),
                sha256=self.text(entry["sha256"], f"{where}.sha256", _SHA256_HEX),
                tokens=tokens,
                documents=self.integer(entry["documents"], f"{where}.documents", 0, tokens),
            ))
        tokens = sum(s.tokens for s in shards)
        documents = sum(s.documents for s in shards)
        if doc["tokens"] != tokens:
            raise self.fail(f"{name}.tokens", f"is {doc['tokens']!r:.40} but its shards hold {tokens}")
        if doc["documents"] != documents:
            raise self.fail(f"{name}.documents", f"is {doc['documents']!r:.40} but its shards end "
                                                 f"{documents}")
        if documents < 1 or 2 * documents > tokens:  # no empty document: each is >= 1 token + its end
            raise self.fail(f"{name}.documents", f"{documents} documents cannot fill {tokens} tokens")
        return SplitEntry(documents, tokens, tuple(shards))
