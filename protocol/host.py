"""The node's libp2p host: one identity, Noise, yamux, TCP, plus bootstrap and peer exchange.

py-libp2p 0.8.1's ``new_host`` offers Noise, TLS, SECIO and *plaintext* by default and mplex next to yamux;
we pin exactly Noise + yamux so no peer can negotiate us down to an unauthenticated or weaker channel.

Start order matters: services that register stream handlers or network notifees (gossip, payload server)
must be attached after ``open_host`` yields and before ``bootstrap`` connects to anyone, or they miss the
first connections. ``open_gossip`` re-registers already connected peers, but handlers must exist first.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import cast

import trio
from libp2p import new_host
from libp2p.abc import IHost, IMuxedConn, INetConn, INetStream, INetwork, INotifee
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from multiaddr import Multiaddr

from .addrs import parse_multiaddr, split_peer_addr, with_peer_id
from .errors import (
    BadMultiaddrError,
    BootstrapError,
    DialError,
    PeerExchangeError,
    ProtocolNotSpokenError,
    TransportError,
)
from .identity import peer_id_of
from .peer_exchange import (
    MAX_PX_ENTRIES,
    MAX_SELF_ADDRS,
    PX_PROTOCOL,
    PeerBook,
    RedialSchedule,
    encode_addr_list,
    read_addr_list,
)
from .wire import reset_quietly

logger = logging.getLogger(__name__)

_CLOSE_TIMEOUT = 5.0

StreamHandler = Callable[[INetStream], Awaitable[None]]


@dataclass(frozen=True)
class HostConfig:
    """Knobs for the host; defaults suit a WAN swarm, tests shorten the intervals."""

    listen_addrs: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    # Transport addresses (no /p2p/) peer exchange advertises instead of the bound ones: behind NAT or in a
    # container the bound address (0.0.0.0, a bridge IP) is not where others can reach us. Empty: bound ones.
    announce_addrs: tuple[str, ...] = ()
    dial_timeout: float = 10.0
    # Periodic peer exchange keeps the swarm converging when several nodes join through one bootstrap at
    # the same moment (each may ask before the others are known). 0 disables the loop.
    px_interval: float = 30.0
    px_fanout: int = 3
    px_timeout: float = 10.0
    max_peers: int = 64
    dial_concurrency: int = 8

    def __post_init__(self) -> None:
        if not self.listen_addrs:
            raise ValueError("HostConfig.listen_addrs must not be empty")
        for name in ("dial_timeout", "px_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"HostConfig.{name} must be > 0")
        if self.px_interval < 0:
            raise ValueError("HostConfig.px_interval must be >= 0")
        for name in ("px_fanout", "max_peers", "dial_concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"HostConfig.{name} must be >= 1")


_LOST_BUFFER = 256
# Every protocol of ours starts with this; every distro node serves peer exchange from before it listens.
OUR_PROTOCOL_PREFIX = "/distro/"


def _prune_closed(network: INetwork) -> None:
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


class _ConnectionWatch(INotifee):
    """Turns swarm connect/disconnect callbacks into a trio.Event so waiters need no polling, and tells
    subscribers when the last connection to a peer has closed."""

    def __init__(self) -> None:
        self.changed = trio.Event()
        self.lost_sinks: list[trio.MemorySendChannel[ID]] = []

    def _bump(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        return None

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        self._bump()

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        self._bump()
        peer_id = conn.muxed_conn.peer_id
        if not self.lost_sinks:
            return
        _prune_closed(network)
        if not network.get_connections(peer_id):
            for sink in list(self.lost_sinks):
                try:
                    sink.send_nowait(peer_id)
                except trio.WouldBlock:
                    logger.debug("lost-peer subscriber is behind; dropped %s", peer_id)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self.lost_sinks.remove(sink)

    async def listen(self, network: INetwork, multiaddr: Multiaddr) -> None:
        return None

    async def listen_close(self, network: INetwork, multiaddr: Multiaddr) -> None:
        return None


class P2PHost:
    """Our view of a running libp2p host. Created by ``open_host``; not constructed directly."""

    def __init__(self, libp2p_host: IHost, key_pair: KeyPair, config: HostConfig) -> None:
        self._host = libp2p_host
        self.key_pair = key_pair
        self.peer_id: ID = peer_id_of(key_pair)
        self.config = config
        self.peer_book = PeerBook(self.peer_id)
        self._watch = _ConnectionWatch()
        self._dial_limit = trio.Semaphore(config.dial_concurrency)
        self._announce = [parse_multiaddr(a) for a in config.announce_addrs]
        self._blocked: set[ID] = set()  # banned peers: never dialed, streams refused, never advertised
        self._redials = RedialSchedule()
        for addr in self._announce:
            if "p2p" in [p.name for p in addr.protocols()]:
                raise BadMultiaddrError(str(addr), "announce addresses take no /p2p/ part")
        libp2p_host.get_network().register_notifee(self._watch)

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

    def advertised_addrs(self) -> list[Multiaddr]:
        """What peer exchange tells others about us: the announce addresses when configured, else the bound
        ones, with ``/p2p/<our id>``."""
        if self._announce:
            return [with_peer_id(a, self.peer_id) for a in self._announce]
        return self.addrs()

    def connected_peers(self) -> set[ID]:
        """Peers with at least one open connection (closed ones are dropped first; see ``_prune_closed``)."""
        _prune_closed(self._host.get_network())
        return set(self._host.get_connected_peers())

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

    async def disconnect(self, peer_id: ID) -> None:
        """Close every connection to ``peer_id`` (bounded to 2 s; failures are logged, never raised)."""
        with trio.move_on_after(2.0):
            try:
                await self._host.get_network().close_peer(peer_id)
            except Exception as exc:  # the connection may already be going down
                logger.debug("closing connections to %s failed: %r", peer_id, exc)

    # --- stream handlers ----------------------------------------------------------------------------------

    def set_handler(self, protocol: TProtocol, handler: StreamHandler) -> None:
        """Register a handler that can never take the connection down with it.

        In 0.8.1 the handler runs inside the connection's task group; an escaping exception would tear down
        the connection (and has been seen to kill the host). Any exception is logged and the stream reset.
        """

        async def guarded(stream: INetStream) -> None:
            if stream.muxed_conn.peer_id in self._blocked:
                await reset_quietly(stream)
                return
            try:
                await handler(stream)
            except Exception as exc:
                logger.debug("handler for %s failed: %r", protocol, exc)
                await reset_quietly(stream)

        self._host.set_stream_handler(protocol, guarded)

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
        async with self._dial_limit:
            try:
                with trio.fail_after(self.config.dial_timeout):
                    await self._host.connect(PeerInfo(peer_id, addrs))
            except trio.TooSlowError as exc:
                raise DialError(str(peer_id), f"timed out after {self.config.dial_timeout:g}s") from exc
            except Exception as exc:  # SwarmException, OSError, Noise/multiselect failures...
                raise DialError(str(peer_id), f"{type(exc).__name__}: {exc}") from exc
        self.peer_book.add(peer_id, addrs)

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
            await self.disconnect(peer_id)
            raise DialError(str(peer_id), f"stream open timed out ({protocol})") from exc
        except Exception as exc:
            raise DialError(str(peer_id), f"cannot open {protocol}: {type(exc).__name__}: {exc}") from exc

    def lost_peers(self) -> trio.MemoryReceiveChannel[ID]:
        """A channel of peers whose last connection to us just closed (a crashed peer's kernel closes its
        sockets at once). Bounded: a subscriber that falls behind misses entries rather than growing memory.
        """
        send, receive = trio.open_memory_channel[ID](_LOST_BUFFER)
        self._watch.lost_sinks.append(send)
        return receive

    async def wait_for_peers(self, count: int, timeout: float) -> None:
        """Block until at least ``count`` peers are connected; trio.TooSlowError after ``timeout``."""
        with trio.fail_after(timeout):
            while len(self.connected_peers()) < count:
                await self._watch.changed.wait()

    # --- bootstrap and peer exchange ----------------------------------------------------------------------

    async def bootstrap(self, addrs: Sequence[str | Multiaddr]) -> list[ID]:
        """Dial bootstrap peers, then learn and dial the rest of the swarm from them.

        All addresses are parsed before any dial so a typo fails fast with BadMultiaddrError. Unreachable
        bootstrap peers are tolerated as long as one answers; if none does, BootstrapError.
        """
        targets = [split_peer_addr(a) for a in addrs]
        reached: list[ID] = []
        errors: list[str] = []

        async def dial_one(peer_id: ID, transport: Multiaddr) -> None:
            try:
                await self.connect(peer_id, [transport])
                reached.append(peer_id)
            except DialError as exc:
                errors.append(str(exc))

        async with trio.open_nursery() as nursery:
            for peer_id, transport in targets:
                if peer_id != self.peer_id:
                    nursery.start_soon(dial_one, peer_id, transport)
        if targets and not reached and any(p != self.peer_id for p, _ in targets):
            raise BootstrapError("no bootstrap peer reachable: " + "; ".join(errors))
        for peer_id in reached:
            await self._exchange_and_dial(peer_id)
        return reached

    async def exchange_peers(self, peer_id: ID) -> list[ID]:
        """One peer-exchange round trip; returns the peer ids the remote told us about."""
        stream = await self.open_stream(peer_id, PX_PROTOCOL)
        try:
            with trio.fail_after(self.config.px_timeout):
                await stream.write(encode_addr_list(self.advertised_addrs(), MAX_SELF_ADDRS))
                reply = await read_addr_list(stream, MAX_PX_ENTRIES)
                await stream.close()
        except PeerExchangeError:
            await reset_quietly(stream)
            raise
        except trio.TooSlowError as exc:
            await reset_quietly(stream)
            raise PeerExchangeError(f"peer exchange with {peer_id} timed out") from exc
        except Exception as exc:  # stream reset/EOF types from libp2p
            await reset_quietly(stream)
            raise PeerExchangeError(f"peer exchange with {peer_id} failed: {exc!r}") from exc
        except BaseException:
            await reset_quietly(stream)
            raise
        return self.peer_book.add_peer_addrs(reply)

    async def discover(self) -> None:
        """Ask a few connected peers for their peers and dial the new ones, then redial known peers we lost
        whose turn has come (one periodic round; see RedialSchedule for why)."""
        peers = sorted(self.member_peers(), key=str)
        random.shuffle(peers)
        for peer_id in peers[: self.config.px_fanout]:
            await self._exchange_and_dial(peer_id)
        connected = self.connected_peers()
        lost = [p for p in self.peer_book.known() if p not in connected and p not in self._blocked]
        room = self.config.max_peers - len(connected)
        due = self._redials.due(lost, trio.current_time())[: max(room, 0)]
        async with trio.open_nursery() as nursery:
            for p in due:
                nursery.start_soon(self._dial_quietly, p)

    async def _exchange_and_dial(self, peer_id: ID) -> None:
        try:
            learned = await self.exchange_peers(peer_id)
        except TransportError as exc:
            logger.debug("peer exchange with %s failed: %r", peer_id, exc)
            return
        new = [p for p in learned if p != self.peer_id and not self.is_connected(p)]
        room = self.config.max_peers - len(self.connected_peers())
        async with trio.open_nursery() as nursery:
            for p in new[: max(room, 0)]:
                nursery.start_soon(self._dial_quietly, p)

    async def _dial_quietly(self, peer_id: ID) -> None:
        # py-libp2p refuses for 60 s to dial a peer whose addresses all failed once; during a partition
        # every redial fails, so after the heal that cache, not the network, kept the sides apart for up
        # to a minute. RedialSchedule already spaces these dials out.
        unblock = getattr(self._host.get_network(), "unblock_peer", None)
        if unblock is not None:
            unblock(peer_id)
        try:
            await self.connect(peer_id)
        except DialError as exc:
            logger.debug("could not dial known peer: %s", exc)
            if self._redials.failed(peer_id, trio.current_time()):
                self.peer_book.forget(peer_id)
        else:
            self._redials.succeeded(peer_id)

    async def _serve_peer_exchange(self, stream: INetStream) -> None:
        remote = stream.muxed_conn.peer_id
        with trio.fail_after(self.config.px_timeout):
            their_addrs = await read_addr_list(stream, MAX_SELF_ADDRS)
            # A peer may only speak for itself: /p2p/ parts naming anyone else are ignored.
            own_claims = []
            for addr in their_addrs:
                try:
                    claimed, transport = split_peer_addr(addr)
                except TransportError:
                    claimed, transport = remote, addr
                if claimed == remote:
                    own_claims.append(transport)
            self.peer_book.add(remote, own_claims)
            await stream.write(encode_addr_list(self._advertised_peers(exclude=remote), MAX_PX_ENTRIES))
        await stream.close()

    def _advertised_peers(self, exclude: ID) -> list[Multiaddr]:
        out = list(self.advertised_addrs())
        for peer_id in sorted(self.member_peers(), key=str):
            if peer_id == exclude or peer_id in self._blocked:
                continue
            out.extend(with_peer_id(a, peer_id) for a in self.peer_book.addrs(peer_id)[:2])
            if len(out) >= MAX_PX_ENTRIES:
                break
        return out[:MAX_PX_ENTRIES]

    async def _peer_exchange_loop(self) -> None:
        while True:
            await trio.sleep(self.config.px_interval * random.uniform(0.8, 1.2))
            for peer_id in sorted(self.connected_peers() & self._blocked, key=str):  # it dialed us again
                await self.disconnect(peer_id)
            await self.discover()


def _build_libp2p_host(key_pair: KeyPair, listen: list[Multiaddr]) -> IHost:
    noise = NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)
    host = new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: noise},
        muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): cast(type[IMuxedConn], Yamux)},
        listen_addrs=listen,
        enable_mDNS=False,
        enable_upnp=False,
    )
    # py-libp2p 0.8.1's AutoConnector dials every address in the peerstore whenever there are fewer than
    # ~150 connections, including the ephemeral source ports of inbound connections, which never listen
    # (soak: 252 failed dials on the bootstrap peer in 200 rounds). Its target is the midpoint of the
    # watermarks, which no ConnectionConfig can set to "never" without also pruning every connection, so
    # its check is replaced on this host's instance; peer exchange does our dialing.
    connector = getattr(host.get_network(), "auto_connector", None)  # the swarm's, not in INetwork
    if connector is not None:
        connector.maybe_connect = _no_auto_dials
    return host


async def _no_auto_dials() -> None:
    return None


@asynccontextmanager
async def open_host(key_pair: KeyPair, config: HostConfig | None = None) -> AsyncIterator[P2PHost]:
    """Run a host for the duration of the block; listening sockets are bound when it yields."""
    cfg = config or HostConfig()
    listen = [parse_multiaddr(a) for a in cfg.listen_addrs]
    libp2p_host = _build_libp2p_host(key_pair, listen)
    host = P2PHost(libp2p_host, key_pair, cfg)
    host.set_handler(PX_PROTOCOL, host._serve_peer_exchange)
    async with libp2p_host.run(listen_addrs=listen):
        try:
            async with trio.open_nursery() as nursery:
                if cfg.px_interval > 0:
                    nursery.start_soon(host._peer_exchange_loop)
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

