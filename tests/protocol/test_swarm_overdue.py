"""A holder too slow for a fetcher's patience stays a holder: its requests are cancelled as overdue (another
holder has the pieces), its rate is marked down, and the fetch goes on asking it (real loopback hosts,
fault-injecting holders)."""

from __future__ import annotations

import os
from typing import Any

import pytest
import trio
from distro_node.protocol.pieces_serve import PiecesServer
from distro_node.protocol.pieces_wire import U16, PiecesConfig, Status
from distro_node.protocol.swarm_request import FetchStats
from distro_node.protocol.swarm_schedule import ScheduleConfig
from distro_node.protocol.testing import WAIT, connect_all_to, start_hosts
from libp2p.abc import INetStream
from pieces_support import SIZE, fetch, server_of

STALLS = PiecesConfig().max_losses  # as many overdue cancels as the losses that drop a failing holder
CRAWL = 0.5
REST_MS = 500
# Quick to call a request overdue: the prior rate makes the floor the first limit, and each cancel raises
# the next limit to four times the time the cancelled piece had run (0.05, ~0.4, ~1.6 s on an idle
# machine; on one whose cores two other processes keep busy, the cancels come late and each limit grows
# from the last, up to ~15 s): all far below the 64 s a crawling piece takes. The fetch gets three times
# that worst case; with the bound around it still short of one crawl's 64 s.
IMPATIENT = PiecesConfig(piece_timeout=WAIT, fetch_timeout=3 * WAIT, have_wait=0.5,
                         schedule=ScheduleConfig(prior_rate=1e8, overdue_floor=0.05))


class _Crawling:
    """A stream that sends its first write a KiB at a time, ``CRAWL`` apart (a piece takes 64 s): a line far
    too slow for the fetcher, as it looks from the fetcher's side. A write after the fetcher's reset fails,
    which ends the upload, as on a real line."""

    def __init__(self, stream: INetStream) -> None:
        self._stream = stream

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def write(self, data: bytes) -> None:
        for offset in range(0, len(data), 1024):
            await self._stream.write(data[offset : offset + 1024])
            await trio.sleep(CRAWL)


class _CrawlsFirstReplies(PiecesServer):
    """A holder whose first ``STALLS`` piece replies crawl."""

    crawled = 0

    async def _piece(self, stream: INetStream, key: tuple[int, bytes], choices: tuple[int, ...]) -> bool:
        if self.crawled >= STALLS:
            return await super()._piece(stream, key, choices)
        self.crawled += 1
        return await super()._piece(_Crawling(stream), key, choices)  # type: ignore[arg-type]


class _RefusesAll(PiecesServer):
    """A holder that has every piece and refuses every request as busy: somewhere else to ask, in the
    schedule's eyes, that never takes a piece away from the author."""

    async def _piece(self, stream: INetStream, key: tuple[int, bytes], choices: tuple[int, ...]) -> bool:
        await stream.write(bytes([Status.BUSY]) + U16.pack(REST_MS))
        return True


@pytest.mark.network
def test_a_slow_author_stays_a_holder_through_overdue_cancels() -> None:
    """Two complete holders, so a late request has somewhere else to go: the author, whose first replies
    crawl, and a mirror that refuses every request as busy. Each crawling piece runs overdue and is
    cancelled; the fetch asks the author again with a longer limit (its rate marked down) and completes
    from it. Before, the cancel left the session as a stream failure (client_stream wraps what it does not
    know), so each one counted as a loss, and the third dropped the author: the fetch failed."""

    async def body() -> None:
        async with start_hosts(3) as (author, mirror_host, me):
            source = server_of(_CrawlsFirstReplies, author, IMPATIENT)
            mirror = server_of(_RefusesAll, mirror_host, IMPATIENT)
            mine = server_of(PiecesServer, me, IMPATIENT)
            for server in (source, mirror, mine):
                server.install()
            data = os.urandom(SIZE)
            root = source.store.put(5, data)
            mirror.store.put(5, data)
            with trio.fail_after(3 * WAIT + 10):
                await connect_all_to([author, mirror_host, me], me)
                stats = FetchStats()
                got = await fetch(me, mine, 5, root, SIZE, [], [author, mirror_host], stats=stats,
                                  config=IMPATIENT)
            assert got == data
            # The case happened: the author was asked again after each crawling reply, and each was given
            # up on (one crawl to its end, 64 s, does not fit in the bound above).
            assert source.crawled == STALLS
            assert stats.by_holder == {str(author.peer_id): SIZE}

    trio.run(body)
