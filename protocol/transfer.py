"""Payload stream protocol ``/distro/payload/1.0.0``: pull a payload by content hash from any holder.

Payloads (~2.8 MB) are far above what gossip should carry, so they move on a direct stream. The receiver
treats every holder as hostile until the bytes hash to what was requested:
- the announced length is checked against our cap (and the announced size, when known) *before* any buffer
  exists, so a 2 GiB length prefix costs nothing but a reset stream;
- the body is read in bounded chunks and hashed as it arrives;
- any violation resets the stream and raises a typed error, so the fetch loop moves on to the next holder and
  the caller can score the peer.

Wire format (all integers big-endian):
  request  = version:u8 (=1) | run_id_len:u8 (1..64) | run_id | step:u64 | sha256:32      (<= 106 bytes)
  reply    = status:u8 | length:u64 | body[length]                 (length is 0 unless status == OK)
"""

from __future__ import annotations

import hashlib
import logging
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from functools import partial
from typing import Protocol

import trio
from libp2p.abc import INetStream
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from .errors import (
    BadRequestError,
    HashMismatchError,
    MalformedReplyError,
    PayloadNotFoundError,
    PayloadTooLargeError,
    RemoteBusyError,
    TransferError,
)
from .fetch_plan import PlanConfig
from .host import P2PHost
from .pieces import RootHasher
from .rpc import client_stream
from .store import DIGEST_BYTES
from .wire import (
    READ_CHUNK,
    ByteReader,
    ShortReadError,
    read_exactly,
    read_opening,
    reply_within,
)

logger = logging.getLogger(__name__)


class ServedPayloads(Protocol):
    """What the server reads: a run's payloads by (step, hash). A :class:`PayloadStore`, or a view of one
    that also counts the bytes handed out."""

    @property
    def run_id(self) -> bytes: ...

    def get(self, step: int, digest: bytes) -> bytes | None: ...


PAYLOAD_PROTOCOL = TProtocol("/distro/payload/1.0.0")
REQUEST_VERSION = 1
MAX_RUN_ID_BYTES = 64
MAX_REQUEST_BYTES = 2 + MAX_RUN_ID_BYTES + 8 + DIGEST_BYTES
_REPLY_HEADER = struct.Struct(">BQ")
_STEP = struct.Struct(">Q")


class Status(IntEnum):
    OK = 0
    NOT_FOUND = 1
    BAD_REQUEST = 2
    BUSY = 3


def check_address(run_id: bytes, step: int, digest: bytes, digest_name: str) -> None:
    """A payload's address as a request names it (run, step, 32-byte digest), for every payload protocol:
    a typed BadRequestError naming the field, before anything is sent or served."""
    if not 1 <= len(run_id) <= MAX_RUN_ID_BYTES:
        raise BadRequestError(f"run_id must be 1..{MAX_RUN_ID_BYTES} bytes, got {len(run_id)}")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**64:
        raise BadRequestError(f"step must be an int in [0, 2^64), got {step!r}")
    if len(digest) != DIGEST_BYTES:
        raise BadRequestError(f"{digest_name} must be {DIGEST_BYTES} bytes, got {len(digest)}")


@dataclass(frozen=True)
class PayloadRequest:
    run_id: bytes
    step: int
    payload_hash: bytes

    def __post_init__(self) -> None:
        check_address(self.run_id, self.step, self.payload_hash, "payload_hash")

    def encode(self) -> bytes:
        return (
            bytes([REQUEST_VERSION, len(self.run_id)])
            + self.run_id
            + _STEP.pack(self.step)
            + self.payload_hash
        )


async def read_request(stream: ByteReader) -> PayloadRequest:
    """Parse a request field by field; at most MAX_REQUEST_BYTES are ever read."""
    try:
        version, run_id_len = await read_exactly(stream, 2)
        if version != REQUEST_VERSION:
            raise BadRequestError(f"unsupported request version {version}")
        if not 1 <= run_id_len <= MAX_RUN_ID_BYTES:
            raise BadRequestError(f"run_id length {run_id_len} out of range")
        rest = await read_exactly(stream, run_id_len + _STEP.size + DIGEST_BYTES)
    except ShortReadError as exc:
        raise BadRequestError(f"truncated request: {exc}") from exc
    run_id = rest[:run_id_len]
    (step,) = _STEP.unpack_from(rest, run_id_len)
    return PayloadRequest(run_id, step, rest[run_id_len + _STEP.size :])


