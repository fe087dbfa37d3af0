"""What a TCP connection still holds for its peer (protocol/send_queue.py), over real loopback sockets and a
real py-libp2p connection."""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing
from distro_node.protocol.send_queue import (
    DRAINED_BYTES,
    queued_bytes,
    send_queue_socket,
    until_acknowledged,
    until_drained,
)
from distro_node.protocol.testing import WAIT, start_hosts
from libp2p.abc import INetStream
from libp2p.custom_types import TProtocol
from tcp_support import tcp_pair

pytestmark = pytest.mark.network

CHUNK = 64 * 1024


async def fill(stream: trio.SocketStream) -> int:
    """Write until the kernel takes no more (the reader is not reading): the bytes it took."""
    sent = 0
    for _ in range(4096):  # bounded: a loopback pair holds a few MB at most
        try:
            sent += os.write(stream.socket.fileno(), b"x" * CHUNK)  # trio's socket is non-blocking
        except BlockingIOError:
            return sent
    raise AssertionError("the kernel never stopped taking bytes")


def test_a_peer_that_does_not_read_leaves_bytes_queued_until_the_cap() -> None:
    async def body() -> None:
        async with tcp_pair() as (sender, _):
            sent = await fill(sender)
            left = queued_bytes(sender.socket)
            assert left is not None and DRAINED_BYTES < left <= sent
            with trio.fail_after(WAIT):
                started = trio.current_time()
                assert not await until_drained(sender.socket, rate=1e6, cap=0.3)
                assert 0.3 <= trio.current_time() - started < 2.0

    trio.run(body)


def test_the_wait_ends_once_the_peer_has_read_what_was_queued() -> None:
    async def body() -> None:
        async with tcp_pair() as (sender, receiver):
            sent = await fill(sender)
            done: list[bool] = []

            async def wait() -> None:
                done.append(await until_drained(sender.socket, rate=10e6, cap=WAIT))

            with trio.fail_after(WAIT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(wait)
                    await trio.testing.wait_all_tasks_blocked()
                    assert not done  # still queued: nobody read
                    got = 0
                    while got < sent:  # bounded: every receive returns bytes or the test times out
                        got += len(await receiver.receive_some(CHUNK))
            assert done == [True]
            left = queued_bytes(sender.socket)
            assert left is not None and left <= DRAINED_BYTES

    trio.run(body)


def test_a_closed_socket_or_an_unknown_rate_does_not_wait() -> None:
    async def body() -> None:
        async with tcp_pair() as (sender, _):
            await fill(sender)
            with trio.fail_after(1):
                assert await until_drained(sender.socket, rate=0.0, cap=WAIT)
            sender.socket.close()
            assert queued_bytes(sender.socket) is None
            with trio.fail_after(1):
                assert await until_drained(sender.socket, rate=1e6, cap=WAIT)

    trio.run(body)


def test_a_libp2p_stream_is_followed_down_to_its_tcp_socket() -> None:
    protocol = TProtocol("/distro/test-send-queue/1.0.0")

    async def body() -> None:
        async with start_hosts(2) as (a, b):
            served: list[INetStream] = []
            seen = trio.Event()

            async def handler(stream: INetStream) -> None:
                served.append(stream)
                await stream.write(b"y" * CHUNK)
                with trio.fail_after(WAIT):
                    assert await until_acknowledged(stream, rate=1e6, cap=WAIT)
                seen.set()
                await stream.read(1)

            b.set_handler(protocol, handler)
            with trio.fail_after(WAIT):
                await a.bootstrap([str(b.addrs()[0])])
                stream = await a.open_stream(b.peer_id, protocol)
                await stream.write(b"?")
                await seen.wait()
                sock = send_queue_socket(served[0])
                assert sock is not None and sock.getpeername()[0] == "127.0.0.1"
                assert send_queue_socket(stream) is not None
                await stream.close()

    trio.run(body)
