"""Hostile payload servers and clients: 2 GiB length prefix (N2), wrong hash, truncation, garbage requests."""

from __future__ import annotations

import os
import struct
from collections.abc import Awaitable, Callable

import pytest
import trio
from distro_node.protocol.errors import (
    HashMismatchError,
    MalformedReplyError,
    PayloadTooLargeError,
)
from distro_node.protocol.host import P2PHost
from distro_node.protocol.payload_fetch import fetch_payload
from distro_node.protocol.store import PayloadStore, payload_digest
from distro_node.protocol.testing import WAIT, start_hosts
from distro_node.protocol.transfer import (
    PAYLOAD_PROTOCOL,
    PayloadRequest,
    PayloadServer,
    Status,
    TransferConfig,
    fetch_from,
    read_request,
)
from libp2p.abc import INetStream

RUN = bytes.fromhex("ef" * 32)
CAP = 8 * 1024 * 1024
CFG = TransferConfig(max_payload_bytes=CAP, attempt_timeout=WAIT)
HEDGE = TransferConfig(max_payload_bytes=CAP, attempt_timeout=60.0, hedge_after=0.5)
REPLY = struct.Struct(">BQ")
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


def install_evil(host: P2PHost, reply: Callable[[INetStream, PayloadRequest], Awaitable[None]]) -> None:
    async def handler(stream: INetStream) -> None:
        await reply(stream, await read_request(stream))

    host.set_handler(PAYLOAD_PROTOCOL, handler)


@pytest.mark.network
def test_2gib_length_prefix_is_refused_before_allocation() -> None:
    async def body() -> None:
        async with start_hosts(2) as (evil, victim):
            reset_seen = trio.Event()
            junk = b"\xaa" * (1024 * 1024)

            async def flood(stream: INetStream, _req: PayloadRequest) -> None:
                await stream.write(REPLY.pack(Status.OK, 2 * 1024**3))
                try:
                    while True:
                        await stream.write(junk)
                except Exception:
                    reset_seen.set()  # the victim reset the stream: we cannot push more
                    raise

            install_evil(evil, flood)
            await victim.dial(str(evil.addrs()[0]))
            req = PayloadRequest(RUN, 1, payload_digest(b"anything"))

            peak = before = rss_bytes()

            async def sample_rss() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, rss_bytes())
                    await trio.sleep(0.005)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(sample_rss)
                with pytest.raises(PayloadTooLargeError):
                    await fetch_from(victim, evil.peer_id, req, config=CFG)
                with trio.fail_after(WAIT):
                    await reset_seen.wait()
                nursery.cancel_scope.cancel()
            growth = max(peak, rss_bytes()) - before
            print(f"RSS growth under a 2 GiB length prefix: {growth / 2**20:.2f} MiB (cap {CAP >> 20} MiB)")
            assert growth < 2 * CAP, f"RSS grew by {growth / 2**20:.1f} MiB"

    trio.run(body)


@pytest.mark.network
def test_wrong_hash_reply_rejected_and_next_holder_used() -> None:
    async def body() -> None:
        async with start_hosts(3) as (evil, honest, client):
            data = os.urandom(300_000)
            store = PayloadStore(RUN)
            digest = store.put(4, data)
            PayloadServer(honest, store, CFG).install()

            async def lie(stream: INetStream, _req: PayloadRequest) -> None:
                fake = os.urandom(len(data))
                await stream.write(REPLY.pack(Status.OK, len(fake)) + fake)
                await stream.close()

            install_evil(evil, lie)
            for h in (evil, honest):
                await client.dial(str(h.addrs()[0]))
            req = PayloadRequest(RUN, 4, digest)
            with pytest.raises(HashMismatchError):
                await fetch_from(client, evil.peer_id, req, config=CFG)
            client_store = PayloadStore(RUN)
            got = await fetch_payload(
                client, req, [evil.peer_id, honest.peer_id], store=client_store, config=CFG, spread=False
            )
            assert got == data and client_store.get(4, digest) == data

    trio.run(body)


