"""Which windows each peer trains on, decided by (run, step, peer) alone.

Every peer can recompute any other peer's batch (to audit it, or to replay a round after a crash) without
coordination, and two peers never train on the same windows by construction of the key rather than by
luck of a shared RNG. One rule for every source: a window lies inside one row (a row of the embedded corpus,
a whole file, or one document of a prepared dataset), and all windows of a split are numbered row by row.
Offsets come from sha256, not from a torch or numpy generator, because those streams
are not promised to stay the same across library versions and peers run different ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np
import torch
from distro_node.node.data.errors import DataSettingError
from distro_node.node.data.rows import DocumentRows
from distro_node.node.data.source import Split, TokenSource
from torch import Tensor


def _check_positive(field: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DataSettingError(field, f"must be a positive integer, got {value!r}")


def _row_lengths(split: Split) -> np.ndarray:
    if isinstance(split, DocumentRows):
        return split.lengths
    return np.full(split.shape[0], split.shape[1], dtype=np.int64)


def _cumulative_windows(split: Split, span: int, stride: int, split_name: str) -> np.ndarray:
    """Cumulative count of the windows of ``span`` tokens, ``stride`` apart, that fit inside each row.

    Windows are numbered row by row, so window ``i`` is in the first row whose cumulative count exceeds
    ``i``. For rows of one length this is plain division (``i // per_row``, ``i % per_row``): the batches of
    every source that existed before documents of unequal length are unchanged."""
    cache = split.window_cache if isinstance(split, DocumentRows) else None
    if cache is not None and (span, stride) in cache:
        return cache[(span, stride)]
    lengths = _row_lengths(split)
    counts = np.where(lengths >= span, (lengths - span) // stride + 1, 0)
    cumulative = np.cumsum(counts)
    if cumulative.shape[0] == 0 or int(cumulative[-1]) == 0:
        longest = int(lengths.max()) if lengths.shape[0] else 0
        shape = f"rows of {longest}" if isinstance(split, np.ndarray) else f"a longest document of {longest}"
        raise DataSettingError(
            "seq_len", f"{span - 1} needs rows of at least {span} tokens; the {split_name} split has {shape}"
        )
    if cache is not None:
        cache[(span, stride)] = cumulative
    return cumulative


def _locate(cumulative: np.ndarray, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, index of the window within its row) of each window number in ``flat``."""
    rows = np.searchsorted(cumulative, flat, side="right")
    before = np.where(rows > 0, cumulative[np.maximum(rows - 1, 0)], 0)
    return rows, flat - before


def _read(split: Split, row: int, offset: int, count: int) -> np.ndarray:
    if isinstance(split, DocumentRows):
        return split.read(row, offset, count)
    return split[row, offset : offset + count]


def _gather(split: Split, rows: np.ndarray, offsets: np.ndarray, seq_len: int) -> tuple[Tensor, Tensor]:
    windows = np.stack(
        [_read(split, int(r), int(o), seq_len + 1) for r, o in zip(rows, offsets, strict=True)]
    )
    tokens = torch.from_numpy(windows.astype(np.int64))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def batch_key(run_id: bytes, step: int, peer: str) -> bytes:
    """The digest that fixes one peer's batch at one step (length-prefixed, so fields cannot run together)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise DataSettingError("step", f"must be a non-negative integer, got {step!r}")
    h = hashlib.sha256(b"distro-node/batch/v1")
    for part in (bytes(run_id), step.to_bytes(8, "little"), peer.encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def sample_batch(
    source: TokenSource, *, run_id: bytes, step: int, peer: str, batch_size: int, seq_len: int
) -> tuple[Tensor, Tensor]:
    """(inputs, targets), both int64 (batch_size, seq_len), targets shifted by one token.

    Windows are drawn uniformly with replacement over all train windows; window i of the batch is fixed by
    sha256(key, i), reduced modulo the window count (128-bit values, so the bias is below 2**-90).
    """
    rows, offsets = batch_windows(source.train, run_id=run_id, step=step, peer=peer, batch_size=batch_size,
                                  seq_len=seq_len)
    return _gather(source.train, rows, offsets, seq_len)


def batch_windows(
    split: Split, *, run_id: bytes, step: int, peer: str, batch_size: int, seq_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """(row, offset) of each window of one peer's batch: the numbers alone, no token read, so a peer that
    fetches shards on demand learns which shards a batch needs from the document lengths (batch_shards)."""
    _check_positive("batch_size", batch_size)
    _check_positive("seq_len", seq_len)
    cumulative = _cumulative_windows(split, seq_len + 1, 1, "train")
    total = int(cumulative[-1])
    key = batch_key(run_id, step, peer)
    picks = [
        int.from_bytes(hashlib.sha256(key + i.to_bytes(8, "little")).digest()[:16], "little") % total
        for i in range(batch_size)
    ]
    return _locate(cumulative, np.array(picks, dtype=np.int64))


def batch_shards(
    split: DocumentRows, *, run_id: bytes, step: int, peer: str, batch_size: int, seq_len: int
) -> set[int]:
    """Indexes of the shards (of ``split``) that ``sample_batch`` reads for this (run, step, peer)."""
    rows, offsets = batch_windows(split, run_id=run_id, step=step, peer=peer, batch_size=batch_size,
                                  seq_len=seq_len)
    needed: set[int] = set()
    for row, offset in zip(rows, offsets, strict=True):
        needed.update(split.shards_of(int(row), int(offset), seq_len + 1))
    return needed


def eval_batches(
    source: TokenSource, *, batch_size: int, seq_len: int, max_batches: int | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """The held-out split cut into consecutive non-overlapping windows, in order: the same batches on every
    peer and every call, so eval losses are comparable across peers, steps and runs. Windows that would not
    fill a last batch are left out, so every batch has the same weight."""
    _check_positive("batch_size", batch_size)
    _check_positive("seq_len", seq_len)
    if max_batches is not None:
        _check_positive("max_batches", max_batches)
    split = source.eval
    # Stride seq_len: each target position is scored once.
    cumulative = _cumulative_windows(split, seq_len + 1, seq_len, "eval")
    windows = int(cumulative[-1])
    count = windows // batch_size
    if count == 0:
        raise DataSettingError(
            "batch_size", f"the eval split holds {windows} windows, fewer than {batch_size}"
        )
    if max_batches is not None:
        count = min(count, max_batches)
    for b in range(count):
        rows, index = _locate(cumulative, np.arange(b * batch_size, (b + 1) * batch_size, dtype=np.int64))
        yield _gather(split, rows, index * seq_len, seq_len)
