"""Prometheus metrics of a node, on an explicit registry, plus the HTTP endpoint that serves them.

Rules (DESIGN.md section 7): every family starts with ``distro_``, uses base units (``_seconds``, ``_bytes``,
``_total``, ``_ratio``), and labels only take values from fixed sets (phases, rejection reasons, round
outcomes). Never a peer id as a label: a swarm with churn would create unbounded series, and an attacker
could grow our memory just by rotating identities. An explicit registry (never the global one) lets several
in-process nodes (the simulator, tests) keep separate metrics.

Public API::

    metrics = NodeMetrics()
    metrics.observe_step(step, loss, {"compute": 0.8, "exchange": 0.3}, sent_bytes=..., received_bytes=...)
    metrics.rejected("duplicate_index")
    server = MetricsServer(metrics.registry, host="127.0.0.1", port=0).start(); server.port; server.stop()
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from types import TracebackType
from wsgiref.simple_server import WSGIServer

from distro_node.compression.errors import REASONS
from distro_node.protocol.codec import CODEC_ERROR_REASONS
from distro_node.protocol.consensus.context import COUNTERS
from distro_node.protocol.reachability import VERDICTS
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server
from prometheus_client.process_collector import ProcessCollector

from distro_node import __version__

__all__ = ["CONNECTION_KINDS", "GOSSIP_REASONS", "OUTCOMES", "PHASES", "REASONS", "REFUSALS", "MetricsError",
           "MetricsServer", "NodeMetrics"]

PREFIX = "distro"
CONNECTION_KINDS = ("direct", "punched", "relayed")
# Phases of one training step, in order; "sync" is fetching weights from peers (join or resync).
PHASES: tuple[str, ...] = ("data", "compute", "prepare", "exchange", "apply", "checkpoint", "sync")
# Why a gossip message was refused before the round machine saw it: its sender is banned, or the codec's
# reason (malformed bytes, wrong run, an author other than the signer, ...).
GOSSIP_REASONS: tuple[str, ...] = ("banned", "not_admitted", "rate", "stranger", *CODEC_ERROR_REASONS)
# How a round closed: every expected payload arrived, or the deadline cut it short.
OUTCOMES: tuple[str, ...] = ("complete", "deadline")
# The round machine's counters (protocol/consensus/context.py): a fixed set, so a bounded label.
ROUND_EVENTS: tuple[str, ...] = COUNTERS
# Refused outside gossip: state requests over node/peer/state_gate.py's rates (by op), and peer-exchange
# hearsay that contradicted an address a peer confirmed itself (protocol/peer_exchange.py, kept out).
REFUSALS: tuple[str, ...] = ("state_meta", "state_chunk", "state_chain", "state_sig", "px_hearsay")
# Step times range from milliseconds (tiny preset, loopback) to minutes (1.2B over a WAN).
_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class MetricsError(ValueError):
    """A metric was fed a value outside its contract (unknown label value, negative byte count, ...);
    ``field`` names the metric argument. Raised rather than clamped: it is a bug in the caller."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


