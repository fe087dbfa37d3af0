"""Connection bookkeeping on top of py-libp2p 0.8.1's swarm: dropping closed connections it still lists,
waking waiters when connections come and go, and telling subscribers which peers we just lost."""

from __future__ import annotations

import logging

import trio
from libp2p.abc import INetConn, INetStream, INetwork, INotifee
from libp2p.peer.id import ID
from multiaddr import Multiaddr

from .address_limit import over_limit, remote_ip

logger = logging.getLogger(__name__)

LOST_BUFFER = 256


def prune_closed(network: INetwork) -> None:
    """Forget connections py-libp2p 0.8.1 closed but still lists.

    Why: while one is listed, libp2p counts its peer as connected, ``connect`` returns without dialing and
    every new stream fails with "no valid connections". After a partition each side kept such connections
    to the other, never dialed it again, and the swarm stayed split after the heal.
    """
    remove = getattr(network, "remove_conn", None)
    if remove is None:
        return
    for conns in network.get_connections_map().values():
        for conn in conns:
            if getattr(conn, "is_closed", False):
                remove(conn)


class ConnectionWatch(INotifee):
    """Turns swarm connect/disconnect callbacks into a trio.Event so waiters need no polling, and tells
    subscribers when the last connection to a peer has closed."""

    def __init__(self, per_address: int = 0) -> None:
        self.changed = trio.Event()
        self.lost_sinks: list[trio.MemorySendChannel[ID]] = []
        self.new_sinks: list[trio.MemorySendChannel[ID]] = []
        self._per_address = per_address
        self._ips: dict[ID, str] = {}  # remote IP of each connected peer (for the per-address limit)
        self.refused_by_address = 0

    def lost_peers(self) -> trio.MemoryReceiveChannel[ID]:
        """A new subscription to lost peers. Bounded: a subscriber that falls behind misses entries rather
        than growing memory."""
        send, receive = trio.open_memory_channel[ID](LOST_BUFFER)
        self.lost_sinks.append(send)
        return receive

    def new_peers(self) -> trio.MemoryReceiveChannel[ID]:
        """A new subscription to peers of every newly opened connection (bounded like :meth:`lost_peers`)."""
        send, receive = trio.open_memory_channel[ID](LOST_BUFFER)
        self.new_sinks.append(send)
        return receive

    def _bump(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def ip_of(self, peer_id: ID) -> str | None:
        """The remote IP the peer's connection came from (None: not connected, or relayed)."""
        return self._ips.get(peer_id)

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        peer_id = conn.muxed_conn.peer_id
        ip = remote_ip(conn)
        if over_limit(peer_id, ip, self._ips, self._per_address):
            self.refused_by_address += 1
            logger.info("closing the connection of %s: %d peers are connected from %s already", peer_id,
                        self._per_address, ip)
            with trio.move_on_after(2.0):
                try:
                    await conn.close()
                except Exception as exc:  # already going down
                    logger.debug("closing %s failed: %r", peer_id, exc)
            return
        if ip is not None:
            self._ips[peer_id] = ip
        self._bump()
        _tell(self.new_sinks, peer_id)

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        self._bump()
        peer_id = conn.muxed_conn.peer_id
        if not self.lost_sinks and peer_id not in self._ips:
            return
        prune_closed(network)
        if not network.get_connections(peer_id):
            self._ips.pop(peer_id, None)
            _tell(self.lost_sinks, peer_id)

    async def listen(self, network: INetwork, multiaddr: Multiaddr) -> None:
        return None

    async def listen_close(self, network: INetwork, multiaddr: Multiaddr) -> None:
        return None


def _tell(sinks: list[trio.MemorySendChannel[ID]], peer_id: ID) -> None:
    """Send without waiting: a subscriber that is behind misses entries, a closed one is dropped."""
    for sink in list(sinks):
        try:
            sink.send_nowait(peer_id)
        except trio.WouldBlock:
            logger.debug("peer subscriber is behind; dropped %s", peer_id)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            sinks.remove(sink)
