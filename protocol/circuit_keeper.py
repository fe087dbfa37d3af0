"""Keeps relayed connections alive across their relay's caps: the host side of circuit_renewal.py.

On the side that dialed a circuit (it knows circuit addresses of the peer): shortly before the relay's
time or byte cap it dials a fresh circuit (through the same relay first, else another one the peer
advertises), then retires the old one; a circuit cut while it was the peer's only connection (its relay
died) is dialed again at once, through another relay first. On either side, a circuit that a newer one to
the same peer supersedes is retired too: the other side learns of a renewal only by the new one arriving;
and when both sides dialed a circuit to each other, only the ones dialed by the smaller peer id are kept,
so that only one side renews.

Retiring a connection takes it out of the swarm's table, so every new stream (ours, and the library's
gossip stream once its old one ends) opens on the new one, while streams already on the old one go on; the
old one is closed once only long-lived gossip streams are left on it, or after a grace that ends well
before the cap. Closing it makes pubsub open its stream again on the connection that remains.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Awaitable, Callable

import trio
from libp2p.abc import INetConn
from libp2p.peer.id import ID
from multiaddr import Multiaddr

from .addrs import circuit_relay, is_circuit
from .circuit_dial import CircuitDialer
from .circuit_renewal import CircuitLife, Step, decide, next_wake, redial_order, settle_time, to_retire
from .circuits import is_relayed, open_conns
from .host import P2PHost

logger = logging.getLogger(__name__)

# Streams that live as long as their connection (pubsub's): they never end on their own, so a retired
# connection does not wait for them; pubsub opens them again on the connection that remains.
LASTING_PREFIXES = ("/meshsub/", "/floodsub/")
DRAIN_POLL_S = 0.25  # how often a retired connection with streams in flight is looked at
CLOSE_TIMEOUT_S = 2.0
MAX_RETIRED_INBOUND = 1024
ASKED_FOR_ADDRS = 2  # members asked for a cut peer's circuit addresses when none we know works


def _busy(conn: INetConn) -> bool:
    """Whether streams other than long-lived ones are open on ``conn`` (one still negotiating counts)."""
    for stream in conn.get_streams():
        protocol = stream.get_protocol()
        if protocol is None or not str(protocol).startswith(LASTING_PREFIXES):
            return True
    return False


def _opened_at(conn: INetConn) -> float:
    return float(getattr(conn, "_created_at", 0.0))  # the library's SwarmConn records it


class CircuitKeeper:
    def __init__(self, host: P2PHost, dialer: CircuitDialer, retry_seconds: float) -> None:
        self._host = host
        self._dialer = dialer
        self._retry_s = retry_seconds
        self.inbound: dict[INetConn, CircuitLife] = {}  # circuits others dialed to us, once superseded
        self.renewed = 0  # circuits replaced before their cap
        self.redialed = 0  # circuits dialed again after a cut
        self.retired_closed = 0  # retired circuits we closed

    def through(self) -> dict[str, str]:
        """Peer -> relay of each circuit we dialed that carries new streams (for status and events)."""
        return {str(c.peer): str(c.relay) for conn, c in self._dialer.circuits.items()
                if c.life.retired_at is None and not getattr(conn.muxed_conn, "is_closed", False)}

    async def run(self) -> None:
        while True:
            try:
                wake = await self.tend()
            except Exception as exc:  # a library surprise must not take the node down with the keeper
                logger.warning("circuit keeper pass failed: %r", exc, exc_info=True)
                wake = trio.current_time() + self._retry_s
            # Events during a pass are not seen by the waits below: a pass that acted looks again at once,
            # and no wait is longer than the retry interval.
            with trio.move_on_at(min(wake, trio.current_time() + self._retry_s)):
                async with trio.open_nursery() as nursery:
                    for wait in (self._host.wait_for_change, self._dialer.changed.wait):
                        nursery.start_soon(_then_cancel, wait, nursery.cancel_scope)

    async def tend(self) -> float:
        """One pass over every circuit; returns when the next pass is due (sooner if a connection opens or
        closes, or a circuit nears its byte cap)."""
        now = trio.current_time()
        acted = self._retire_superseded(now)
        wakes: list[float] = []
        async with trio.open_nursery() as nursery:
            circuits = [(conn, c.peer, c.life, True) for conn, c in self._dialer.circuits.items()]
            circuits += [(conn, conn.muxed_conn.peer_id, life, False) for conn, life in self.inbound.items()]
            for conn, peer, life, outbound in circuits:
                step = self._step(conn, peer, life, now, outbound=outbound)
                if step is Step.RENEW or step is Step.REDIAL:
                    nursery.start_soon(self._redial, conn, step)
                elif step is Step.CLOSE:
                    nursery.start_soon(_close, conn)
                elif step is Step.KEEP:
                    wakes.append(self._wake(conn, life, now))
                acted = acted or step is not Step.KEEP
        return now if acted else min(wakes, default=math.inf)

    def _wake(self, conn: INetConn, life: CircuitLife, now: float) -> float:
        at = next_wake(life, self._dialer.margins)
        if life.retired_at is not None:  # idle from its settle time on, or still draining: look again soon
            settle = settle_time(life, self._dialer.margins)
            at = min(at if at is not None else math.inf,
                     max(now + DRAIN_POLL_S, settle if settle is not None else now))
        return at if at is not None else math.inf

    def _step(self, conn: INetConn, peer: ID, life: CircuitLife, now: float, *, outbound: bool) -> Step:
        """Decide for one circuit and do what needs no waiting (retire, forget)."""
        is_open = not getattr(conn.muxed_conn, "is_closed", False) and not getattr(conn, "is_closed", False)
        others = any(c is not conn for c in open_conns(self._host.libp2p, peer))
        step = decide(life, now, self._dialer.margins, is_open=is_open, busy=is_open and _busy(conn),
                      others=others, outbound=outbound)
        if step is Step.RETIRE:
            self._retire(conn, life, now)
        elif step is Step.CLOSE or step is Step.FORGET:
            self._forget(conn)
            self.retired_closed += step is Step.CLOSE
        return step

    def _forget(self, conn: INetConn) -> None:
        self._dialer.circuits.pop(conn, None)
        self.inbound.pop(conn, None)

    def _retire(self, conn: INetConn, life: CircuitLife, now: float) -> None:
        """Stop new streams going to ``conn``: out of the swarm's table, still running."""
        life.retired_at = now
        network = self._host.libp2p.get_network()
        peer = conn.muxed_conn.peer_id
        table: dict[ID, list[INetConn]] = network.connections
        left = [c for c in table.get(peer, []) if c is not conn]
        if left:
            table[peer] = left
        else:
            table.pop(peer, None)

    def _retire_superseded(self, now: float) -> bool:
        """Retire every relayed connection that another one to the same peer replaces (a renewal, or both
        sides dialing at once; circuit_renewal.to_retire); True if any was."""
        acted = False
        for peer, conns in list(self._host.libp2p.get_network().get_connections_map().items()):
            relayed = [c for c in conns if is_relayed(c) and not getattr(c.muxed_conn, "is_closed", False)]
            if len(relayed) < 2:
                continue
            ours = [(c, _opened_at(c)) for c in relayed if c in self._dialer.circuits]
            theirs = [(c, _opened_at(c)) for c in relayed if c not in self._dialer.circuits]
            for old in to_retire(ours, theirs, ours_kept=str(self._host.peer_id) < str(peer)):
                circuit = self._dialer.circuits.get(old)
                if circuit is not None:
                    self._retire(old, circuit.life, now)
                elif len(self.inbound) < MAX_RETIRED_INBOUND:
                    life = CircuitLife(opened_at=_opened_at(old), seconds=None, bytes_cap=None)
                    self.inbound[old] = life
                    self._retire(old, life, now)
                acted = True
            logger.debug("%s: %d relayed connections, %d ours", peer, len(relayed), len(ours))
        return acted

    async def _redial(self, conn: INetConn, step: Step) -> None:
        """Open a fresh circuit to the peer of ``conn``: before its cap (RENEW), or after a cut (REDIAL).

        After a cut, when no circuit address we know works (they may all name the dead relay: we learned
        them before the peer reserved on another), a member or two are asked for the peer's current ones.
        """
        circuit = self._dialer.circuits.get(conn)
        if circuit is None:  # forgotten meanwhile (bounded table)
            return
        cut = step is Step.REDIAL
        if cut:
            self._forget(conn)
        tried: set[Multiaddr] = set()
        for ask in (False, True):
            if ask:
                if not cut:
                    break
                await self._ask_addrs(circuit.peer)
            known = [a for a in self._host.peer_book.addrs(circuit.peer) if is_circuit(a)]
            if circuit.transport not in known:
                known.append(circuit.transport)
            addrs: list[tuple[Multiaddr, ID | None]] = [(a, circuit_relay(a)) for a in known
                                                         if a not in tried]
            for addr in redial_order(addrs, circuit.relay, cut=cut):
                tried.add(addr)
                if await self._dial(addr, circuit.peer):
                    if cut:
                        self.redialed += 1
                    else:
                        self.renewed += 1
                        self._retire(conn, circuit.life, trio.current_time())
                    logger.info("%s circuit to %s via %s", "redialed" if cut else "renewed", circuit.peer,
                                addr)
                    return
        circuit.life.retry_at = trio.current_time() + self._retry_s

    async def _dial(self, addr: Multiaddr, peer: ID) -> bool:
        try:
            with trio.fail_after(self._host.config.dial_timeout):
                await self._dialer.dial(addr, peer)
        except Exception as exc:  # DialError, a refusal by the relay, Noise failures, a timeout
            logger.info("no fresh circuit to %s via %s: %r", peer, addr, exc)
            return False
        return True

    async def _ask_addrs(self, peer: ID) -> None:
        """Peer exchange with up to ASKED_FOR_ADDRS members (what they know of ``peer`` lands in the peer
        book); failures are only logged."""
        members = sorted(self._host.member_peers() - {peer}, key=str)
        for member in random.sample(members, min(ASKED_FOR_ADDRS, len(members))):
            try:
                await self._host.exchange_peers(member)
            except Exception as exc:  # PeerExchangeError, DialError
                logger.info("asking %s for addresses of %s failed: %r", member, peer, exc)


async def _then_cancel(wait: Callable[[], Awaitable[object]], scope: trio.CancelScope) -> None:
    await wait()
    scope.cancel()


async def _close(conn: INetConn) -> None:
    with trio.move_on_after(CLOSE_TIMEOUT_S):
        try:
            await conn.close()
        except Exception as exc:  # already going down
            logger.debug("closing a retired circuit failed: %r", exc)
