"""Peer exchange advertises ``network.announce_addrs`` when set (containers, NAT): what a peer learns about
another is the address it announced, not the one it bound."""

from __future__ import annotations

from dataclasses import replace

import pytest
import trio
from distro_node.protocol.errors import BadMultiaddrError
from distro_node.protocol.host import open_host
from distro_node.protocol.testing import NO_PX_LOOP, WAIT
from libp2p.crypto.ed25519 import create_new_key_pair
from multiaddr import Multiaddr

pytestmark = pytest.mark.network

# Documentation-range and example names: never dialed by this test, only learned.
A_PUBLIC = "/ip4/192.0.2.7/tcp/4747"
B_PUBLIC = "/dns4/node-b.example/tcp/4747"


def test_the_other_side_learns_the_announced_address() -> None:
    async def body() -> None:
        async with (
            open_host(create_new_key_pair(), replace(NO_PX_LOOP, announce_addrs=(A_PUBLIC,))) as a,
            open_host(create_new_key_pair(), replace(NO_PX_LOOP, announce_addrs=(B_PUBLIC,))) as b,
            open_host(create_new_key_pair(), NO_PX_LOOP) as c,
        ):
            assert [str(x) for x in a.advertised_addrs()] == [f"{A_PUBLIC}/p2p/{a.peer_id}"]
            assert a.advertised_addrs() != a.addrs()  # bound loopback address, port resolved
            with trio.fail_after(WAIT):
                await b.bootstrap([str(a.addrs()[0])])  # dialed at the bound address...
            assert b.peer_book.addrs(a.peer_id) == (Multiaddr(A_PUBLIC),)  # ...learned at the announced one
            assert a.peer_book.addrs(b.peer_id) == (Multiaddr(B_PUBLIC),)
            # Without announce addresses the bound one is still what others learn.
            with trio.fail_after(WAIT):
                await c.dial(str(a.addrs()[0]))
                await c.exchange_peers(a.peer_id)  # not bootstrap: it would try to dial B_PUBLIC
            assert a.peer_book.addrs(c.peer_id) == tuple(c.transport_addrs())

    trio.run(body)


def test_announce_with_a_peer_id_is_refused() -> None:
    async def body() -> None:
        key = create_new_key_pair()
        with pytest.raises(BadMultiaddrError, match="no /p2p/"):
            async with open_host(key, replace(NO_PX_LOOP, announce_addrs=(
                    "/ip4/192.0.2.7/tcp/4747/p2p/12D3KooWD3eckifWpRn9wQpMG9R9hX3sD158z7EqHWmweQAJU5SA",))):
                pass

    trio.run(body)
