"""One step's payload exchange as a flow model: the daemon's piece scheduler over fluid access links.

Why: the namespace testbed runs at most a few dozen daemons on this machine, and the question volunteers ask
is what their line costs at 64 or 1024 peers. This model runs the *same decisions* the daemon makes, from
protocol/swarm_schedule.py: every fetcher keeps one :class:`PieceScheduler` per payload it wants, asks holders
for candidate pieces, and each holder answers with :func:`pick_to_serve` under its upload slots, as
protocol/pieces_serve.py does. Bytes then move over :class:`FlowNetwork` (max-min fair shares of each
peer's uplink and downlink). A holder's have-map reaches a fetcher as the daemon's HAVE long poll brings it
(protocol/swarm_fetch.py): one ``latency`` after the holder gained a piece the fetcher neither holds nor asked
for, while the fetcher has nothing to ask that holder; otherwise once it has again. A request that finds the
holder's slots full waits there for one to free when an upload should end within ``slot_wait``, as
protocol/pieces_serve.py holds it (``Waitlist.hold_for``); otherwise, or past that, it is refused. Left
out: TCP dynamics (not its acknowledgements: a line's ``ack`` share, flow_net.py), the agreement's own
messages (the caller adds a calibrated constant), and compute. What a daemon carries from one step to the
next, each peer's measured rates and the time its uploads of a piece take, a run takes from an earlier one.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import cast

from distro_node.protocol.pieces import PIECE_BYTES, piece_count, piece_span
from distro_node.protocol.swarm_first_copies import FirstCopies, PeerRates
from distro_node.protocol.swarm_pick import Decline, own_first_copies_left, pick_to_serve
from distro_node.protocol.swarm_schedule import ALL, Failure, PieceScheduler
from distro_node.protocol.swarm_turns import GateUse, HolderGate, Waitlist

from .flow_net import FlowModelError, FlowNetwork, Transfer
from .flow_spec import ExchangeResult, ExchangeSpec
from .flow_unheard import UnheardHolders


class _Exchange:
    def __init__(self, spec: ExchangeSpec, rates: Sequence[PeerRates] | None,
                 piece_seconds: Sequence[float] | None) -> None:
        self.spec = spec
        n = len(spec.lines)
        if rates is not None and len(rates) != n:
            raise FlowModelError(f"rates need one table per line ({n})")
        if piece_seconds is not None and len(piece_seconds) != n:
            raise FlowModelError(f"piece_seconds need one figure per line ({n})")
        self.rates = list(rates) if rates is not None else [PeerRates() for _ in range(n)]
        self.first = [FirstCopies(spec.first_copy_factor, spec.first_copy_window) for _ in range(n)]
        self.net = FlowNetwork(spec.lines)
        self.events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.have: list[dict[int, set[int]]] = [{} for _ in range(n)]
        self.started: list[dict[int, dict[int, int]]] = [{} for _ in range(n)]
        self.uploading = [0] * n
        self.sched: dict[tuple[int, int], PieceScheduler] = {}
        self.moving: dict[tuple[int, int, int], Transfer] = {}
        self.waking: set[tuple[int, int]] = set()
        # Requests held at a holder for a free slot, in arrival order: (fetcher, author, rid) -> candidates.
        self.queued: list[dict[tuple[int, int, int], tuple[int, ...]]] = [{} for _ in range(n)]
        # Per fetch, holders whose news it has not polled for (it had something to ask them meanwhile).
        self.unheard: dict[tuple[int, int], UnheardHolders] = {}
        self.refused = 0
        prior = PIECE_BYTES / spec.schedule.prior_rate
        self.waitlists = [Waitlist(spec.upload_slots, prior if piece_seconds is None else piece_seconds[i])
                          for i in range(n)]
        self.gates = [HolderGate() if spec.turns else None for _ in range(n)]
        self.gate_uses: dict[tuple[int, int], GateUse] = {}  # per fetch, as each daemon fetch has one
        self.missing = [len(w) for w in spec.wants]
        self.done_at = [math.inf if spec.wants[i] else 0.0 for i in range(n)]
        # Who wants a payload, to tell them when a neighbour gains a piece of it.
        self.fetchers: dict[int, list[int]] = {}
        # Per peer, the peers that hold a connection to it (its news goes to these), in id order.
        self.near: list[list[int]] = [[] for _ in range(n)]
        self.names = [str(i) for i in range(n)]  # peers as the scheduler names holders
        for other, theirs in enumerate(spec.neighbours):
            for peer in theirs:
                self.near[peer].append(other)
        for fetcher, wanted in enumerate(spec.wants):
            for author in wanted:
                self.fetchers.setdefault(author, []).append(fetcher)

    def at(self, when: float, action: Callable[[], None]) -> None:
        heapq.heappush(self.events, (when, next(self._seq), action))

    def run(self) -> ExchangeResult:
        spec = self.spec
        for author in self.fetchers:
            self.at(spec.announced(author), partial(self._announce, author))
        bound = spec.time_limit
        for _ in range(50_000_000):  # bounded: each round handles at least one event or transfer
            finish = self.net.next_finish()
            nxt = self.events[0][0] if self.events else math.inf
            now = min(nxt, finish if finish is not None else math.inf)
            if now == math.inf or now > bound or all(d < math.inf for d in self.done_at):
                break
            for transfer in self.net.advance(now):
                self._delivered(transfer)
            while self.events and self.events[0][0] <= now:
                heapq.heappop(self.events)[2]()
        size = spec.payload_bytes
        return ExchangeResult(self.done_at, list(self.net.uploaded), list(self.net.downloaded),
                              [size * len(w) for w in spec.wants], self.refused, self.rates,
                              [w.piece_seconds for w in self.waitlists])

    # --- authors and fetchers ------------------------------------------------------------------------------

    def _announce(self, author: int) -> None:
        self.have[author][author] = set(range(piece_count(self.spec.payload_bytes)))
        for fetcher in self.fetchers[author]:
            self.at(self.net.now + self.spec.latency, partial(self._start_fetch, fetcher, author))

    def _start_fetch(self, fetcher: int, author: int) -> None:
        key = (fetcher, author)
        if key in self.sched:
            return
        sched = PieceScheduler(self.spec.payload_bytes, config=self.spec.schedule,
                               order_key=f"{fetcher}:{author}".encode())
        self.sched[key] = sched
        known = self.rates[fetcher].known
        sched.holder_has(str(author), ALL, rate=known(str(author)))
        for holder in self.spec.neighbours[fetcher]:
            if holder != author:
                sched.holder_has(str(holder), self._offered(holder, author),
                                 uploads=self.uploading[holder], rate=known(str(holder)))
        self._ask(fetcher, author)

    def _ask(self, fetcher: int, author: int) -> None:
        sched = self.sched[(fetcher, author)]
        now = self.net.now
        for rid in sched.overdue(now):
            moving = self.moving.pop((fetcher, author, rid), None)
            for queue in self.queued:
                queue.pop((fetcher, author, rid), None)
            if moving is not None:
                self.net.cancel(moving)
                self.uploading[moving.src] -= 1
                self.waitlists[moving.src].finished(id(moving), now, complete=False)
                self._slot_freed(moving.src)
            sched.request_failed(rid, now, Failure.LOST)
            self._ungate(fetcher, author, rid)
        self._poll_unheard(fetcher, author)
        use = self._gate_use(fetcher, author)
        for req in sched.next_requests(now, use.may_ask):
            holder = int(req.holder)
            use.took(req.id, req.holder)
            self.at(now + self.spec.latency,
                    partial(self._serve, fetcher, author, holder, req.id, req.candidates))

    def _ungate(self, fetcher: int, author: int, rid: int) -> None:
        """A request ended: the fetcher may ask that holder again, for any payload (each one it fetches
        there is asked at once, as the daemon's gate pokes every fetch)."""
        holder = self._gate_use(fetcher, author).ended(rid)
        if holder is None:
            return
        for other in self.spec.wants[fetcher]:
            sched = self.sched.get((fetcher, other))
            if other != author and sched is not None and sched.could_ask(holder, self.net.now):
                self._ask(fetcher, other)

    def _gate_use(self, fetcher: int, author: int) -> GateUse:
        use = self.gate_uses.get((fetcher, author))
        if use is None:
            use = self.gate_uses[(fetcher, author)] = GateUse(self.gates[fetcher])
        return use

    # --- holders -------------------------------------------------------------------------------------------

    def _serve(self, fetcher: int, author: int, holder: int, rid: int, candidates: tuple[int, ...]) -> None:
        if author == holder:
            self.first[holder].asked(str(fetcher), self.net.now)
        got, waits = self._pick(fetcher, author, holder, candidates)
        if got is Decline.BUSY and not waits and self.spec.turns:
            hold = self.waitlists[holder].hold_for(self.net.now, self.spec.slot_wait)
            if hold > 0:
                key = (fetcher, author, rid)
                self.queued[holder][key] = candidates
                self.at(self.net.now + hold, partial(self._held_too_long, holder, key))
                return
        self._answer(fetcher, author, holder, rid, got)

    def _pick(self, fetcher: int, author: int, holder: int, candidates: tuple[int, ...]
              ) -> tuple[int | Decline, bool]:
        """As pieces_serve.PiecesServer._choose: the piece, and True when a BUSY must not be held."""
        started = self.started[holder].setdefault(author, {})
        waits = self._relay_waits(holder, author)
        got = pick_to_serve(candidates, self.have[holder].get(author, set()), started,
                            uploading=self.uploading[holder], slots=self.spec.upload_slots, relay_waits=waits)
        if author == holder and self.first[holder].keeps(author, got, started, str(fetcher), self.net.now,
                                                         self.waitlists[holder].upload_rate(PIECE_BYTES),
                                                         self.rates[holder]):
            return Decline.BUSY, True
        return got, waits

    def _relay_waits(self, holder: int, author: int) -> bool:
        """As pieces_serve.PiecesServer._relay_waits: ``author``'s pieces wait at ``holder`` while pieces
        of its own payload that somebody asked for never went out."""
        return author != holder and self._own_left(holder)

    def _own_left(self, holder: int) -> bool:
        return own_first_copies_left(self.started[holder].get(holder), piece_count(self.spec.payload_bytes))

    def _offered(self, holder: int, author: int) -> frozenset[int]:
        """What a HAVE answer from ``holder`` tells of (pieces_serve.PiecesServer._offered)."""
        if self._relay_waits(holder, author):
            return frozenset()
        return frozenset(self.have[holder].get(author, ()))

    def _relays_resume(self, holder: int) -> None:
        """``holder``'s own first copies are all out: the polls it held answer with what it offers now."""
        for author in self.have[holder]:
            offered = self._offered(holder, author)
            if author == holder or not offered:
                continue
            for other in self.near[holder]:
                sched = self.sched.get((other, author))
                if sched is not None and not sched.complete:
                    news = partial(self._news, other, author, holder, offered)
                    self.at(self.net.now + self.spec.latency, news)

    def _held_too_long(self, holder: int, key: tuple[int, int, int]) -> None:
        if self.queued[holder].pop(key, None) is not None:
            self._answer(*key[:2], holder, key[2], Decline.BUSY)

    def _slot_freed(self, holder: int) -> None:
        """An upload ended: the requests held there, first come first, take what is free now."""
        for key, candidates in list(self.queued[holder].items()):
            if self.uploading[holder] >= self.spec.upload_slots:
                return
            got, _ = self._pick(key[0], key[1], holder, candidates)
            if not isinstance(got, Decline):
                del self.queued[holder][key]
                self._answer(*key[:2], holder, key[2], got)

    def _answer(self, fetcher: int, author: int, holder: int, rid: int, got: int | Decline) -> None:
        reply_at = self.net.now + self.spec.latency
        waitlist = self.waitlists[holder]
        if isinstance(got, Decline):
            why = Failure.BUSY if got is Decline.BUSY else Failure.GONE
            self.refused += why is Failure.BUSY
            turns = self.spec.turns and why is Failure.BUSY
            hint = waitlist.turn(str(fetcher), self.net.now) if turns else 0.0
            self.at(reply_at, lambda: self._failed(fetcher, author, rid, why, hint))
            return
        waitlist.served(str(fetcher))
        started = self.started[holder].setdefault(author, {})
        own_left = author == holder and self._own_left(holder)
        started[got] = started.get(got, 0) + 1
        if own_left and not self._own_left(holder):
            self._relays_resume(holder)
        self.uploading[holder] += 1
        self.sched[(fetcher, author)].piece_started(rid, got)
        size = piece_span(self.spec.payload_bytes, got)[1]
        transfer = Transfer(holder, fetcher, size, tag=(author, got, rid))
        self.moving[(fetcher, author, rid)] = transfer
        self.net.start(transfer)
        waitlist.started(id(transfer), self.net.now)

    def _failed(self, fetcher: int, author: int, rid: int, why: Failure, retry_after: float) -> None:
        self.sched[(fetcher, author)].request_failed(rid, self.net.now, why, retry_after=retry_after)
        self._ungate(fetcher, author, rid)
        self._ask(fetcher, author)
        self._wake(fetcher, author)

    def _wake(self, fetcher: int, author: int) -> None:
        """Ask again once a back-off is over, as the daemon's fetch loop wakes every ``backoff``: one wake
        pending per fetch, however many requests were refused."""
        key = (fetcher, author)
        if key in self.waking:
            return
        sched = self.sched[key]
        when = sched.next_wake(self.net.now) if self.spec.turns else self.net.now + self.spec.schedule.backoff
        if when is None:
            return
        self.waking.add(key)

        def wake() -> None:
            self.waking.discard(key)
            if not sched.complete:
                self._ask(fetcher, author)
                if self.spec.turns:
                    self._wake(fetcher, author)

        self.at(when, wake)

    def _delivered(self, transfer: Transfer) -> None:
        author, piece, rid = cast(tuple[int, int, int], transfer.tag)
        holder, fetcher = transfer.src, transfer.dst
        self.uploading[holder] -= 1
        self.waitlists[holder].finished(id(transfer), self.net.now, complete=True)
        self._slot_freed(holder)
        self.moving.pop((fetcher, author, rid), None)
        sched = self.sched[(fetcher, author)]
        rate = sched.piece_done(rid, self.net.now)
        if rate is not None:
            self.rates[fetcher].observe(str(holder), rate)
        if holder == author:
            self.first[holder].asked(str(fetcher), self.net.now)
            self.first[holder].delivered(author, piece, str(fetcher), self.net.now,
                                         self.waitlists[holder].upload_rate(PIECE_BYTES), self.rates[holder])
        self._ungate(fetcher, author, rid)
        self.have[fetcher].setdefault(author, set()).add(piece)
        name = self.names[fetcher]
        offered = self._offered(fetcher, author)
        for other in self.near[fetcher]:
            theirs = self.sched.get((other, author))
            if theirs is None or other == fetcher:
                continue
            quiet = piece in theirs.no_news_from(name) or theirs.offers(name)
            if not quiet and offered:  # its poll there is answered now
                news = partial(self._news, other, author, fetcher, offered)
                self.at(self.net.now + self.spec.latency, news)
            unheard = self.unheard.get((other, author))
            if quiet or (unheard is not None and fetcher in unheard.holders):
                if unheard is None:
                    unheard = self.unheard[(other, author)] = UnheardHolders(theirs.count)
                unheard.add(fetcher, self.have[fetcher][author] - theirs.holders[name].pieces)
        if sched.complete:
            self.missing[fetcher] -= 1
            if self.missing[fetcher] == 0:
                self.done_at[fetcher] = self.net.now
        else:
            self._ask(fetcher, author)

    def _news(self, fetcher: int, author: int, holder: int, have: frozenset[int]) -> None:
        """A HAVE answer: the holder's whole have-map as it was sent."""
        sched = self.sched[(fetcher, author)]
        if sched.complete:
            return
        sched.holder_has(self.names[holder], have, uploads=self.uploading[holder],
                         rate=self.rates[fetcher].known(self.names[holder]))
        unheard = self.unheard.get((fetcher, author))
        if unheard is not None:
            unheard.told(holder, have)
        self._ask(fetcher, author)

    def _poll_unheard(self, fetcher: int, author: int) -> None:
        """Holders this fetch stopped polling while it could ask them: polled again once it cannot, and
        answered at once (a round trip) when they hold news for it (``no_news_from``: the daemon's poll)."""
        unheard = self.unheard.get((fetcher, author))
        if unheard is None:
            return
        sched = self.sched[(fetcher, author)]
        answering = unheard.with_news(sched.held_or_coming())
        if not answering:
            return
        offering, names = sched.offering(), self.names
        for holder in [h for h in unheard.holders if h in answering and names[h] not in offering]:
            unheard.polled(holder)
            news = partial(self._news, fetcher, author, holder, self._offered(holder, author))
            self.at(self.net.now + 2 * self.spec.latency, news)


def simulate_exchange(spec: ExchangeSpec, rates: Sequence[PeerRates] | None = None,
                      piece_seconds: Sequence[float] | None = None) -> ExchangeResult:
    """Run one step's exchange to the end (every fetcher complete) or ``spec.time_limit``. ``rates`` and
    ``piece_seconds``: what each peer measured in an earlier step (``ExchangeResult.rates`` and
    ``.piece_seconds``); None: a first step, nothing measured yet."""
    return _Exchange(spec, rates, piece_seconds).run()
