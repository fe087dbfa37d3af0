"""Dialing a peer through a relay ourselves (the hop CONNECT), keeping what the relay says of the circuit.

Why not ``CircuitV2Transport.dial``: it reads the relay's reply and drops its ``limit`` (the circuit's time
and byte caps), and it hands back a connection whose bytes nobody counts, so nothing could tell when the
relay is about to cut it. The exchange itself is short: a HOP CONNECT naming the peer, a STATUS reply, then
the same stream carries Noise and yamux as any other raw connection. What the relay counts against its byte
cap is exactly the bytes this stream carries, both directions, so counting them here tells how close the
cap is. protocol/circuit_keeper.py renews circuits from what is kept here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio
from libp2p.abc import INetConn, INetStream
from libp2p.connection_types import ConnectionType
from libp2p.network.connection.raw_connection import RawConnection
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.pb.circuit_pb2 import PeerId as CircuitPeerId
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg
from multiaddr import Multiaddr

from .addrs import CIRCUIT, circuit_relay, is_circuit, with_peer_id
from .circuit_renewal import CircuitLife, Margins, renew_bytes
from .errors import DialError
from .wire import reset_quietly

if TYPE_CHECKING:
    from .host import P2PHost

MIN_CAP_SECONDS = 1.0  # a relay's word on its caps is bounded: renewing faster than this is churn
MIN_CAP_BYTES = 64 * 1024
MAX_CIRCUITS_KEPT = 4096  # circuits tracked at once (each a connection of ours; bounded all the same)


@dataclass
class Circuit:
    """A relayed connection we dialed: to whom, through which relay and address, and its life so far."""

    peer: ID
    relay: ID
    transport: Multiaddr  # <relay addr>/p2p/<relay>/p2p-circuit
    life: CircuitLife


class _CountedRaw(RawConnection):
    """The hop stream as a raw connection, counting what crosses it and waking the keeper near the cap."""

    def __init__(self, stream: INetStream, full: Multiaddr, life: CircuitLife, threshold: int | None,
                 wake: Callable[[], None]) -> None:
        super().__init__(stream=stream, initiator=True, connection_type=ConnectionType.RELAYED,
                         addresses=[full])
        self._life = life
        self._threshold = threshold
        self._wake = wake

    def _count(self, n: int) -> None:
        self._life.used += n
        if self._threshold is not None and self._life.used >= self._threshold:
            self._threshold = None  # once is enough
            self._wake()

    async def write(self, data: bytes) -> None:
        await super().write(data)
        self._count(len(data))

    async def read(self, n: int | None = None) -> bytes:
        data = await super().read(n)
        self._count(len(data))
        return data


def relay_transport(transport: Multiaddr) -> tuple[ID, Multiaddr | None]:
    """The relay of a circuit address and its own address (None when the circuit address names none)."""
    relay = circuit_relay(transport)
    if relay is None:
        raise DialError(str(transport), "not a circuit address")
    head = str(transport).split(f"/p2p/{relay}/{CIRCUIT}")[0]
    return relay, Multiaddr(head) if head else None


class CircuitDialer:
    """Dials circuits for :class:`P2PHost` (``use_relays``) and remembers the ones it opened."""

    def __init__(self, host: P2PHost, margins: Margins) -> None:
        self._host = host
        self.margins = margins
        self.circuits: dict[INetConn, Circuit] = {}
        self.changed = trio.Event()  # a circuit opened, or one came near its byte cap

    def _bump(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def dial(self, transport: Multiaddr, peer_id: ID) -> INetConn:
        """Open a relayed connection to ``peer_id`` over ``transport``; DialError (or the upgrade's own
        error) on failure. The caller bounds the time."""
        if not is_circuit(transport):
            raise DialError(str(peer_id), f"not a circuit address: {transport}")
        relay, relay_addr = relay_transport(transport)
        await self._host.connect(relay, [relay_addr] if relay_addr is not None else ())
        stream = await self._host.open_stream(relay, HOP_PROTOCOL)
        full = with_peer_id(transport, peer_id)
        try:
            await write_delimited_msg(stream, HopMessage(type=HopMessage.CONNECT,
                                                         peer=CircuitPeerId(id=peer_id.to_bytes())))
            reply = await read_delimited_msg(stream, HopMessage)
            status = StatusCode(reply.status) if reply.HasField("status") else None
            if reply.type != HopMessage.STATUS or status != StatusCode.OK:
                raise DialError(str(peer_id), f"relay {relay} refused the circuit: {status}")
            seconds = float(reply.limit.duration) if reply.limit.duration else None
            cap = int(reply.limit.data) if reply.limit.data else None
            life = CircuitLife(opened_at=trio.current_time(),
                               seconds=None if seconds is None else max(seconds, MIN_CAP_SECONDS),
                               bytes_cap=None if cap is None else max(cap, MIN_CAP_BYTES))
            raw = _CountedRaw(stream, full, life, renew_bytes(life, self.margins), self._bump)
            conn = await self._host.libp2p.upgrade_outbound_connection(raw, peer_id)
        except BaseException:
            with trio.CancelScope(shield=True):
                await reset_quietly(stream)
            raise
        tag = getattr(conn, "set_transport_info", None)  # the swarm's connection takes the raw one's kind
        if tag is not None:
            tag([full], ConnectionType.RELAYED)
        self._bound()
        self.circuits[conn] = Circuit(peer_id, relay, transport, life)
        self._bump()
        return conn

    def _bound(self) -> None:
        """Forget the oldest past the bound (the keeper forgets each as it sees it close)."""
        while len(self.circuits) >= MAX_CIRCUITS_KEPT:
            del self.circuits[next(iter(self.circuits))]
