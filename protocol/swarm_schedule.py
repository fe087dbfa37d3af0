"""Which piece of a payload to ask which holder for next: a pure state machine (no trio, no libp2p).

Why pure: the same decisions drive the daemon's fetch (protocol/swarm_fetch.py) and a flow-level model of
a whole swarm, so time is an argument and nothing here waits or sends. The caller feeds state in and acts on
the decisions it gets back:

    sched = PieceScheduler(size, have=(), config=ScheduleConfig(), order_key=b"...")
    sched.holder_has("origin", ALL)                     # or a set of piece indices, as holders report them
    for req in sched.next_requests(now):                # Request(id, holder, candidates)
        ... ask req.holder for one of req.candidates ...
    sched.piece_started(req.id, piece)                  # the holder's reply names the piece it sends
    sched.piece_done(req.id, now)                       # verified and kept: we hold it, and can serve it
    sched.request_failed(req.id, now, Failure.BUSY)     # or LOST / LYING; holder_failed(h) drops a holder
    sched.overdue(now)                                  # requests to cancel (and then report LOST)

Rules, and why:
- A request names up to ``choices`` candidate pieces and the *holder* picks one (protocol/swarm_pick.py:
  the one it has uploaded least, and no repeat while its uplink is busy). The origin of a payload is the
  only holder at first and often the slowest uplink; letting it pick is what makes it send each piece about
  once while the fetchers trade the rest. A holder whose own payload still has pieces it never sent
  declines to relay other payloads' pieces meanwhile (``relay_waits``).
- Candidates of requests in flight are disjoint and never include a piece we have or are receiving, so no
  byte is downloaded twice (amplification 1.0) unless a stalled request is cancelled (:meth:`overdue`).
- Rarest first (fewest holders), ties broken by an order private to this fetcher (``order_key``), so
  fetchers of one payload start on different pieces.
- Holders are tried best first: connection class (``conn_class``: 0 direct, higher later; another layer
  decides it), then the time a piece would take there given the measured rate and the requests already
  queued on it, its own reported uploads included. At most ``max_in_flight`` requests per holder.
- Not from a far slower holder: a piece is not asked of a holder while another would deliver it in under
  1/``slower_holder_factor`` of the time (protocol/swarm_holders.py, which weighs the holders).
- A holder that failed, or sent bytes that do not verify, is dropped at once and its pieces re-offered.
- A holder that refused as busy rests until the turn it named (``retry_after``, capped), and a caller
  sharing holders among fetches can close some to this one (``may_ask``): protocol/swarm_turns.py.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from .pieces import PIECE_BYTES, piece_count, piece_span
from .swarm_holders import Holder, etas, held_sooner, ranked
from .swarm_schedule_config import ALL, Failure, Request, ScheduleConfig

# The values a caller exchanges with the scheduler live in swarm_schedule_config.py; importable from here too.
__all__ = ["ALL", "Failure", "PieceScheduler", "Request", "ScheduleConfig"]

@dataclass
class _InFlight:
    holder: str
    candidates: tuple[int, ...]
    sent_at: float
    piece: int | None = None


def _elapsed(r: _InFlight, now: float) -> float:
    """Seconds since we asked. Not since the holder named its piece: over the muxer a reply's header is
    read when the frame it came in is whole, often with the piece itself, so that measure read 12-106
    MB/s off a 62 KB/s uplink (testbed, mixed at a quarter), and every limit there was the floor."""
    return max(now - r.sent_at, 1e-6)


class PieceScheduler:
    """Decisions for one payload fetched by one peer. See the module docstring for the protocol."""

    def __init__(self, size: int, *, have: Iterable[int] = (), config: ScheduleConfig | None = None,
                 order_key: bytes = b"") -> None:
        self.config = config or ScheduleConfig()
        self.size = size
        self.count = piece_count(size)
        self.have: set[int] = set()
        for i in have:
            self._check_index(i)
            self.have.add(i)
        self.holders: dict[str, Holder] = {}
        self._requests: dict[int, _InFlight] = {}
        self._next_id = 0
        self.received_bytes = 0  # every verified piece byte, a cancelled partial piece excluded
        self._tiebreak = {i: hashlib.sha256(order_key + i.to_bytes(4, "big")).digest()
                          for i in range(self.count)}
        # Live holders per piece, kept as holders report and drop out: a decision reads only the holders of
        # pieces it could ask for, and their count is the piece's rarity (scanning every holder and counting
        # afresh per decision was nearly half of a flow model's time).
        self._holders_of: list[set[str]] = [set() for _ in range(self.count)]
        # Bumped by every change to what we hold, ask for or know of holders: what was derived from an
        # older state (the overdue check below) is derived again.
        self._version = 0
        # (version, time): at that version no request is overdue before that time. The daemon's fetch loop
        # and the flow model ask at every event; most asks are long before any limit.
        self._none_overdue: tuple[int, float] = (-1, 0.0)

    # --- state in -----------------------------------------------------------------------------------------

    def holder_has(self, holder: str, pieces: Iterable[int] | Literal["all"], *, conn_class: int = 0,
                   uploads: int | None = None, rate: float | None = None) -> None:
        """A holder's (growing) have-set; unknown holders are added. Indices out of range are ignored."""
        got = set(range(self.count)) if pieces == ALL else {i for i in pieces if 0 <= i < self.count}
        h = self.holders.get(holder)
        if h is None:
            h = self.holders[holder] = Holder(got, conn_class=conn_class, rate=rate)
            new: set[int] = got
        else:
            new = got - h.pieces
            h.pieces |= new
            h.conn_class = conn_class
        if not h.dropped:
            for i in new:
                self._holders_of[i].add(holder)
        self._version += 1
        if uploads is not None:
            h.uploads = max(0, uploads)

    def holder_failed(self, holder: str) -> list[int]:
        """Drop ``holder`` for good; returns the ids of its requests, which the caller should cancel."""
        h = self.holders.get(holder)
        if h is None:
            return []
        if not h.dropped:
            for i in h.pieces:
                self._holders_of[i].discard(holder)
        h.dropped = True
        self._version += 1
        ids = sorted(h.in_flight)
        for rid in ids:
            self._forget(rid)
        return ids

    # --- decisions out --------------------------------------------------------------------------------------

    def next_requests(self, now: float, may_ask: Callable[[str], bool] | None = None) -> list[Request]:
        """New requests to send now; empty when every free slot has nothing useful to ask for.

        ``may_ask(holder)`` False: this peer is asking that holder for another payload already
        (protocol/swarm_turns.py ``HolderGate``). At most one request per holder per call, so the caller
        can take the gate for each request it gets."""
        out: list[Request] = []
        # Cheap exits first: the fetch loop calls this every back-off, and most calls find nothing left to
        # ask for, or every holder of what is left busy or resting (a flow model spent half its time here).
        askable = set(range(self.count)) - self.have - self._reserved()
        if not askable:
            return out
        free_holders = [n for n in self._holders_of_any(askable)
                        if self._free(self.holders[n], now) and (may_ask is None or may_ask(n))]
        if not free_holders:
            return out
        holders_of = self._holders_of
        times = etas(self.holders, now, self.config)
        for name in ranked(self.holders, free_holders, self.config.prior_rate):
            h = self.holders[name]
            elsewhere = held_sooner(name, self.holders, times, self.config)
            while len(h.in_flight) < self.config.max_in_flight:
                free = [i for i in h.pieces if i in askable and i not in elsewhere]
                if not free:
                    break
                free.sort(key=lambda i: (len(holders_of[i]), self._tiebreak[i]))  # rarest first
                picks = tuple(free[: self.config.choices])
                rid = self._next_id
                self._next_id += 1
                self._requests[rid] = _InFlight(name, picks, now)
                h.in_flight.add(rid)
                askable.difference_update(picks)
                out.append(Request(rid, name, picks))
                self._version += 1
                if may_ask is not None:
                    break
        return out

    def overdue(self, now: float) -> list[int]:
        """Requests whose holder is far slower than expected: cancel them, then report ``Failure.LOST``.
        A piece on its way is cancelled only while another holder has it: an origin's first copy can only
        come from the origin, and cancelled, its bytes were sent for nothing (testbed, mixed lines at a
        fifth, 4 peers: rounds 49.8 s with those cancels; bound 30.3 s). A request with no reply yet is
        cancelled as before: asked again on a fresh stream, a request lost on the way gets through. A new
        holder's report changes the version the cache keys on."""
        version, until = self._none_overdue
        if version == self._version and now < until:
            return []
        late, first = [], math.inf
        for rid, r in self._requests.items():
            if r.piece is not None and not self._held_elsewhere(r.holder, r.piece):
                continue
            expected = self.holders[r.holder].expected_seconds(0, self.config.prior_rate)
            limit = max(self.config.overdue_floor, self.config.overdue_factor * expected)
            if now - r.sent_at > limit:
                late.append(rid)
            first = min(first, r.sent_at + limit)
        if not late:  # none is overdue before the first limit unless the state changes (less a margin)
            self._none_overdue = (self._version, first - 1e-9 * max(1.0, abs(first)))
        return late

    # --- events back ---------------------------------------------------------------------------------------

    def piece_started(self, request_id: int, piece: int) -> bool:
        """The holder named the piece it sends. False (and the caller drops the holder) if it is not one
        of the request's candidates: the holder is lying or broken."""
        r = self._requests.get(request_id)
        if r is None:
            return False
        if piece not in r.candidates:
            return False
        r.piece = piece
        self._version += 1
        return True

    def piece_done(self, request_id: int, now: float) -> float | None:
        """The piece arrived and verified: we hold it (and serve it from now on). Returns the rate it came
        at (bytes/s), for the peer's table of rates over all fetches (swarm_first_copies.PeerRates)."""
        r = self._requests.get(request_id)
        if r is None or r.piece is None:
            return None
        h = self.holders[r.holder]
        h.refusals = 0
        nbytes = piece_span(self.size, r.piece)[1]
        measured = nbytes / _elapsed(r, now)
        a = self.config.rate_smoothing
        h.rate = measured if h.rate is None else a * measured + (1 - a) * h.rate
        if r.piece not in self.have:
            self.have.add(r.piece)
            self.received_bytes += nbytes
        self._forget(request_id)
        return measured

    def request_failed(self, request_id: int, now: float, why: Failure, *, retry_after: float = 0.0) -> None:
        """``retry_after``: when a BUSY holder said to come back (seconds); the holder rests that long,
        within [backoff, max_rest]."""
        r = self._requests.get(request_id)
        if r is None:
            return
        h = self.holders[r.holder]
        self._forget(request_id)
        if why in (Failure.LYING, Failure.GONE):
            self.holder_failed(r.holder)
            return
        rest = min(max(self.config.backoff, retry_after), self.config.max_rest)
        h.resting_until = max(h.resting_until, now + rest)
        if why is Failure.BUSY:
            h.refusals += 1
        if why is Failure.LOST:
            # It had not finished: its rate is below a piece per elapsed time, so the next limit there is
            # longer (with the prior's 2 s, a slow holder had every piece cancelled mid-way). A reply not
            # begun counts from the request: on a slow uplink the header waits behind piece bytes queued in
            # the holder's socket, and at 0.4 Mbit/s up no request ever began within the limit.
            nbytes = PIECE_BYTES if r.piece is None else piece_span(self.size, r.piece)[1]
            ceiling = nbytes / _elapsed(r, now)
            h.rate = ceiling if h.rate is None else min(h.rate, ceiling)

    # --- views ---------------------------------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        return len(self.have) == self.count

    @property
    def in_flight(self) -> int:
        return len(self._requests)

    def could_ask(self, holder: str, now: float) -> bool:
        """Whether ``holder`` is free here and has a piece we lack: worth a :meth:`next_requests` call once
        another fetch's request to it ended."""
        h = self.holders.get(holder)
        return h is not None and self._free(h, now) and not h.pieces <= self.have

    def spoken_for(self) -> set[int]:
        """The pieces we hold or have asked for: news that a holder has one of these changes nothing."""
        return self.have | self._reserved()

    def held_or_coming(self) -> set[int]:
        """The pieces we hold or whose holder named them in a reply (on their way)."""
        return self.have | {r.piece for r in self._requests.values() if r.piece is not None}

    def no_news_from(self, holder: str, held_or_coming: set[int] | None = None) -> set[int]:
        """What a HAVE poll to ``holder`` carries: pieces whose arrival there would tell us nothing (we hold
        them, one is on its way, or it told us it has them). Not the candidates of a request still
        unanswered (unlike :meth:`spoken_for`): its reply names one and frees the rest, and a poll that
        counted them silenced the holder for the whole ``have_wait``. With fewer pieces than a request
        names, that was every poll sent while the origin was asked: on loopback the fetchers then took
        every piece from the origin. ``held_or_coming``: :meth:`held_or_coming`, when the caller asks about
        many holders at once."""
        h = self.holders.get(holder)
        base = self.held_or_coming() if held_or_coming is None else held_or_coming
        return base | h.pieces if h is not None else set(base)

    def offers(self, holder: str) -> bool:
        """Whether ``holder`` (as last reported) has a piece we miss that no request in flight reserves:
        a fetcher can ask it without news of more pieces there."""
        h = self.holders.get(holder)
        if h is None or h.dropped:
            return False
        return not h.pieces <= self.spoken_for()

    def offering(self) -> set[str]:
        """The holders for which :meth:`offers` is True, for a caller asking about many at once."""
        return self._holders_of_any(set(range(self.count)) - self.spoken_for())

    def in_flight_ids(self) -> set[int]:
        return set(self._requests)

    def next_wake(self, now: float) -> float | None:
        """When the first resting holder that has a piece we lack may be asked again (None when none
        rests): the flow model's fetcher waits until then, as the daemon's fetch loop polls."""
        wanted = set(range(self.count)) - self.have
        times = [h.resting_until for h in self.holders.values()
                 if not h.dropped and h.resting_until > now and not h.pieces.isdisjoint(wanted)]
        return min(times, default=None)

    def missing_pieces(self) -> list[int]:
        return [i for i in range(self.count) if i not in self.have]

    def stuck(self) -> bool:
        """True when no live holder has a piece we miss and nothing is in flight: waiting cannot help
        unless a holder reports new pieces."""
        if self.complete or self._requests:
            return False
        live = [h for h in self.holders.values() if not h.dropped]
        return not any(i not in self.have for h in live for i in h.pieces)

    def requests_of(self, holder: str) -> list[tuple[tuple[int, ...], int | None, float]]:
        """(candidates, piece named or None, sent at) of each request in flight to ``holder``: for logs."""
        return [(r.candidates, r.piece, r.sent_at) for r in self._requests.values() if r.holder == holder]

    def holder_rate(self, holder: str) -> float | None:
        h = self.holders.get(holder)
        return None if h is None else h.rate

    # --- internals -----------------------------------------------------------------------------------------

    def _check_index(self, i: int) -> None:
        if not 0 <= i < self.count:
            raise ValueError(f"piece {i} outside 0..{self.count - 1}")

    def _free(self, h: Holder, now: float) -> bool:
        """Live, not resting, and with room for another request."""
        return not h.dropped and h.resting_until <= now and len(h.in_flight) < self.config.max_in_flight

    def _reserved(self) -> set[int]:
        out: set[int] = set()
        for r in self._requests.values():
            out.update(r.candidates if r.piece is None else (r.piece,))
        return out

    def _holders_of_any(self, pieces: Iterable[int]) -> set[str]:
        """The live holders of any of ``pieces``."""
        return set().union(*(self._holders_of[i] for i in pieces))

    def _held_elsewhere(self, holder: str, piece: int) -> bool:
        """Whether a live holder besides ``holder`` holds ``piece``."""
        holders = self._holders_of[piece]
        return len(holders) > (holder in holders)

    def _forget(self, request_id: int) -> None:
        r = self._requests.pop(request_id, None)
        if r is not None:
            self.holders[r.holder].in_flight.discard(request_id)
            self._version += 1
