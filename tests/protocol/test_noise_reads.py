"""Noise messages read paced or with the socket's low-water mark (protocol/noise_reads.py), over a real TCP
pair.

The reader is py-libp2p's own packet reader with the body read changed, so these tests drive it as a Noise
session does: a 2-byte length, then the body, here arriving in parts the way a shaped uplink delivers it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing
from distro_node.protocol.host_config import HostConfig
from distro_node.protocol.noise_reads import (
    PACE_FROM,
    PACE_SHARE,
    PacedNoiseReader,
    install_noise_reads,
    pace,
)
from libp2p.io.exceptions import IncompleteReadError
from libp2p.io.trio import TrioTCPStream
from libp2p.network.connection.raw_connection import RawConnection
from libp2p.security.noise import io as noise_io

pytestmark = pytest.mark.network


@contextlib.asynccontextmanager
async def tcp_pair() -> AsyncIterator[tuple[trio.SocketStream, trio.SocketStream]]:
    """A connected pair of TCP streams on loopback, port chosen by the kernel."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    try:
        yield client, server
    finally:
        for s in (client, server, *listeners):
            await s.aclose()


def low_water(stream: trio.SocketStream) -> int:
    return int(stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT))


def reader_of(stream: trio.SocketStream) -> PacedNoiseReader:
    return PacedNoiseReader(RawConnection(TrioTCPStream(stream), initiator=False))


