"""How this peer moves payloads: both payload protocols' servers, and the pull the fetcher uses.

Both servers are installed whatever this peer fetches with, so a peer that pulls whole payloads
(``network.payload_fetch = "whole"``, or an older peer) and one that fetches pieces serve each other.
``pieces`` (the default) fetches each payload in verified pieces from every holder at once and serves each
piece as soon as it is in (protocol/swarm_fetch.py): a slow origin uploads each piece about once and the
fast peers carry the rest. ``whole`` downloads the payload from one holder at a time, origin first
(protocol/payload_fetch.py): the origin uploads (N - 1) copies.
"""

from __future__ import annotations

from collections.abc import Callable

from distro_node.node.config.schema import PAYLOAD_FETCHES
from distro_node.protocol.circuits import Kind
from distro_node.protocol.consensus.config import RoundConfig
from distro_node.protocol.fetch_plan import Route
from distro_node.protocol.host import P2PHost
from distro_node.protocol.partials import PartialPayloads
from distro_node.protocol.payload_fetch import pull_payload
from distro_node.protocol.pieces_serve import PiecesServer
from distro_node.protocol.pieces_wire import PiecesConfig
from distro_node.protocol.store import PayloadStore
from distro_node.protocol.swarm_fetch import fetch_swarm
from distro_node.protocol.swarm_first_copies import PeerRates
from distro_node.protocol.swarm_request import FetchStats, SwarmRequest
from distro_node.protocol.swarm_turns import HolderGate
from distro_node.protocol.transfer import PayloadRequest, PayloadServer, TransferConfig
from libp2p.peer.id import ID

from .payloads import ByteCounters

_ROUTE = {Kind.DIRECT: Route.DIRECT, Kind.RELAYED: Route.RELAYED}


def routes(holders: list[ID], kind: Callable[[ID], Kind],
           dialable: Callable[[ID], bool]) -> list[tuple[ID, Route]]:
    """Each holder with how we reach it (direct ones are asked first, then relayed ones, then those to
    dial), in the given order; one we hold no connection to and have no address worth dialing for is left
    out, so it costs no dial timeout (a NAT'd peer known only by its private address)."""
    out: list[tuple[ID, Route]] = []
    for h in holders:
        k = kind(h)
        if k in _ROUTE:
            out.append((h, _ROUTE[k]))
        elif dialable(h):
            out.append((h, Route.DIAL))
    return out


def piece_fetch_timeout(rounds: RoundConfig) -> float:
    """How long one piece fetch may run: as long as the round machine could still use its payload (the
    collection, a leader's turn, then ``apply_timeout`` once decided), and never less than the protocol's
    default. With a fixed 60 s, a run whose rounds were lengthened for slow lines (32 peers on 20/2 Mbit
    with 1.77 MB payloads need over 200 s to exchange everything) cut its fetches off every minute: the
    pieces stay (protocol/partials.py), but the next try opens new sessions and starts its scheduler from
    nothing (no holder's have-map, rate or turn)."""
    useful = rounds.collect_timeout + rounds.leader_timeout + rounds.apply_timeout
    return max(PiecesConfig.fetch_timeout, useful)


class PayloadExchange:
    """The payload servers of one run, and one ``pull`` for the fetcher whichever protocol it uses."""

    def __init__(self, host: P2PHost, store: PayloadStore, counters: ByteCounters, *, max_payload_bytes: int,
                 fetch: str, fetch_timeout: float = PiecesConfig.fetch_timeout) -> None:
        """``counters``: bytes uploaded by either server, and bytes downloaded by ``pull``;
        ``fetch_timeout``: one piece fetch's limit (:func:`piece_fetch_timeout` of the run's rounds)."""
        if fetch not in PAYLOAD_FETCHES:
            raise ValueError(f"payload fetch {fetch!r} is not one of {', '.join(PAYLOAD_FETCHES)}")
        self._host = host
        self.store = store
        self._counters = counters
        self.fetch = fetch
        self.transfer = TransferConfig(max_payload_bytes=max_payload_bytes, attempt_timeout=20.0)
        self.pieces = PiecesConfig(max_payload_bytes=max_payload_bytes, fetch_timeout=fetch_timeout)
        self.partials = PartialPayloads()
        self.gate = HolderGate()  # one request to a holder at once over all our piece fetches
        self.rates = PeerRates()  # measured by our fetches, read by our server for first copies
        self.whole_server = PayloadServer(host, store, self.transfer, on_upload=counters.count_sent)
        self.piece_server = PiecesServer(host, store, self.partials, self.pieces,
                                         on_upload=counters.count_sent, rates=self.rates)

    def install(self) -> None:
        self.whole_server.install()
        self.piece_server.install()

    def mark_own(self, step: int, digest: bytes) -> None:
        """A payload we authored: its first copies go out before pieces we relay (pieces_serve.py)."""
        self.piece_server.mark_own(step, digest)

    @property
    def uploads_in_progress(self) -> int:
        return self.whole_server.uploads_in_progress + self.piece_server.uploads_in_progress

    @property
    def last_request_at(self) -> float | None:
        times = [t for t in (self.whole_server.last_request_at, self.piece_server.last_request_at)
                 if t is not None]
        return max(times) if times else None

    async def pull(self, run_id: bytes, step: int, digest: bytes, size: int | None, *, author: ID,
                   sources: list[ID]) -> bytes:
        """Payload ``digest`` from the network (raises TransportError when no holder delivered it).
        ``sources`` hold all of it (its author, the leader that listed it); every other connected member
        may hold some. The bytes read are counted, those of a fetch that failed too."""
        others = sorted(self._host.member_peers() - set(sources), key=str)
        holders = routes([*sources, *others], self._host.connection_kind, self._host.worth_dialing)
        if self.fetch == "whole":
            got = await pull_payload(self._host, PayloadRequest(run_id, step, digest), holders, author=author,
                                     store=self.store, config=self.transfer, expected_size=size)
            if got.holder is not None:  # None: it was in the store after all
                self._counters.received_via(len(got.data), relayed=self._relayed(got.holder))
            return got.data
        route = dict(holders)
        stats = FetchStats()
        try:
            return await fetch_swarm(
                self._host, SwarmRequest(run_id, step, digest, size), [h for h, _ in holders],
                store=self.store, partials=self.partials, complete=[s for s in sources if s in route],
                # Route is best first, as the scheduler's connection class wants it (lower asked first)
                config=self.pieces, conn_class=lambda h: route.get(h, Route.DIAL), stats=stats,
                gate=self.gate, rates=self.rates)
        finally:
            for holder, n in stats.by_holder.items():
                self._counters.received_via(n, relayed=self._relayed(ID.from_base58(holder)))

    def _relayed(self, peer: ID) -> bool:
        return self._host.connection_kind(peer) is Kind.RELAYED
