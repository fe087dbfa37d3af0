"""The node's libp2p host: one identity, Noise, yamux, TCP; dialing, stream handlers and bans.

Bootstrap and peer exchange are ``PeerDiscovery`` (discovery.py), which the host owns and delegates to;
connection bookkeeping is in connections.py and the knobs in host_config.py.

Building the py-libp2p host itself (exactly Noise + yamux, no automatic dials) is host_build.py.

Start order matters: services that register stream handlers or network notifees (gossip, payload server)
must be attached after ``open_host`` yields and before ``bootstrap`` connects to anyone, or they miss the
first connections. ``open_gossip`` re-registers already connected peers, but handlers must exist first.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from typing import cast

import trio
from libp2p.abc import IHost, INetStream
from libp2p.crypto.keys import KeyPair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from multiaddr import Multiaddr

from .addrs import (
    is_circuit,
    is_private,
    parse_multiaddr,
    same_lan,
    split_peer_addr,
    with_peer_id,
    worth_dialing,
)
from .circuits import DialsCircuits, Kind, connection_kind
from .connections import ConnectionWatch, prune_closed
from .discovery import PeerDiscovery
from .errors import BadMultiaddrError, DialError, ProtocolNotSpokenError
from .host_build import build_libp2p_host
from .host_config import HostConfig
from .identity import peer_id_of
from .peer_exchange import PX_PROTOCOL, PeerBook
from .wire import reset_quietly

__all__ = ["OUR_PROTOCOL_PREFIX", "HostConfig", "P2PHost", "StreamHandler", "open_host"]

logger = logging.getLogger(__name__)

_CLOSE_TIMEOUT = 5.0

StreamHandler = Callable[[INetStream], Awaitable[None]]

# Every protocol of ours starts with this; every distro node serves peer exchange from before it listens.
OUR_PROTOCOL_PREFIX = "/distro/"


class P2PHost:
    """Our view of a running libp2p host. Created by ``open_host``; not constructed directly."""

    def __init__(self, libp2p_host: IHost, key_pair: KeyPair, config: HostConfig) -> None:
        self._host = libp2p_host
        self.key_pair = key_pair
        self.peer_id: ID = peer_id_of(key_pair)
        self.config = config
        self.peer_book = PeerBook(self.peer_id)
        self._watch = ConnectionWatch(config.max_peers_per_address)
        self._dial_limit = trio.Semaphore(config.dial_concurrency)
        self._announce = [parse_multiaddr(a) for a in config.announce_addrs]
        self._blocked: set[ID] = set()  # banned peers: never dialed, streams refused, never advertised
        self._admitted: Callable[[ID], Awaitable[bool]] | None = None  # a permissioned run's admission
        self._open_protocols: frozenset[TProtocol] = frozenset()
        self._circuits: DialsCircuits | None = None  # relayed dialing, once a relay service runs
        self._circuit_addrs: Callable[[], list[Multiaddr]] = list  # ours, through the relays we reserved on
        self._relays: Callable[[], Collection[ID]] = frozenset  # the peers holding those reservations
        self.behind_nat = False  # dial-back probes said nobody can dial us (node/peer/reachability_watch.py)
        for addr in self._announce:
            if "p2p" in [p.name for p in addr.protocols()]:
                raise BadMultiaddrError(str(addr), "announce addresses take no /p2p/ part")
        libp2p_host.get_network().register_notifee(self._watch)
        self.discovery = PeerDiscovery(self)

    @property
    def libp2p(self) -> IHost:
        """The underlying py-libp2p host, for services (pubsub) that need it directly."""
        return self._host

    def transport_addrs(self) -> list[Multiaddr]:
        """Actually bound listen addresses (port 0 resolved), without ``/p2p/``."""
        return list(self._host.get_transport_addrs())

    def addrs(self) -> list[Multiaddr]:
        """Bound listen addresses with ``/p2p/<our id>``: what others put in their bootstrap list."""
        return [with_peer_id(a, self.peer_id) for a in self.transport_addrs()]

    def advertised_addrs(self, to: ID | None = None) -> list[Multiaddr]:
        """What peer exchange tells ``to`` about us: the announce addresses when configured, else the bound
        ones, then our circuit addresses, with ``/p2p/<our id>``.

        Behind a NAT (``behind_nat``) a private-range address (192.168.x, 10.x, ...) is told only to a peer
        whose connection comes from the same /24: anyone else dialing it reaches somebody else's LAN, or
        nothing, after a dial timeout (issue 15: NAT'd joiners kept dialing each other's 192.168 addresses).
        """
        own = list(self._announce) or self.transport_addrs()
        if self.behind_nat:
            near = self.remote_ip(to) if to is not None else None
            own = [a for a in own if not is_private(a) or (near is not None and same_lan(a, near))]
        return [with_peer_id(a, self.peer_id) for a in own + self._circuit_addrs()]

    def use_relays(self, dialer: DialsCircuits, circuit_addrs: Callable[[], list[Multiaddr]],
                   relays: Callable[[], Collection[ID]] = frozenset) -> None:
        """Dial circuit addresses with ``dialer``; advertise ``circuit_addrs``; ``relays``: the peers holding
        a reservation for us (protocol/relay_client.py)."""
        self._circuits = dialer
        self._circuit_addrs = circuit_addrs
        self._relays = relays

    def connection_kind(self, peer_id: ID) -> Kind:
        """Whether our connection to ``peer_id`` is direct (hole-punched included), relayed only, or none:
        whom a payload fetcher should ask first."""
        return connection_kind(self._host, peer_id)

    def worth_dialing(self, peer_id: ID) -> bool:
        """Whether a peer we hold no connection to has an address we could reach (addrs.worth_dialing)."""
        return worth_dialing(self.peer_book.addrs(peer_id), self.transport_addrs(),
                             circuits=self._circuits is not None)

    def advertise_confirmed(self, addrs: Sequence[Multiaddr]) -> None:
        """Advertise addresses that dial-back probes confirmed (a UPnP mapping, a forwarded port), ahead of
        the bound ones; empty goes back to the bound ones. Configured announce addresses are the operator's
        word and are kept as they are."""
        if not self.config.announce_addrs:
            bound = self.transport_addrs()
            self._announce = [*addrs, *(a for a in bound if a not in addrs)] if addrs else []

    def connected_peers(self) -> set[ID]:
        """Peers with at least one open connection (closed ones are dropped first; see ``prune_closed``)."""
        prune_closed(self._host.get_network())
        return set(self._host.get_connected_peers())

    @property
    def refused_by_address(self) -> int:
        """Connections closed because their address already had ``max_peers_per_address`` peers."""
        return self._watch.refused_by_address

    def is_connected(self, peer_id: ID) -> bool:
        return peer_id in self.connected_peers()

    def is_foreign(self, peer_id: ID) -> bool:
        """True once identify has told us the peer's protocols and none of them is ours.

        Why identify and not trial and error: a peer that does not speak a protocol answers ``na``, and
        py-libp2p logs every refused negotiation as a multi-line ERROR; a go-libp2p node connected to a
        daemon made it print one about once a second. Not ``supports this exact protocol``: handlers such as
        the payload server are registered after the host starts listening and identify is not pushed again
        then, so an early identify reply of a real member may lack them; but peer exchange is registered
        before listening, so a member's reply always names at least one /distro/ protocol. Unknown (identify
        not finished yet) is not foreign.
        """
        try:
            protocols = self._host.get_peerstore().get_protocols(peer_id)
        except Exception:  # PeerStoreError: nothing known about the peer yet
            return False
        return bool(protocols) and not any(str(p).startswith(OUR_PROTOCOL_PREFIX) for p in protocols)

    def member_peers(self) -> set[ID]:
        """Connected peers that may speak our protocols (members, or not yet identified): whom to ask for
        peers, payloads and state."""
        return {p for p in self.connected_peers() if not self.is_foreign(p)}

    def is_blocked(self, peer_id: ID) -> bool:
        return peer_id in self._blocked

    async def block(self, peer_id: ID) -> None:
        """Cut a banned peer off: close its connections, refuse its streams, never dial or advertise it.

        Why more than dropping its gossip: without this, peer exchange re-dials a banned peer within a
        second and it keeps costing bandwidth and CPU. If it dials us again, the connection stays up but
        every stream it opens is reset, so it gets nothing (payloads, state, peers) from us.
        """
        if peer_id == self.peer_id:
            return
        self._blocked.add(peer_id)
        await self.disconnect(peer_id)

    def unblock(self, peer_id: ID) -> None:
        """Let a peer cut off for a while (a muted stranger, protocol/gossip_mute.py) back in."""
        self._blocked.discard(peer_id)

    async def disconnect(self, peer_id: ID) -> None:
        """Close every connection to ``peer_id`` (bounded to 2 s; failures are logged, never raised)."""
        with trio.move_on_after(2.0):
            try:
                await self._host.get_network().close_peer(peer_id)
            except Exception as exc:  # the connection may already be going down
                logger.debug("closing connections to %s failed: %r", peer_id, exc)

    # --- stream handlers ----------------------------------------------------------------------------------

    def set_handler(self, protocol: TProtocol, handler: StreamHandler, *, members_only: bool = False) -> None:
        """Register a handler that can never take the connection down with it.

        In 0.8.1 the handler runs inside the connection's task group; an escaping exception would tear down
        the connection (and has been seen to kill the host). Any exception is logged and the stream reset.
        Banned peers (and a permissioned run's strangers) get a reset; with ``members_only`` so do peers
        identify shows to speak none of our protocols (``is_foreign``), for services of a standard libp2p
        protocol (the relay hop) that only the run's members may use.
        """

        async def guarded(stream: INetStream) -> None:
            peer = stream.muxed_conn.peer_id
            if not await self._serves(peer, protocol) or (members_only and self.is_foreign(peer)):
                await reset_quietly(stream)
                return
            try:
                await handler(stream)
            except Exception as exc:
                logger.debug("handler for %s failed: %r", protocol, exc)
                await reset_quietly(stream)

        self._host.set_stream_handler(protocol, guarded)

    def restrict(self, admitted: Callable[[ID], Awaitable[bool]],
                 open_protocols: frozenset[TProtocol]) -> None:
        """From now on reset every stream, except on ``open_protocols``, of a peer ``admitted`` refuses (a
        permissioned run's strangers; protocol/admission.py). It is awaited: a peer that just connected is
        showing its ticket at that moment, and its first streams (gossip among them, which py-libp2p does
        not open again) must not be reset for coming first."""
        self._admitted = admitted
        self._open_protocols = open_protocols

    async def _serves(self, peer_id: ID, protocol: TProtocol) -> bool:
        if peer_id in self._blocked:
            return False
        return self._admitted is None or protocol in self._open_protocols or await self._admitted(peer_id)

    def remove_handler(self, protocol: TProtocol) -> None:
        """Stop accepting a protocol (new streams for it are then reset during negotiation)."""
        try:
            self._host.remove_stream_handler(protocol)
        except KeyError:
            pass

    # --- connecting -------------------------------------------------------------------------------------

    async def connect(self, peer_id: ID, transports: Sequence[Multiaddr] = ()) -> None:
        """Ensure a connection, dialing the given or known addresses; DialError on failure or timeout."""
        if peer_id == self.peer_id:
            raise DialError(str(peer_id), "refusing to dial ourselves")
        if peer_id in self._blocked:
            raise DialError(str(peer_id), "banned")
        if self.is_connected(peer_id):  # prunes closed connections, so libp2p dials below
            return
        addrs = list(transports) or list(self.peer_book.addrs(peer_id))
        if not addrs:
            raise DialError(str(peer_id), "no known address")
        direct = [a for a in addrs if not is_circuit(a)]
        relayed = [a for a in addrs if is_circuit(a)] if self._circuits is not None else []
        if not direct and not relayed:
            raise DialError(str(peer_id), "only relayed addresses, and no relay client runs here")
        failures: list[str] = []
        async with self._dial_limit:
            if direct:  # direct first: a relay carries our traffic only when nothing else reaches the peer
                try:
                    await self._dial_direct(peer_id, direct)
                except DialError as exc:
                    if not relayed:
                        raise
                    failures.append(str(exc))
                else:
                    self.peer_book.add(peer_id, addrs)
                    return
            for addr in relayed[:2]:
                try:
                    with trio.fail_after(self.config.dial_timeout):
                        await cast(DialsCircuits, self._circuits).dial(addr, peer_id)
                except trio.TooSlowError:
                    failures.append(f"{addr}: timed out after {self.config.dial_timeout:g}s")
                except Exception as exc:  # ConnectionError from the relay, Noise failures...
                    failures.append(f"{addr}: {type(exc).__name__}: {exc}")
                else:
                    self.peer_book.add(peer_id, addrs)
                    return
        raise DialError(str(peer_id), "; ".join(failures))

    async def _dial_direct(self, peer_id: ID, addrs: list[Multiaddr]) -> None:
        try:
            with trio.fail_after(self.config.dial_timeout):
                await self._host.connect(PeerInfo(peer_id, addrs))
        except trio.TooSlowError as exc:
            raise DialError(str(peer_id), f"timed out after {self.config.dial_timeout:g}s") from exc
        except Exception as exc:  # SwarmException, OSError, Noise/multiselect failures...
            raise DialError(str(peer_id), f"{type(exc).__name__}: {exc}") from exc

    async def dial(self, addr: str | Multiaddr) -> ID:
        """Dial ``<transport>/p2p/<id>``; BadMultiaddrError before any network I/O if it does not parse."""
        peer_id, transport = split_peer_addr(addr)
        await self.connect(peer_id, [transport])
        return peer_id

    async def open_stream(self, peer_id: ID, protocol: TProtocol) -> INetStream:
        """Open a protocol stream, connecting first from the peer book if needed.

        A connection on which no stream opens within ``dial_timeout`` is closed, so the next call dials a
        fresh one. Why: TCP connections that lived through a partition come back with retransmission
        timers backed off to a minute or more; after a heal, state syncs and payload fetches on them timed
        out again and again (40 s each) while a new connection would have worked at once.
        """
        await self.connect(peer_id)
        if self.is_foreign(peer_id):
            raise ProtocolNotSpokenError(str(peer_id), str(protocol))
        try:
            with trio.fail_after(self.config.dial_timeout):
                return await self._host.new_stream(peer_id, [protocol])
        except trio.TooSlowError as exc:
            if self._may_redial(peer_id):
                logger.info("closing the connections to %s: no %s stream opened within %gs", peer_id,
                            protocol, self.config.dial_timeout)
                await self.disconnect(peer_id)
            raise DialError(str(peer_id), f"stream open timed out ({protocol})") from exc
        except Exception as exc:
            raise DialError(str(peer_id), f"cannot open {protocol}: {type(exc).__name__}: {exc}") from exc

    def _may_redial(self, peer_id: ID) -> bool:
        """Whether closing a slow connection to ``peer_id`` can be undone by dialing it again: not a direct
        one when we know no direct address of it (a peer behind a NAT: only it can dial), nor one to a peer
        that relays for us (closing it would cut every circuit through it); a relayed one always. Under load
        a stream open can take longer than the dial timeout on a healthy connection; closing those cut
        NAT'd peers off for good."""
        if peer_id in self._relays():
            return False
        if self.connection_kind(peer_id) is Kind.RELAYED:
            return True  # a circuit is dialed again through the relay
        return any(not is_circuit(a) for a in self.peer_book.addrs(peer_id))

    def remote_ip(self, peer_id: ID) -> str | None:
        """The IP address ``peer_id``'s connection to us comes from, as our socket sees it."""
        return self._watch.ip_of(peer_id)

    def new_peers(self) -> trio.MemoryReceiveChannel[ID]:
        """Peers as connections to them open (a subscription; see ConnectionWatch)."""
        return self._watch.new_peers()

    def lost_peers(self) -> trio.MemoryReceiveChannel[ID]:
        """A channel of peers whose last connection to us just closed (a crashed peer's kernel closes its
        sockets at once). Bounded: a subscriber that falls behind misses entries rather than growing memory.
        """
        return self._watch.lost_peers()

    async def wait_for_change(self) -> None:
        """Until a connection opens or closes."""
        await self._watch.changed.wait()

    async def wait_for_peers(self, count: int, timeout: float) -> None:
        """Block until at least ``count`` peers are connected; trio.TooSlowError after ``timeout``."""
        with trio.fail_after(timeout):
            while len(self.connected_peers()) < count:
                await self._watch.changed.wait()

    # --- bootstrap and peer exchange (see discovery.py) --------------------------------------------------

    async def bootstrap(self, addrs: Sequence[str | Multiaddr]) -> list[ID]:
        """Dial bootstrap peers, then learn and dial the rest of the swarm from them (``PeerDiscovery``)."""
        return await self.discovery.bootstrap(addrs)

    async def exchange_peers(self, peer_id: ID) -> list[ID]:
        """One peer-exchange round trip; returns the peer ids the remote told us about."""
        return await self.discovery.exchange_peers(peer_id)

    async def discover(self) -> None:
        """One periodic round: ask a few peers for theirs, dial the new ones, redial lost ones when due."""
        await self.discovery.discover()


@asynccontextmanager
async def open_host(key_pair: KeyPair, config: HostConfig | None = None) -> AsyncIterator[P2PHost]:
    """Run a host for the duration of the block; listening sockets are bound when it yields."""
    cfg = config or HostConfig()
    listen = [parse_multiaddr(a) for a in cfg.listen_addrs]
    libp2p_host = build_libp2p_host(key_pair, listen, cfg.read_pace_max_wait)
    host = P2PHost(libp2p_host, key_pair, cfg)
    host.set_handler(PX_PROTOCOL, host.discovery.serve)
    async with libp2p_host.run(listen_addrs=listen):
        try:
            async with trio.open_nursery() as nursery:
                if cfg.px_interval > 0:
                    nursery.start_soon(host.discovery.run)
                try:
                    yield host
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            # Leaving ``run()`` alone stops the swarm's tasks but, in 0.8.1, leaves the TCP listener
            # accepting: a later dial to the old port completed a Noise handshake with the dead host.
            # ``close()`` shuts connections and listeners explicitly.
            with trio.CancelScope(shield=True), trio.move_on_after(_CLOSE_TIMEOUT):
                await libp2p_host.close()