@dataclass(frozen=True)
class TransferConfig:
    # Above the ~2.8 MB payload of a 1.2B model with headroom; also the per-fetch memory bound.
    max_payload_bytes: int = 16 * 1024 * 1024
    # One holder's budget (dial + request + body). A 2.8 MB body at 10 Mbit/s takes ~2.3 s.
    attempt_timeout: float = 30.0
    # How long the server waits for the ~100-byte request (slow-loris bound).
    request_timeout: float = 10.0
    # How long the server spends writing one reply before giving up on a stalled reader.
    serve_timeout: float = 120.0
    max_concurrent_uploads: int = 8
    # A holder that has not even answered the request after this long is raced by the next one (it keeps
    # its chance until attempt_timeout); one that answers and sends is never raced. See fetch_plan.py.
    hedge_after: float = 2.0
    # A holder other than the author that answered NOT_FOUND is asked again this many times, first after
    # not_found_backoff seconds, then every 2 x that (0.1 + 9 x 0.2 = 1.9 s), before relayed holders start
    # (and on while another attempt runs; fetch_plan.py): a public peer is usually pulling a NAT'd author's
    # payload at that moment.
    not_found_retries: int = 10
    not_found_backoff: float = 0.1

    def __post_init__(self) -> None:
        if self.max_payload_bytes < 1 or self.max_concurrent_uploads < 1:
            raise ValueError("TransferConfig sizes and counts must be >= 1")
        if self.not_found_retries < 0:
            raise ValueError("TransferConfig.not_found_retries must be >= 0")
        for name in ("attempt_timeout", "request_timeout", "serve_timeout", "hedge_after",
                     "not_found_backoff"):
            if getattr(self, name) <= 0:
                raise ValueError(f"TransferConfig.{name} must be > 0")

    def plan(self) -> PlanConfig:
        return PlanConfig(hedge_after=self.hedge_after, not_found_retries=self.not_found_retries,
                          not_found_backoff=self.not_found_backoff)


class PayloadServer:
    """Serves every payload in ``store`` to any peer that asks by (run, step, hash)."""

    def __init__(self, host: P2PHost, store: ServedPayloads, config: TransferConfig | None = None, *,
                 on_upload: Callable[[int], None] | None = None) -> None:
        """``on_upload``: told the bytes of each payload that went out whole (the daemon's byte counters)."""
        self.host = host
        self.store = store
        self.config = config or TransferConfig()
        self._on_upload = on_upload
        self._uploads = trio.Semaphore(self.config.max_concurrent_uploads)
        self.served = 0
        self.bad_requests = 0
        self.not_found = 0
        self.busy = 0
        self.last_request_at: float | None = None  # trio time of the last well-formed request

    @property
    def uploads_in_progress(self) -> int:
        return self.config.max_concurrent_uploads - self._uploads.value

    def install(self) -> None:
        self.host.set_handler(PAYLOAD_PROTOCOL, self._handle)

    async def _handle(self, stream: INetStream) -> None:
        refuse = partial(self._reply_status, stream, Status.BAD_REQUEST)
        read = partial(read_request, stream)
        request = await read_opening(stream, read, self.config.request_timeout, refuse, "payload request")
        if request is None:
            self.bad_requests += 1
            return
        self.last_request_at = trio.current_time()
        data = self.store.get(request.step, request.payload_hash)
        if data is None or request.run_id != self.store.run_id:
            self.not_found += 1
            await self._reply_status(stream, Status.NOT_FOUND)
            return
        try:
            self._uploads.acquire_nowait()
        except trio.WouldBlock:
            self.busy += 1
            await self._reply_status(stream, Status.BUSY)
            return
        try:
            if await reply_within(stream, self.config.serve_timeout, _REPLY_HEADER.pack(Status.OK, len(data)),
                                  data):
                self.served += 1
                if self._on_upload is not None:
                    self._on_upload(len(data))
        finally:
            self._uploads.release()

    async def _reply_status(self, stream: INetStream, status: Status) -> None:
        await reply_within(stream, self.config.request_timeout, _REPLY_HEADER.pack(status, 0))


