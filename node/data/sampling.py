"""Which windows each peer trains on, decided by (run, step, peer) alone.

Every peer can recompute any other peer's batch (to audit it, or to replay a round after a crash) without
coordination, and two peers never train on the same windows by construction of the key rather than by
luck of a shared RNG. Offsets come from sha256, not from a torch or numpy generator, because those streams
are not promised to stay the same across library versions and peers run different ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np
import torch
from distro_node.node.data.errors import DataSettingError
from distro_node.node.data.source import TokenSource
from torch import Tensor


def _check_positive(field: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DataSettingError(field, f"must be a positive integer, got {value!r}")


def _windows_per_row(split: np.ndarray, seq_len: int, split_name: str) -> int:
    """A window is seq_len + 1 tokens (inputs plus the shifted targets) and must fit inside one row."""
    per_row = split.shape[1] - seq_len
    if per_row <= 0:
        raise DataSettingError(
            "seq_len",
            f"{seq_len} needs rows of at least {seq_len + 1} tokens;"
            f" the {split_name} split has rows of {split.shape[1]}",
        )
    return per_row


def _gather(split: np.ndarray, rows: np.ndarray, offsets: np.ndarray, seq_len: int) -> tuple[Tensor, Tensor]:
    windows = np.stack([split[r, o : o + seq_len + 1] for r, o in zip(rows, offsets, strict=True)])
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
    _check_positive("batch_size", batch_size)
    _check_positive("seq_len", seq_len)
    split = source.train
    per_row = _windows_per_row(split, seq_len, "train")
    total = split.shape[0] * per_row
    key = batch_key(run_id, step, peer)
    picks = [
        int.from_bytes(hashlib.sha256(key + i.to_bytes(8, "little")).digest()[:16], "little") % total
        for i in range(batch_size)
    ]
    flat = np.array(picks, dtype=np.int64)
    return _gather(split, flat // per_row, flat % per_row, seq_len)


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
    _windows_per_row(split, seq_len, "eval")
    per_row = (split.shape[1] - 1) // seq_len  # stride seq_len: each target position is scored once
    count = split.shape[0] * per_row // batch_size
    if count == 0:
        raise DataSettingError(
            "batch_size", f"the eval split holds {split.shape[0] * per_row} windows, fewer than {batch_size}"
        )
    if max_batches is not None:
        count = min(count, max_batches)
    for b in range(count):
        flat = np.arange(b * batch_size, (b + 1) * batch_size, dtype=np.int64)
        yield _gather(split, flat // per_row, (flat % per_row) * seq_len, seq_len)
