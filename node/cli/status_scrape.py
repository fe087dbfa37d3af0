"""Read a running node's state from its Prometheus endpoint: the one interface a node already exposes.

Why scrape rather than add a status API: ``/metrics`` exists on every node (node/metrics.py), is bound to
loopback by default, and is what dashboards read, so ``distro-node status`` can never show something the
dashboards do not. The fetch is bounded (3 s overall, 4 MiB) and ignores proxy settings: the target is a
local process, and an ``http_proxy`` in the environment must not send the request elsewhere.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from prometheus_client.parser import text_string_to_metric_families

DEFAULT_TIMEOUT = 3.0
MAX_BODY_BYTES = 4 * 1024 * 1024
_READ_CHUNK = 64 * 1024


class StatusError(Exception):
    """The endpoint could not be read or is not a distro-node's; ``unreachable`` when nothing answered."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


@dataclass(frozen=True)
class PhaseTime:
    count: int
    mean_seconds: float | None


@dataclass(frozen=True)
class NodeStatus:
    """What ``status`` shows. Ratios are None until the node has reported one (a gauge at 0 then)."""

    version: str | None
    step: int
    steps_observed: int
    loss: float | None
    peers: int
    sent_bytes: int
    received_bytes: int
    tokens: int
    step_mean_seconds: float | None
    phases: dict[str, PhaseTime] = field(default_factory=dict)
    rounds: dict[str, int] = field(default_factory=dict)
    rejected: dict[str, int] = field(default_factory=dict)
    banned: int = 0
    faults_tolerated: int = 0
    vote_quorum: int = 0
    permissioned: bool = False
    reachability: str = "unknown"
    isolated_seconds: float = 0.0
    connections: dict[str, int] = field(default_factory=dict)  # connected members by kind (direct, ...)
    relay_reservations: int = 0
    weights_agreement_ratio: float | None = None
    bandwidth_reduction_ratio: float | None = None
    checkpoints: int = 0
    last_checkpoint_unix: float | None = None
    started_unix: float | None = None
    resident_bytes: int | None = None
    # Prepared data (node/data_metrics.py); data_shards is 0 on other runs and the rest is then not shown.
    data_shards: int = 0
    data_shards_cached: int = 0
    data_shards_fetched: int = 0
    data_bytes_fetched: int = 0
    blob_faulty: int = 0
    data_epoch: float | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def check_url(url: str) -> str:
    """``url`` when it is http(s) with a host; ValueError otherwise (``file:`` and friends are refused)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http:// URL with a host (http://127.0.0.1:9400/metrics), got {url!r}")
    return url


def fetch(url: str, timeout: float = DEFAULT_TIMEOUT, cap: int = MAX_BODY_BYTES) -> str:
    """The body of ``url`` as text, within ``timeout`` seconds overall and ``cap`` bytes."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    try:
        request = urllib.request.Request(url, headers={"Accept": "text/plain"})
        with opener.open(request, timeout=timeout) as resp:
            body = bytearray()
            while len(body) <= cap:
                if time.monotonic() > deadline:
                    raise StatusError(f"{url} did not finish answering within {timeout:g} s")
                part = resp.read(_READ_CHUNK)
                if not part:
                    break
                body += part
    except urllib.error.HTTPError as exc:
        detail = f"{url} answered HTTP {exc.code} {exc.reason}: not a node's metrics endpoint?"
        raise StatusError(detail) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StatusError(str(reason), unreachable=True) from None
    if len(body) > cap:
        raise StatusError(f"{url} sent more than {cap} bytes: not a node's metrics endpoint")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise StatusError(f"{url} sent a body that is not UTF-8 text") from None


