"""A banned peer is cut off at the host: its connections closed, its streams refused, never dialed or
advertised again (protocol/host.py ``P2PHost.block``)."""

from __future__ import annotations

import pytest
import trio
from distro_node.protocol.errors import DialError, TransportError
from distro_node.protocol.host import open_host
from distro_node.protocol.testing import NO_PX_LOOP, WAIT
from libp2p.crypto.ed25519 import create_new_key_pair

pytestmark = pytest.mark.network


def test_blocked_peer_is_disconnected_refused_and_not_advertised() -> None:
    async def body() -> None:
        async with (
            open_host(create_new_key_pair(), NO_PX_LOOP) as a,
            open_host(create_new_key_pair(), NO_PX_LOOP) as bad,
            open_host(create_new_key_pair(), NO_PX_LOOP) as c,
        ):
            with trio.fail_after(WAIT):
                await bad.dial(str(a.addrs()[0]))
                await c.dial(str(a.addrs()[0]))
                assert len(await c.exchange_peers(a.peer_id)) >= 1  # a advertises bad before the ban
            await a.block(bad.peer_id)
            assert a.is_blocked(bad.peer_id) and not a.is_connected(bad.peer_id)
            with pytest.raises(DialError, match="banned"):
                await a.connect(bad.peer_id)
            with trio.fail_after(WAIT):
                learned = await c.exchange_peers(a.peer_id)
            assert bad.peer_id not in learned
            # It dials back in: the connection comes up, but a stream it opens is reset unanswered.
            with trio.fail_after(WAIT):
                await bad.dial(str(a.addrs()[0]))
            with trio.fail_after(WAIT), pytest.raises(TransportError):
                await bad.exchange_peers(a.peer_id)

    trio.run(body)
