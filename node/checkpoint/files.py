"""Durable file-system primitives for checkpoints: fsync of files and directories, hashing, a writer lock.

Why all the fsyncs: ``rename`` is atomic in the namespace, but without fsyncing the files first a power loss
can leave the renamed directory pointing at empty or partial data; without fsyncing the parent directory the
rename itself may be lost. Order: write -> fsync files -> fsync temp dir -> rename -> fsync parent.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from distro_node.node.checkpoint.errors import CheckpointLockedError

_HASH_CHUNK = 1 << 20
LOCK_NAME = ".lock"


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """fsync a directory's entries; some file systems refuse it (EINVAL), which then is all they offer."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def write_bytes_durably(path: Path, data: bytes) -> None:
    with path.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def sha256_file(path: Path) -> tuple[str, int]:
    """(hex digest, size) read in 1 MiB chunks, so multi-gigabyte model files need no extra memory."""
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def remove_tree(path: Path) -> None:
    """Delete a leftover directory or file; a concurrent removal is not an error."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


@contextlib.contextmanager
def writer_lock(directory: Path) -> Iterator[None]:
    """Exclusive, non-blocking ``flock`` on ``<directory>/.lock`` for one save. The kernel drops it when the
    holder dies (even by SIGKILL), so a crashed writer never blocks the next one."""
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CheckpointLockedError(directory) from None
        yield
    finally:
        os.close(fd)
