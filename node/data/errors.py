"""Typed data errors, so the CLI can tell a user which file or setting is wrong instead of a traceback."""

from __future__ import annotations

from pathlib import Path


class DataError(ValueError):
    """Base of every data failure; catch this to report any of them."""


class DataFileNotFoundError(DataError):
    """The configured data file does not exist (or is not a regular file)."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"data file not found: {path}")
        self.path = path


class EmptyDataFileError(DataError):
    """The file exists but holds no tokens; training on it would fail later with a confusing message."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"data file is empty: {path}")
        self.path = path


class DataFormatError(DataError):
    """The file's bytes cannot be read as tokens (unknown dtype, a truncated last token, too few tokens)."""

    def __init__(self, path: Path | None, detail: str) -> None:
        super().__init__(f"{path}: {detail}" if path is not None else detail)
        self.path = path
        self.detail = detail


class TokenRangeError(DataError):
    """A token id is >= the vocabulary size; the embedding lookup would fail or silently read garbage."""

    def __init__(self, path: Path | None, position: int, token: int, vocab_size: int) -> None:
        where = f"{path}: " if path is not None else ""
        super().__init__(f"{where}token {token} at position {position} is >= vocab_size={vocab_size}")
        self.path = path
        self.position = position
        self.token = token
        self.vocab_size = vocab_size


class DataSettingError(DataError):
    """A data setting is invalid; ``field`` names it (``seq_len``, ``batch_size``, ``vocab_size``, ...)."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"data.{field}: {detail}")
        self.field = field
        self.detail = detail


class ShardError(DataFormatError):
    """A file of a prepared dataset (a shard, its tokenizer) is not what the data manifest says: missing,
    short or long, corrupt (another sha256), or holding another number of documents. ``path`` is the file."""


class DataManifestError(DataFormatError):
    """A data manifest cannot be trusted as written; ``field`` names the entry (``train.shards[3].sha256``).

    Raised before any shard is opened, so a manifest from elsewhere is checked in full (types, ranges,
    totals, file names) before a single number in it sizes a read or an allocation."""

    def __init__(self, path: Path | None, field: str, detail: str) -> None:
        super().__init__(path, f"{field}: {detail}")
        self.field = field


class MissingExtraError(DataError):
    """An optional dependency is not installed: the message names the extra that brings it, since the
    daemon core runs without it and only ``data prepare`` (and Parquet input) need it."""

    def __init__(self, package: str, purpose: str, extra: str = "data") -> None:
        super().__init__(f"{purpose} needs the {package!r} package: pip install 'distro-node[{extra}]'")
        self.package = package
        self.extra = extra
