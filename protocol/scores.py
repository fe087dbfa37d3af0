"""Per-peer reputation kept by peer id for the whole run, and the ban decision derived from it.

Why our own scores: py-libp2p's peer scoring is off by default and forgets a peer when it disconnects, so a
penalised peer could reset itself by reconnecting (threats.md). Here nothing is keyed by connection: a peer
id keeps its record, and a ban, until the run ends; ``connect`` only answers whether the id is welcome.

Why a robust z-score: honest DeMo payloads overlap on few coefficients (~10% on the tiny preset), so raw
leave-one-out scores are small (~0.05) and drift during training. Each round, a peer's score is compared with
the round's median and divided by the median absolute deviation (floored): (score - median) / MAD. An honest
peer sits around 0, a random-direction or sign-flipping peer far below, at any stage of training and as long
as honest peers are the majority of the included set. A first version divided by the median instead; with 3
sign-flippers of 8 (threats.md B3) the honest peers' own scores fell to ~0, so did the median, most rounds
carried no signal and the flippers were banned only after 32-36 steps (z-score, replayed on the same scores:
10-16 steps).

Why a norm term: sign agreement cannot see a peer that sends the honest direction at 100x the magnitude (a
scale attack, possible with value codecs that carry magnitudes: bf16, fp32, int8). Clipping to the median norm
bounds its effect; the norm term makes it accountable. Each round, a peer's log payload norm gets the same
robust z-score against the round; only the part beyond ``norm_tolerance`` counts, against the agreement z.
Honest peers' log norms were within 0.073 of the round median in 8-peer and 4-peer runs with bf16, int8 and
fp32 values (z <= 0.73 with the 0.1 floor), so the tolerance of 3 (a factor of e^0.3 = 1.35 away from the
median) leaves a 4x margin. With 1-bit values every norm is equal and the term is 0: nothing changes there.

Pure Python and deterministic (no torch, no clock, no randomness): every honest replica feeds its keeper the
same inputs (the decided inclusion lists and the payloads in them) and so reaches the same bans at the same
step; the simulator computes them once per step from the same payloads.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

BAN_REASONS: tuple[str, ...] = ("low_score", "equivocation")
_TINY_NORM = 1e-300  # log of a zero norm: far below every honest peer, but finite


class ScorePolicyError(ValueError):
    """A bad score policy setting; ``field`` names it."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field


