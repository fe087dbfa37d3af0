"""Bounded reads from libp2p streams.

py-libp2p's ``stream.read(n)`` returns *up to* n bytes (whatever the muxer has buffered) and raises
``StreamEOF`` at end of stream, so every fixed-size field needs a loop. Centralising the loop here keeps one
rule everywhere: never ask the stream for more than a small chunk, and never accumulate more than the caller
said it is prepared to hold.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import trio
from libp2p.abc import INetStream
from libp2p.network.stream.exceptions import StreamEOF

from .errors import BadRequestError

# Matches the yamux frame payload limit in 0.8.1 (64 KiB): asking for more never returns more at once.
READ_CHUNK = 64 * 1024

logger = logging.getLogger(__name__)
T = TypeVar("T")


def refuse_msgpack_ext(code: int, data: bytes) -> Any:
    """``ext_hook`` for unpacking a stranger's msgpack: extension types are never part of our formats."""
    raise ValueError(f"msgpack extension type {code} is not allowed")


class ByteReader(Protocol):
    """The read half of a libp2p stream (``INetStream``), narrowed so fakes can be used in unit tests."""

    async def read(self, n: int | None = None) -> bytes: ...


class ShortReadError(Exception):
    """The stream ended before the expected number of bytes arrived."""

    def __init__(self, expected: int, received: int) -> None:
        super().__init__(f"stream ended after {received} of {expected} bytes")
        self.expected = expected
        self.received = received


async def read_exactly(stream: ByteReader, n: int, chunk: int = READ_CHUNK) -> bytes:
    """Read exactly ``n`` bytes; the caller has already checked ``n`` against its cap."""
    if n < 0:
        raise ValueError(f"negative read length {n}")
    buf = bytearray()
    while len(buf) < n:
        try:
            part = await stream.read(min(chunk, n - len(buf)))
        except StreamEOF as exc:
            raise ShortReadError(n, len(buf)) from exc
        if not part:
            raise ShortReadError(n, len(buf))
        if len(part) > n - len(buf):
            # A reader that returns more than asked would let the buffer exceed the caller's cap.
            raise ShortReadError(n, len(buf) + len(part))
        buf += part
    return bytes(buf)


class BufferedReader:
    """A stream's reads taken a muxer frame at a time, fields handed out of that buffer.

    Why: a small reply (status, header, have-map) is one frame, and each field read straight from the
    stream went through py-libp2p's stream, muxer and their locks again (bench/swarm_cpu.py). Holds at most
    ``chunk`` bytes it was not asked for; every read of a stream must then go through its one reader."""

    def __init__(self, stream: ByteReader, chunk: int = READ_CHUNK) -> None:
        if chunk < 1:
            raise ValueError("BufferedReader chunk must be >= 1")
        self._stream = stream
        self._chunk = chunk
        self._buf = b""
        self._at = 0

    async def read(self, n: int | None = None) -> bytes:
        if self._at >= len(self._buf):
            self._buf, self._at = await self._stream.read(self._chunk), 0
            if not self._buf:
                return b""
        end = len(self._buf) if n is None else min(len(self._buf), self._at + n)
        part = self._buf[self._at : end]
        self._at = end
        return part


class Resettable(Protocol):
    async def reset(self) -> None: ...


async def reset_quietly(stream: Resettable) -> None:
    """Reset a stream even from a cancelled scope; a failed reset is not worth an error on top."""
    with trio.CancelScope(shield=True), trio.move_on_after(2):
        try:
            await stream.reset()
        except Exception as exc:
            logger.debug("stream reset failed: %r", exc)


class ByteWriter(Protocol):
    async def write(self, data: bytes) -> None: ...

    async def close(self) -> None: ...


class ByteStream(ByteReader, Protocol):
    async def write(self, data: bytes) -> None: ...


class BufferedStream(BufferedReader):
    """A :class:`BufferedReader` that also writes, for a session whose side owns every read and write."""

    def __init__(self, stream: ByteStream, chunk: int = READ_CHUNK) -> None:
        super().__init__(stream, chunk)
        self._writer = stream

    async def write(self, data: bytes) -> None:
        await self._writer.write(data)


WRITE_CHUNK = 256 * 1024


async def write_reply(stream: ByteWriter, header: bytes, body: bytes = b"", *, close: bool = True) -> None:
    """Write a reply header, then ``body`` in bounded chunks (so one huge write never sits in the muxer's
    window at once), then close our side (unless more replies follow on the stream: ``close=False``).
    Shared by every request/reply protocol of ours. The header goes out with the first chunk: written
    apart, it was a muxer frame of its own (one more encrypted message and send on each side), and the
    small replies of the pieces protocol are most of its frames (bench/swarm_cpu.py)."""
    view = memoryview(body)
    await stream.write(header + bytes(view[:WRITE_CHUNK]))
    for offset in range(WRITE_CHUNK, len(body), WRITE_CHUNK):
        await stream.write(bytes(view[offset : offset + WRITE_CHUNK]))
    if close:
        await stream.close()


class ReplyStream(ByteWriter, Resettable, Protocol):
    pass


async def reply_within(stream: ReplyStream, timeout: float, header: bytes, body: bytes = b"", *,
                       close: bool = True) -> bool:
    """:func:`write_reply` bounded by ``timeout``; a reader that does not take it in time has the stream
    reset (a stalled or hostile reader never holds a server task). Returns whether the reply went out."""
    with trio.move_on_after(timeout) as scope:
        await write_reply(stream, header, body, close=close)
    if scope.cancelled_caught:
        await reset_quietly(stream)
        return False
    return True


async def read_opening(stream: INetStream, read: Callable[[], Awaitable[T]], timeout: float,
                       refuse: Callable[[], Awaitable[object]], what: str) -> T | None:
    """A request's opening as ``read`` parses it from ``stream``, within ``timeout``. None when it was
    malformed (``refuse`` answers it) or did not come in time (the stream is reset: a stranger that opens a
    stream and sends nothing holds no server task of ours); the caller counts either as a bad request.
    The payload and pieces servers open this way."""
    try:
        with trio.fail_after(timeout):
            return await read()
    except BadRequestError as exc:
        logger.debug("bad %s from %s: %s", what, stream.muxed_conn.peer_id, exc)
        await refuse()
    except trio.TooSlowError:
        await reset_quietly(stream)
    return None
