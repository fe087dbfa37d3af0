"""Node metrics: exposition that Prometheus' own promtool accepts, bounded labels, validated inputs, and an
HTTP endpoint that starts on a free port and stops cleanly."""

from __future__ import annotations

import re
import subprocess
import urllib.error
import urllib.request

import prometheus_client
import pytest
from distro_node.compression.errors import REASONS
from distro_node.node.metrics import (
    CONNECTION_KINDS,
    GOSSIP_REASONS,
    OUTCOMES,
    PHASES,
    REFUSALS,
    ROUND_EVENTS,
    MetricsError,
    MetricsServer,
    NodeMetrics,
)
from distro_node.node.peer.telemetry import Telemetry
from distro_node.protocol.reachability import VERDICTS
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from promtool import require_promtool

REQUIRED = {
    "distro_step",
    "distro_loss",
    "distro_peers",
    "distro_faults_tolerated",
    "distro_vote_quorum",
    "distro_payload_sent_bytes_total",
    "distro_payload_received_bytes_total",
    "distro_payload_received_relayed_bytes_total",
    "distro_step_phase_seconds",
    "distro_payloads_rejected_total",
    "distro_peers_banned_total",
    "distro_weights_hash_agreement_ratio",
    "distro_bandwidth_reduction_ratio",
    "distro_rounds_total",
    "distro_build_info",
}
ALLOWED_LABELS = {"phase": set(PHASES), "reason": set(REASONS) | set(GOSSIP_REASONS),
                  "outcome": set(OUTCOMES), "event": set(ROUND_EVENTS),
                  "verdict": set(VERDICTS), "what": set(REFUSALS), "kind": set(CONNECTION_KINDS),
                  "version": None}


def busy_metrics() -> NodeMetrics:
    metrics = NodeMetrics()
    metrics.observe_step(7, 3.25, {"compute": 0.5, "exchange": 0.25, "apply": 0.01}, 1200, 8400, tokens=512,
                         relayed_bytes=300)
    metrics.set_peers(8)
    metrics.set_trust(2, 6)
    metrics.rejected("duplicate_index")
    metrics.rejected("norm", 2)
    metrics.peer_banned()
    metrics.weights_agreement(7, 8)
    metrics.bandwidth_reduction(2_000_000, 1000)
    metrics.round_closed("deadline")
    metrics.checkpoint_saved(1.7e9)
    metrics.set_connections({"direct": 2, "punched": 1, "relayed": 3}, 2)
    metrics.nat_traversal(4096, 3, 1)
    return metrics


def exposition(metrics: NodeMetrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_exposition_parses_and_holds_the_observed_values() -> None:
    families = {f.name: f for f in text_string_to_metric_families(exposition(busy_metrics()))}
    value = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples
    }
    assert value[("distro_step", ())] == 7
    assert value[("distro_loss", ())] == 3.25
    assert value[("distro_peers", ())] == 8
    assert value[("distro_faults_tolerated", ())] == 2 and value[("distro_vote_quorum", ())] == 6
    assert value[("distro_payload_sent_bytes_total", ())] == 1200
    assert value[("distro_payload_received_bytes_total", ())] == 8400
    assert value[("distro_payload_received_relayed_bytes_total", ())] == 300
    assert value[("distro_tokens_total", ())] == 512
    assert value[("distro_connections", (("kind", "relayed"),))] == 3
    assert value[("distro_connections", (("kind", "punched"),))] == 1
    assert value[("distro_relay_reservations", ())] == 2
    assert value[("distro_relayed_bytes_total", ())] == 4096
    assert value[("distro_holepunch_attempts_total", ())] == 3
    assert value[("distro_holepunch_successes_total", ())] == 1
    assert value[("distro_payloads_rejected_total", (("reason", "norm"),))] == 2
    assert value[("distro_payloads_rejected_total", (("reason", "malformed"),))] == 0
    assert value[("distro_step_phase_seconds_count", (("phase", "compute"),))] == 1
    assert value[("distro_step_phase_seconds_sum", (("phase", "exchange"),))] == 0.25
    assert value[("distro_step_seconds_sum", ())] == pytest.approx(0.76)
    assert value[("distro_weights_hash_agreement_ratio", ())] == 0.875
    assert value[("distro_bandwidth_reduction_ratio", ())] == 2000
    assert value[("distro_rounds_total", (("outcome", "deadline"),))] == 1
    assert value[("distro_rounds_total", (("outcome", "complete"),))] == 0
    assert value[("distro_peers_banned_total", ())] == 1


