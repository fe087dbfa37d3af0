"""Bounded reads and replies (protocol/wire.py) against in-memory streams."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest
import trio
import trio.testing
from distro_node.protocol.errors import BadRequestError
from distro_node.protocol.wire import (
    WRITE_CHUNK,
    BufferedReader,
    ShortReadError,
    read_exactly,
    read_opening,
    write_reply,
)
from libp2p.abc import INetStream


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


class _Opened:
    """The stream of a request being opened: who sent it, and whether it was reset."""

    def __init__(self) -> None:
        self.muxed_conn = SimpleNamespace(peer_id="stranger")
        self.was_reset = False

    async def reset(self) -> None:
        self.was_reset = True


@pytest.mark.parametrize("arrives", ["well-formed", "malformed", "never"])
def test_a_request_opening_is_read_refused_or_cut_off(arrives: str) -> None:
    """Every server's opening: parsed within the timeout; a malformed one answered by the refusal, one that
    never comes cut off by a reset; the caller gets None for both."""
    stream, refused = _Opened(), []

    async def read() -> str:
        if arrives == "malformed":
            raise BadRequestError("version 9")
        if arrives == "never":
            await trio.sleep_forever()
        return "opening"

    async def refuse() -> None:
        refused.append(True)

    async def body() -> str | None:
        return await read_opening(cast(INetStream, stream), read, 5.0, refuse, "test request")

    got = trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0))
    assert got == ("opening" if arrives == "well-formed" else None)
    assert refused == ([True] if arrives == "malformed" else [])
    assert stream.was_reset == (arrives == "never")