async def trickle(sender: trio.SocketStream, message: bytes, parts: int, gap: float) -> None:
    """``message`` with its length prefix, in ``parts`` sends ``gap`` seconds apart (a slow line)."""
    data = struct.pack(">H", len(message)) + message
    step = -(-len(data) // parts)
    for start in range(0, len(data), step):
        await sender.send_all(data[start : start + step])
        await trio.sleep(gap)


async def read_slow_message(sender: trio.SocketStream, reader: PacedNoiseReader, message: bytes,
                            parts: int) -> None:
    """Have ``reader`` read ``message`` trickled in ``parts`` 30 ms apart: the connection's rate is then a
    slow line's."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trickle, sender, message, parts, 0.03)
        assert await reader.read_msg() == message


async def read_while_sending(parts: list[bytes], expected_mark_after_first: int,
                             slow_first: bytes | None = None) -> bytes:
    """Send ``parts`` one by one to a reader that is waiting for the message; after the first part, check
    the mark the waiting reader left on its socket. Returns what the reader read. ``slow_first``: a message
    the reader reads first, trickled in 4 parts (read_slow_message)."""
    async with tcp_pair() as (sender, receiver):
        reader = reader_of(receiver)
        got: list[bytes] = []

        async def read() -> None:
            got.append(await reader.read_msg())

        with trio.fail_after(10):
            if slow_first is not None:
                await read_slow_message(sender, reader, slow_first, 4)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read)
                await sender.send_all(parts[0])
                await trio.testing.wait_all_tasks_blocked()
                assert got == []
                assert low_water(receiver) == expected_mark_after_first
                for part in parts[1:]:
                    await sender.send_all(part)
        assert low_water(receiver) == 1
        return got[0]


def test_a_long_message_arriving_in_parts_is_read_whole_with_the_mark_set_while_it_waits() -> None:
    message = bytes(range(256)) * 200  # 51,200 bytes
    parts = [struct.pack(">H", len(message)) + message[:1000]]
    parts += [message[start : start + 5000] for start in range(1000, len(message), 5000)]
    # waiting for the rest in one wake-up
    assert trio.run(read_while_sending, parts, len(message) - 1000) == message


def test_a_short_message_is_read_without_the_mark() -> None:
    parts = [struct.pack(">H", 100) + bytes(10), bytes(90)]
    assert trio.run(read_while_sending, parts, 1) == bytes(100)


def test_a_connection_closed_inside_a_message_is_an_incomplete_read_and_the_mark_is_reset() -> None:
    async def body() -> None:
        async with tcp_pair() as (sender, receiver):
            reader = reader_of(receiver)
            with trio.fail_after(10):
                await sender.send_all(struct.pack(">H", 40_000) + bytes(20_000))
                await sender.aclose()
                with pytest.raises(IncompleteReadError, match="20000 bytes into a 40000-byte"):
                    await reader.read_msg()
            assert low_water(receiver) == 1

    trio.run(body)


def test_a_cancelled_read_puts_the_mark_back() -> None:
    async def body() -> None:
        async with tcp_pair() as (sender, receiver):
            reader = reader_of(receiver)
            with trio.fail_after(10):
                await sender.send_all(struct.pack(">H", 30_000) + bytes(100))
                with trio.move_on_after(0.2) as scope:
                    await reader.read_msg()
            assert scope.cancelled_caught
            assert low_water(receiver) == 1

    trio.run(body)


class _NotTcp:
    """A raw connection that is not a TCP socket (a relayed circuit's stream): read as py-libp2p does."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def read(self, n: int | None = None) -> bytes:
        take = min(n or 1000, 1000)  # a part at a time, as a stream over a circuit hands it out
        chunk, self.data = self.data[:take], self.data[take:]
        return chunk

    async def write(self, data: bytes) -> None:
        raise AssertionError("not written")

    async def close(self) -> None:
        return None


def test_a_connection_without_a_tcp_socket_reads_as_before() -> None:
    async def body() -> None:
        message = bytes(range(200)) * 100
        conn: Any = _NotTcp(struct.pack(">H", len(message)) + message)
        assert await PacedNoiseReader(conn).read_msg() == message

    trio.run(body)


def test_installing_makes_noise_sessions_build_this_reader_with_its_wait() -> None:
    try:
        install_noise_reads(0.2)
        assert noise_io.NoisePacketReadWriter is PacedNoiseReader
        assert PacedNoiseReader.max_wait == 0.2
        with pytest.raises(ValueError, match="max_wait must be in"):
            install_noise_reads(-1.0)
    finally:
        install_noise_reads(HostConfig().read_pace_max_wait)
    assert PacedNoiseReader.max_wait == HostConfig().read_pace_max_wait


def test_pace_waits_a_share_of_the_rest_at_the_last_rate_capped_and_not_on_fast_or_new_connections() -> None:
    assert pace(10_000, None, 0.05) is None  # no long message yet: the mark
    assert pace(10_000, 1e-6, 0.0) is None  # pacing off: the mark
    assert pace(10_000, 0.5 * PACE_FROM / 10_000, 0.05) is None  # due within PACE_FROM: the mark
    assert pace(10_000, 4e-6, 0.05) == pytest.approx(PACE_SHARE * 10_000 * 4e-6)  # 2 Mbit/s-ish: a share
    assert pace(60_000, 4e-5, 0.05) == 0.05  # slower still: the cap


def test_after_a_slow_message_the_next_is_read_paced_without_the_mark_and_whole() -> None:
    async def body() -> None:
        async with tcp_pair() as (sender, receiver):
            reader = reader_of(receiver)
            first, second = bytes(range(256)) * 80, bytes(reversed(range(256))) * 80  # 20,480 bytes each
            marks: list[int] = []

            async def watch_mark() -> None:
                for _ in range(200):  # bounded: 200 looks, 5 ms apart
                    marks.append(low_water(receiver))
                    await trio.sleep(0.005)

            with trio.fail_after(10):
                await read_slow_message(sender, reader, first, 8)  # the connection's first: with the mark
                rate = reader._seconds_per_byte
                assert rate is not None and rate > 0.1 / len(first)  # ~0.2 s for 20 KB: a slow line
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(trickle, sender, second, 8, 0.03)
                    nursery.start_soon(watch_mark)
                    assert await reader.read_msg() == second
                    nursery.cancel_scope.cancel()
            assert marks and set(marks) == {1}  # paced: the mark never set while it waited
            assert low_water(receiver) == 1

    trio.run(body)


def test_with_pacing_off_the_next_slow_message_waits_with_the_mark() -> None:
    message = bytes(20_000)
    parts = [struct.pack(">H", len(message)) + message[:1000], message[1000:]]
    try:
        PacedNoiseReader.max_wait = 0.0
        assert trio.run(read_while_sending, parts, len(message) - 1000, message) == message
    finally:
        PacedNoiseReader.max_wait = HostConfig().read_pace_max_wait