def test_promtool_accepts_the_exposition() -> None:
    promtool = require_promtool()
    done = subprocess.run(
        [promtool, "check", "metrics"], input=exposition(busy_metrics()), capture_output=True, text=True,
        timeout=30, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not done.stdout.strip() and not done.stderr.strip(), done.stdout + done.stderr


def test_metric_names_lists_every_family_and_the_required_ones() -> None:
    metrics = busy_metrics()
    typed = set(re.findall(r"^# TYPE (\S+) ", exposition(metrics), re.MULTILINE))
    typed = {name for name in typed if not name.endswith("_created")}
    assert set(metrics.metric_names()) == typed
    assert REQUIRED <= typed
    assert all(name.startswith("distro_") for name in typed)
    assert metrics.metric_names() == sorted(metrics.metric_names())


def test_labels_are_bounded_and_never_peer_ids() -> None:
    metrics = busy_metrics()
    for family in metrics.registry.collect():
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k not in ("le", "quantile")}
            for key, val in labels.items():
                assert key in ALLOWED_LABELS and "peer" not in key, f"{sample.name} has label {key}"
                allowed = ALLOWED_LABELS[key]
                assert allowed is None or val in allowed, f"{sample.name}{{{key}={val!r}}}"
                # Rejection reason "peer_id" names a check, not a peer; actual ids look like these:
                assert not re.search(r"12D3Koo|Qm[1-9A-HJ-NP-Za-km-z]{44}", val)


def test_explicit_registry_leaves_the_global_one_alone() -> None:
    NodeMetrics()
    NodeMetrics()  # a second node in the same process must not collide
    global_names = {f.name for f in prometheus_client.REGISTRY.collect()}
    assert not any(name.startswith("distro_") for name in global_names)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda m: m.rejected("not_a_reason"), "reason"),
        (lambda m: m.rejected("norm", -1), "count"),
        (lambda m: m.observe_step(1, 1.0, {"thinking": 1.0}, 0, 0), "phase"),
        (lambda m: m.observe_step(1, 1.0, {"compute": -1.0}, 0, 0), "phase_seconds[compute]"),
        (lambda m: m.observe_step(1, 1.0, {}, -5, 0), "sent_bytes"),
        (lambda m: m.observe_step(-1, 1.0, {}, 0, 0), "step"),
        (lambda m: m.observe_step(1, "low", {}, 0, 0), "loss"),
        (lambda m: m.set_peers(-1), "peers"),
        (lambda m: m.round_closed("timeout"), "outcome"),
        (lambda m: m.weights_agreement(3, 2), "announcing"),
        (lambda m: m.weights_agreement(0, 0), "announcing"),
        (lambda m: m.bandwidth_reduction(100, 0), "payload_bytes"),
    ],
)
def test_bad_input_raises_naming_the_argument(call: object, field: str) -> None:
    with pytest.raises(MetricsError) as info:
        call(NodeMetrics(process_metrics=False))  # type: ignore[operator]
    assert info.value.field == field


def test_nan_loss_is_reported_not_hidden() -> None:
    metrics = NodeMetrics(process_metrics=False)
    metrics.observe_step(1, float("nan"), {}, 0, 0)
    assert "distro_loss NaN" in exposition(metrics)


def test_http_server_on_a_free_port_serves_and_stops() -> None:
    metrics = busy_metrics()
    server = MetricsServer(metrics.registry, host="127.0.0.1", port=0).start()
    try:
        port = server.port
        assert port > 0
        with urllib.request.urlopen(server.url, timeout=5) as response:
            body = response.read().decode()
        assert response.status == 200
        assert "distro_step 7.0" in body
        with pytest.raises(RuntimeError):
            server.start()
    finally:
        server.stop()
    server.stop()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
    with pytest.raises(RuntimeError):
        _ = server.port


def test_context_manager_and_bad_port() -> None:
    with MetricsServer(NodeMetrics(process_metrics=False).registry) as server:
        with urllib.request.urlopen(server.url, timeout=5) as response:
            assert b"distro_build_info" in response.read()
    with pytest.raises(MetricsError, match="port"):
        MetricsServer(NodeMetrics(process_metrics=False).registry, port=70000)


def test_round_events_and_muted_strangers_arrive_as_increments_from_their_sources() -> None:
    """Telemetry reads the round machine's cumulative counters and the gossip mutes at each step; a machine
    replaced by a resync (counters back at 0) does not take the metric back."""
    telemetry = Telemetry.__new__(Telemetry)  # no HTTP server needed for the translation
    telemetry.metrics = NodeMetrics(process_metrics=False)
    telemetry._seen_events, telemetry._seen_muted, telemetry._seen_refusals = {}, 0, {}
    counts = {"stale_step": 3, "votes_cast": 5}
    muted = [2]
    refused = {"state_meta": 4}
    telemetry.watch(lambda: counts, lambda: muted[0], lambda: refused)
    telemetry._counts()
    counts = {"stale_step": 1, "votes_cast": 7}  # a fresh machine: stale_step started again
    muted[0] = 3
    refused = {"state_meta": 6, "px_hearsay": 1}
    telemetry._counts()
    text = generate_latest(telemetry.metrics.registry).decode()
    assert 'distro_requests_refused_total{what="state_meta"} 6.0' in text
    assert 'distro_requests_refused_total{what="px_hearsay"} 1.0' in text
    assert 'distro_requests_refused_total{what="state_chunk"} 0.0' in text
    assert 'distro_round_events_total{event="stale_step"} 4.0' in text
    assert 'distro_round_events_total{event="votes_cast"} 7.0' in text
    assert 'distro_round_events_total{event="list_conflict"} 0.0' in text
    assert "distro_gossip_strangers_muted_total 3.0" in text
    with pytest.raises(MetricsError):
        telemetry.metrics.round_events("made_up", 1)
