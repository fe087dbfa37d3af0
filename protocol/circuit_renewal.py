"""When a relayed connection is replaced, closed or dialed again: pure decisions, every time passed in.

Why: a relay cuts each circuit at its caps (``RelayServiceConfig.circuit_seconds`` / ``circuit_bytes``;
py-libp2p 0.8.1's hop resets both ends on the first data it reads past a cap). A cut mid-round loses every
stream on the connection (a payload half fetched, a round message), so the side that dialed the circuit,
the one that knows a circuit address, opens a fresh circuit before the cut, sends new streams over it
and lets the old one finish what it carries; a circuit cut anyway (its relay died) is dialed again at once
rather than at the next peer-exchange round. The host side is protocol/circuit_keeper.py.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

A = TypeVar("A")


@dataclass(frozen=True)
class Margins:
    """How long (and how many bytes) before a cap a circuit is replaced; at most half the cap, so a relay
    with tiny caps still gets circuits that live a while (``RelayClientConfig.renew_before_*``)."""

    seconds: float
    bytes: int

    def __post_init__(self) -> None:
        if not self.seconds > 0 or self.bytes < 1:
            raise ValueError(f"renewal margins must be > 0, got {self.seconds}s and {self.bytes} bytes")


@dataclass
class CircuitLife:
    """One relayed connection as the renewal sees it; times are monotonic seconds."""

    opened_at: float
    seconds: float | None  # the relay's time cap on it (None: none, or not known: an inbound circuit)
    bytes_cap: int | None  # its byte cap, both directions together (None: none or not known)
    used: int = 0  # bytes through it so far, both directions (what the relay counts)
    retired_at: float | None = None  # when new streams stopped going to it
    retry_at: float = 0.0  # a renewal that found no fresh circuit is tried again from then


class Step(Enum):
    KEEP = "keep"
    RENEW = "renew"  # open a fresh circuit, then retire this one
    RETIRE = "retire"  # another connection carries new streams from now on; close this one once idle
    CLOSE = "close"  # retired, and idle or out of time
    REDIAL = "redial"  # cut while it was the only connection to its peer: dial a circuit again now
    FORGET = "forget"  # closed, and nothing to do


def renew_time(c: CircuitLife, m: Margins) -> float | None:
    """When the circuit is replaced for its time cap (None: it has none)."""
    if c.seconds is None:
        return None
    return c.opened_at + c.seconds - min(m.seconds, c.seconds / 2)


def renew_bytes(c: CircuitLife, m: Margins) -> int | None:
    """From how many bytes on the circuit is replaced for its byte cap (None: it has none)."""
    if c.bytes_cap is None:
        return None
    return c.bytes_cap - min(m.bytes, c.bytes_cap // 2)


def _grace(c: CircuitLife, m: Margins) -> float:
    """How long a retired circuit may still carry streams: half of its renewal margin, so it ends well
    before its time cap."""
    return min(m.seconds, c.seconds / 2 if c.seconds is not None else m.seconds) / 2


def close_time(c: CircuitLife, m: Margins) -> float | None:
    """When a retired circuit is closed even with streams still on it (None: not retired)."""
    return None if c.retired_at is None else c.retired_at + _grace(c, m)


def settle_time(c: CircuitLife, m: Margins) -> float | None:
    """From when a retired circuit with no stream in flight is closed: not at once, since the other side
    may not have switched to the new circuit yet and could be opening a stream on this one (None: not
    retired)."""
    return None if c.retired_at is None else c.retired_at + _grace(c, m) / 2


def decide(c: CircuitLife, now: float, m: Margins, *, is_open: bool, busy: bool, others: bool,
           outbound: bool) -> Step:
    """What to do with the circuit now.

    ``busy``: streams other than long-lived ones (gossip) are on it; ``others``: its peer has another open
    connection; ``outbound``: we dialed it (only then do we know a circuit address to renew or redial by).
    """
    if c.retired_at is not None:
        if not is_open:
            return Step.FORGET
        grace = _grace(c, m)
        idle_done = not busy and now >= c.retired_at + grace / 2
        return Step.CLOSE if now >= c.retired_at + grace or idle_done else Step.KEEP
    if not is_open:
        return Step.REDIAL if outbound and not others else Step.FORGET
    if not outbound or now < c.retry_at:
        return Step.KEEP
    at, limit = renew_time(c, m), renew_bytes(c, m)
    if (at is not None and now >= at) or (limit is not None and c.used >= limit):
        return Step.RETIRE if others else Step.RENEW
    return Step.KEEP


def next_wake(c: CircuitLife, m: Margins) -> float | None:
    """The next time :func:`decide` may answer differently without any event (bytes and closes wake the
    keeper themselves)."""
    if c.retired_at is not None:
        return close_time(c, m)  # the keeper looks sooner while streams drain (it polls them)
    at = renew_time(c, m)
    return max(at, c.retry_at) if at is not None else None


def redial_order(addrs: Sequence[tuple[A, Hashable]], current: Hashable, *, cut: bool) -> list[A]:
    """Circuit addresses to try, given as (address, its relay). Renewing: the current relay first (it is
    known to work), then the others; after a cut: the others first (the relay may be what failed)."""
    same = [a for a, relay in addrs if relay == current]
    other = [a for a, relay in addrs if relay != current]
    return other + same if cut else same + other


def superseded(opened: Sequence[tuple[A, float]]) -> list[A]:
    """Of a peer's live circuits, given as (circuit, opened at), those a newer one replaces: all but the
    newest. The side that did not dial learns of a renewal only by the new circuit arriving."""
    newest = max(opened, key=lambda item: item[1], default=None)
    return [c for c, _ in opened if newest is None or c is not newest[0]]


def to_retire(outbound: Sequence[tuple[A, float]], inbound: Sequence[tuple[A, float]], *,
              ours_kept: bool) -> list[A]:
    """Of a peer's live circuits, given as (circuit, opened at), those to retire. When both sides dialed
    one (they dialed each other at the same moment), only the circuits dialed by the side with the smaller
    peer id are kept (``ours_kept``: that is us), so both sides agree and only one side renews; of those,
    all but the newest."""
    if outbound and inbound:
        keep, drop = (outbound, inbound) if ours_kept else (inbound, outbound)
    else:
        keep, drop = (outbound or inbound), []
    return [c for c, _ in drop] + superseded(keep)
