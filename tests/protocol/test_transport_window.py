"""A peer that sends past yamux's receive window is cut off, not buffered (protocol/muxer_guard.py).

The attacker is a real host of ours whose stream ignores the window it was given (its send window is set
far above what the receiver granted), writing to a protocol whose handler never reads: what py-libp2p 0.8.1
alone would have buffered without limit.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from distro_node.protocol.host import P2PHost, open_host
from distro_node.protocol.muxer_guard import PER_STREAM_BYTES, GuardedBuffers
from distro_node.protocol.testing import NO_PX_LOOP, WAIT
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.network.stream.net_stream import INetStream

pytestmark = pytest.mark.network

SINK = TProtocol("/distro-test/sink/1.0.0")
ECHO = TProtocol("/distro-test/echo/1.0.0")
CHUNK = 1 << 20


@contextlib.asynccontextmanager
async def connected() -> AsyncIterator[tuple[P2PHost, P2PHost]]:
    """Two hosts of ours, the second dialed to the first."""
    async with (
        open_host(create_new_key_pair(), NO_PX_LOOP) as server,
        open_host(create_new_key_pair(), NO_PX_LOOP) as client,
    ):
        with trio.fail_after(WAIT):
            await client.dial(str(server.addrs()[0]))
        yield server, client


def muxed(host: P2PHost, peer: P2PHost) -> Any:
    """``host``'s yamux connection to ``peer``."""
    return next(iter(host.libp2p.get_network().get_connections(peer.peer_id))).muxed_conn


def test_a_stream_pushed_past_the_window_closes_the_connection_within_the_cap() -> None:
    async def body() -> None:
        held = trio.Event()

        async def never_reads(stream: INetStream) -> None:
            held.set()
            await trio.sleep_forever()

        async with connected() as (victim, attacker):
            victim.libp2p.set_stream_handler(SINK, never_reads)
            with trio.fail_after(WAIT):
                stream = await attacker.open_stream(victim.peer_id, SINK)
                await stream.write(b"x")
                await held.wait()
            conn = muxed(victim, attacker)
            buffers = conn.stream_buffers
            assert isinstance(buffers, GuardedBuffers), (type(conn), type(buffers))
            lost = victim.lost_peers()
            stream.muxed_stream.send_window = 1 << 40  # type: ignore[attr-defined]
            sent = 0
            with trio.move_on_after(60):
                try:
                    while sent < 4 * PER_STREAM_BYTES:  # bounded: twice what the cap lets through
                        await stream.write(b"y" * CHUNK)
                        sent += CHUNK
                        await trio.sleep(0)
                except Exception:  # the victim closed the connection under us: what we want
                    pass
            with trio.fail_after(WAIT):
                assert await lost.receive() == attacker.peer_id
            assert buffers.overruns >= 1
            assert buffers.total() <= PER_STREAM_BYTES
            assert sent <= 2 * PER_STREAM_BYTES  # cut off near the cap, not after everything was sent

    trio.run(body)


def test_writes_cancelled_mid_stream_leave_the_connection_whole() -> None:
    """A cancelled write must not break the connection under the streams that share it: py-libp2p alone
    let the cancel land inside the Noise write, and the receiver's next decrypt failed and dropped the
    connection (muxer_guard.py's docstring). Cancels at many points of a 1 MiB write, then an echo."""

    async def body() -> None:
        async def drains(stream: INetStream) -> None:
            with contextlib.suppress(Exception):  # the client resets each stream: the read then raises
                while await stream.read(CHUNK):
                    pass

        async def echoes(stream: INetStream) -> None:
            await stream.write(await stream.read(16))
            await stream.close()

        async with connected() as (server, client):
            server.libp2p.set_stream_handler(SINK, drains)
            server.libp2p.set_stream_handler(ECHO, echoes)
            lost = client.lost_peers()
            cancelled = 0
            for attempt in range(40):  # bounded: 40 writes, each cut after a few ms at most
                stream = await client.open_stream(server.peer_id, SINK)
                with trio.move_on_after(0.0005 * (attempt % 8)) as scope:
                    await stream.write(b"z" * CHUNK)
                cancelled += scope.cancelled_caught
                await stream.reset()
            assert cancelled >= 10, "too few writes were cut off to test anything"
            with trio.fail_after(WAIT):
                stream = await client.open_stream(server.peer_id, ECHO)
                await stream.write(b"still connected!")
                assert await stream.read(16) == b"still connected!"
            with pytest.raises(trio.WouldBlock):
                lost.receive_nowait()  # the connection never dropped

    trio.run(body)


def test_a_reader_in_small_chunks_grants_its_window_back_in_halves() -> None:
    """8 MiB read 4 KiB at a time: py-libp2p alone answered every read with a WINDOW_UPDATE (2,048 frames
    written back, each encrypted and handled by the sender); granted once half the window was read, it is
    a few dozen, and every byte still arrives."""
    total, small = 8 * CHUNK, 4096

    async def body() -> None:
        got = trio.Event()
        received = [0]

        async def reads_small(stream: INetStream) -> None:
            while received[0] < total:
                part = await stream.read(small)
                if not part:
                    break
                received[0] += len(part)
            got.set()

        async with connected() as (server, client):
            server.libp2p.set_stream_handler(SINK, reads_small)
            with trio.fail_after(WAIT):
                stream = await client.open_stream(server.peer_id, SINK)
            conn = muxed(server, client)
            updates = [0]
            write_frame = conn._write_frame

            async def counting(data: bytes) -> None:
                updates[0] += data[1] == 1  # yamux header: version, then type (1: WINDOW_UPDATE)
                await write_frame(data)

            conn._write_frame = counting
            with trio.fail_after(4 * WAIT):
                for _ in range(total // CHUNK):
                    await stream.write(b"w" * CHUNK)
                await got.wait()
            assert received[0] == total
            assert updates[0] <= total // (128 * 1024), updates[0]  # at most one per half initial window

    trio.run(body)
