"""Fetching one payload in pieces from every holder at once: the trio side of protocol/swarm_schedule.py.

The scheduler decides; this module drives the fetch and protocol/swarm_talk.py talks. Each holder gets one
session (protocol/pieces_wire.py): it carries the piece requests the scheduler assigns to that holder and,
while there is nothing to ask it for, a HAVE long poll, so news of a piece it just got arrives at once. The
piece-hash list comes first, from the first holder that has it, and is checked against the root the caller got
from the signed announcement; every piece is then checked against it on arrival and kept in ``partials`` at
once, so this peer serves it to the others while it still fetches the rest. A holder whose bytes do not
verify, or who sends a piece it was not asked for, is dropped for the rest of the fetch and named in the
error. A holder that refuses a request as busy names when to ask again, and the fetches of one peer share a
``HolderGate`` (one request to a holder at a time over all of them): protocol/swarm_turns.py says why.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import trio
from libp2p.network.stream.exceptions import StreamEOF
from libp2p.peer.id import ID

from .errors import (
    FetchFailedError,
    HashMismatchError,
    MalformedReplyError,
    PayloadNotFoundError,
    PayloadTooLargeError,
    RemoteBusyError,
    StoreError,
    TransportError,
)
from .host import P2PHost
from .partials import PartialPayload, PartialPayloads
from .pieces import piece_count
from .pieces_wire import PiecesConfig
from .store import PayloadStore
from .swarm_first_copies import PeerRates
from .swarm_lanes import Lane, Lost, carrying, describe
from .swarm_request import ConnClass, FetchStats, SwarmRequest, all_direct
from .swarm_schedule import Failure, PieceScheduler
from .swarm_talk import HolderTalk
from .swarm_turns import GateUse, HolderGate
from .wire import ShortReadError

logger = logging.getLogger(__name__)

async def fetch_swarm(host: P2PHost, request: SwarmRequest, holders: Sequence[ID], *, store: PayloadStore,
                      partials: PartialPayloads, complete: Sequence[ID] = (),
                      config: PiecesConfig | None = None, conn_class: ConnClass = all_direct,
                      stats: FetchStats | None = None, gate: HolderGate | None = None,
                      rates: PeerRates | None = None) -> bytes:
    """The payload, from ``store`` or fetched from ``holders`` (``complete`` ones are known to hold all of
    it: its author, the leader that listed it) and kept in ``store``. Raises FetchFailedError naming each
    holder's error when no complete copy could be put together within ``fetch_timeout``. ``gate``: shared
    by the fetches this peer runs at once (None: this fetch asks each holder as its scheduler allows).
    ``rates``: the peer's table of measured rates, which each verified piece updates (its pieces server
    decides first copies by it, swarm_first_copies.py)."""
    cfg = config or PiecesConfig()
    cached = store.get(request.step, request.root)
    if cached is not None:
        return cached
    if request.size is not None and not 0 <= request.size <= cfg.max_payload_bytes:
        raise PayloadTooLargeError(f"announced size {request.size} is outside 0..{cfg.max_payload_bytes}")
    run = _Fetch(host, request, cfg, partials, conn_class, stats or FetchStats(), gate, rates)
    # A one-piece payload gains nothing from partial holders: its complete holders alone, one session each.
    single = request.size is not None and piece_count(request.size) == 1
    order = list(dict.fromkeys(h for h in [*complete, *(() if single else holders)] if h != host.peer_id))
    with trio.move_on_after(cfg.fetch_timeout):
        await run.run(order, set(complete))
    data = run.result()
    if data is None:
        logger.debug("swarm fetch of %s gave up: %s", request.root.hex()[:16], describe(run.sched, run.lanes))
        raise FetchFailedError(request.root, run.errors)
    try:
        store.put_verified(request.step, request.root, data)
    except StoreError as exc:
        logger.debug("fetched payload not kept for serving: %s", exc)
    finally:
        partials.close(request.step, request.root)
    return data


_STALL_LOG_AFTER = 10.0  # seconds without a new piece before a fetch logs where it stands (debug)


class _Fetch(HolderTalk):
    def __init__(self, host: P2PHost, request: SwarmRequest, cfg: PiecesConfig, partials: PartialPayloads,
                 conn_class: ConnClass, stats: FetchStats, gate: HolderGate | None,
                 rates: PeerRates | None) -> None:
        self.host, self.request, self.cfg, self.partials = host, request, cfg, partials
        self.conn_class, self.stats, self.gate, self.rates = conn_class, stats, GateUse(gate), rates
        self.errors: list[tuple[str, TransportError]] = []
        self.lanes: dict[str, Lane] = {}
        self.sched: PieceScheduler | None = None
        self.part: PartialPayload | None = None
        self.size = 0
        self.count = 0
        self._by_root = False  # a one-piece payload: its piece is checked against the root itself
        self._listing = trio.Lock()
        self._listed = trio.Event()
        self._changed = trio.Event()
        self._done = False

    def result(self) -> bytes | None:
        if self.part is not None and self.sched is not None and self.sched.complete:
            return self.part.assemble()
        if self.part is not None:
            self.partials.release(self.request.step, self.request.root)  # its pieces stay for the next try
        return None

    async def run(self, order: list[ID], complete: set[ID]) -> None:
        gate = self.gate.gate
        unwatch = None if gate is None else gate.watch(self.poke)
        try:
            await self._run(order, complete)
        finally:
            if unwatch is not None:
                unwatch()
            self.gate.settle(set())

    async def _run(self, order: list[ID], complete: set[ID]) -> None:
        async with trio.open_nursery() as nursery:
            for h in order:
                self.lanes[str(h)] = lane = Lane(h, h in complete)
                nursery.start_soon(self._session, lane)
            while self.sched is None and not all(lane.over for lane in self.lanes.values()):
                self._changed = trio.Event()
                with trio.move_on_after(self.cfg.schedule.backoff):
                    await self._changed.wait()
            if self.sched is not None:
                await self._drive()
            self._done = True
            nursery.cancel_scope.cancel()

    async def _drive(self) -> None:
        sched = self.sched
        if sched is None:
            return
        progress, since = len(sched.have), trio.current_time()
        while not sched.complete:
            now = trio.current_time()
            if len(sched.have) != progress:
                progress, since = len(sched.have), now
            elif now - since > _STALL_LOG_AFTER:
                logger.debug("swarm fetch of %s stalled: %s", self.request.root.hex()[:16],
                             describe(sched, self.lanes))
                since = now
            for rid in sched.overdue(now):
                carrier = carrying(self.lanes.values(), rid)
                if carrier is None:  # no session carries it any more: free its pieces for the other holders
                    sched.request_failed(rid, now, Failure.LOST)
                elif carrier.current is not None and carrier.current.id == rid and carrier.scope is not None:
                    carrier.scope.cancel()
            self.gate.settle(sched.in_flight_ids())
            for req in sched.next_requests(now, self.gate.may_ask):
                self.gate.took(req.id, req.holder)
                lane = self.lanes[req.holder]
                lane.pending = req
                lane.work.set()
            quiet = [(name, lane) for name, lane in self.lanes.items() if lane.quiet]
            offering = sched.offering() if quiet else set()
            for name, lane in quiet:
                if name not in offering:
                    lane.work.set()  # back to polling it for news
            if all(lane.over for lane in self.lanes.values()):
                return  # nobody left to ask
            self._changed = trio.Event()
            with trio.move_on_after(self.cfg.schedule.backoff):
                await self._changed.wait()

    # --- one holder's session ------------------------------------------------------------------------------

    async def _session(self, lane: Lane) -> None:
        peer = str(lane.holder)
        losses = 0
        try:
            while losses < self.cfg.max_losses and not self._done:
                try:
                    await self._converse(lane)
                    return
                except Lost:  # our own overdue cancel: the holder is slow, not at fault; it stays in
                    self._fail_current(lane, Failure.LOST)
                except RemoteBusyError:
                    if lane.current is None:
                        return  # too many sessions there: it stays out of this fetch, no fault of its own
                    losses += 1
                    self._fail_current(lane, Failure.LOST)
                except (HashMismatchError, MalformedReplyError, PayloadTooLargeError) as exc:
                    if isinstance(exc.__cause__, (ShortReadError, StreamEOF)):  # a cut stream, not a lie
                        losses += 1
                        self._fail_current(lane, Failure.LOST)
                        if losses >= self.cfg.max_losses:
                            self._failed(peer, exc)
                        await trio.sleep(self.cfg.schedule.backoff)
                        continue
                    self._failed(peer, exc)
                    self._fail_current(lane, Failure.LYING)
                    return
                except PayloadNotFoundError as exc:  # it claimed (or was said) to hold what it does not
                    self._failed(peer, exc)
                    self._fail_current(lane, Failure.GONE)
                    return
                except TransportError as exc:
                    losses += 1
                    self._fail_current(lane, Failure.LOST)
                    if losses >= self.cfg.max_losses:
                        self._failed(peer, exc)
                await trio.sleep(self.cfg.schedule.backoff)
        finally:
            lane.over = True
            if self.sched is not None:
                self.sched.holder_failed(peer)
            self.poke()

    def _fail_current(self, lane: Lane, why: Failure) -> None:
        req = lane.current or lane.pending
        lane.current = lane.pending = None
        if self.sched is not None:
            if req is not None:
                self.sched.request_failed(req.id, trio.current_time(), why)
            if why is Failure.LYING:
                self.sched.holder_failed(str(lane.holder))
        self.poke()

    def _failed(self, peer: str, exc: TransportError) -> None:
        logger.debug("swarm fetch of %s: %s failed: %r", self.request.root.hex()[:16], peer, exc)
        self.errors.append((peer, exc))
