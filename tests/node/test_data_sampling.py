"""Per-(run, step, peer) batch sampling and the fixed eval batches, over any source."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from distro_node.node.data import DataSettingError, MarkovSpec, eval_batches, markov_source, sample_batch

SOURCE = markov_source(0, MarkovSpec(train_rows=8, eval_rows=2, row_len=512))


def batch(step: int = 0, peer: str = "peer-a", run: bytes = b"run-1", size: int = 8, seq: int = 32):
    return sample_batch(SOURCE, run_id=run, step=step, peer=peer, batch_size=size, seq_len=seq)


def test_shapes_dtypes_and_shift() -> None:
    x, y = batch(size=5, seq=17)
    assert x.shape == y.shape == (5, 17)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_windows_are_real_corpus_slices_within_one_row() -> None:
    x, y = batch(size=16, seq=64)
    for row_in, row_out in zip(x, y, strict=True):
        window = np.concatenate([row_in.numpy(), row_out[-1:].numpy()])
        hits = [
            r for r in range(SOURCE.train.shape[0])
            for o in range(SOURCE.train.shape[1] - 64)
            if np.array_equal(SOURCE.train[r, o : o + 65], window)
        ]
        assert hits, "window not found inside a single training row"


def test_same_key_same_batch() -> None:
    a, b = batch(step=4, peer="p"), batch(step=4, peer="p")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("other", [{"peer": "peer-b"}, {"step": 1}, {"run": b"run-2"}])
def test_any_key_change_changes_the_batch(other: dict[str, object]) -> None:
    base, changed = batch(), batch(**other)
    assert not torch.equal(base[0], changed[0])


def test_peers_get_mostly_disjoint_windows() -> None:
    x_a, _ = batch(peer="a", size=32)
    x_b, _ = batch(peer="b", size=32)
    windows_a = {tuple(r.tolist()) for r in x_a}
    windows_b = {tuple(r.tolist()) for r in x_b}
    assert len(windows_a & windows_b) <= 1


def test_batch_prefix_is_stable_across_batch_sizes() -> None:
    # Window i depends only on (key, i): a smaller batch is a prefix of a larger one.
    small, large = batch(size=3), batch(size=9)
    assert torch.equal(small[0], large[0][:3])


def test_offsets_cover_the_split() -> None:
    rows = set()
    for step in range(20):
        x, _ = batch(step=step, size=8, seq=32)
        rows.update(x[:, 0].tolist())
    assert len(rows) > 50  # 160 draws over ~4k windows: far from a degenerate sampler


def test_eval_batches_are_fixed_and_disjoint() -> None:
    # 2 rows x 15 stride-32 windows (each needs 33 tokens of a 512-token row) = 30 windows = 6 batches of 5.
    first = list(eval_batches(SOURCE, batch_size=5, seq_len=32))
    second = list(eval_batches(SOURCE, batch_size=5, seq_len=32))
    assert len(first) == 6
    assert len(list(eval_batches(SOURCE, batch_size=4, seq_len=32))) == 7  # a partial last batch is dropped
    for (xa, ya), (xb, yb) in zip(first, second, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
    targets = torch.cat([y for _, y in first]).reshape(-1)
    expected = np.concatenate([SOURCE.eval[r, 1 : 1 + 15 * 32] for r in range(2)])
    assert np.array_equal(targets.numpy(), expected)  # each held-out position scored exactly once
    assert len(list(eval_batches(SOURCE, batch_size=4, seq_len=32, max_batches=2))) == 2


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"seq_len": 512}, "seq_len"),  # a window needs seq_len + 1 tokens of one row
        ({"seq_len": 0}, "seq_len"),
        ({"batch_size": 0}, "batch_size"),
        ({"step": -1}, "step"),
    ],
)
def test_bad_sampling_settings_name_the_field(kwargs: dict[str, int], field: str) -> None:
    args = {"run_id": b"r", "step": 0, "peer": "p", "batch_size": 2, "seq_len": 8} | kwargs
    with pytest.raises(DataSettingError) as info:
        sample_batch(SOURCE, **args)
    assert info.value.field == field


def test_eval_too_small_for_batch() -> None:
    with pytest.raises(DataSettingError) as info:
        next(eval_batches(SOURCE, batch_size=10_000, seq_len=32))
    assert info.value.field == "batch_size"


def test_vocab_check() -> None:
    SOURCE.check_vocab(256)
    SOURCE.check_vocab(32000)
    with pytest.raises(DataSettingError) as info:
        SOURCE.check_vocab(128)
    assert info.value.field == "vocab_size"
