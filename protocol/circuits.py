"""Relayed connections as the host sees them: dialing a ``/p2p-circuit`` address, and telling a peer's
connection kind (direct, relayed, none).

Why apart from the swarm: py-libp2p 0.8.1's ``swarm.dial_peer`` drops every circuit address, so a relayed
dial has to go through ``CircuitV2Transport.dial`` (which connects to the relay, asks it to CONNECT and
upgrades the stream with Noise and yamux into an ordinary swarm connection). Its outbound connections come
back untagged (the inbound side is tagged by the library), so we tag them, and every reader of a connection's
kind (metrics, the payload fetcher, DCUtR's upgrade loop) sees the same answer.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from libp2p.abc import IHost, INetConn
from libp2p.connection_types import ConnectionType
from libp2p.peer.id import ID
from multiaddr import Multiaddr

from .addrs import is_circuit, with_peer_id


class Kind(Enum):
    """What a peer's best open connection is: payload fetchers ask direct holders before relayed ones."""

    DIRECT = "direct"
    RELAYED = "relayed"
    NONE = "none"


class CircuitDialer(Protocol):
    """``CircuitV2Transport``'s dial, as we use it."""

    async def dial(self, maddr: Multiaddr) -> INetConn: ...


def _relayed(conn: INetConn) -> bool:
    kind = getattr(conn, "get_connection_type", None)
    if kind is not None and kind() == ConnectionType.RELAYED:
        return True
    actual: list[Multiaddr] | None = getattr(conn, "_actual_transport_addresses", None)  # set when known
    return any(is_circuit(a) for a in actual or ())


def open_conns(host: IHost, peer_id: ID) -> list[INetConn]:
    network = host.get_network()
    get = getattr(network, "get_connections", None)
    conns = list(get(peer_id)) if get is not None else list(network.connections.get(peer_id, []))
    return [c for c in conns if not getattr(c.muxed_conn, "is_closed", False)]


def connection_kind(host: IHost, peer_id: ID) -> Kind:
    conns = open_conns(host, peer_id)
    if not conns:
        return Kind.NONE
    return Kind.RELAYED if all(_relayed(c) for c in conns) else Kind.DIRECT


async def dial_circuit(dialer: CircuitDialer, transport: Multiaddr, peer_id: ID) -> INetConn:
    """Open a relayed connection to ``peer_id`` over ``transport`` (``<relay addr>/p2p/<relay>/p2p-circuit``)
    and tag it as relayed."""
    if not is_circuit(transport):
        raise ValueError(f"not a circuit address: {transport}")
    full = with_peer_id(transport, peer_id)
    conn = await dialer.dial(full)
    tag = getattr(conn, "set_transport_info", None)
    if tag is not None:
        tag([full], ConnectionType.RELAYED)
    return conn
