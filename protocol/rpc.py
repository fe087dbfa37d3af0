"""One request, one reply, on a fresh libp2p stream: the framing the manifest and state protocols share.

Both directions are length-prefixed and capped *before* any buffer exists, because both sides are untrusted:
  request = length:u32 | body[length]                     (body <= the server's request cap)
  reply   = status:u8 | length:u64 | body[length]         (body <= the caller's reply cap; 0 unless OK)

The server's handler turns a request body into ``(status, body)``; any exception in it is answered with
``ERROR`` (never a crash, never a hung stream). Bodies are read with :func:`.wire.read_exactly` in bounded
chunks, and every call is bounded by a timeout.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from enum import IntEnum

import trio
from libp2p.abc import INetStream
from libp2p.custom_types import TProtocol
from libp2p.network.stream.exceptions import StreamEOF
from libp2p.peer.id import ID

from .errors import MalformedReplyError, TransferError, TransferTimeoutError, TransportError
from .host import P2PHost
from .wire import ShortReadError, read_exactly, reply_within, reset_quietly, write_reply

logger = logging.getLogger(__name__)

_REQ = struct.Struct(">I")
_REPLY = struct.Struct(">BQ")


class RpcStatus(IntEnum):
    OK = 0
    NOT_FOUND = 1
    BAD_REQUEST = 2
    BUSY = 3
    NOT_READY = 4
    ERROR = 5


class RpcRefusedError(TransferError):
    """The remote answered with a non-OK status; ``status`` says which."""

    def __init__(self, status: int, peer: str) -> None:
        name = RpcStatus(status).name if status in RpcStatus._value2member_map_ else str(status)
        super().__init__(f"remote refused the request ({name})", peer)
        self.status = status


Handler = Callable[[ID, bytes], Awaitable[tuple[RpcStatus, bytes]]]


def install_rpc(
    host: P2PHost, protocol: TProtocol, handler: Handler, *, max_request: int, timeout: float
) -> None:
    """Serve ``protocol``: read one capped request, answer with the handler's (status, body)."""

    async def serve(stream: INetStream) -> None:
        remote = stream.muxed_conn.peer_id
        try:
            with trio.fail_after(timeout):
                (length,) = _REQ.unpack(await read_exactly(stream, _REQ.size))
                if length > max_request:
                    await _reply(stream, RpcStatus.BAD_REQUEST, b"")
                    return
                body = await read_exactly(stream, length)
        except (ShortReadError, StreamEOF, trio.TooSlowError):
            await reset_quietly(stream)
            return
        try:
            status, reply = await handler(remote, body)
        except Exception as exc:
            logger.warning("%s handler failed for %s: %r", protocol, remote, exc)
            status, reply = RpcStatus.ERROR, b""
        body_out = reply if status == RpcStatus.OK else b""
        await reply_within(stream, timeout, _REPLY.pack(int(status), len(body_out)), body_out)

    host.set_handler(protocol, serve)


async def _reply(stream: INetStream, status: RpcStatus, body: bytes) -> None:
    await write_reply(stream, _REPLY.pack(int(status), len(body)), body)


async def call(
    host: P2PHost, peer_id: ID, protocol: TProtocol, request: bytes, *, max_reply: int, timeout: float
) -> bytes:
    """Send ``request`` and return the OK reply body; typed TransportError on anything else."""
    peer = str(peer_id)
    async with client_stream(host, peer_id, protocol, timeout=timeout, what=f"{protocol} call") as stream:
        await stream.write(_REQ.pack(len(request)) + request)
        status, length = _REPLY.unpack(await read_exactly(stream, _REPLY.size))
        if status != RpcStatus.OK:
            raise RpcRefusedError(status, peer)
        if length > max_reply:
            raise MalformedReplyError(f"reply of {length} bytes exceeds the cap {max_reply}", peer)
        return await read_exactly(stream, length)


@asynccontextmanager
async def client_stream(host: P2PHost, peer_id: ID, protocol: TProtocol, *, timeout: float,
                        what: str) -> AsyncIterator[INetStream]:
    """A fresh stream for one request/reply exchange, closed after the block, the whole of it bounded by
    ``timeout``. Whatever goes wrong inside (our typed errors, a timeout, a truncated reply, a reset or any
    muxer error from py-libp2p) resets the stream and leaves as a typed TransportError naming the peer, so
    every client of every protocol fails the same way and a caller only ever catches TransportError."""
    peer = str(peer_id)
    stream: INetStream | None = None
    try:
        with trio.fail_after(timeout):
            stream = await host.open_stream(peer_id, protocol)
            yield stream
            await stream.close()
    except (TransportError, trio.Cancelled):  # cancelled: a raced fetch lost; the holder stops sending
        await _abort(stream)
        raise
    except trio.TooSlowError as exc:
        await _abort(stream)
        raise TransferTimeoutError(f"{what} exceeded {timeout:g}s", peer) from exc
    except (ShortReadError, StreamEOF) as exc:
        await _abort(stream)
        raise MalformedReplyError(f"truncated reply: {exc!r}", peer) from exc
    except Exception as exc:  # stream resets and muxer errors from py-libp2p
        await _abort(stream)
        raise TransferError(f"{what} stream failed: {type(exc).__name__}: {exc}", peer) from exc


async def _abort(stream: INetStream | None) -> None:
    if stream is not None:
        await reset_quietly(stream)
