"""A partial holder this peer measured far slower than the median of its peers gets no piece session while a
complete holder's lives (protocol/swarm_talk.py ``_while_far_slower``), and is asked once none is left
(real loopback hosts; the slow holder is a real server that counts the sessions opened to it)."""

from __future__ import annotations

import os

import pytest
import trio
from distro_node.protocol.pieces import PIECE_BYTES
from distro_node.protocol.pieces_serve import PiecesServer
from distro_node.protocol.pieces_wire import PiecesConfig
from distro_node.protocol.swarm_fetch import fetch_swarm
from distro_node.protocol.swarm_first_copies import PeerRates
from distro_node.protocol.swarm_request import SwarmRequest
from distro_node.protocol.testing import WAIT, connect_all_to, start_hosts
from libp2p.abc import INetStream
from pieces_support import RUN, put_pieces, server_of

SIZE = 4 * PIECE_BYTES + 7  # five pieces
QUICK = PiecesConfig(piece_timeout=WAIT, fetch_timeout=WAIT, have_wait=0.2)
FAST = 10e6  # bytes/s, as measured by earlier fetches
SLOW = FAST / 100  # far under a quarter of the median (ScheduleConfig.slower_holder_factor 4)


class _Counting(PiecesServer):
    sessions = 0

    async def _handle(self, stream: INetStream) -> None:
        self.sessions += 1
        await super()._handle(stream)


async def _fetch(author_serves: bool) -> tuple[bytes, bytes, int, int]:
    """Fetch a payload whose author (complete) and one partial holder, measured slow, both hold all of it.
    Returns (got, data, sessions at the slow holder, pieces it served)."""
    rates = PeerRates()
    async with start_hosts(3) as (author, slow, me):
        source = server_of(PiecesServer, author, QUICK)
        partial = server_of(_Counting, slow, QUICK)
        mine = server_of(PiecesServer, me, QUICK)
        if author_serves:
            source.install()
        partial.install()
        mine.install()
        data = os.urandom(SIZE)
        root = source.store.put(3, data)
        put_pieces(partial, 3, root, data, range(5))
        for peer, rate in ((author.peer_id, FAST), (slow.peer_id, SLOW), ("another", FAST)):
            rates.observe(str(peer), rate)
        with trio.fail_after(WAIT):
            await connect_all_to([author, slow, me], me)
            got = await fetch_swarm(me, SwarmRequest(RUN, 3, root, SIZE), [slow.peer_id],
                                    store=mine.store, partials=mine.partials, complete=[author.peer_id],
                                    config=QUICK, rates=rates)
        return got, data, partial.sessions, partial.pieces_served


@pytest.mark.network
def test_a_far_slower_partial_holder_gets_no_session_while_the_author_serves() -> None:
    got, data, sessions, served = trio.run(_fetch, True)
    assert got == data
    assert sessions == 0 and served == 0


@pytest.mark.network
def test_with_no_complete_holder_left_the_far_slower_one_is_asked() -> None:
    """The author serves nothing (no pieces protocol): its session fails, and the slow holder, the only
    one left, gives the whole payload."""
    got, data, sessions, served = trio.run(_fetch, False)
    assert got == data
    assert sessions >= 1 and served == 5
