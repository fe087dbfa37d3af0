"""A fetch that gave up leaves its verified pieces behind, and the next fetch of that payload asks only for
the rest: no byte is downloaded twice across the tries (real loopback hosts, a fault-injecting holder)."""

from __future__ import annotations

import os

import pytest
import trio
from distro_node.protocol.errors import FetchFailedError
from distro_node.protocol.pieces import piece_span
from distro_node.protocol.pieces_serve import PiecesServer
from distro_node.protocol.pieces_wire import Status
from distro_node.protocol.swarm_request import FetchStats
from distro_node.protocol.testing import WAIT
from distro_node.protocol.wire import reply_within
from libp2p.abc import INetStream
from pieces_support import SIZE, fetch, swarm

pytestmark = pytest.mark.network

SERVED_BEFORE_FAILING = 4


class _StopsServing(PiecesServer):
    """A holder that serves a few pieces, then answers that it does not hold the payload (as one that
    dropped it would) until ``resumed``."""

    resumed = False

    async def _piece(self, stream: INetStream, key: tuple[int, bytes], choices: tuple[int, ...]) -> bool:
        if self.resumed or self.pieces_served < SERVED_BEFORE_FAILING:
            return await super()._piece(stream, key, choices)
        return await reply_within(stream, self.config.request_timeout, bytes([Status.NOT_FOUND]), close=False)


def test_a_second_fetch_asks_only_for_the_pieces_the_first_did_not_get() -> None:
    async def body() -> None:
        async with swarm(2, _StopsServing) as ((origin, fetcher), (server, mine)):
            data = os.urandom(SIZE)
            root = server.store.put(4, data)
            first, second = FetchStats(), FetchStats()
            with trio.fail_after(WAIT):
                with pytest.raises(FetchFailedError):
                    await fetch(fetcher, mine, 4, root, SIZE, [origin], [origin], stats=first)
                kept = mine.partials.get(4, root)
                assert kept is not None and len(kept.have) == SERVED_BEFORE_FAILING
                kept_bytes = sum(piece_span(SIZE, i)[1] for i in kept.have)
                server.resumed = True
                got = await fetch(fetcher, mine, 4, root, SIZE, [origin], [origin], stats=second)
            assert got == data
            assert first.downloaded == kept_bytes
            assert second.downloaded == SIZE - kept_bytes  # the rest only: each byte fetched once
            assert mine.partials.get(4, root) is None  # complete: in the store, the entry closed

    trio.run(body)
