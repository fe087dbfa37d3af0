"""``distro-node data prepare``: local documents -> a tokenizer, fixed-size token shards and data.json.

Layout of the output folder: ``tokenizer.json`` (trained here as byte-level BPE when none is given),
``index.u64`` (every document's length, so a peer can tell which shard a batch reads before it holds any),
``train-00000.u16`` ... and ``heldout-00000.u16`` ... (raw little-endian ids, uint16 when every id fits,
else ``.u32``; memory-mappable with ``numpy.memmap``), and ``data.json`` (node/data/data_manifest.py),
written last and atomically, so a folder whose preparation was interrupted has no manifest to train on.

Each document's ids are followed by the tokenizer's end-of-document token and appended to its split's token
stream; the stream is cut into shards of exactly ``shard_tokens`` ids (the last one shorter), so a document
may continue into the next shard. Shard sizes are fixed so that a future fetch from peers can be sized and
checked from the manifest alone.

The held-out split is chosen per document from its content: held out when sha256("distro-node/heldout/v1"
+ text) falls below ``eval_fraction``. The same documents give the same split on any machine and in any
input order, exact duplicates land on the same side, and no document is in both.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from distro_node.node.data.data_manifest import (
    INDEX_DTYPE,
    MANIFEST_NAME,
    DataManifest,
    IndexEntry,
    ShardEntry,
    SplitEntry,
    TokenizerEntry,
)
from distro_node.node.data.errors import DataSettingError
from distro_node.node.data.inputs import DocumentReader, InputFile, collect_inputs
from distro_node.node.data.progress import Progress
from distro_node.node.data.tokenizer import (
    TokenizerInfo,
    describe,
    encode,
    load_tokenizer,
    tokenizer_bytes,
    train_bpe,
)
from distro_node.node.presets import PRESETS

TOKENIZER_NAME = "tokenizer.json"
INDEX_NAME = "index.u64"
HELDOUT_KEY = b"distro-node/heldout/v1"
# Documents are encoded in batches of about this much text (the tokenizer encodes a batch in parallel).
_BATCH_CHARS = 4 << 20
_BATCH_DOCUMENTS = 4096


@dataclass(frozen=True)
class PrepareSettings:
    """What shapes a prepared dataset; the CLI fills it from the config's ``[prepare]`` table and
    ``run.data.eval_fraction`` (node/config/prepare.py holds the defaults)."""

    vocab_size: int
    eod_token: str
    text_field: str
    eval_fraction: float
    shard_tokens: int


@dataclass(frozen=True)
class PrepareResult:
    manifest: DataManifest
    path: Path  # the data manifest
    input_files: int
    input_bytes: int
    skipped_documents: int  # empty ones
    # seq_len -> fraction of train tokens in documents long enough for one window of seq_len + 1 tokens:
    # windows never cross a document boundary, so the rest is never trained on at that length.
    coverage: dict[int, float]
    trained_tokenizer: bool
    seconds: float


def held_out(text: bytes, eval_fraction: float) -> bool:
    """Whether a document (its UTF-8 bytes) belongs to the held-out split."""
    digest = hashlib.sha256(HELDOUT_KEY + text).digest()
    return int.from_bytes(digest[:8], "little") < int(eval_fraction * 2**64)


class ShardWriter:
    """Appends documents (each followed by the end-of-document id) to one split's stream of shards."""

    def __init__(self, out: Path, prefix: str, info: TokenizerInfo, shard_tokens: int) -> None:
        self.out = out
        self.prefix = prefix
        self.eod_id = info.eod_id
        self.suffix = "u16" if info.dtype == "uint16" else "u32"
        self.buffer = np.empty(shard_tokens, dtype=np.dtype("<u2") if info.dtype == "uint16" else "<u4")
        self.filled = 0
        self.shards: list[ShardEntry] = []
        self.lengths: list[int] = []  # of every document, its end token included (8 bytes each at most)

    def add(self, ids: np.ndarray) -> None:
        self.lengths.append(ids.shape[0] + 1)
        piece = np.append(ids.astype(self.buffer.dtype, copy=False), self.buffer.dtype.type(self.eod_id))
        start = 0
        while start < piece.shape[0]:
            take = min(piece.shape[0] - start, self.buffer.shape[0] - self.filled)
            self.buffer[self.filled : self.filled + take] = piece[start : start + take]
            self.filled += take
            start += take
            if self.filled == self.buffer.shape[0]:
                self._flush()

    def _flush(self) -> None:
        tokens = self.buffer[: self.filled]
        data = tokens.tobytes()
        name = f"{self.prefix}-{len(self.shards):05d}.{self.suffix}"
        with (self.out / name).open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # Documents never contain the end id (tokenizer.encode refuses that), so its count is the number of
        # documents ending here: what node/data/shards.py checks each shard against.
        documents = int(np.count_nonzero(tokens == self.eod_id))
        self.shards.append(ShardEntry(name, hashlib.sha256(data).hexdigest(), self.filled, documents))
        self.filled = 0

    def coverage(self, seq_lens: Sequence[int]) -> dict[int, float]:
        lengths = np.array(self.lengths, dtype=np.int64)
        total = max(1, int(lengths.sum()))
        return {n: int(lengths[lengths > n].sum()) / total for n in seq_lens}

    def close(self) -> SplitEntry:
        if self.filled:
            self._flush()
        return SplitEntry(sum(s.documents for s in self.shards), sum(s.tokens for s in self.shards),
                          tuple(self.shards))


