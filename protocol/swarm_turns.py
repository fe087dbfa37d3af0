"""Fewer refused piece requests: a busy holder tells each fetcher when its turn comes, and a fetcher asks a
holder one thing at a time over all the payloads it fetches there. Pure (time is an argument), shared by
the daemon's pieces protocol and the flow model.

Why: a holder uploads ``upload_slots`` (2) pieces at once, and every fetcher that wanted any of its pieces
asked it again each back-off (0.1 s), each of its payload fetches on its own. In the flow model
(bench/flow.py, home lines, 16 peers, K = 8) 1,800 pieces moved and 67,600 requests were refused: ~37
refusals a piece, every one a round trip and some CPU on both sides, and on the 2-core namespace testbed
8 peers were CPU-bound. The two rules, one per side:

- :class:`Waitlist` (holder): a refused fetcher is told a time to come back, behind the fetchers already
  told a later one, spaced by the holder's measured time per piece over its slots. It rests there until
  then (at most ``ScheduleConfig.max_rest``) and asks other holders meanwhile. Nothing is reserved, so no
  slot idles for a fetcher that went elsewhere: whoever asks while a slot is free is served.
- :class:`HolderGate` (fetcher): at most ``per_holder`` requests to one holder at once, over every payload.
  A holder serves two pieces at a time to all of its fetchers; the ten payloads one fetcher wants there
  asking at once were ten requests of which at most two could be served.

Measured with the model, same specs with and without (tests/protocol/test_swarm_turns.py has a small one):
refusals fell 3.4-4.8x, and the exchange got faster, not slower: home K = 8, 13.6 -> 12.4 s at 16 peers
and 16.5 -> 13.3 s at 32 (bounds 11.4 and 11.8 s); mixed K = 8, 15.8 -> 13.9 s at 16 peers; mixed, all
included, 16 peers, 23.9 -> 22.1 s. A first form of the turns without the gate cut refusals as much but
left the mixed K = 8 exchange 12% slower.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable


class Waitlist:
    """One holder's view of its uploads and of the fetchers it told to come back later.

    ``prior_piece_seconds`` stands for the time one upload takes until one has been measured; it is
    replaced by a moving average of completed uploads (a holder knows its own uplink best by using it).
    """

    def __init__(self, slots: int, prior_piece_seconds: float, *, smoothing: float = 0.3,
                 max_tracked: int = 1024) -> None:
        if slots < 1 or prior_piece_seconds <= 0 or not 0 < smoothing <= 1 or max_tracked < 1:
            raise ValueError("Waitlist needs slots >= 1, prior_piece_seconds > 0, smoothing in (0, 1], "
                             "max_tracked >= 1")
        self.slots = slots
        self.piece_seconds = prior_piece_seconds
        self._smoothing = smoothing
        self._max_tracked = max_tracked
        self._uploads: dict[int, float] = {}  # upload id -> start
        self._turns: OrderedDict[str, float] = OrderedDict()  # fetcher -> when it was told to come back

    def started(self, upload: int, now: float) -> None:
        self._uploads[upload] = now

    def finished(self, upload: int, now: float, *, complete: bool) -> None:
        """An upload ended; a complete one updates the time per piece (a cut one says nothing of it)."""
        began = self._uploads.pop(upload, None)
        if began is not None and complete:
            a = self._smoothing
            self.piece_seconds = a * max(now - began, 1e-6) + (1 - a) * self.piece_seconds

    def hold_for(self, now: float, cap: float) -> float:
        """How long a request that found every slot taken may wait here for one: until about when the first
        upload should end, if that is within ``cap``; else 0, refused at once. A held request keeps its
        candidate pieces from the fetcher's other holders, so a slow holder (the flow model: a 2 Mbit/s
        origin holding for its whole piece time) must not hold; a fast one saves the refusal and the idle
        round trip after it."""
        first_free = self._first_free(now, default=0.0)
        return 2 * first_free if first_free <= cap else 0.0

    def _first_free(self, now: float, *, default: float) -> float:
        """Seconds until the first upload running here should end (``default`` when none runs)."""
        return min((max(0.0, began + self.piece_seconds - now) for began in self._uploads.values()),
                   default=default)

    def upload_rate(self, piece_bytes: int) -> float:
        """Our upload rate as our uploads measured it (bytes/s): every slot busy with a piece of
        ``piece_bytes`` taking the average time. Exact for a full uplink; a fast one, whose uploads the
        fetchers' downlinks hold back, reads low."""
        return self.slots * piece_bytes / self.piece_seconds

    def served(self, fetcher: str) -> None:
        """``fetcher`` got a slot: its turn is used."""
        self._turns.pop(fetcher, None)

    def turn(self, fetcher: str, now: float) -> float:
        """Seconds until ``fetcher`` should ask again, after a refusal: its turn if it already has one to
        come, else a new one behind every turn still to come."""
        told = self._turns.get(fetcher)
        if told is not None and told > now:
            return told - now
        for name in [f for f, t in self._turns.items() if t <= now]:
            del self._turns[name]
        ahead = len(self._turns)
        spacing = self.piece_seconds / self.slots
        # Refused with no upload running (its own first copies wait, or only a repeat was asked for): what
        # changes that is the next upload, about one spacing away.
        first_free = self._first_free(now, default=spacing)
        when = now + first_free + ahead * spacing
        self._turns[fetcher] = when
        while len(self._turns) > self._max_tracked:
            self._turns.popitem(last=False)
        return when - now


