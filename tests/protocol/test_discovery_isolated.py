"""A host whose every peer is gone keeps its bootstrap peer and keeps redialing it (protocol/discovery.py):
an isolated node that forgot everyone could never come back. Real hosts on loopback."""

from __future__ import annotations

import pytest
import trio
from distro_node.protocol.host import open_host
from distro_node.protocol.peer_exchange import RedialSchedule
from distro_node.protocol.testing import NO_PX_LOOP, WAIT, start_hosts
from libp2p.crypto.ed25519 import create_new_key_pair


@pytest.mark.network
def test_an_isolated_host_never_forgets_its_bootstrap_peer_and_counts_its_redials() -> None:
    async def body() -> None:
        async with start_hosts(1) as (a,):
            async with open_host(create_new_key_pair(), NO_PX_LOOP) as b:
                await a.bootstrap([str(b.addrs()[0])])
                assert a.discovery.note_isolation(trio.current_time()) is False
            with trio.fail_after(WAIT):
                while a.connected_peers():
                    await a.wait_for_change()
            # Due at once after every failure, and forgotten after 2 of them were it counted.
            a.discovery._redials = RedialSchedule(base=0.0, cap=0.0, give_up_after=2)
            with trio.fail_after(WAIT * 2):
                for _ in range(4):
                    await a.discovery.discover()
            assert b.peer_id in a.peer_book
            assert a.discovery.isolated_since is not None
            assert a.discovery.isolated_redials == 4

    trio.run(body)
