"""Local data: raw text through a byte-level tokenizer, or a flat binary file of pre-tokenized ids.

Token files are memory-mapped, not read: a multi-gigabyte corpus costs only the pages the sampled windows
touch. Every way a file can be unusable is reported as a typed error naming the file, at load time, rather
than as an index error deep inside the first training step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from distro_node.node.data.errors import (
    DataFileNotFoundError,
    DataFormatError,
    DataSettingError,
    EmptyDataFileError,
    TokenRangeError,
)
from distro_node.node.data.source import TokenSource
from distro_node.protocol.digests import file_sha256

BYTE_VOCAB_SIZE = 256

TokenDtype = Literal["uint16", "uint32"]
# Explicit little-endian: the file format is fixed, whatever the byte order of the machine reading it.
_DTYPES: dict[str, np.dtype] = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
_SUFFIXES: dict[str, TokenDtype] = {
    ".u16": "uint16",
    ".uint16": "uint16",
    ".u32": "uint32",
    ".uint32": "uint32",
}
# Validation scans the file in slices of this many tokens, so checking a huge file needs little memory.
_SCAN_CHUNK = 1 << 24


def _check_file(path: Path) -> int:
    if not path.is_file():
        raise DataFileNotFoundError(path)
    size = path.stat().st_size
    if size == 0:
        raise EmptyDataFileError(path)
    return size


def _split(tokens: np.ndarray, eval_fraction: float, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The last ``eval_fraction`` of the file is held out: a contiguous tail, so no held-out token ever
    appears inside a training window (a random scatter of eval windows would overlap training ones)."""
    is_number = isinstance(eval_fraction, float | int) and not isinstance(eval_fraction, bool)
    if not is_number or not 0 < eval_fraction < 1:
        raise DataSettingError("eval_fraction", f"must be in (0, 1), got {eval_fraction!r}")
    n = tokens.shape[0]
    n_eval = max(2, int(n * eval_fraction))
    if n - n_eval < 2:
        raise DataFormatError(path, f"{n} tokens are too few to split into train and eval")
    return tokens[None, : n - n_eval], tokens[None, n - n_eval :]


def text_source(path: str | Path, *, eval_fraction: float = 0.01) -> TokenSource:
    """A text (or any) file as bytes: token id = byte value, vocab 256. No tokenizer to ship or agree on,
    and every file is representable, which matters more here than compression of the token stream."""
    path = Path(path)
    _check_file(path)
    tokens = np.fromfile(path, dtype=np.uint8)
    tokens.flags.writeable = False
    train, held_out = _split(tokens, eval_fraction, path)
    return TokenSource(name=f"text:{path.name}", vocab_size=BYTE_VOCAB_SIZE, train=train, eval=held_out)


def file_fingerprint(path: str | Path) -> tuple[str, int]:
    """(sha256 hex, size in bytes) of a data file, read in 1 MiB blocks: what peers compare to prove they
    hold the same corpus without ever sending it or its path."""
    path = Path(path)
    size = _check_file(path)
    return file_sha256(path).hex(), size


def resolve_token_dtype(path: str | Path, dtype: TokenDtype | None = None) -> TokenDtype:
    """The token width of a token file: ``dtype`` when given, else from its name (``.u16``/``.u32``...)."""
    return _resolve_dtype(Path(path), dtype)


def _resolve_dtype(path: Path, dtype: TokenDtype | None) -> TokenDtype:
    if dtype is not None:
        if dtype not in _DTYPES:
            raise DataSettingError("dtype", f"must be one of {sorted(_DTYPES)}, got {dtype!r}")
        return dtype
    for suffix in reversed(path.suffixes):  # data.u16.bin and data.u16 both say uint16
        if suffix.lower() in _SUFFIXES:
            return _SUFFIXES[suffix.lower()]
    raise DataFormatError(
        path, f"cannot tell the token width; name it *.u16.bin or *.u32.bin or pass dtype ({sorted(_DTYPES)})"
    )


def _check_range(tokens: np.ndarray, vocab_size: int, path: Path) -> None:
    for start in range(0, tokens.shape[0], _SCAN_CHUNK):
        chunk = tokens[start : start + _SCAN_CHUNK]
        if int(chunk.max()) >= vocab_size:
            position = start + int(np.argmax(chunk >= vocab_size))
            raise TokenRangeError(path, position, int(tokens[position]), vocab_size)


def token_file_source(
    path: str | Path, *, vocab_size: int, dtype: TokenDtype | None = None, eval_fraction: float = 0.01
) -> TokenSource:
    """A flat little-endian array of token ids (no header), as written by ``array.tofile``; the width comes
    from ``dtype`` or else from the file name (``.u16``/``.uint16``/``.u32``/``.uint32`` suffix)."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
        raise DataSettingError("vocab_size", f"must be a positive integer, got {vocab_size!r}")
    path = Path(path)
    size = _check_file(path)
    width = _resolve_dtype(path, dtype)
    itemsize = _DTYPES[width].itemsize
    if size % itemsize:
        raise DataFormatError(path, f"{size} bytes is not a whole number of {width} tokens (truncated file?)")
    tokens = np.memmap(path, dtype=_DTYPES[width], mode="r")
    _check_range(tokens, vocab_size, path)
    train, held_out = _split(tokens, eval_fraction, path)
    return TokenSource(name=f"tokens:{path.name}", vocab_size=vocab_size, train=train, eval=held_out)