class HolderGate:
    """Requests in flight per holder over all of one peer's fetches; see the module docstring.

    ``watch(poke)`` registers a fetch to be poked when a holder's count drops, so a fetch that was kept
    from asking asks at once instead of at its next back-off."""

    def __init__(self, per_holder: int = 1) -> None:
        if per_holder < 1:
            raise ValueError("HolderGate.per_holder must be >= 1")
        self.per_holder = per_holder
        self._asking: dict[str, int] = {}
        self._pokes: list[Callable[[], None]] = []

    def may_ask(self, holder: str) -> bool:
        return self._asking.get(holder, 0) < self.per_holder

    def take(self, holder: str) -> None:
        self._asking[holder] = self._asking.get(holder, 0) + 1

    def give(self, holder: str) -> None:
        left = self._asking.get(holder, 0) - 1
        if left > 0:
            self._asking[holder] = left
        else:
            self._asking.pop(holder, None)
        for poke in list(self._pokes):
            poke()

    def watch(self, poke: Callable[[], None]) -> Callable[[], None]:
        """Poke ``poke`` on every ``give``; returns the call that stops it."""
        self._pokes.append(poke)
        return lambda: self._pokes.remove(poke)


class GateUse:
    """One fetch's requests that hold a :class:`HolderGate` (none when there is no gate): taken as they go
    out, given back once the scheduler no longer has them in flight, however they ended."""

    def __init__(self, gate: HolderGate | None) -> None:
        self.gate = gate
        self._held: dict[int, str] = {}  # request id -> holder

    @property
    def may_ask(self) -> Callable[[str], bool] | None:
        return None if self.gate is None else self.gate.may_ask

    def took(self, request_id: int, holder: str) -> None:
        if self.gate is not None:
            self.gate.take(holder)
            self._held[request_id] = holder

    def ended(self, request_id: int) -> str | None:
        """Give back what one request held, when the caller sees it end; the holder it held, if any."""
        holder = self._held.pop(request_id, None)
        if holder is not None and self.gate is not None:
            self.gate.give(holder)
        return holder

    def settle(self, in_flight: set[int]) -> None:
        """Give back what requests no longer in ``in_flight`` held (all of it, given an empty set)."""
        for rid in [r for r in self._held if r not in in_flight]:
            self.ended(rid)
