"""Hole punching (DCUtR) on every peer: a relayed connection is upgraded to a direct one where the NATs allow.

py-libp2p 0.8.1's ``DCUtRProtocol`` does the protocol (TCP only) and drives it itself: every 2 s it starts a
punch towards each peer whose only connection is relayed, at most 3 times per peer and connection, and
closes the relayed connection after a grace period once a direct one works, so streams then take the direct
one. Checked across emulated NATs: 6 of 6 through one that drops unsolicited packets, none through one that
answers with a reset or picks random ports (those pairs stay relayed). What this module adds: the handler goes
through the host's guards (bans, a permissioned run's strangers), and attempts, successes and the peers
reached by a punch are counted, so metrics can tell punched connections from other direct ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.dcutr import PROTOCOL_ID as DCUTR_PROTOCOL
from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol
from libp2p.tools.anyio_service import background_trio_service

from .host import P2PHost

MAX_PUNCHED_KEPT = 4096  # peers remembered as punched (bounded: ids cost nothing to make)


class HolePunch(DCUtRProtocol):
    """The library's DCUtR, counting what it tries and achieves."""

    def __init__(self, host: P2PHost) -> None:
        super().__init__(host.libp2p, dial_timeout=int(host.config.dial_timeout))
        self.attempts = 0
        self.successes = 0
        self.punched: dict[ID, None] = {}

    async def _initiate_hole_punch_locked(self, peer_id: ID) -> bool:
        self.attempts += 1
        ok = await super()._initiate_hole_punch_locked(peer_id)
        if ok:
            self.successes += 1
            self.punched.pop(peer_id, None)
            self.punched[peer_id] = None
            while len(self.punched) > MAX_PUNCHED_KEPT:
                del self.punched[next(iter(self.punched))]
        return ok


@asynccontextmanager
async def open_hole_punch(host: P2PHost) -> AsyncIterator[HolePunch]:
    """Run DCUtR for the duration of the block, its handler behind the host's guards."""
    punch = HolePunch(host)
    async with background_trio_service(punch):
        await punch.event_started.wait()
        host.set_handler(DCUTR_PROTOCOL, punch._handle_dcutr_stream)  # replaces the library's unguarded one
        yield punch
