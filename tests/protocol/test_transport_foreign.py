"""A libp2p peer that is not a member of any distro run (another application on the same network) is never
asked for our protocols once identify has told us what it speaks, and nothing is logged at ERROR for it
(protocol/host.py ``P2PHost.is_foreign``)."""

from __future__ import annotations

import logging

import pytest
import trio
from distro_node.protocol.errors import ProtocolNotSpokenError
from distro_node.protocol.host import open_host
from distro_node.protocol.peer_exchange import PX_PROTOCOL
from distro_node.protocol.testing import NO_PX_LOOP, WAIT
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr

pytestmark = pytest.mark.network


def test_foreign_peer_is_recognised_and_never_asked(caplog: pytest.LogCaptureFixture) -> None:
    async def body() -> None:
        async with open_host(create_new_key_pair(), NO_PX_LOOP) as ours, open_host(
            create_new_key_pair(), NO_PX_LOOP
        ) as member:
            bare = new_host(key_pair=create_new_key_pair())  # py-libp2p's defaults, none of our protocols
            listen = [Multiaddr("/ip4/127.0.0.1/tcp/0")]
            async with bare.run(listen_addrs=listen):
                with trio.fail_after(WAIT):
                    await bare.connect(PeerInfo(ours.peer_id, ours.transport_addrs()))
                    await member.dial(str(ours.addrs()[0]))
                    # Identify runs in the background on every new connection; wait (bounded) for its reply.
                    while not ours.is_foreign(bare.get_id()):
                        await trio.sleep(0.02)
                assert not ours.is_foreign(member.peer_id)
                assert ours.member_peers() == {member.peer_id}
                with caplog.at_level(logging.DEBUG, logger="libp2p"), pytest.raises(ProtocolNotSpokenError):
                    await ours.open_stream(bare.get_id(), PX_PROTOCOL)
                with trio.fail_after(WAIT):
                    learned = await member.exchange_peers(ours.peer_id)
                assert bare.get_id() not in learned  # not advertised to members either
                await bare.close()

    trio.run(body)
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