def _count(field: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MetricsError(field, f"must be a non-negative integer, got {value!r}")
    return value


def _seconds(field: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise MetricsError(field, f"must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _ratio(field: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise MetricsError(field, f"must be in [0, 1], got {value!r}")
    return float(value)


def _choice(field: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise MetricsError(field, f"must be one of {', '.join(allowed)}, got {value!r}")
    return value


class NodeMetrics:
    """Every metric of one node. Methods validate their input, so a bad call fails in tests instead of
    producing a series that breaks dashboards."""

    def __init__(self, registry: CollectorRegistry | None = None, *, process_metrics: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self._info = Info(f"{PREFIX}_build", "Version of this node", registry=r)
        self._info.info({"version": __version__})
        self._step = Gauge(f"{PREFIX}_step", "Last completed training step", registry=r)
        self._loss = Gauge(f"{PREFIX}_loss", "Training loss of the last step (nats per token)", registry=r)
        self._peers = Gauge(f"{PREFIX}_peers", "Active peers in the current round's roster", registry=r)
        self._faults = Gauge(
            f"{PREFIX}_faults_tolerated",
            "Lying peers agreement survives with the current roster (f of n >= 3f + 1)", registry=r,
        )
        self._quorum = Gauge(f"{PREFIX}_vote_quorum", "Signed votes that decide a step (2f + 1 of 3f + 1)",
                             registry=r)
        self._permissioned = Gauge(
            f"{PREFIX}_admission_permissioned",
            "1: only the founder and holders of its tickets are admitted; 0: an open run", registry=r,
        )
        self._sent = Counter(f"{PREFIX}_payload_sent_bytes", "Payload bytes sent to peers", registry=r)
        self._received = Counter(
            f"{PREFIX}_payload_received_bytes", "Payload bytes received from peers", registry=r
        )
        self._received_relayed = Counter(
            f"{PREFIX}_payload_received_relayed_bytes",
            "Of the payload bytes received, those that came over a relayed connection (no direct path)",
            registry=r,
        )
        self._tokens = Counter(f"{PREFIX}_tokens", "Training tokens processed by this node", registry=r)
        self._step_seconds = Histogram(
            f"{PREFIX}_step_seconds", "Wall time of a whole step", registry=r, buckets=_SECONDS_BUCKETS
        )
        self._phase_seconds = Histogram(
            f"{PREFIX}_step_phase_seconds", "Wall time of each phase of a step", ["phase"],
            registry=r, buckets=_SECONDS_BUCKETS,
        )
        self._rejected = Counter(
            f"{PREFIX}_payloads_rejected", "Peer payloads rejected at validation, by reason", ["reason"],
            registry=r,
        )
        self._gossip_rejected = Counter(
            f"{PREFIX}_gossip_rejected", "Gossip messages refused before the round machine, by reason",
            ["reason"], registry=r,
        )
        self._banned = Counter(f"{PREFIX}_peers_banned", "Peers excluded for misbehaviour", registry=r)
        self._round_events = Counter(
            f"{PREFIX}_round_events", "What the round machine refused, ignored or did, by event", ["event"],
            registry=r,
        )
        self._refused = Counter(
            f"{PREFIX}_requests_refused", "State requests over the gate's rate and peer-exchange hearsay "
            "contradicting a confirmed address, by what", ["what"], registry=r,
        )
        self._reachability = Gauge(
            f"{PREFIX}_reachability", "1 for what dial-back probes say of this node (verdict label)",
            ["verdict"], registry=r,
        )
        self._connections = Gauge(
            f"{PREFIX}_connections", "Connected members by how we reach them: direct, punched (direct after "
            "a hole punch), relayed (only through a circuit relay)", ["kind"], registry=r,
        )
        self._relayed = Counter(f"{PREFIX}_relayed_bytes", "Bytes this node carried as a relay for others",
                                registry=r)
        self._punch_attempts = Counter(f"{PREFIX}_holepunch_attempts", "Hole punches this node started",
                                       registry=r)
        self._punch_successes = Counter(f"{PREFIX}_holepunch_successes",
                                        "Hole punches that gave a direct connection", registry=r)
        self._relays_held = Gauge(f"{PREFIX}_relay_reservations",
                                  "Relays holding a reservation for this node (a private peer's)", registry=r)
        self._isolated = Gauge(
            f"{PREFIX}_isolated_seconds", "How long this node has had no connected member (0: connected); "
            "it keeps redialing known peers meanwhile", registry=r,
        )
        self._muted = Counter(f"{PREFIX}_gossip_strangers_muted",
                              "Strangers muted and cut off for sending mostly refused gossip", registry=r)
        # Scores are in [-1, 1] (agreement) or unbounded below (reputation), so neither is a _ratio.
        self._agreement_min = Gauge(
            f"{PREFIX}_round_agreement_min",
            "Lowest leave-one-out sign agreement of an included payload with the others, last applied round",
            registry=r,
        )
        self._agreement_median = Gauge(
            f"{PREFIX}_round_agreement_median",
            "Median leave-one-out sign agreement of the included payloads, last applied round", registry=r,
        )
        self._score_min = Gauge(
            f"{PREFIX}_peer_score_min", "Lowest reputation among peers not banned (a ban is below -1)",
            registry=r,
        )
        self._agreement = Gauge(
            f"{PREFIX}_weights_hash_agreement_ratio",
            "Fraction of announcing peers whose weights hash equals the majority hash", registry=r,
        )
        self._reduction = Gauge(
            f"{PREFIX}_bandwidth_reduction_ratio",
            "Dense bf16 gradient bytes divided by the payload bytes actually sent", registry=r,
        )
        self._last_step = Gauge(
            f"{PREFIX}_last_step_duration_seconds", "Wall time of the last completed step", registry=r
        )
        self._rounds = Counter(
            f"{PREFIX}_rounds", "Rounds closed, by outcome", ["outcome"], registry=r
        )
        self._checkpoints = Counter(f"{PREFIX}_checkpoints_saved", "Checkpoints written", registry=r)
        self._checkpoint_time = Gauge(
            f"{PREFIX}_last_checkpoint_timestamp_seconds", "Unix time of the last checkpoint", registry=r
        )
        # Every label value exists from the start (at 0), so rate() and alerts work before the first event.
        for phase in PHASES:
            self._phase_seconds.labels(phase=phase)
        for reason in REASONS:
            self._rejected.labels(reason=reason)
        for reason in GOSSIP_REASONS:
            self._gossip_rejected.labels(reason=reason)
        for outcome in OUTCOMES:
            self._rounds.labels(outcome=outcome)
        for event in ROUND_EVENTS:
            self._round_events.labels(event=event)
        for what in REFUSALS:
            self._refused.labels(what=what)
        self.set_reachability("unknown")
        self.set_connections({}, 0)
        if process_metrics:
            ProcessCollector(namespace=PREFIX, registry=r)

    def observe_step(
        self,
        step: int,
        loss: float,
        phase_seconds: Mapping[str, float],
        sent_bytes: int,
        received_bytes: int,
        *,
        step_seconds: float | None = None,
        tokens: int = 0,
        relayed_bytes: int = 0,
    ) -> None:
        """Record one finished step. ``loss`` may be NaN (a diverged run must show up, not be hidden);
        ``step_seconds`` defaults to the sum of the phases; ``relayed_bytes`` is the part of
        ``received_bytes`` that crossed a relay."""
        _count("step", step)
        if isinstance(loss, bool) or not isinstance(loss, int | float):
            raise MetricsError("loss", f"must be a number, got {loss!r}")
        phases = {_choice("phase", name, PHASES): _seconds(f"phase_seconds[{name}]", s)
                  for name, s in phase_seconds.items()}
        total = sum(phases.values()) if step_seconds is None else _seconds("step_seconds", step_seconds)
        self._step.set(step)
        self._loss.set(float(loss))
        for name, seconds in phases.items():
            self._phase_seconds.labels(phase=name).observe(seconds)
        self._step_seconds.observe(total)
        self._sent.inc(_count("sent_bytes", sent_bytes))
        self._received.inc(_count("received_bytes", received_bytes))
        self._received_relayed.inc(_count("relayed_bytes", relayed_bytes))
        self._tokens.inc(_count("tokens", tokens))

    def last_step_seconds(self, seconds: float) -> None:
        """The newest step's wall time as a gauge: the histogram gives rates and quantiles, this gives the
        "how slow is it right now" a status line or a single-stat panel shows."""
        self._last_step.set(_seconds("seconds", seconds))

    def set_trust(self, faults: int, quorum: int) -> None:
        self._faults.set(_count("faults", faults))
        self._quorum.set(_count("quorum", quorum))

    def set_admission(self, permissioned: bool) -> None:
        self._permissioned.set(1 if permissioned else 0)

    def set_peers(self, count: int) -> None:
        self._peers.set(_count("peers", count))

    def rejected(self, reason: str, count: int = 1) -> None:
        """A payload failed validation; ``reason`` is a ``PayloadError.reason`` (one of ``REASONS``)."""
        self._rejected.labels(reason=_choice("reason", reason, REASONS)).inc(_count("count", count))

    def gossip_rejected(self, reason: str) -> None:
        self._gossip_rejected.labels(reason=_choice("reason", reason, GOSSIP_REASONS)).inc()

    def round_events(self, event: str, count: int) -> None:
        """``count`` more of one of the round machine's counters (``ROUND_EVENTS``)."""
        self._round_events.labels(event=_choice("event", event, ROUND_EVENTS)).inc(_count("count", count))

    def requests_refused(self, what: str, count: int) -> None:
        """``count`` more refusals of one kind (``REFUSALS``)."""
        self._refused.labels(what=_choice("what", what, REFUSALS)).inc(_count("count", count))

    def set_reachability(self, verdict: str) -> None:
        _choice("verdict", verdict, VERDICTS)
        for name in VERDICTS:
            self._reachability.labels(verdict=name).set(1 if name == verdict else 0)

    def set_connections(self, kinds: Mapping[str, int], relays_held: int) -> None:
        for kind in CONNECTION_KINDS:
            self._connections.labels(kind=kind).set(_count(kind, kinds.get(kind, 0)))
        self._relays_held.set(_count("relays_held", relays_held))

    def nat_traversal(self, relayed_bytes: int, punch_attempts: int, punch_successes: int) -> None:
        """``count`` more of each (deltas since the last call)."""
        self._relayed.inc(_count("relayed_bytes", relayed_bytes))
        self._punch_attempts.inc(_count("punch_attempts", punch_attempts))
        self._punch_successes.inc(_count("punch_successes", punch_successes))

    def set_isolated(self, seconds: float) -> None:
        self._isolated.set(_seconds("isolated_seconds", seconds))

    def strangers_muted(self, count: int) -> None:
        self._muted.inc(_count("count", count))

    def peer_banned(self, count: int = 1) -> None:
        self._banned.inc(_count("count", count))

    def round_scores(self, agreement_min: float, agreement_median: float, score_min: float | None) -> None:
        """One applied round's agreement figures, and the lowest reputation (None: nobody tracked yet)."""
        for name, value in (("agreement_min", agreement_min), ("agreement_median", agreement_median)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not -1.0 <= value <= 1.0:
                raise MetricsError(name, f"must be in [-1, 1], got {value!r}")
        self._agreement_min.set(agreement_min)
        self._agreement_median.set(agreement_median)
        if score_min is not None:
            finite = isinstance(score_min, int | float) and math.isfinite(score_min)
            if isinstance(score_min, bool) or not finite:
                raise MetricsError("score_min", f"must be a finite number, got {score_min!r}")
            self._score_min.set(score_min)

    def weights_agreement(self, agreeing: int, announcing: int) -> None:
        """``agreeing`` of ``announcing`` peers reported the majority weights hash."""
        _count("agreeing", agreeing)
        if _count("announcing", announcing) == 0 or agreeing > announcing:
            raise MetricsError("announcing", f"must be >= agreeing ({agreeing}) and > 0, got {announcing}")
        self._agreement.set(_ratio("agreement", agreeing / announcing))

    def bandwidth_reduction(self, dense_bf16_bytes: int, payload_bytes: int) -> None:
        """What the compression saves: a dense bf16 gradient of the model vs the payload this node sent."""
        _count("dense_bf16_bytes", dense_bf16_bytes)
        if _count("payload_bytes", payload_bytes) == 0:
            raise MetricsError("payload_bytes", "must be > 0")
        self._reduction.set(dense_bf16_bytes / payload_bytes)

    def round_closed(self, outcome: str) -> None:
        self._rounds.labels(outcome=_choice("outcome", outcome, OUTCOMES)).inc()

    def checkpoint_saved(self, unix_time: float) -> None:
        self._checkpoints.inc()
        self._checkpoint_time.set(_seconds("unix_time", unix_time))

    def metric_names(self) -> list[str]:
        """Every family as it appears on ``# TYPE`` lines of /metrics (counters with ``_total``, the info
        metric with ``_info``; histograms by base name, queried as ``_bucket``/``_sum``/``_count``),
        sorted. Dashboards and alert rules are checked against this list."""
        suffix = {"counter": "_total", "info": "_info"}
        return sorted(f.name + suffix.get(f.type, "") for f in self.registry.collect())


class MetricsServer:
    """``/metrics`` over HTTP on a background thread; ``port=0`` binds a free port (see :attr:`port`)."""

    def __init__(self, registry: CollectorRegistry, *, host: str = "127.0.0.1", port: int = 0) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise MetricsError("port", f"must be in [0, 65535], got {port!r}")
        self.registry = registry
        self.host = host
        self.requested_port = port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was requested); only valid while running."""
        if self._server is None:
            raise RuntimeError("metrics server is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def start(self) -> MetricsServer:
        if self._server is not None:
            raise RuntimeError("metrics server already running")
        # prometheus_client >= 0.20 returns (server, thread), which is what makes a clean stop possible.
        self._server, self._thread = start_http_server(
            self.requested_port, addr=self.host, registry=self.registry
        )
        return self

    def stop(self) -> None:
        """Stop serving, close the socket and join the thread; idempotent."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
