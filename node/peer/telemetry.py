"""The peer's Prometheus side: owns the ``NodeMetrics`` registry and the ``/metrics`` server of one `join`.

Why a separate object: the node's loop reports facts in its own vocabulary (its step row, a rejected
payload, a penalty, the announcements of a round); this class translates them into the metric contract of
``node/metrics.py`` (fixed phase names, per-step byte deltas, ratios) so node.py stays about the protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from distro_node.protocol.membership import faults_tolerated, vote_quorum

from ..data_metrics import DataMetrics
from ..metrics import PHASES, MetricsServer, NodeMetrics
from .bans import RoundScores

# The node's phase names -> the metric's fixed phase labels. "codec" (storing and decoding our own payload)
# is preparation of what we send; "round" is waiting for the swarm's decision, i.e. the exchange.
_PHASE_MAP = {"compute": "compute", "prepare": "prepare", "codec": "prepare", "apply": "apply",
              "round": "exchange", "checkpoint": "checkpoint", "sync": "sync", "data": "data",
              "score": "apply"}


class Telemetry:
    def __init__(self, host: str, port: int, dense_bf16_bytes: int, tokens_per_step: int) -> None:
        self.metrics = NodeMetrics()
        self.data = DataMetrics(self.metrics.registry)
        self._tokens = 0
        self.server = MetricsServer(self.metrics.registry, host=host, port=port).start()
        self.dense_bf16_bytes = dense_bf16_bytes
        self.tokens_per_step = tokens_per_step
        self._bytes_seen: dict[str, int] = {}  # the node's cumulative byte totals, as last reported
        self._last_loss = float("nan")
        self._sources: tuple[Callable[[], Mapping[str, int]], Callable[[], int]] = (dict, int)
        self._refusals: Callable[[], Mapping[str, int]] = dict
        self._seen_events: dict[str, int] = {}
        self._seen_refusals: dict[str, int] = {}
        self._seen_muted = 0

    def watch(self, round_events: Callable[[], Mapping[str, int]],
              strangers_muted: Callable[[], int],
              refusals: Callable[[], Mapping[str, int]] = dict) -> None:
        """Cumulative counts kept elsewhere (the round machine's counters, the gossip channel's mutes, the
        state gate's and the peer book's refusals), read at every step and reported as increments. A
        machine replaced by a resync starts again at 0: a count below the last one seen is all new."""
        self._sources = (round_events, strangers_muted)
        self._refusals = refusals

    def _counts(self) -> None:
        events, muted = self._sources[0](), self._sources[1]()
        _increments(events, self._seen_events, self.metrics.round_events)
        _increments(self._refusals(), self._seen_refusals, self.metrics.requests_refused)
        if muted > self._seen_muted:
            self.metrics.strangers_muted(muted - self._seen_muted)
        self._seen_muted = max(self._seen_muted, muted)

    @property
    def url(self) -> str:
        return self.server.url

    def step(
        self,
        step: int,
        loss: float | None,
        phases: Mapping[str, float],
        *,
        sent_total: int,
        received_total: int,
        relayed_total: int = 0,
        step_seconds: float,
        peers: int,
        complete: bool,
    ) -> None:
        """One applied step. Byte counters are cumulative in the node; the metric wants increments."""
        merged: dict[str, float] = {}
        for name, seconds in phases.items():
            label = _PHASE_MAP.get(name)
            if label in PHASES:
                merged[label] = merged.get(label, 0.0) + max(0.0, seconds)
        m = self.metrics
        sent, received, relayed = (self._grown(name, total) for name, total in (
            ("sent", sent_total), ("received", received_total), ("relayed", relayed_total)))
        # A step we applied without computing (catching up) has no loss of ours: repeat the last one, since
        # a NaN here would read as divergence on the dashboard.
        if loss is not None:
            self._last_loss = loss
        tokens = self.tokens_per_step if loss is not None else 0
        m.observe_step(step, self._last_loss, merged, sent, received, step_seconds=max(0.0, step_seconds),
                       tokens=tokens, relayed_bytes=relayed)
        self._tokens += tokens
        self.data.tokens_seen(self._tokens)
        m.set_peers(peers)
        faults = faults_tolerated(peers)
        m.set_trust(faults, vote_quorum(peers, faults))
        m.round_closed("complete" if complete else "deadline")
        m.last_step_seconds(step_seconds)
        self._counts()

    def _grown(self, name: str, total: int) -> int:
        """What a cumulative byte total grew by since the last step (never negative, never counted twice)."""
        last = self._bytes_seen.get(name, 0)
        self._bytes_seen[name] = max(last, total)
        return max(0, total - last)

    def payload_sent(self, payload_bytes: int) -> None:
        if payload_bytes > 0:
            self.metrics.bandwidth_reduction(self.dense_bf16_bytes, payload_bytes)

    def agreement(self, by_hash: Mapping[bytes, set[str]], own: bytes | None, self_id: str) -> None:
        """Weights hash agreement of a round from its signed announcements (ours included)."""
        voters: dict[bytes, set[str]] = {h: set(peers) for h, peers in by_hash.items()}
        if own is not None:
            voters.setdefault(own, set()).add(self_id)
        total = len(set().union(*voters.values())) if voters else 0
        if total:
            self.metrics.weights_agreement(max(len(v) for v in voters.values()), total)

    def rejected(self, reason: str) -> None:
        self.metrics.rejected(reason)

    def gossip_rejected(self, reason: str) -> None:
        self.metrics.gossip_rejected(reason)

    def round_scored(self, scored: RoundScores, lowest_score: float | None) -> None:
        """An applied round went through the ban keeper: its agreement figures, and any new bans."""
        if scored.bans:
            self.metrics.peer_banned(len(scored.bans))
        low, median = scored.agreement_min, scored.agreement_median
        if low is not None and median is not None:
            self.metrics.round_scores(low, median, lowest_score)

    def checkpoint_saved(self, unix_time: float) -> None:
        self.metrics.checkpoint_saved(unix_time)

    def stop(self) -> None:
        self.server.stop()


def _increments(totals: Mapping[str, int], seen: dict[str, int], report: Callable[[str, int], None]) -> None:
    """Report what each cumulative total grew by since ``seen`` (updated); a total below the last one seen
    comes from a fresh counter and is all new."""
    for name, total in totals.items():
        last = seen.get(name, 0)
        fresh = total - last if total >= last else total
        if fresh:
            report(name, fresh)
        seen[name] = total
