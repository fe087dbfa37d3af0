"""The one shape every data source takes, so sampling and evaluation need not know where tokens came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
from distro_node.node.data.errors import DataSettingError
from distro_node.node.data.rows import DocumentRows

# A split: a 2-D (rows, row_len) array, or documents of unequal length over shards (node/data/rows.py).
Split = np.ndarray | DocumentRows


@dataclass(frozen=True, eq=False)
class TokenSource:
    """Train and held-out token splits plus what is known about the best achievable loss.

    Splits are 2-D (rows, row_len) integer arrays: a training window never crosses a row boundary, because
    rows of the synthetic source are independent sequences and a window spanning two of them would contain a
    transition no model could predict, pushing the achievable loss above the stated floor. A file is one row;
    a prepared dataset has one row per document (:class:`DocumentRows`). Arrays may be read-only memory maps;
    they are shared (sources are cached), so never write to them.
    """

    name: str
    vocab_size: int
    train: Split
    eval: Split
    # Entropy rate in nats/token (the loss of a perfect model given unbounded context); None for real data.
    loss_floor: float | None = None
    # Best achievable loss at window positions 0, 1, ... that see fewer tokens than the source's order needs;
    # positions beyond this tuple achieve ``loss_floor``.
    short_context_floors: tuple[float, ...] = ()
    # Losses of simple predictors (uniform, unigram, bigram, ...) to read a loss curve against.
    reference_losses: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # sha256 of the tokenizer that made the tokens, "" when none did (bytes, the embedded corpus): with one,
    # the model takes its vocabulary size from the data instead of from the preset (node/presets.py).
    tokenizer_sha256: str = ""

    def window_floor(self, seq_len: int) -> float | None:
        """Mean loss a perfect model achieves over a window of ``seq_len`` targets.

        Not simply ``loss_floor``: the first targets of a window are predicted from fewer tokens than the
        source's order, so they cannot reach the entropy rate; reporting "loss above floor" against the plain
        rate would show even a perfect model a gap it can never close.
        """
        if self.loss_floor is None:
            return None
        if seq_len <= 0:
            raise DataSettingError("seq_len", f"must be positive, got {seq_len}")
        head = self.short_context_floors[:seq_len]
        return (sum(head) + (seq_len - len(head)) * self.loss_floor) / seq_len

    def check_vocab(self, model_vocab_size: int) -> None:
        """Refuse a model whose embedding cannot index every token this source can produce."""
        if self.vocab_size > model_vocab_size:
            raise DataSettingError(
                "vocab_size",
                f"data source {self.name!r} has vocab {self.vocab_size} > model vocab {model_vocab_size}",
            )
