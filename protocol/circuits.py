"""Relayed connections as the host sees them: dialing a ``/p2p-circuit`` address, and telling a peer's
connection kind (direct, relayed, none).

Why apart from the swarm: py-libp2p 0.8.1's ``swarm.dial_peer`` drops every circuit address, so a relayed
dial goes through our own hop CONNECT (circuit_dial.py), which upgrades the stream with Noise and yamux into
an ordinary swarm connection and tags it relayed (the inbound side is tagged by the library), so every
reader of a connection's kind (metrics, the payload fetcher, DCUtR's upgrade loop) sees the same answer.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from libp2p.abc import IHost, INetConn
from libp2p.connection_types import ConnectionType
from libp2p.peer.id import ID
from multiaddr import Multiaddr

from .addrs import is_circuit


class Kind(Enum):
    """What a peer's best open connection is: payload fetchers ask direct holders before relayed ones."""

    DIRECT = "direct"
    RELAYED = "relayed"
    NONE = "none"


class DialsCircuits(Protocol):
    """Relayed dialing as the host uses it (protocol/circuit_dial.py's ``CircuitDialer``)."""

    async def dial(self, transport: Multiaddr, peer_id: ID) -> INetConn: ...


def is_relayed(conn: INetConn) -> bool:
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
    return Kind.RELAYED if all(is_relayed(c) for c in conns) else Kind.DIRECT
