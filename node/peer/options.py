"""What a `join` process is asked to do, and the error it stops with when it cannot.

Kept apart from node.py so that every part of the peer can read its settings without importing the wiring.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..config.schema import CheckpointConfig, MetricsConfig, NetworkConfig
from ..faults import FaultSpec
from .local import LocalSettings
from .manifest import RunManifest


class PeerError(RuntimeError):
    """The peer cannot start or continue (bad bootstrap, manifest, or state sync); the message says why."""


@dataclass(frozen=True)
class PeerOptions:
    """The node config's sections as loaded (one source of every operator setting), the paths join derived
    from them, this process's own flags, and internal pacing that is not an operator's choice."""

    manifest: RunManifest | None = None  # founders: the run to create; joiners: None (fetched)
    expected_run_id: bytes | None = None
    # [network]: listen, bootstrap (empty: found a run), announce, peer exchange and round pacing.
    network: NetworkConfig = field(default_factory=NetworkConfig)
    # [metrics]: enabled=False serves no /metrics endpoint.
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    # [checkpoint]: how often and how many; where is checkpoint_dir below.
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    key_file: Path | None = None
    data_dir: Path | None = None
    steps: int | None = None  # stop (gracefully) after applying this many steps in total
    genesis_peers: int = 1  # founders: start step 0 once this many peers (ourselves included) are in
    log_format: str = "text"
    startup_timeout: float = 120.0
    leave_budget: float = 4.0  # seconds a leaving peer may spend finishing its current round
    # A leaving peer keeps serving payloads after its goodbye until no request came for `linger` seconds and
    # no upload is running (peers still fetching the last step need ours), for at most `linger_max` seconds.
    linger: float = 1.0
    linger_max: float = 30.0
    max_state_bytes: int = 1 << 30
    checkpoint_dir: Path | None = None  # None: no checkpoints (and no resume)
    # Benchmark knob only (bench/overlap.py): seconds to hold our own announcement back after the payload is
    # ready, as if uploading it took that long. It stands in for a slow link on loopback; 0 in real runs.
    comm_delay: float = 0.0
    # Demos and tests of degraded/malicious peers only: send what node/faults.py makes of our payloads.
    fault: FaultSpec | None = None
    # This process's device, precision, gradient accumulation and data file path (never in the manifest).
    local: LocalSettings = field(default_factory=LocalSettings)