def _batches(documents: DocumentReader) -> Iterator[list[str]]:
    batch: list[str] = []
    chars = 0
    for text in documents:
        batch.append(text)
        chars += len(text)
        if chars >= _BATCH_CHARS or len(batch) >= _BATCH_DOCUMENTS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def prepare(
    inputs: Sequence[Path],
    out: Path,
    settings: PrepareSettings,
    *,
    tokenizer_path: Path | None = None,
    progress: bool | None = None,
) -> PrepareResult:
    """Prepare ``inputs`` into ``out`` (created; an existing data.json there is replaced: the CLI asks for
    --force first). ``progress`` None: a bar on stderr when it is a terminal."""
    if not 0 < settings.eval_fraction < 1:
        raise DataSettingError("eval_fraction", f"must be in (0, 1), got {settings.eval_fraction}")
    if settings.shard_tokens < 1:
        raise DataSettingError("shard_tokens", f"must be positive, got {settings.shard_tokens}")
    start = time.perf_counter()
    files = collect_inputs(inputs)
    total = sum(f.size for f in files)
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST_NAME).unlink(missing_ok=True)  # no manifest until the new shards are all written
    if tokenizer_path is not None:
        tokenizer, raw = load_tokenizer(tokenizer_path)
    else:
        with Progress("training tokenizer", total, enabled=progress) as bar:
            reader = DocumentReader(files, text_field=settings.text_field, progress=bar.advance)
            tokenizer = train_bpe(reader, vocab_size=settings.vocab_size, eod_token=settings.eod_token)
        raw = tokenizer_bytes(tokenizer)
    info = describe(tokenizer, raw, settings.eod_token, tokenizer_path)
    _write_atomic(out / TOKENIZER_NAME, raw)
    train = ShardWriter(out, "train", info, settings.shard_tokens)
    heldout = ShardWriter(out, "heldout", info, settings.shard_tokens)
    with Progress("tokenizing", total, enabled=progress) as bar:
        reader = DocumentReader(files, text_field=settings.text_field, progress=bar.advance)
        for batch in _batches(reader):
            for text, ids in zip(batch, encode(tokenizer, batch, info), strict=True):
                held = held_out(text.encode("utf-8"), settings.eval_fraction)
                (heldout if held else train).add(ids)
    splits = {"train": train.close(), "held-out": heldout.close()}
    documents = sum(s.documents for s in splits.values())
    for name, split in splits.items():
        if split.documents == 0:
            raise DataSettingError("eval_fraction", f"the {name} split got none of the {documents} "
                                                    f"documents at eval_fraction {settings.eval_fraction}; "
                                                    "add documents or change the fraction")
    # Document lengths of both splits: a peer that fetches shards on demand samples from them alone.
    index = np.array(train.lengths + heldout.lengths, dtype=INDEX_DTYPE).tobytes()
    _write_atomic(out / INDEX_NAME, index)
    manifest = DataManifest(
        tokenizer=TokenizerEntry(file=TOKENIZER_NAME, sha256=info.sha256, bytes=info.bytes,
                                 vocab_size=info.vocab_size, eod_id=info.eod_id, eod_token=info.eod_token),
        dtype=info.dtype,
        shard_tokens=settings.shard_tokens,
        eval_fraction=float(settings.eval_fraction),
        train=splits["train"],
        heldout=splits["held-out"],
        index=IndexEntry(file=INDEX_NAME, sha256=hashlib.sha256(index).hexdigest(), bytes=len(index)),
    )
    path = out / MANIFEST_NAME
    _write_atomic(path, manifest.to_bytes())
    windows = train.coverage(sorted({shape.seq_len for shape in PRESETS.values()}))
    return PrepareResult(manifest, path, len(files), total, reader.skipped, windows, tokenizer_path is None,
                         time.perf_counter() - start)


__all__ = ["HELDOUT_KEY", "INDEX_NAME", "TOKENIZER_NAME", "InputFile", "PrepareResult", "PrepareSettings",
           "ShardWriter", "held_out", "prepare"]
