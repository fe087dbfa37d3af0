"""Who may use our protocols: everyone in an open run; in a permissioned run the founder and ticket holders.

Tickets are shown on ``/distro/ticket/1.0.0``, one round trip in which each side presents its own ticket
(the founder has none: its id is in the manifest) and learns the other's. It runs on every new connection,
so both ends know within one round trip whom they are talking to. A stream a peer opens on any other
protocol waits up to :data:`ADMIT_WAIT` for its ticket and is then reset (``P2PHost.restrict``), gossip
streams included; what an admitted peer forwards from a stranger is dropped (the node's validator asks
:meth:`Admission.admits` about each message's signed publisher): a stranger gets no state, payloads, peer
lists or relaying, and cannot be listed, vote or lead, because honest peers never hear it. Open protocols:
this one, and the manifest (a joiner fetches it through a throwaway host before it has its identity's
connection).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from .errors import TransportError
from .host import P2PHost
from .manifest_rpc import MANIFEST_PROTOCOL
from .rpc import RpcStatus, call, install_rpc
from .tickets import MAX_TICKET_BYTES, Ticket, TicketError

logger = logging.getLogger(__name__)

TICKET_PROTOCOL = TProtocol("/distro/ticket/1.0.0")
OPEN_PROTOCOLS = frozenset({TICKET_PROTOCOL, MANIFEST_PROTOCOL})
PRESENT_TIMEOUT = 10.0
ADMIT_WAIT = 5.0  # how long a stream of a peer not yet admitted waits for its ticket before it is reset
MAX_TICKETS = 4096  # tickets remembered; the least recently shown goes first


class Admission:
    """One node's view of who is admitted. ``founder`` None: an open run (everyone is)."""

    def __init__(self, *, run_id: bytes, self_id: str, founder: str | None, own_ticket: Ticket | None,
                 clock: Callable[[], float] = time.time, admit_wait: float = ADMIT_WAIT) -> None:
        if founder is not None and own_ticket is None and self_id != founder:
            raise TicketError("a permissioned run admits only ticket holders: this peer needs a ticket "
                              "signed by the founder's key (distro-node ticket)")
        if founder is not None and own_ticket is not None:
            own_ticket.check(run_id=run_id, founder=founder, holder=self_id, now=clock())
        self._run_id = run_id
        self._self_id = self_id
        self.founder = founder
        self._own = own_ticket
        self._clock = clock
        self._admit_wait = admit_wait
        self._tickets: OrderedDict[str, Ticket] = OrderedDict()
        self._learned = trio.Event()  # set and replaced whenever a ticket is learned
        self.refused = 0  # tickets shown to us that admitted nobody

    @property
    def permissioned(self) -> bool:
        return self.founder is not None

    def admits(self, peer: str) -> bool:
        if self.founder is None or peer in (self.founder, self._self_id):
            return True
        ticket = self._tickets.get(peer)
        return ticket is not None and self._clock() < ticket.expires

    def admits_id(self, peer: ID) -> bool:
        return self.admits(str(peer))

    async def admitted(self, peer: ID) -> bool:
        """Whether ``peer`` is admitted, waiting up to ``admit_wait`` for a ticket exchange in flight."""
        with trio.move_on_after(self._admit_wait):
            while not self.admits_id(peer):
                await self._learned.wait()
        return self.admits_id(peer)

    def learn(self, holder: str, data: bytes) -> Ticket:
        """A ticket ``holder`` showed us; TicketError (nothing learned) unless it admits ``holder``."""
        if self.founder is None:
            raise TicketError("an open run takes no tickets")
        try:
            ticket = Ticket.from_bytes(data)
            ticket.check(run_id=self._run_id, founder=self.founder, holder=holder, now=self._clock())
        except TicketError:
            self.refused += 1
            raise
        self._tickets[holder] = ticket
        self._tickets.move_to_end(holder)
        learned, self._learned = self._learned, trio.Event()
        learned.set()
        while len(self._tickets) > MAX_TICKETS:
            self._tickets.popitem(last=False)
        return ticket

    def _own_bytes(self) -> bytes:
        return self._own.to_bytes() if self._own is not None else b""

    def install(self, host: P2PHost) -> None:
        """Serve ticket exchanges and reset every other stream of a peer we have not admitted."""
        async def handle(remote: ID, body: bytes) -> tuple[RpcStatus, bytes]:
            self._learn_shown(remote, body)
            return RpcStatus.OK, self._own_bytes()

        install_rpc(host, TICKET_PROTOCOL, handle, max_request=MAX_TICKET_BYTES, timeout=PRESENT_TIMEOUT)
        if self.permissioned:
            host.restrict(self.admitted, OPEN_PROTOCOLS)

    async def present(self, host: P2PHost, peer: ID) -> bool:
        """Show our ticket to ``peer`` and learn its own; whether it is admitted now."""
        try:
            reply = await call(host, peer, TICKET_PROTOCOL, self._own_bytes(), max_reply=MAX_TICKET_BYTES,
                               timeout=PRESENT_TIMEOUT)
        except TransportError as exc:
            logger.debug("ticket exchange with %s failed: %s", peer, exc)
            return self.admits_id(peer)
        self._learn_shown(peer, reply)
        return self.admits_id(peer)

    def _learn_shown(self, peer: ID, data: bytes) -> None:
        """Learn the ticket ``peer`` showed in an exchange, if it showed one we need; a bad one is logged."""
        if not data or self.admits_id(peer):
            return
        try:
            self.learn(str(peer), data)
        except TicketError as exc:
            logger.info("peer %s showed a ticket that does not admit it: %s", peer, exc)

    async def run(self, host: P2PHost) -> None:
        """Exchange tickets with every peer that connects (at most 8 exchanges at a time)."""
        if not self.permissioned:
            return
        limit = trio.Semaphore(8)
        new = host.new_peers()

        async def one(peer: ID) -> None:
            async with limit:
                await self.present(host, peer)

        async with trio.open_nursery() as nursery:
            for peer in host.connected_peers():
                nursery.start_soon(one, peer)
            async for peer in new:
                if not self.admits_id(peer):
                    nursery.start_soon(one, peer)


__all__ = ["OPEN_PROTOCOLS", "TICKET_PROTOCOL", "Admission"]
