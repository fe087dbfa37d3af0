"""Typed checkpoint errors: each names the file or field involved, so an operator knows what to delete or
fix."""

from __future__ import annotations

from pathlib import Path


class CheckpointError(Exception):
    """Base of every checkpoint failure."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint file is missing, truncated, fails its sha256, or does not parse; ``file`` names it."""

    def __init__(self, file: Path, detail: str) -> None:
        super().__init__(f"{file}: {detail}")
        self.file = file
        self.detail = detail


class CheckpointMismatchError(CheckpointError):
    """A valid checkpoint of something else (other run, other config, other strategy); ``field`` names what
    differs. Resuming from it would silently train a different run."""

    def __init__(self, path: Path, field: str, expected: object, found: object) -> None:
        super().__init__(f"{path}: {field} is {found!r}, expected {expected!r}")
        self.path = path
        self.field = field
        self.expected = expected
        self.found = found


class CheckpointLockedError(CheckpointError):
    """Another process is writing checkpoints into the same directory; two writers would prune each other's
    files."""

    def __init__(self, directory: Path) -> None:
        super().__init__(f"{directory}: another process holds the checkpoint lock")
        self.directory = directory


class CheckpointStateError(CheckpointError):
    """A state to save holds something that cannot be stored without pickling; ``path`` is its dotted key."""

    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail
