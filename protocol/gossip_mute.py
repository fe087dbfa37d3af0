"""Which strangers to stop listening to: those whose gossip we mostly refuse.

Every gossip message costs its receiver a signature check before our validator sees it, and the per-signer
rate limit (node/peer/rate_limit.py) refuses a flood only after that check. Ten made-up identities sending
20 heartbeats a second each doubled the CPU of 4 honest peers in an open run (docs/benchmarks.md). A peer
that *forwards* us mostly refused messages is either flooding or broken; honest peers forward only what their
own validator accepted, so what we refuse from them is a few timing mismatches between rate buckets.

The ledger counts, per forwarder and over a fixed window, the messages our validator accepted and refused.
A forwarder that is not a run member and had at least ``min_refused`` refused, and more than ``max_share`` of
its messages refused, in one window is muted for ``mute_s``: pubsub drops its messages before any
signature check (py-libp2p's blacklist), and within a second its connections are closed and the host
refuses its streams and does not dial it (protocol/gossip.py) until the mute is over. Members are never
muted: a member's flood is the rate limiter's and the ban's business, and muting one would cut its votes.
Nor is a former member for ``member_grace_s`` after it was last seen as one: a peer back from a partition
or an outage has been dropped from the roster meanwhile, and what it forwards first is its side's stale
gossip, all refused. Muting it also refused its state-sync streams, so on the namespace testbed a 20 s
partition cost the returning peer 100 s instead of 20 (tests/testbed/test_testbed_faults.py).
Time is passed in.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class MuteConfig:
    window_s: float = 10.0
    min_refused: int = 50
    max_share: float = 0.5
    mute_s: float = 60.0
    max_tracked: int = 4096  # forwarders counted at once; the least recently seen is forgotten first
    member_grace_s: float = 600.0  # a former member counts as one this long after it was last seen as one

    def __post_init__(self) -> None:
        if not (self.window_s > 0 and self.mute_s > 0):
            raise ValueError("MuteConfig.window_s and mute_s must be positive")
        if self.member_grace_s < 0:
            raise ValueError("MuteConfig.member_grace_s must be >= 0")
        if self.min_refused < 1 or self.max_tracked < 1:
            raise ValueError("MuteConfig.min_refused and max_tracked must be >= 1")
        if not 0.0 <= self.max_share < 1.0:
            raise ValueError("MuteConfig.max_share must be in [0, 1)")


@dataclass
class _Tally:
    since: float
    accepted: int = 0
    refused: int = 0


class RefusalLedger:
    """Per-forwarder counts of accepted and refused gossip; bounded in the number of forwarders."""

    def __init__(self, config: MuteConfig | None = None) -> None:
        self.config = config or MuteConfig()
        self._tallies: OrderedDict[str, _Tally] = OrderedDict()
        self._muted: dict[str, float] = {}  # forwarder -> until
        self._member_seen: OrderedDict[str, float] = OrderedDict()  # forwarder -> last seen as a member

    def record(self, forwarder: str, accepted: bool, *, member: bool, now: float) -> bool:
        """Count one message; True when this one makes ``forwarder`` muted (once per mute)."""
        cfg = self.config
        member = self._member_now_or_lately(forwarder, member, now)
        tally = self._tallies.get(forwarder)
        if tally is None or now - tally.since >= cfg.window_s:
            tally = _Tally(since=now)
        self._tallies[forwarder] = tally
        self._tallies.move_to_end(forwarder)
        while len(self._tallies) > cfg.max_tracked:
            self._tallies.popitem(last=False)
        if accepted:
            tally.accepted += 1
            return False
        tally.refused += 1
        if member or forwarder in self._muted or len(self._muted) >= cfg.max_tracked:
            return False
        seen = tally.accepted + tally.refused
        if tally.refused >= cfg.min_refused and tally.refused > cfg.max_share * seen:
            self._muted[forwarder] = now + cfg.mute_s
            del self._tallies[forwarder]
            return True
        return False

    def _member_now_or_lately(self, forwarder: str, member: bool, now: float) -> bool:
        seen = self._member_seen
        if member:
            seen[forwarder] = now
            seen.move_to_end(forwarder)
            while len(seen) > self.config.max_tracked:
                seen.popitem(last=False)
            return True
        last = seen.get(forwarder)
        return last is not None and now - last < self.config.member_grace_s

    def expired(self, now: float) -> list[str]:
        """Forwarders whose mute is over (forgotten here: the caller lets them back in)."""
        over = [f for f, until in self._muted.items() if until <= now]
        for forwarder in over:
            del self._muted[forwarder]
        return over

    def muted(self) -> frozenset[str]:
        return frozenset(self._muted)
