"""Finding the swarm: bootstrap dialing, peer exchange (asking and answering) and redialing lost peers.

A joining node knows one bootstrap address; an all-to-all payload exchange needs everyone. Bootstrap dials
the given peers and asks each for the peers it knows; a periodic round then keeps asking a few connected
peers and redials known peers we lost (see ``RedialSchedule`` for why), so the swarm converges when several
nodes join at once and finds itself again after a partition heals. The wire codec and the address book are
in ``peer_exchange``; this module only decides whom to ask, what to answer and whom to dial.

It sees the host through :class:`DiscoveryHost`, not the host class, so the host can own one of these
without the two modules importing each other.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Protocol

import trio
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID
from multiaddr import Multiaddr

from .addrs import split_peer_addr, with_peer_id
from .errors import BootstrapError, DialError, PeerExchangeError, TransportError
from .host_config import HostConfig
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


class DiscoveryHost(Protocol):
    """What discovery needs from the host: who we are, whom we know and are connected to, and dialing."""

    @property
    def peer_id(self) -> ID: ...

    @property
    def config(self) -> HostConfig: ...

    @property
    def peer_book(self) -> PeerBook: ...

    @property
    def libp2p(self) -> IHost: ...

    def advertised_addrs(self, to: ID | None = None) -> list[Multiaddr]: ...

    def connected_peers(self) -> set[ID]: ...

    def is_connected(self, peer_id: ID) -> bool: ...

    def member_peers(self) -> set[ID]: ...

    def is_blocked(self, peer_id: ID) -> bool: ...

    async def connect(self, peer_id: ID, transports: Sequence[Multiaddr] = ()) -> None: ...

    async def disconnect(self, peer_id: ID) -> None: ...

    async def open_stream(self, peer_id: ID, protocol: TProtocol) -> INetStream: ...


class PeerDiscovery:
    """Bootstrap, peer exchange and redials for one host. ``serve`` is the host's peer-exchange stream
    handler and ``run`` its periodic round; ``open_host`` wires both."""

    def __init__(self, host: DiscoveryHost) -> None:
        self._host = host
        self._redials = RedialSchedule()
        # Bootstrap peers are never forgotten: when every link is down they are the way back in.
        self._pinned: set[ID] = set()
        self.isolated_since: float | None = None  # trio time our last member connection went, None if any
        self.isolated_redials = 0  # dials tried while no member was connected (status and tests read it)

    async def bootstrap(self, addrs: Sequence[str | Multiaddr]) -> list[ID]:
        """Dial bootstrap peers, then learn and dial the rest of the swarm from them.

        All addresses are parsed before any dial so a typo fails fast with BadMultiaddrError. Unreachable
        bootstrap peers are tolerated as long as one answers; if none does, BootstrapError.
        """
        own_id = self._host.peer_id
        targets = [split_peer_addr(a) for a in addrs]
        reached: list[ID] = []
        errors: list[str] = []

        async def dial_one(peer_id: ID, transport: Multiaddr) -> None:
            try:
                await self._host.connect(peer_id, [transport])
                reached.append(peer_id)
            except DialError as exc:
                errors.append(str(exc))

        async with trio.open_nursery() as nursery:
            for peer_id, transport in targets:
                if peer_id != own_id:
                    self._pinned.add(peer_id)
                    self._host.peer_book.add(peer_id, [transport])
                    nursery.start_soon(dial_one, peer_id, transport)
        if targets and not reached and any(p != own_id for p, _ in targets):
            raise BootstrapError("no bootstrap peer reachable: " + "; ".join(errors))
        for peer_id in reached:
            await self._exchange_and_dial(peer_id)
        return reached

    async def exchange_peers(self, peer_id: ID) -> list[ID]:
        """One peer-exchange round trip; returns the peer ids the remote told us about."""
        host = self._host
        stream = await host.open_stream(peer_id, PX_PROTOCOL)
        try:
            with trio.fail_after(host.config.px_timeout):
                await stream.write(encode_addr_list(host.advertised_addrs(peer_id), MAX_SELF_ADDRS))
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
        return host.peer_book.add_peer_addrs(reply, source=peer_id)

    def note_isolation(self, now: float) -> bool:
        """Track whether any member is connected; True while none is (we are isolated)."""
        if self._host.member_peers():
            self.isolated_since = None
            return False
        if self.isolated_since is None:
            self.isolated_since = now
        return True

    async def discover(self) -> None:
        """Ask a few connected peers for their peers and dial the new ones, then redial known peers we lost
        whose turn has come (one periodic round; see RedialSchedule for why).

        While no member is connected the failure is most likely ours (our link or router is down), so failed
        dials then never count towards forgetting a peer: an isolated node that forgot everyone it knew
        could never come back without a restart."""
        host = self._host
        isolated = self.note_isolation(trio.current_time())
        peers = sorted(host.member_peers(), key=str)
        random.shuffle(peers)
        for peer_id in peers[: host.config.px_fanout]:
            await self._exchange_and_dial(peer_id)
        connected = host.connected_peers()
        lost = [p for p in host.peer_book.known() if p not in connected and not host.is_blocked(p)]
        room = host.config.max_peers - len(connected)
        due = self._redials.due(lost, trio.current_time())[: max(room, 0)]
        if isolated:
            self.isolated_redials += len(due)
        async with trio.open_nursery() as nursery:
            for p in due:
                nursery.start_soon(self._dial_quietly, p, not isolated)

    async def run(self) -> None:
        """The periodic round, every ``px_interval`` (jittered so a swarm started together does not ask in
        lockstep); it also drops banned peers that dialed us again."""
        host = self._host
        while True:
            await trio.sleep(host.config.px_interval * random.uniform(0.8, 1.2))
            for peer_id in sorted((p for p in host.connected_peers() if host.is_blocked(p)), key=str):
                await host.disconnect(peer_id)
            await self.discover()

    async def serve(self, stream: INetStream) -> None:
        """Answer one peer-exchange request: remember the asker's own addresses, reply with ours and those
        of the members we are connected to."""
        remote = stream.muxed_conn.peer_id
        with trio.fail_after(self._host.config.px_timeout):
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
            self._host.peer_book.add(remote, own_claims)
            await stream.write(encode_addr_list(self._advertised_peers(exclude=remote), MAX_PX_ENTRIES))
        await stream.close()

    def _advertised_peers(self, exclude: ID) -> list[Multiaddr]:
        host = self._host
        out = list(host.advertised_addrs(exclude))
        for peer_id in sorted(host.member_peers(), key=str):
            if peer_id == exclude or host.is_blocked(peer_id):
                continue
            out.extend(with_peer_id(a, peer_id) for a in host.peer_book.addrs(peer_id)[:2])
            if len(out) >= MAX_PX_ENTRIES:
                break
        return out[:MAX_PX_ENTRIES]

    async def _exchange_and_dial(self, peer_id: ID) -> None:
        host = self._host
        try:
            learned = await self.exchange_peers(peer_id)
        except TransportError as exc:
            logger.debug("peer exchange with %s failed: %r", peer_id, exc)
            return
        new = [p for p in learned if p != host.peer_id and not host.is_connected(p)]
        room = host.config.max_peers - len(host.connected_peers())
        async with trio.open_nursery() as nursery:
            for p in new[: max(room, 0)]:
                nursery.start_soon(self._dial_quietly, p)

    async def _dial_quietly(self, peer_id: ID, may_forget: bool = True) -> None:
        # py-libp2p refuses for 60 s to dial a peer whose addresses all failed once; during a partition
        # every redial fails, so after the heal that cache, not the network, kept the sides apart for up
        # to a minute. RedialSchedule already spaces these dials out.
        unblock = getattr(self._host.libp2p.get_network(), "unblock_peer", None)
        if unblock is not None:
            unblock(peer_id)
        try:
            await self._host.connect(peer_id)
        except DialError as exc:
            logger.debug("could not dial known peer: %s", exc)
            give_up = self._redials.failed(peer_id, trio.current_time(), count=may_forget)
            if give_up and peer_id not in self._pinned:
                self._host.peer_book.forget(peer_id)
        else:
            self._redials.succeeded(peer_id)