class ScoreInputError(ValueError):
    """Observations that do not fit together (e.g. a norm missing for a scored peer); ``field`` names them."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field


@dataclass(frozen=True)
class ScorePolicy:
    """How observations move a peer's score, and when a score means a ban.

    Defaults, calibrated on 8-peer runs of the tiny preset (bench/robustness.py settings, batch 4 x 32, 3
    seeds x 120 steps, and batch 2 x 16, 2 seeds x 60 steps), replaying the per-round scores offline:

    * ``ema_weight`` 0.1, ``ban_below`` -1.0, ``scale_floor`` 0.02: the lowest honest average after 10
      observations was -0.62 (floor 0.01 banned one honest peer at step 103 of one run); sign-flippers and
      random-direction peers (2 of 8) were banned after 9-10 rounds, 3 sign-flippers of 8 after 10-16.
    * ``min_observations`` 10: no ban on a handful of noisy early rounds.
    * ``invalid_value`` -2: a payload that fails validation counts like a clearly bad one; a single corrupted
      transfer leaves an honest peer near -0.65, a peer that keeps sending invalid payloads is banned after 5.
    * ``missed_value`` -0.5: absences pull the score down but never below the threshold by themselves, so a
      peer that crashes and rejoins (churn) is not banned for it, while a peer that both misses rounds and
      sends bad payloads is banned sooner.
    * ``clamp`` 3: one round's z-score is limited to [-3, 3], so a single odd round cannot dominate.
    * ``norm_floor`` 0.1, ``norm_tolerance`` 3: the log payload norm's z-score uses a MAD floored at 0.1,
      and only the part of ``|z|`` beyond 3 is subtracted (see the module docstring for the measurements).
    * Rounds where every peer has the same score and no norm is out of tolerance carry no signal (e.g. the
      first step) and are not observed.
    """

    ema_weight: float = 0.1
    ban_below: float = -1.0
    min_observations: int = 10
    initial: float = 0.0
    invalid_value: float = -2.0
    missed_value: float = -0.5
    scale_floor: float = 0.02
    clamp: float = 3.0
    norm_floor: float = 0.1
    norm_tolerance: float = 3.0

    def __post_init__(self) -> None:
        numbers: tuple[str, ...] = ("ema_weight", "ban_below", "initial", "invalid_value", "missed_value")
        numbers += ("scale_floor", "clamp", "norm_floor", "norm_tolerance")
        for name in numbers:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ScorePolicyError(name, f"must be a finite number, got {value!r}")
        if not 0.0 < self.ema_weight <= 1.0:
            raise ScorePolicyError("ema_weight", f"must be in (0, 1], got {self.ema_weight}")
        n = self.min_observations
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ScorePolicyError("min_observations", f"must be a positive integer, got {n!r}")
        if self.scale_floor <= 0:
            raise ScorePolicyError("scale_floor", f"must be > 0, got {self.scale_floor}")
        if self.clamp <= 0:
            raise ScorePolicyError("clamp", f"must be > 0, got {self.clamp}")
        if self.norm_floor <= 0:
            raise ScorePolicyError("norm_floor", f"must be > 0, got {self.norm_floor}")
        if self.norm_tolerance < 0:
            raise ScorePolicyError("norm_tolerance", f"must be >= 0, got {self.norm_tolerance}")
        if self.missed_value < self.ban_below:
            raise ScorePolicyError("missed_value", "must be >= ban_below (absence alone must never ban)")


@dataclass
class PeerRecord:
    """Everything known about one peer id; survives disconnects (see the module docstring)."""

    score: float
    observations: int = 0
    invalid: int = 0
    equivocations: int = 0
    missed: int = 0
    banned_at: int | None = None
    ban_reason: str | None = None
    history: list[float] = field(default_factory=list)  # last observed values, newest last

    @property
    def banned(self) -> bool:
        return self.banned_at is not None


HISTORY_LEN = 32


class ScoreKeeper:
    """Scores by peer id: ``observe_round`` once per applied round, penalties as they are detected."""

    def __init__(self, policy: ScorePolicy | None = None) -> None:
        self.policy = policy or ScorePolicy()
        self._records: dict[str, PeerRecord] = {}

    # -- queries ---------------------------------------------------------------------------------------------

    def record(self, peer: str) -> PeerRecord:
        """The peer's record, created with the initial score on first sight."""
        rec = self._records.get(peer)
        if rec is None:
            rec = self._records[peer] = PeerRecord(score=self.policy.initial)
        return rec

    def is_banned(self, peer: str) -> bool:
        rec = self._records.get(peer)
        return rec is not None and rec.banned

    def banned(self) -> frozenset[str]:
        return frozenset(p for p, r in self._records.items() if r.banned)

    def connect(self, peer: str) -> bool:
        """Whether a (re)connecting peer id may take part; its record is kept either way."""
        return not self.record(peer).banned

    def eligible(self, peers: Iterable[str]) -> list[str]:
        """``peers`` without the banned ones, sorted: what an inclusion list may contain."""
        return sorted(p for p in peers if not self.is_banned(p))

    # -- observations ----------------------------------------------------------------------------------------

    def observe_round(
        self, step: int, raw_scores: Mapping[str, float], norms: Mapping[str, float] | None = None
    ) -> list[str]:
        """Fold one round's leave-one-out agreement scores (peer -> score in [-1, 1]) and, optionally, the
        payload L2 norms of the same peers into the records.

        Each score becomes a robust z-score against the round, ``(score - median) / max(MAD, scale_floor)``
        (``statistics.median``: exact and order-independent for the same inputs, so every replica agrees);
        each log norm likewise with ``norm_floor``, and ``max(0, |z| - norm_tolerance)`` is subtracted.
        Returns the peers newly banned, sorted.
        """
        peers = sorted(p for p in raw_scores if not self.is_banned(p))
        if len(peers) < 3:
            return []  # with fewer than three peers a median says nothing about who is the odd one out
        agreement = _robust_z([raw_scores[p] for p in peers], self.policy.scale_floor)
        excess = [0.0] * len(peers)
        if norms is not None:
            logs = [math.log(max(_norm(norms, p), _TINY_NORM)) for p in peers]
            norm_z = _robust_z(logs, self.policy.norm_floor)
            if norm_z is not None:
                excess = [max(0.0, abs(z) - self.policy.norm_tolerance) for z in norm_z]
        if agreement is None and not any(excess):
            return []  # no signal (e.g. nobody shares a coefficient yet, and every norm is typical)
        newly: list[str] = []
        c = self.policy.clamp
        for i, peer in enumerate(peers):
            z = (agreement[i] if agreement is not None else 0.0) - excess[i]
            if self._observe(step, peer, max(-c, min(c, z))):
                newly.append(peer)
        return newly

    def penalize_invalid(self, step: int, peer: str) -> bool:
        """A payload from ``peer`` failed validation. Returns True if this banned it."""
        self.record(peer).invalid += 1
        return self._observe(step, peer, self.policy.invalid_value)

    def penalize_missed(self, step: int, peer: str) -> bool:
        """``peer`` was expected but sent nothing in time. Returns True if this banned it."""
        self.record(peer).missed += 1
        return self._observe(step, peer, self.policy.missed_value)

    def penalize_equivocation(self, step: int, peer: str) -> bool:
        """Two different payloads for one step: signed proof of a faulty or malicious peer, banned at once."""
        rec = self.record(peer)
        rec.equivocations += 1
        return self._ban(step, peer, "equivocation")

    # -- internals -------------------------------------------------------------------------------------------

    def _observe(self, step: int, peer: str, value: float) -> bool:
        rec = self.record(peer)
        if rec.banned:
            return False
        w = self.policy.ema_weight
        rec.score = (1.0 - w) * rec.score + w * value
        rec.observations += 1
        rec.history = [*rec.history[-(HISTORY_LEN - 1) :], value]
        if rec.observations >= self.policy.min_observations and rec.score < self.policy.ban_below:
            return self._ban(step, peer, "low_score")
        return False

    def _ban(self, step: int, peer: str, reason: str) -> bool:
        rec = self.record(peer)
        if rec.banned:
            return False
        rec.banned_at = step
        rec.ban_reason = reason
        return True

    def lowest_score(self) -> float | None:
        """The lowest score among peers not banned (None if none is tracked): how close anyone is to a ban."""
        scores = [r.score for r in self._records.values() if not r.banned]
        return min(scores) if scores else None

    # -- persistence -----------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly state, so bans survive a restart of the node as well as a reconnect of the peer."""
        peers = {p: asdict(r) for p, r in sorted(self._records.items())}
        return {"policy": asdict(self.policy), "peers": peers}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> ScoreKeeper:
        """Inverse of :meth:`to_dict`; raises :class:`ScorePolicyError` for a malformed document."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("peers"), Mapping):
            raise ScorePolicyError("peers", "score state must be a mapping with a 'peers' mapping")
        policy_doc = doc.get("policy", {})
        if not isinstance(policy_doc, Mapping):
            raise ScorePolicyError("policy", "must be a mapping")
        try:
            keeper = cls(ScorePolicy(**policy_doc))
            for peer, rec in doc["peers"].items():
                if not isinstance(peer, str) or not isinstance(rec, Mapping):
                    raise ScorePolicyError("peers", f"bad record for {peer!r}")
                record = PeerRecord(**rec)
                if record.ban_reason is not None and record.ban_reason not in BAN_REASONS:
                    raise ScorePolicyError("peers", f"unknown ban reason {record.ban_reason!r}")
                keeper._records[peer] = record
        except TypeError as exc:
            raise ScorePolicyError("peers", f"unexpected fields: {exc}") from None
        return keeper


def _robust_z(values: list[float], floor: float) -> list[float] | None:
    """``(v - median) / max(MAD, floor)`` per value, or None when all values are equal (no signal)."""
    if max(values) == min(values):
        return None
    median = statistics.median(values)
    scale = max(floor, statistics.median(abs(v - median) for v in values))
    return [(v - median) / scale for v in values]


def _norm(norms: Mapping[str, float], peer: str) -> float:
    value = norms.get(peer)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ScoreInputError("norms", f"peer {peer!r} needs a finite norm >= 0, got {value!r}")
    return float(value)
