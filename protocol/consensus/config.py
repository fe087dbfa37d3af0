"""Tunables of the round state machine, validated once so the machine itself never sees nonsense."""

from __future__ import annotations

from dataclasses import dataclass

from ..messages import MAX_LIST_PEERS, MAX_PAYLOAD_BYTES, RUN_ID_BYTES

# Under a bound on inclusion, the candidates beyond it a peer fetches in case a top one fails to arrive: two
# keep a run going through one bad or slow payload per step while adding 2/K to the traffic.
DEFAULT_INCLUSION_FETCH_MARGIN = 2


class RoundConfigError(ValueError):
    """A round setting is out of range; the message names the field."""


@dataclass(frozen=True)
class RoundConfig:
    """Times are in seconds of whatever monotonic clock the caller passes as ``now``.

    Timeouts only affect liveness (how long a round waits for stragglers or a silent leader), never which
    list is decided: agreement rests on vote quorums, not on clocks being in sync. ``leader_timeout`` should
    still exceed a few gossip delays (status, proposal, votes) or fallback epochs end before they can decide.
    """

    run_id: bytes
    # Collect announcements and payloads this long after the round's first announcement.
    collect_timeout: float = 10.0
    # Length of each leader's epoch after the first; see the class docstring.
    leader_timeout: float = 3.0
    # A roster peer not heard from for this long is not waited for (it can still be included if it shows up).
    liveness_timeout: float = 30.0
    # Rounds a newcomer announces without being included (momentum warm-up, weights check).
    warmup_rounds: int = 3
    # Consecutive rounds a roster peer may miss before every replica drops it.
    max_missed_rounds: int = 3
    # Announcements and lists more than this many steps ahead of the undecided step are ignored.
    max_future_steps: int = 2
    # Decided steps kept for payload fetching, weights checks and conflict detection.
    history_steps: int = 8
    max_roster_peers: int = 256
    max_tracked_peers: int = 1024
    max_joiners_per_round: int = 8
    max_announcements_per_step: int = 512
    max_lists_per_step: int = 8
    max_payload_bytes: int = 64 << 20
    # The most payloads one step's list includes (protocol/consensus/inclusion_bound.py); 0: all of them.
    max_included: int = 0
    # Under that bound, how many candidates beyond it a peer fetches (see the constant's comment).
    inclusion_fetch_margin: int = DEFAULT_INCLUSION_FETCH_MARGIN
    # Resync when a majority of the roster reports a step at least this far ahead of ours.
    behind_steps: int = 2
    # While a round is stalled, republish our announcement this often (a partition may have eaten it).
    reannounce_interval: float = 5.0
    fetch_retry_interval: float = 2.0
    # A decided step whose payloads cannot be fetched within this long asks for a state sync.
    apply_timeout: float = 60.0
    resync_cooldown: float = 10.0

    @property
    def heartbeat_interval(self) -> float:
        """How often a peer publishes a heartbeat: a quarter of ``liveness_timeout``, so three may be lost or
        late before the others stop waiting for it. More cost: every heartbeat reaches every peer about
        ``degree`` times and each copy is signature-checked, so with 8 peers on 2 shared cores fixed 0.5 s
        heartbeats alone kept the daemons too busy to read their sockets (rounds of 12-19 s)."""
        return self.liveness_timeout / 4

    def __post_init__(self) -> None:
        if type(self.run_id) is not bytes or len(self.run_id) != RUN_ID_BYTES:
            raise RoundConfigError(f"run_id must be {RUN_ID_BYTES} bytes")
        for name in (
            "collect_timeout", "leader_timeout", "liveness_timeout", "reannounce_interval",
            "fetch_retry_interval", "apply_timeout", "resync_cooldown",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < 1e9:
                raise RoundConfigError(f"{name} must be a positive number of seconds, got {value!r}")
        limits = {
            "warmup_rounds": (1, 1000),
            "max_missed_rounds": (1, 1000),
            "max_future_steps": (0, 1000),
            "history_steps": (1, 10_000),
            "max_roster_peers": (1, MAX_LIST_PEERS),
            "max_tracked_peers": (1, 1_000_000),
            "max_joiners_per_round": (0, MAX_LIST_PEERS),
            "max_announcements_per_step": (1, 1_000_000),
            "max_lists_per_step": (1, 1000),
            "max_payload_bytes": (1, MAX_PAYLOAD_BYTES),
            "behind_steps": (1, 1_000_000),
            "max_included": (0, MAX_LIST_PEERS),
            "inclusion_fetch_margin": (0, MAX_LIST_PEERS),
        }
        for name, (lo, hi) in limits.items():
            value = getattr(self, name)
            if type(value) is not int or not lo <= value <= hi:
                raise RoundConfigError(f"{name} must be an int in [{lo}, {hi}], got {value!r}")
        if self.max_tracked_peers < self.max_roster_peers:
            raise RoundConfigError("max_tracked_peers must be >= max_roster_peers")
        if self.max_announcements_per_step < self.max_roster_peers:
            raise RoundConfigError("max_announcements_per_step must be >= max_roster_peers")
