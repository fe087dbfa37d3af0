"""The daemon's payload exchange on real loopback hosts: pieces from every holder, the whole pull, and the
two serving each other (node/peer/payload_exchange.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from distro_node.node.peer.payload_exchange import PayloadExchange
from distro_node.node.peer.payloads import ByteCounters
from distro_node.protocol.errors import FetchFailedError, PayloadNotFoundError
from distro_node.protocol.host import P2PHost
from distro_node.protocol.pieces import PIECE_BYTES
from distro_node.protocol.store import PayloadStore, payload_digest
from distro_node.protocol.testing import WAIT, connect_all_to, start_hosts

pytestmark = pytest.mark.network

RUN = bytes.fromhex("cd" * 32)
SIZE = 8 * PIECE_BYTES + 77
STEP = 3


@asynccontextmanager
async def exchanges(fetches: list[str]) -> AsyncIterator[tuple[list[P2PHost], list[PayloadExchange],
                                                                list[ByteCounters]]]:
    async with start_hosts(len(fetches)) as hosts:
        counters = [ByteCounters() for _ in hosts]
        ex = [PayloadExchange(h, PayloadStore(RUN), c, max_payload_bytes=4 * SIZE, fetch=f)
              for h, c, f in zip(hosts, counters, fetches, strict=True)]
        for e in ex:
            e.install()
        with trio.fail_after(WAIT):
            await connect_all_to(hosts, hosts[0])
        yield hosts, ex, counters


def _authored(ex: PayloadExchange, data: bytes) -> bytes:
    digest = payload_digest(data)
    ex.store.put_verified(STEP, digest, data)
    ex.mark_own(STEP, digest)
    return digest


def test_fetchers_take_pieces_from_each_other_and_count_every_byte_once() -> None:
    async def body() -> None:
        async with exchanges(["pieces"] * 4) as (hosts, ex, counters):
            data = os.urandom(SIZE)
            digest = _authored(ex[0], data)
            got: dict[int, bytes] = {}

            async def pull(i: int) -> None:
                got[i] = await ex[i].pull(RUN, STEP, digest, SIZE, author=hosts[0].peer_id,
                                          sources=[hosts[0].peer_id])

            with trio.fail_after(WAIT):
                async with trio.open_nursery() as nursery:
                    for i in (1, 2, 3):
                        nursery.start_soon(pull, i)
            assert all(got[i] == data for i in (1, 2, 3))
            assert [c.received for c in counters[1:]] == [SIZE] * 3  # no byte twice (amplification 1.0)
            assert sum(c.sent for c in counters) == 3 * SIZE
            assert counters[0].sent < 3 * SIZE, "the origin uploaded every copy: nobody served a piece on"

    trio.run(body)


def test_a_whole_puller_and_a_piece_fetcher_serve_each_other() -> None:
    async def body() -> None:
        async with exchanges(["whole", "pieces", "whole"]) as (hosts, ex, counters):
            by_pieces, by_whole = os.urandom(SIZE), os.urandom(SIZE // 3)
            d1 = _authored(ex[0], by_pieces)
            d2 = _authored(ex[1], by_whole)
            with trio.fail_after(WAIT):
                assert await ex[1].pull(RUN, STEP, d1, SIZE, author=hosts[0].peer_id,
                                        sources=[hosts[0].peer_id]) == by_pieces
                assert await ex[2].pull(RUN, STEP, d2, len(by_whole), author=hosts[1].peer_id,
                                        sources=[hosts[1].peer_id]) == by_whole
            assert counters[2].received == len(by_whole)
            assert ex[0].last_request_at is not None and ex[1].last_request_at is not None
            assert ex[0].uploads_in_progress == ex[1].uploads_in_progress == 0

    trio.run(body)


def test_a_payload_its_author_denies_fails_naming_the_author() -> None:
    async def body() -> None:
        async with exchanges(["pieces", "pieces"]) as (hosts, ex, counters):
            with trio.fail_after(WAIT), pytest.raises(FetchFailedError) as err:
                await ex[1].pull(RUN, STEP, payload_digest(b"never made"), 10, author=hosts[0].peer_id,
                                 sources=[hosts[0].peer_id])
            # what the fetcher reads as DENIED: the author itself said it does not hold its payload
            assert any(peer == str(hosts[0].peer_id) and isinstance(e, PayloadNotFoundError)
                       for peer, e in err.value.attempts), err.value.attempts
            assert counters[1].received == 0

    trio.run(body)


def test_an_unknown_fetch_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="payload fetch 'torrent'"):
        PayloadExchange(None, PayloadStore(RUN), ByteCounters(), max_payload_bytes=1,  # type: ignore[arg-type]
                        fetch="torrent")
