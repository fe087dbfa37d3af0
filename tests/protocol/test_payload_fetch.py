"""pull_payload on loopback hosts: a holder that said NOT_FOUND is asked again before a relayed author."""

from __future__ import annotations

import os

import pytest
import trio
from distro_node.protocol.fetch_plan import Route
from distro_node.protocol.payload_fetch import pull_payload
from distro_node.protocol.store import PayloadStore, payload_digest
from distro_node.protocol.testing import WAIT, connect_all_to, start_hosts
from distro_node.protocol.transfer import PayloadRequest, PayloadServer, TransferConfig

RUN = bytes.fromhex("ab" * 32)
CFG = TransferConfig(attempt_timeout=WAIT)


class LateStore:
    """A public peer still pulling the payload from its author: the first ask misses, later ones find it."""

    def __init__(self, data: bytes) -> None:
        self.run_id = RUN
        self.asks = 0
        self._data = data

    def get(self, step: int, digest: bytes) -> bytes | None:
        self.asks += 1
        return self._data if self.asks > 1 and digest == payload_digest(self._data) else None


@pytest.mark.network
def test_a_holder_that_said_not_found_delivers_on_the_next_ask_and_the_relayed_author_is_not_asked() -> None:
    async def body() -> None:
        async with start_hosts(3) as (public, author, fetcher):
            data = os.urandom(50_000)
            late = LateStore(data)
            public_server = PayloadServer(public, late, CFG)
            author_store = PayloadStore(RUN)
            digest = author_store.put(4, data)
            author_server = PayloadServer(author, author_store, CFG)
            public_server.install()
            author_server.install()
            with trio.fail_after(WAIT):
                await connect_all_to([public, author, fetcher], public)
                got = await pull_payload(fetcher, PayloadRequest(RUN, 4, digest),
                                         [(author.peer_id, Route.RELAYED), (public.peer_id, Route.DIRECT)],
                                         author=author.peer_id, config=CFG)
            assert got.data == data and got.holder == public.peer_id
            assert late.asks == 2 and public_server.not_found == 1
            assert author_server.served == 0 and author_server.last_request_at is None

    trio.run(body)
