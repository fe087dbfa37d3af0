"""A private peer's relays: reservations on two public members, replaced when one leaves, and the circuit
addresses they give us to advertise.

Why two: a relay that leaves (or restarts) would cut a private peer off from every other private peer until
a new reservation is made; with two, the other keeps it reachable meanwhile. Which members can relay is not
known in advance (a peer serves the hop only once dial-back probes confirmed it public), so candidates are
simply asked, public-looking ones first; one that does not speak the hop answers at once.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

import trio
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
from libp2p.relay.circuit_v2.transport import CircuitV2Transport
from multiaddr import Multiaddr

from .addrs import CIRCUIT, is_circuit, is_private
from .circuit_dial import CircuitDialer
from .circuit_keeper import CircuitKeeper
from .circuits import Kind
from .errors import TransportError
from .host import P2PHost
from .relay_config import RelayClientConfig
from .relay_service import HOP_PROTOCOL, RelayService
from .wire import reset_quietly

logger = logging.getLogger(__name__)

REFRESH_AT = 0.8  # renew a reservation once this share of its lifetime has passed
ASK_AGAIN_S = 15.0  # a member that gave no reservation (not a relay yet, or full) is asked again after this
MAX_ASKED = 1024


class RelayClient:
    """Holds up to ``config.relays`` reservations while ``wanted()`` (our verdict is private)."""

    def __init__(self, host: P2PHost, service: RelayService, config: RelayClientConfig | None = None) -> None:
        self._host = host
        self.config = config or RelayClientConfig()
        # STOP only: the library's CLIENT role would make a reservation on every relay we merely dial through.
        self.transport = CircuitV2Transport(host.libp2p, service.protocol, RelayConfig(roles=RelayRole.STOP))
        self.circuits = CircuitDialer(host, self.config.margins())  # our relayed dials, renewed by the keeper
        self.keeper = CircuitKeeper(host, self.circuits, self.config.check_seconds)
        self.held: dict[ID, tuple[Multiaddr, float, float]] = {}  # relay -> (its address, since, expires)
        self.failovers = 0  # reservations replaced after their relay went away
        self._asked: dict[ID, float] = {}  # when each candidate was last asked (monotonic)
        host.use_relays(self.circuits, self.circuit_addrs, lambda: self.held.keys())

    def circuit_addrs(self) -> list[Multiaddr]:
        """``<relay address>/p2p/<relay>/p2p-circuit`` for every relay holding a reservation for us."""
        return [Multiaddr(f"{addr}/p2p/{relay}/{CIRCUIT}") for relay, (addr, _, _) in sorted(
            self.held.items(), key=lambda kv: str(kv[0]))]

    async def run(self, wanted: Callable[[], bool]) -> None:
        while True:
            if wanted():
                await self.round()
            else:
                self.held.clear()
            await trio.sleep(self.config.check_seconds)

    async def round(self) -> None:
        """Drop reservations whose relay is gone or that near their end, then reserve up to the target."""
        now = time.time()
        for relay, (_, since, expires) in list(self.held.items()):
            lapsing = expires and now >= since + (expires - since) * REFRESH_AT
            if not self._host.is_connected(relay) or lapsing:
                del self.held[relay]
                self.failovers += not lapsing
        for relay in self._candidates():
            if len(self.held) >= self.config.relays:
                break
            await self.reserve(relay)

    def _candidates(self) -> list[ID]:
        """Members we hold a direct connection to (a relay refuses reservations over a relayed one) and no
        reservation on, those with a non-private address first; each asked at most every ASK_AGAIN_S."""
        now = time.monotonic()
        peers = [p for p in self._host.member_peers() if p not in self.held
                 and self._asked.get(p, -ASK_AGAIN_S) <= now - ASK_AGAIN_S
                 and self._host.connection_kind(p) is Kind.DIRECT]
        random.shuffle(peers)
        return sorted(peers, key=lambda p: not self._public_addr(p))

    def _public_addr(self, peer: ID) -> Multiaddr | None:
        addrs = [a for a in self._host.peer_book.addrs(peer) if not is_circuit(a)]
        return next((a for a in addrs if not is_private(a)), addrs[0] if addrs else None)

    async def reserve(self, relay: ID) -> bool:
        """Ask ``relay`` for a reservation; True when it gave one."""
        addr = self._public_addr(relay)
        if addr is None:
            return False
        self._asked[relay] = time.monotonic()
        while len(self._asked) > MAX_ASKED:
            del self._asked[next(iter(self._asked))]
        try:
            stream = await self._host.open_stream(relay, HOP_PROTOCOL)
        except TransportError as exc:
            logger.debug("no hop from %s: %s", relay, exc)
            return False
        try:
            ok = await self.transport._make_reservation(stream, relay)
        finally:
            await reset_quietly(stream)
        if ok:
            expires = float(self.transport._reservations.get(relay, 0))
            self.held[relay] = (addr, time.time(), expires)
        return ok
