"""Blob stream protocol ``/distro/blob/1.0.0``: the files a run needs, fetched by sha256 from any holder.

A run on real data needs files beside the weights: the tokenizer, the data manifest, the token shards and
an imported starting checkpoint. The manifest names each by its sha256 and size, so any peer that has a file
can serve it and a joiner needs no download from elsewhere. Served and fetched like payloads, with two
differences that follow from size (shards are tens of MB):

- Ranges. A request names (sha256, offset, length) with length at most ``PIECE_BYTES``, so memory per
  request is bounded on both sides and a fetch cut off half way resumes where it stopped (the bytes so far
  sit in ``<dest>.part``), from the same holder or another one.
- Verified as a whole before use. Bytes land in the ``.part`` file and are hashed once complete; only a
  file whose sha256 matches is renamed into place, so training never reads an unverified byte. A mismatch
  discards the partial file and names every holder that contributed to it (:class:`BlobFetch.faulty`);
  the fetch goes on with the holders not named.

The server serves only what was put in its :class:`BlobCatalog` (files it made or verified), never a path a
peer asks for, and only to peers its ``allow`` predicate accepts (run members).

Wire format (all integers big-endian):
  request = version:u8 (=1) | sha256:32 | offset:u64 | length:u32 (1..PIECE_BYTES)          (45 bytes)
  reply   = status:u8 | length:u32 | body[length]     (length == the requested length when status == OK)
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path

import trio
from libp2p.abc import INetStream
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from .digests import file_sha256
from .errors import (
    BadRequestError,
    FetchFailedError,
    HashMismatchError,
    MalformedReplyError,
    PayloadTooLargeError,
    TransferError,
    TransportError,
)
from .host import P2PHost
from .rpc import client_stream
from .store import DIGEST_BYTES
from .transfer import status_error
from .wire import ShortReadError, read_exactly, reply_within, reset_quietly

logger = logging.getLogger(__name__)

BLOB_PROTOCOL = TProtocol("/distro/blob/1.0.0")
REQUEST_VERSION = 1
PIECE_BYTES = 1 << 20
_REQUEST = struct.Struct(">B32sQI")
_REPLY_HEADER = struct.Struct(">BI")


class BlobStatus(IntEnum):
    OK = 0
    NOT_FOUND = 1
    BAD_REQUEST = 2
    BUSY = 3
    REFUSED = 4


@dataclass(frozen=True)
class BlobConfig:
    # The largest file a fetch accepts, checked against the manifest's size before any byte is asked for.
    max_blob_bytes: int = 8 << 30
    # One piece: dial + request + body. 1 MiB at 1 Mbit/s takes ~8.4 s.
    attempt_timeout: float = 30.0
    request_timeout: float = 10.0
    max_concurrent_uploads: int = 4

    def __post_init__(self) -> None:
        if self.max_blob_bytes < 1 or self.max_concurrent_uploads < 1:
            raise ValueError("BlobConfig sizes and counts must be >= 1")
        for name in ("attempt_timeout", "request_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"BlobConfig.{name} must be > 0")


class BlobCatalog:
    """The files this peer serves, by sha256. Only files added here are ever read for a peer."""

    def __init__(self) -> None:
        self._files: dict[bytes, tuple[Path, int]] = {}

    def add(self, path: Path, digest: bytes | None = None) -> bytes:
        """Serve ``path``; ``digest`` when it was just verified (else the file is hashed now)."""
        digest = file_sha256(path) if digest is None else digest
        if len(digest) != DIGEST_BYTES:
            raise ValueError(f"a blob digest is {DIGEST_BYTES} bytes, got {len(digest)}")
        self._files[digest] = (path, path.stat().st_size)
        return digest

    def get(self, digest: bytes) -> tuple[Path, int] | None:
        return self._files.get(digest)

    def discard(self, digest: bytes) -> None:
        """Stop serving a file (a cache evicted it)."""
        self._files.pop(digest, None)

    def __contains__(self, digest: object) -> bool:
        return digest in self._files

    def __len__(self) -> int:
        return len(self._files)


def _int_in(value: object, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


@dataclass(frozen=True)
class BlobRequest:
    digest: bytes
    offset: int
    length: int

    def __post_init__(self) -> None:
        if len(self.digest) != DIGEST_BYTES:
            raise BadRequestError(f"digest must be {DIGEST_BYTES} bytes, got {len(self.digest)}")
        if not _int_in(self.offset, 0, 2**63 - 1):
            raise BadRequestError(f"offset must be an int in [0, 2^63), got {self.offset!r}")
        if not _int_in(self.length, 1, PIECE_BYTES):
            raise BadRequestError(f"length must be an int in [1, {PIECE_BYTES}], got {self.length!r}")

    def encode(self) -> bytes:
        return _REQUEST.pack(REQUEST_VERSION, self.digest, self.offset, self.length)

    @classmethod
    def decode(cls, raw: bytes) -> BlobRequest:
        version, digest, offset, length = _REQUEST.unpack(raw)
        if version != REQUEST_VERSION:
            raise BadRequestError(f"unsupported blob request version {version}")
        return cls(digest, offset, length)


class BlobServer:
    """Serves ranges of catalogued files to peers ``allow`` accepts; a bounded number at once."""

    def __init__(self, host: P2PHost, catalog: BlobCatalog, config: BlobConfig | None = None,
                 allow: Callable[[ID], bool] | None = None) -> None:
        self.host = host
        self.catalog = catalog
        self.config = config or BlobConfig()
        self._allow = allow
        self._uploads = trio.Semaphore(self.config.max_concurrent_uploads)
        self.served_bytes = 0
        self.refused = 0

    def install(self) -> None:
        self.host.set_handler(BLOB_PROTOCOL, self._handle)

    async def _handle(self, stream: INetStream) -> None:
        peer = stream.muxed_conn.peer_id
        try:
            with trio.fail_after(self.config.request_timeout):
                request = BlobRequest.decode(await read_exactly(stream, _REQUEST.size))
        except (BadRequestError, ShortReadError, trio.TooSlowError) as exc:
            logger.debug("bad blob request from %s: %r", peer, exc)
            await self._status(stream, BlobStatus.BAD_REQUEST)
            return
        if self._allow is not None and not self._allow(peer):
            self.refused += 1
            await self._status(stream, BlobStatus.REFUSED)
            return
        entry = self.catalog.get(request.digest)
        if entry is None:
            await self._status(stream, BlobStatus.NOT_FOUND)
            return
        path, size = entry
        if request.offset + request.length > size:
            await self._status(stream, BlobStatus.BAD_REQUEST)
            return
        try:
            self._uploads.acquire_nowait()
        except trio.WouldBlock:
            await self._status(stream, BlobStatus.BUSY)
            return
        try:
            body = await trio.to_thread.run_sync(_read_range, path, request.offset, request.length)
            if await reply_within(stream, self.config.attempt_timeout,
                                  _REPLY_HEADER.pack(BlobStatus.OK, len(body)), body):
                self.served_bytes += len(body)
        except OSError as exc:
            logger.debug("blob range for %s not served: %r", peer, exc)
            await reset_quietly(stream)
        finally:
            self._uploads.release()

    async def _status(self, stream: INetStream, status: BlobStatus) -> None:
        await reply_within(stream, self.config.request_timeout, _REPLY_HEADER.pack(status, 0))


def _read_range(path: Path, offset: int, length: int) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        body = f.read(length)
    if len(body) != length:
        raise OSError(f"{path} is shorter than its catalogued size")
    return body


async def fetch_range(host: P2PHost, peer_id: ID, request: BlobRequest, config: BlobConfig) -> bytes:
    """One piece from one holder, bounded by ``attempt_timeout``; typed TransferError on any failure."""
    peer = str(peer_id)
    async with client_stream(host, peer_id, BLOB_PROTOCOL, timeout=config.attempt_timeout,
                             what="blob piece") as stream:
        await stream.write(request.encode())
        status, length = _REPLY_HEADER.unpack(await read_exactly(stream, _REPLY_HEADER.size))
        if status != BlobStatus.OK:
            raise _status_error(status, length, peer)
        if length != request.length:
            raise MalformedReplyError(f"reply of {length} bytes to a request for {request.length}", peer)
        return await read_exactly(stream, length)


def _status_error(status: int, length: int, peer: str) -> TransferError:
    if status == BlobStatus.REFUSED and length == 0:
        return TransferError("holder does not serve us (not a member of its run)", peer)
    return status_error(status, length, peer, "blob") or MalformedReplyError(f"status {status}", peer)


class BlobFetchFailedError(FetchFailedError):
    """No holder completed the file with the right hash; ``faulty`` served bytes that failed it. A partial
    file from holders that merely stopped is kept for a later resume."""

    def __init__(self, digest: bytes, attempts: list[tuple[str, TransportError]], faulty: list[str]) -> None:
        super().__init__(digest, attempts)
        self.faulty = faulty


@dataclass
class BlobFetch:
    """Where the verified file is, who served its bytes, and who served bytes that failed the hash."""

    path: Path
    served_by: list[str] = field(default_factory=list)
    faulty: list[str] = field(default_factory=list)
    resumed_from: int = 0


async def fetch_blob(host: P2PHost, digest: bytes, size: int, holders: Sequence[ID], dest: Path,
                     config: BlobConfig | None = None) -> BlobFetch:
    """Make ``dest`` the verified file with this sha256 and size, fetching what is missing from ``holders``.

    A ``dest`` that already verifies is kept. Otherwise pieces are appended to ``dest.part`` (resuming from
    what is there), each holder used until it fails, then the next. Raises BlobFetchFailedError when
    no holder could complete the file with the right hash; ``faulty`` holders are never asked twice.
    """
    cfg = config or BlobConfig()
    if not _int_in(size, 1, cfg.max_blob_bytes):
        raise PayloadTooLargeError(f"blob size {size!r} is outside 1..{cfg.max_blob_bytes}")
    if dest.exists() and dest.stat().st_size == size and await _verifies(dest, digest):
        return BlobFetch(dest)
    part = dest.with_name(dest.name + ".part")
    dest.parent.mkdir(parents=True, exist_ok=True)
    result = BlobFetch(dest)
    failures: list[tuple[str, TransportError]] = []
    contributors: set[str] = set()
    have = part.stat().st_size if part.exists() else 0
    if have > size:
        part.unlink()
        have = 0
    result.resumed_from = have
    queue = [h for h in dict.fromkeys(holders) if h != host.peer_id]
    while queue:
        holder = queue.pop(0)
        before = have
        try:
            await _fill_from(host, holder, digest, size, part, have, cfg)
        except TransportError as exc:
            logger.debug("blob %s from %s: %r", digest.hex()[:16], holder, exc)
            failures.append((str(holder), exc))
        have = part.stat().st_size if part.exists() else 0
        if have > before:
            contributors.add(str(holder))
        if have < size:
            continue
        if await _verifies(part, digest):
            os.replace(part, dest)
            result.served_by = sorted(contributors)
            return result
        # Bytes from these holders do not hash to the manifest's digest: start over without them.
        result.faulty.extend(sorted(contributors))
        failures.append((str(holder), HashMismatchError("blob does not match its sha256", str(holder))))
        part.unlink(missing_ok=True)
        have = 0
        queue = [h for h in queue if str(h) not in contributors]
        contributors.clear()
    raise BlobFetchFailedError(digest, failures, result.faulty)


async def _fill_from(host: P2PHost, holder: ID, digest: bytes, size: int, part: Path, have: int,
                     cfg: BlobConfig) -> None:
    """Append pieces from one holder until the file is complete (or the holder fails: TransferError)."""
    while have < size:
        length = min(PIECE_BYTES, size - have)
        body = await fetch_range(host, holder, BlobRequest(digest, have, length), cfg)
        await trio.to_thread.run_sync(_append, part, body)
        have += len(body)


def _append(part: Path, body: bytes) -> None:
    with part.open("ab") as f:
        f.write(body)
        f.flush()
        os.fsync(f.fileno())


async def _verifies(path: Path, digest: bytes) -> bool:
    return await trio.to_thread.run_sync(file_sha256, path) == digest
