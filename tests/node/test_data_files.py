"""Local text and token files: loading, splitting, sampling, and every way a file can be unusable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from distro_node.node.data import (
    DataError,
    DataFileNotFoundError,
    DataFormatError,
    DataSettingError,
    EmptyDataFileError,
    TokenRangeError,
    sample_batch,
    text_source,
    token_file_source,
)


def test_text_file_is_bytes(tmp_path: Path) -> None:
    text = "héllo, world\n" * 200
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    source = text_source(path, eval_fraction=0.1)
    raw = text.encode()
    assert source.vocab_size == 256 and source.loss_floor is None and source.window_floor(8) is None
    assert source.train.shape[0] == source.eval.shape[0] == 1
    assert source.train.shape[1] + source.eval.shape[1] == len(raw)
    assert source.eval.shape[1] == int(len(raw) * 0.1)
    assert bytes(source.train[0].tolist()) + bytes(source.eval[0].tolist()) == raw
    x, _ = sample_batch(source, run_id=b"r", step=0, peer="p", batch_size=4, seq_len=16)
    assert x.shape == (4, 16) and int(x.max()) < 256
    assert bytes(x[0].tolist()) in raw


@pytest.mark.parametrize(
    ("name", "dtype", "width"),
    [
        ("data.u16.bin", None, "<u2"),
        ("data.uint16", None, "<u2"),
        ("data.u32.bin", None, "<u4"),
        ("data.bin", "uint32", "<u4"),
        ("data.u16.bin", "uint32", "<u4"),  # an explicit flag wins over the name
    ],
)
def test_token_file_widths(tmp_path: Path, name: str, dtype: str | None, width: str) -> None:
    tokens = (np.arange(1000) * 7919) % 31999
    path = tmp_path / name
    tokens.astype(width).tofile(path)
    source = token_file_source(path, vocab_size=32000, dtype=dtype)
    assert source.vocab_size == 32000
    loaded = np.concatenate([source.train[0], source.eval[0]])
    assert np.array_equal(loaded, tokens)
    x, _ = sample_batch(source, run_id=b"r", step=1, peer="p", batch_size=2, seq_len=32)
    assert x.dtype == torch.int64 and int(x.max()) < 32000


def test_token_file_is_little_endian(tmp_path: Path) -> None:
    path = tmp_path / "le.u16.bin"
    path.write_bytes(bytes([0x01, 0x02] * 50))  # 0x0201 = 513 as little-endian uint16
    source = token_file_source(path, vocab_size=1000)
    assert set(source.train[0].tolist()) == {513}


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataFileNotFoundError) as info:
        text_source(tmp_path / "nope.txt")
    assert info.value.path == tmp_path / "nope.txt"
    with pytest.raises(DataFileNotFoundError):
        token_file_source(tmp_path / "nope.u16.bin", vocab_size=10)
    with pytest.raises(DataFileNotFoundError):
        text_source(tmp_path)  # a directory is not a data file


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.u16.bin"
    path.touch()
    with pytest.raises(EmptyDataFileError):
        token_file_source(path, vocab_size=10)
    with pytest.raises(EmptyDataFileError):
        text_source(path)


def test_token_out_of_range_reports_position(tmp_path: Path) -> None:
    tokens = np.zeros(100, dtype="<u2")
    tokens[37] = 500
    path = tmp_path / "bad.u16.bin"
    tokens.tofile(path)
    with pytest.raises(TokenRangeError) as info:
        token_file_source(path, vocab_size=500)
    assert (info.value.position, info.value.token, info.value.vocab_size) == (37, 500, 500)
    token_file_source(path, vocab_size=501)


def test_truncated_token_file(tmp_path: Path) -> None:
    path = tmp_path / "odd.u32.bin"
    path.write_bytes(b"\x00" * 10)
    with pytest.raises(DataFormatError, match="whole number"):
        token_file_source(path, vocab_size=10)


def test_unknown_width_needs_flag(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    path.write_bytes(b"\x00" * 8)
    with pytest.raises(DataFormatError, match="dtype"):
        token_file_source(path, vocab_size=10)
    with pytest.raises(DataSettingError) as info:
        token_file_source(path, vocab_size=10, dtype="int8")  # type: ignore[arg-type]
    assert info.value.field == "dtype"


def test_too_few_tokens_to_split(tmp_path: Path) -> None:
    path = tmp_path / "short.txt"
    path.write_bytes(b"abc")
    with pytest.raises(DataFormatError):
        text_source(path)


def test_bad_settings(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"x" * 100)
    with pytest.raises(DataSettingError) as info:
        text_source(path, eval_fraction=1.0)
    assert info.value.field == "eval_fraction"
    with pytest.raises(DataSettingError) as info:
        token_file_source(path, vocab_size=0, dtype="uint16")
    assert info.value.field == "vocab_size"


def test_short_file_and_long_window(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"x" * 100)
    source = text_source(path)
    with pytest.raises(DataSettingError) as info:
        sample_batch(source, run_id=b"r", step=0, peer="p", batch_size=1, seq_len=200)
    assert info.value.field == "seq_len"


def test_all_errors_share_a_base() -> None:
    errors = (DataFileNotFoundError, EmptyDataFileError, DataFormatError, TokenRangeError, DataSettingError)
    for error in errors:
        assert issubclass(error, DataError)