async def fetch_from(
    host: P2PHost,
    peer_id: ID,
    request: PayloadRequest,
    *,
    config: TransferConfig | None = None,
    expected_size: int | None = None,
    answered: trio.Event | None = None,
) -> bytes:
    """One attempt against one holder, bounded by ``attempt_timeout``; typed TransferError on any failure.
    ``answered`` is set once the holder's OK header arrived (the body is on its way)."""
    cfg = config or TransferConfig()
    peer = str(peer_id)
    cap = cfg.max_payload_bytes
    if expected_size is not None and not 0 <= expected_size <= cap:
        raise PayloadTooLargeError(f"announced size {expected_size} is outside 0..{cap}", peer)
    async with client_stream(host, peer_id, PAYLOAD_PROTOCOL, timeout=cfg.attempt_timeout,
                             what="payload attempt") as stream:
        await stream.write(request.encode())
        status, length = _REPLY_HEADER.unpack(await read_exactly(stream, _REPLY_HEADER.size))
        _check_status(status, length, peer)
        if length > cap:
            raise PayloadTooLargeError(f"reply announces {length} bytes, cap is {cap}", peer)
        if expected_size is not None and length != expected_size:
            raise MalformedReplyError(f"reply length {length} != announced {expected_size}", peer)
        if answered is not None:
            answered.set()
        return await _read_body(stream, length, request.payload_hash, peer)


def _check_status(status: int, length: int, peer: str) -> None:
    error = status_error(status, length, peer, "payload")
    if error is not None:
        raise error


def status_error(status: int, length: int, peer: str, thing: str) -> TransferError | None:
    """The typed error for a reply status shared by the payload and blob protocols (None for OK)."""
    if status == Status.OK:
        return None
    if length != 0:
        return MalformedReplyError(f"status {status} with a {length}-byte body", peer)
    if status == Status.NOT_FOUND:
        return PayloadNotFoundError(f"holder does not have the {thing}", peer)
    if status == Status.BUSY:
        return RemoteBusyError("holder is at its upload limit", peer)
    if status == Status.BAD_REQUEST:
        return MalformedReplyError("holder rejected our request as malformed", peer)
    return MalformedReplyError(f"unknown status byte {status}", peer)


async def _read_body(stream: INetStream, length: int, want: bytes, peer: str) -> bytes:
    """Read ``length`` bytes in bounded chunks into one preallocated buffer, hashing as they arrive."""
    buf = bytearray(length)
    view = memoryview(buf)
    digest = RootHasher()
    filled = 0
    while filled < length:
        part = await stream.read(min(READ_CHUNK, length - filled))
        if not part:
            raise ShortReadError(length, filled)
        if len(part) > length - filled:
            raise MalformedReplyError("muxer returned more than requested", peer)
        view[filled : filled + len(part)] = part
        digest.update(part)
        filled += len(part)
    if digest.digest() != want:
        got = digest.digest().hex()[:16]
        raise HashMismatchError(f"body hashes to {got}, wanted {want.hex()[:16]}", peer)
    view.release()
    return bytes(buf)


def order_holders(own_id: ID, payload_hash: bytes, holders: Iterable[ID]) -> list[ID]:
    """Deterministic per (fetcher, payload), different across fetchers: rendezvous hashing.

    Every fetcher ranks the holders by sha256(own id || holder id || payload hash), so N peers pulling the
    same payload start at different holders (spreading upload) while each one's order is reproducible and
    stable when holders join. Ourselves and duplicates are dropped.
    """
    unique = {h for h in holders if h != own_id}
    own = own_id.to_bytes()
    return sorted(unique, key=lambda h: hashlib.sha256(own + h.to_bytes() + payload_hash).digest())
