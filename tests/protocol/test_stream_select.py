"""Opening a stream in one write (protocol/stream_select.py), with real hosts on loopback: the header and
the protocol leave in one muxer frame, the stream then works, a protocol the peer does not speak fails as
before, and a proposal of several protocols still negotiates the old way."""

from __future__ import annotations

import pytest
import trio
from distro_node.protocol import muxer_guard
from distro_node.protocol.stream_select import OneWriteSelect
from distro_node.protocol.testing import WAIT, start_hosts
from distro_node.protocol.wire import read_exactly
from libp2p.abc import INetStream
from libp2p.custom_types import TProtocol
from libp2p.host.exceptions import StreamFailure

ECHO = TProtocol("/distro/test-echo/1")
HEADER = b"/multistream/1.0.0\n"


async def _echo(stream: INetStream) -> None:
    data = await read_exactly(stream, 5)
    await stream.write(data)
    await stream.close()


@pytest.mark.network
def test_one_protocol_is_proposed_in_the_headers_frame_and_the_stream_works(
        monkeypatch: pytest.MonkeyPatch) -> None:
    frames: list[bytes] = []
    original = muxer_guard.GuardedYamux._write_frame

    async def spy(self: muxer_guard.GuardedYamux, data: bytes) -> None:
        frames.append(bytes(data))
        await original(self, data)

    monkeypatch.setattr(muxer_guard.GuardedYamux, "_write_frame", spy)

    async def body() -> None:
        async with start_hosts(2) as (a, b):
            b.set_handler(ECHO, _echo)
            await a.connect(b.peer_id, b.addrs())
            assert isinstance(a.libp2p.multiselect_client, OneWriteSelect)  # type: ignore[attr-defined]
            frames.clear()
            with trio.fail_after(WAIT):
                stream = await a.open_stream(b.peer_id, ECHO)
                await stream.write(b"hello")
                assert await read_exactly(stream, 5) == b"hello"
            proposals = [f for f in frames if HEADER in f and ECHO.encode() + b"\n" in f]
            assert proposals, "no frame carried the header and the protocol together"

    trio.run(body)


@pytest.mark.network
def test_a_protocol_the_peer_does_not_speak_fails_and_several_still_negotiate() -> None:
    async def body() -> None:
        async with start_hosts(2) as (a, b):
            b.set_handler(ECHO, _echo)
            await a.connect(b.peer_id, b.addrs())
            with trio.fail_after(WAIT):
                with pytest.raises(StreamFailure) as failed:
                    await a.libp2p.new_stream(b.peer_id, [TProtocol("/distro/nobody/1")])
                assert "not supported" in str(failed.value.__cause__)
                stream = await a.libp2p.new_stream(b.peer_id, [TProtocol("/distro/nobody/1"), ECHO])
                assert stream.get_protocol() == ECHO
                await stream.write(b"again")
                assert await read_exactly(stream, 5) == b"again"

    trio.run(body)