@pytest.mark.network
def test_truncated_body_and_unknown_status_rejected() -> None:
    async def body() -> None:
        async with start_hosts(3) as (short, odd, client):

            async def truncate(stream: INetStream, _req: PayloadRequest) -> None:
                await stream.write(REPLY.pack(Status.OK, 1000) + b"x" * 10)
                await stream.close()

            async def weird(stream: INetStream, _req: PayloadRequest) -> None:
                await stream.write(REPLY.pack(77, 0))
                await stream.close()

            install_evil(short, truncate)
            install_evil(odd, weird)
            req = PayloadRequest(RUN, 1, payload_digest(b"z"))
            for h in (short, odd):
                await client.dial(str(h.addrs()[0]))
                with pytest.raises(MalformedReplyError):
                    await fetch_from(client, h.peer_id, req, config=CFG)

    trio.run(body)


@pytest.mark.network
def test_garbage_requests_do_not_break_the_server() -> None:
    async def body() -> None:
        async with start_hosts(3) as (server_host, attacker, honest):
            data = os.urandom(200_000)
            store = PayloadStore(RUN)
            digest = store.put(1, data)
            impatient = TransferConfig(request_timeout=1.0, attempt_timeout=WAIT)
            server = PayloadServer(server_host, store, impatient)
            server.install()
            for h in (attacker, honest):
                await h.dial(str(server_host.addrs()[0]))

            garbage = [
                os.urandom(200),  # random bytes (version byte almost surely wrong)
                b"\x01\x00" + b"\0" * 40,  # run id length 0
                b"\x01\xff" + b"\0" * 40,  # run id length over the cap
                b"\x01\x20" + b"\0" * 10,  # truncated, then EOF
            ]
            for blob in garbage:
                stream = await attacker.open_stream(server_host.peer_id, PAYLOAD_PROTOCOL)
                await stream.write(blob)
                await stream.close_write()
                with trio.fail_after(WAIT):
                    try:
                        reply = await stream.read(REPLY.size)
                    except Exception:
                        reply = b""  # a reset is an acceptable answer too
                assert reply in (b"", REPLY.pack(Status.BAD_REQUEST, 0))
                await stream.reset()

            # A client that opens a stream and never sends is cut off after request_timeout.
            silent = await attacker.open_stream(server_host.peer_id, PAYLOAD_PROTOCOL)
            with trio.fail_after(WAIT):
                try:
                    while await silent.read(1):
                        pass
                except Exception:
                    pass  # reset or EOF: either way the server let go of the stream

            req = PayloadRequest(RUN, 1, digest)
            got = await fetch_payload(honest, req, [server_host.peer_id], config=CFG)
            assert got == data
            assert server.bad_requests >= len(garbage) and server.served == 1

    trio.run(body)


@pytest.mark.network
def test_a_silent_holder_is_raced_by_the_next_and_an_answering_one_is_not() -> None:
    """A holder that never answers (behind a cut link) must not hold the fetch for its whole attempt
    timeout; one that answered and is sending must not be raced (no second download on a slow link)."""

    async def body() -> None:
        async with start_hosts(4) as (silent, slow, honest, client):
            data = os.urandom(200_000)
            store = PayloadStore(RUN)
            digest = store.put(6, data)
            honest_server = PayloadServer(honest, store, CFG)
            honest_server.install()
            answered_slowly = trio.Event()

            async def never(stream: INetStream, _req: PayloadRequest) -> None:
                await trio.sleep_forever()

            async def dribble(stream: INetStream, _req: PayloadRequest) -> None:
                await stream.write(REPLY.pack(Status.OK, len(data)))
                answered_slowly.set()
                await trio.sleep(3 * HEDGE.hedge_after)  # longer than the hedge delay, far below the timeout
                await stream.write(data)
                await stream.close()

            install_evil(silent, never)
            install_evil(slow, dribble)
            for h in (silent, slow, honest):
                await client.dial(str(h.addrs()[0]))
            req = PayloadRequest(RUN, 6, digest)
            with trio.fail_after(HEDGE.attempt_timeout / 2):  # not one silent attempt timeout long
                got = await fetch_payload(client, req, [silent.peer_id, honest.peer_id], config=HEDGE,
                                          spread=False)
            assert got == data and honest_server.served == 1
            got = await fetch_payload(client, req, [slow.peer_id, honest.peer_id], config=HEDGE, spread=False)
            assert got == data and answered_slowly.is_set()
            assert honest_server.served == 1, "a holder that was sending was raced"

    trio.run(body)