Samples = Mapping[tuple[str, frozenset[tuple[str, str]]], float]


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    try:
        return {
            (s.name, frozenset(s.labels.items())): float(s.value)
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
    except (ValueError, TypeError, IndexError) as exc:
        raise StatusError(f"not a Prometheus text exposition ({exc})") from None


def _get(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def _by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {
        dict(labels)[label]: value
        for (sample, labels), value in samples.items()
        if sample == name and label in dict(labels)
    }


def _mean(total: float | None, count: float | None) -> float | None:
    return total / count if total is not None and count else None


def _positive(value: float | None) -> float | None:
    return value if value else None


def parse_status(text: str) -> NodeStatus:
    """Pick the node's metrics out of an exposition; StatusError when ``distro_step`` is missing."""
    s = _samples(text)
    step = _get(s, "distro_step")
    if step is None:
        raise StatusError("the endpoint serves metrics but no distro_step: not a distro-node")
    steps_observed = int(_get(s, "distro_step_seconds_count") or 0)
    versions = [dict(labels).get("version") for (name, labels) in s if name == "distro_build_info"]
    phase_sums = _by_label(s, "distro_step_phase_seconds_sum", "phase")
    phase_counts = _by_label(s, "distro_step_phase_seconds_count", "phase")
    phases = {
        phase: PhaseTime(int(count), _mean(phase_sums.get(phase), count))
        for phase, count in phase_counts.items()
        if count
    }
    resident = _get(s, "distro_process_resident_memory_bytes")
    rejected = _by_label(s, "distro_payloads_rejected_total", "reason")
    return NodeStatus(
        version=versions[0] if versions else None,
        step=int(step),
        steps_observed=steps_observed,
        loss=_get(s, "distro_loss") if steps_observed else None,
        peers=int(_get(s, "distro_peers") or 0),
        sent_bytes=int(_get(s, "distro_payload_sent_bytes_total") or 0),
        received_bytes=int(_get(s, "distro_payload_received_bytes_total") or 0),
        tokens=int(_get(s, "distro_tokens_total") or 0),
        step_mean_seconds=_mean(_get(s, "distro_step_seconds_sum"), steps_observed),
        phases=phases,
        rounds={k: int(v) for k, v in _by_label(s, "distro_rounds_total", "outcome").items()},
        rejected={k: int(v) for k, v in rejected.items() if v},
        banned=int(_get(s, "distro_peers_banned_total") or 0),
        faults_tolerated=int(_get(s, "distro_faults_tolerated") or 0),
        vote_quorum=int(_get(s, "distro_vote_quorum") or 0),
        permissioned=bool(_get(s, "distro_admission_permissioned")),
        reachability=next((v for v, on in _by_label(s, "distro_reachability", "verdict").items() if on),
                          "unknown"),
        isolated_seconds=_get(s, "distro_isolated_seconds") or 0.0,
        connections={k: int(v) for k, v in _by_label(s, "distro_connections", "kind").items()},
        relay_reservations=int(_get(s, "distro_relay_reservations") or 0),
        weights_agreement_ratio=_positive(_get(s, "distro_weights_hash_agreement_ratio")),
        bandwidth_reduction_ratio=_positive(_get(s, "distro_bandwidth_reduction_ratio")),
        checkpoints=int(_get(s, "distro_checkpoints_saved_total") or 0),
        last_checkpoint_unix=_positive(_get(s, "distro_last_checkpoint_timestamp_seconds")),
        started_unix=_get(s, "distro_process_start_time_seconds"),
        resident_bytes=int(resident) if resident is not None else None,
        data_shards=int(_get(s, "distro_data_shards") or 0),
        data_shards_cached=int(_get(s, "distro_data_shards_cached") or 0),
        data_shards_fetched=int(_get(s, "distro_data_shards_fetched_total") or 0),
        data_bytes_fetched=int(_get(s, "distro_data_bytes_fetched_total") or 0),
        blob_faulty=int(_get(s, "distro_blob_faulty_total") or 0),
        data_epoch=_positive(_get(s, "distro_data_epoch")),
    )


def scrape(url: str, timeout: float = DEFAULT_TIMEOUT) -> NodeStatus:
    return parse_status(fetch(check_url(url), timeout))
