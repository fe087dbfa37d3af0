"""Bounded reads and replies (protocol/wire.py) against in-memory streams."""

from __future__ import annotations

import pytest
import trio
from distro_node.protocol.wire import WRITE_CHUNK, BufferedReader, ShortReadError, read_exactly, write_reply


class _Frames:
    """A stream that returns one queued frame per read, cut to what was asked for, as a muxer does."""

    def __init__(self, frames: list[bytes]) -> None:
        self.frames, self.reads = frames, 0

    async def read(self, n: int | None = None) -> bytes:
        self.reads += 1
        if not self.frames:
            return b""
        frame = self.frames.pop(0)
        if n is not None and len(frame) > n:
            frame, rest = frame[:n], frame[n:]
            self.frames.insert(0, rest)
        return frame


class _Writes:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    async def write(self, data: bytes) -> None:
        self.writes.append(data)

    async def close(self) -> None:
        self.closed = True


def test_fields_of_one_frame_are_read_from_one_stream_read() -> None:
    frames = _Frames([b"\x00" + b"\x01\x02\x03\x04" + b"tail", b"next"])
    reader = BufferedReader(frames)

    async def body() -> list[bytes]:
        return [await read_exactly(reader, 1), await read_exactly(reader, 4), await read_exactly(reader, 6)]

    assert trio.run(body) == [b"\x00", b"\x01\x02\x03\x04", b"tailne"]
    assert frames.reads == 2


def test_a_buffered_read_never_hands_out_more_than_asked_and_ends_short_at_eof() -> None:
    reader = BufferedReader(_Frames([b"abc"]), chunk=2)

    async def body() -> None:
        assert await reader.read(1) == b"a"
        assert await reader.read(5) == b"b"  # what the chunk held
        with pytest.raises(ShortReadError):
            await read_exactly(reader, 2)

    trio.run(body)
    with pytest.raises(ValueError):
        BufferedReader(_Frames([]), chunk=0)


def test_a_reply_header_goes_out_with_the_first_chunk_of_its_body() -> None:
    out = _Writes()
    body = bytes(range(256)) * (WRITE_CHUNK // 256 + 10)
    trio.run(write_reply, out, b"HDR", body)
    assert out.writes[0] == b"HDR" + body[:WRITE_CHUNK]
    assert b"".join(out.writes) == b"HDR" + body and len(out.writes) == 2 and out.closed
    small = _Writes()
    trio.run(write_reply, small, b"\x00", b"")
    assert small.writes == [b"\x00"]
