"""Per-signer token buckets for gossip: one peer cannot make us decode, check and forward without bound.

Why per signer and before decoding: every gossip message costs a decode, signature checks (several in a list
or certificate) and round-machine work, and a valid one is forwarded to our mesh. An honest peer sends a
few messages a step (announcement, two votes, sometimes a status, list or certificate, heartbeats), about
25 a second at the tiny preset's 7 steps a second, with bursts when it catches up; a flooding one is cut to
the configured rate, and what it sends beyond that is neither delivered nor forwarded (py-libp2p's own
envelope signature check still runs first, which we cannot avoid).

Some kinds get a much tighter bucket of their own (:class:`GossipRates`): an honest peer sends one heartbeat
per heartbeat interval and one goodbye, ever, so a flood of distinct heartbeats (each one new, so never
"seen") is cut to a few a second however generous the overall budget is. That matters because every message
the validator accepts is forwarded: a flood accepted at the overall rate filled the per-peer gossip queues of
honest peers, and their own votes waited behind it (a 1,000-a-second heartbeat flood from one of 4 peers
stalled the swarm at step 0 on this 2-core machine).

Memory is bounded: at most ``max_peers`` buckets, the least recently used evicted first (a fresh bucket is
full, so eviction can only make us more lenient toward a peer, never block an honest one).

A tighter budget is also spent earlier, before py-libp2p's signature check, per (forwarder, claimed origin)
(:func:`forwarder_prefilter`): the signature check is what a member's flood of validly signed messages
costs us most, and it ran for every message however early the per-signer bucket refused it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping

from libp2p.peer.id import ID


class PeerRateLimit:
    def __init__(self, rate: float, burst: float, clock: Callable[[], float], max_peers: int = 4096) -> None:
        if not (rate > 0 and burst >= 1 and max_peers >= 1):
            raise ValueError("PeerRateLimit needs rate > 0, burst >= 1 and max_peers >= 1")
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._max_peers = max_peers
        self._buckets: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # peer -> (tokens, at)

    def allow(self, peer: Hashable) -> bool:
        """Take one token from ``peer``'s bucket (any key: a signer, a (forwarder, origin) pair); False
        (nothing taken) if it is empty."""
        now = self._clock()
        tokens, at = self._buckets.get(peer, (self._burst, now))
        tokens = min(self._burst, tokens + max(0.0, now - at) * self._rate)
        allowed = tokens >= 1.0
        self._buckets[peer] = (tokens - 1.0 if allowed else tokens, now)
        self._buckets.move_to_end(peer)
        while len(self._buckets) > self._max_peers:
            self._buckets.popitem(last=False)
        return allowed


def forwarder_prefilter(rate: float, burst: float, clock: Callable[[], float],
                        on_refused: Callable[[str], None] | None = None) -> Callable[[ID, bytes], bool]:
    """The gossip prefilter (protocol/gossip_pubsub.py ``RunPubsub``): a budget per (forwarder, claimed
    origin), spent before the signature check; refusals count as ``rate``."""
    buckets = PeerRateLimit(rate, burst, clock)

    def keep(forwarder: ID, origin: bytes) -> bool:
        if buckets.allow((forwarder.to_bytes(), origin)):
            return True
        if on_refused is not None:
            on_refused("rate")
        return False

    return keep


class GossipRates:
    """The overall per-signer bucket, and tighter ones for the kinds named in ``per_kind`` (rate, burst)."""

    def __init__(self, rate: float, burst: float, per_kind: Mapping[str, tuple[float, float]],
                 clock: Callable[[], float]) -> None:
        self._overall = PeerRateLimit(rate, burst, clock)
        self._kinds = {kind: PeerRateLimit(r, b, clock) for kind, (r, b) in per_kind.items()}

    def allow(self, signer: str) -> bool:
        """Before decoding: one message of any kind."""
        return self._overall.allow(signer)

    def allow_kind(self, signer: str, kind: str) -> bool:
        """After decoding, before any signature check: one message of ``kind``."""
        bucket = self._kinds.get(kind)
        return bucket is None or bucket.allow(signer)

