"""Whom one payload fetch asks, in what order and when: a pure plan (time passed in, no I/O) that
``payload_fetch._race`` carries out.

Why a plan apart from the I/O: across NATs the order and the retries decide the step time. A peer behind a
NAT asks the public founder first (a direct connection); the founder often has not pulled the payload from
its NAT'd author yet and answers NOT_FOUND a few hundred milliseconds too early. Moving on to the author
meant a relay (or a dial that times out) and, once that failed, waiting for the round machine's next retry a
second or more later. So:

- holders are asked by route: an open direct connection first, then a relayed one, then peers we would have
  to dial; a later route starts only when no better-routed holder is still asking (or retrying), or when the
  holder asked last has been silent for ``hedge_after`` (a dead link must not stall the fetch);
- a holder that is not the payload's author and answered NOT_FOUND is asked again after a short backoff
  (0.1 s, then 0.2 s, ``not_found_retries`` times before worse routes start; and on, up to four times as
  often, while another attempt still runs): it is probably fetching the payload right now, and a relayed
  attempt started meanwhile can hang for the whole dial timeout (seen behind resetting NATs);
- a holder that answered (its OK header arrived) is sending: nothing else starts while it does.

The caller drops holders it cannot reach at all before making the plan (no connection and no address worth
dialing), so they cost nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Generic, TypeVar

H = TypeVar("H", bound=Hashable)

# The longest backoff is the first one times 2**_MAX_DOUBLINGS, so a retried holder is never left alone long.
_MAX_DOUBLINGS = 1
# While worse-routed holders are still to ask or running (a relayed attempt can hang for the whole dial
# timeout), a NOT_FOUND holder is asked on, up to this many times its ``not_found_retries`` in all.
_PATIENCE = 4


class Route(IntEnum):
    """How we would reach a holder, best first."""

    DIRECT = 0  # an open direct connection (a hole-punched one included)
    RELAYED = 1  # an open connection through a circuit relay only
    DIAL = 2  # no connection: an address to dial (direct or through a relay), which may time out


@dataclass(frozen=True)
class PlanConfig:
    """The plan's timing (defaults live in ``transfer.TransferConfig``, which builds this)."""

    # A holder silent this long (no reply header) is raced by the next one; it keeps its own attempt.
    hedge_after: float
    # How often a holder other than the author is asked again after NOT_FOUND, and the first wait (doubling).
    not_found_retries: int
    not_found_backoff: float

    def __post_init__(self) -> None:
        if self.hedge_after <= 0 or self.not_found_backoff <= 0:
            raise ValueError("PlanConfig.hedge_after and not_found_backoff must be > 0")
        if self.not_found_retries < 0:
            raise ValueError("PlanConfig.not_found_retries must be >= 0")

    def backoff(self, retry: int) -> float:
        """The wait before the ``retry``-th new ask (0-based) of a holder that answered NOT_FOUND."""
        return self.not_found_backoff * float(2 ** min(retry, _MAX_DOUBLINGS))


class FetchPlan(Generic[H]):
    """One fetch's schedule. Drive it with :meth:`due` (start these now), :meth:`answered`,
    :meth:`failed` and :meth:`next_wakeup`; it is over (undelivered) when :meth:`exhausted`."""

    def __init__(self, holders: Sequence[tuple[H, Route]], *, author: H | None, config: PlanConfig) -> None:
        seen: dict[H, Route] = {}
        for holder, route in holders:
            seen.setdefault(holder, route)
        # Stable: the caller's order is kept within a route.
        self._queue: list[H] = sorted(seen, key=lambda h: seen[h])
        self._route = seen
        self._author = author
        self._cfg = config
        self._running: dict[H, float] = {}  # holder -> when its attempt started
        self._answered: set[H] = set()
        self._retry_at: dict[H, float] = {}  # holder -> when to ask it again
        self._retries: dict[H, int] = {}
        self._last_start: float | None = None

    @property
    def running(self) -> frozenset[H]:
        return frozenset(self._running)

    def route(self, holder: H) -> Route:
        return self._route[holder]

    def due(self, now: float) -> list[H]:
        """Holders to start now (each marked running)."""
        if self._answered:
            return []
        out = [h for h, at in sorted(self._retry_at.items(), key=lambda kv: kv[1]) if at <= now]
        for h in out:
            del self._retry_at[h]
        if self._queue and self._may_start_next(now) and not out:
            out.append(self._queue.pop(0))
        for h in out:
            self._running[h] = now
            self._last_start = now
        return out

    def _may_start_next(self, now: float) -> bool:
        if self._running and self._last_start is not None and now - self._last_start < self._cfg.hedge_after:
            return False  # the last one started still has its chance alone
        route = self._route[self._queue[0]]
        # A better-routed holder still in its first not_found_retries goes first.
        return not any(self._route[h] < route and self._retries[h] <= self._cfg.not_found_retries
                       for h in self._retry_at)

    def answered(self, holder: H) -> None:
        """Its reply header arrived: it is sending, so nobody else is started meanwhile."""
        if holder in self._running:
            self._answered.add(holder)

    def failed(self, holder: H, now: float, *, not_found: bool) -> None:
        """Its attempt ended without verified bytes; ``not_found``: it said it does not hold the payload."""
        self._running.pop(holder, None)
        self._answered.discard(holder)
        done = self._retries.get(holder, 0)
        others = bool(self._running) or bool(self._queue)
        patient = done < self._cfg.not_found_retries or (
            others and done < _PATIENCE * self._cfg.not_found_retries)
        if not_found and holder != self._author and patient:
            self._retries[holder] = done + 1
            self._retry_at[holder] = now + self._cfg.backoff(done)

    def next_wakeup(self, now: float) -> float | None:
        """When :meth:`due` may next have something to start (None: only an attempt ending can change it)."""
        if self._answered:
            return None
        times = list(self._retry_at.values())
        if self._queue:
            if self._running and self._last_start is not None:
                times.append(self._last_start + self._cfg.hedge_after)
            elif self._may_start_next(now):
                times.append(now)
        return min(times) if times else None

    def exhausted(self) -> bool:
        """Nothing running, nothing to retry, nobody left to ask."""
        return not self._running and not self._retry_at and not self._queue
