"""Per-peer reputation kept by peer id for the whole run, and the ban decision derived from it.

Why our own scores: py-libp2p's peer scoring is off by default and forgets a peer when it disconnects, so a
penalised peer could reset itself by reconnecting (threats.md). Here nothing is keyed by connection: a peer
id keeps its record, and a ban, until the run ends; ``connect`` only answers whether the id is welcome.

Why relative agreement: honest DeMo payloads overlap on few coefficients, and how much they agree drifts
during training (measured on the tiny preset: mean leave-one-out sign score ~0.075 early, ~0.045 after 100
steps). A fixed threshold on the raw score would either miss random-direction peers early or ban honest peers
late. Dividing each peer's score by the round's median score makes an honest peer ~1, a random-direction peer
~0 and a sign-flipper negative at any stage, as long as honest peers are the majority of the included set.

Pure Python and deterministic (no torch, no clock, no randomness): the round leader computes bans that every
honest replica must reproduce, and the simulator computes them once per step from the same payloads.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

BAN_REASONS: tuple[str, ...] = ("low_score", "equivocation")


class ScorePolicyError(ValueError):
    """A bad score policy setting; ``field`` names it."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field


@dataclass(frozen=True)
class ScorePolicy:
    """How observations move a peer's score, and when a score means a ban.

    Defaults (calibrated on honest 8-peer runs of the tiny preset, see bench/robustness.py):

    * ``ema_weight`` 0.2: a sign-flipper (relative agreement ~ -1.3) falls under the threshold in 2 rounds, a
      random-direction peer (~0) in 4; an honest peer's average has a spread of ~0.1 around 1.
    * ``ban_below`` 0.5: halfway between honest (~1) and random (~0).
    * ``min_observations`` 10: no ban on a handful of noisy early rounds; attackers are out by round ~10-15.
    * ``invalid_value`` -1: a payload that fails validation counts like a strongly disagreeing one; two in a
      row ban an otherwise good peer, a single corrupted transfer does not.
    * ``missed_value`` 0.6: absences pull the score down but never below the threshold by themselves, so a
      peer that crashes and rejoins (churn) is not banned for it, while a peer that both misses rounds and
      sends bad payloads is banned sooner.
    * ``min_median`` 0.005: when the round's median raw score is this small the round carries no signal
      (e.g. the first step, when momentum is a single gradient); it is not observed.
    * ``clamp`` 2: one round's relative value is limited to [-2, 2], so a single odd round cannot dominate.
    """

    ema_weight: float = 0.2
    ban_below: float = 0.5
    min_observations: int = 10
    initial: float = 1.0
    invalid_value: float = -1.0
    missed_value: float = 0.6
    min_median: float = 0.005
    clamp: float = 2.0

    def __post_init__(self) -> None:
        numbers = ("ema_weight", "ban_below", "initial", "invalid_value", "missed_value")
        numbers += ("min_median", "clamp")
        for name in numbers:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ScorePolicyError(name, f"must be a finite number, got {value!r}")
        if not 0.0 < self.ema_weight <= 1.0:
            raise ScorePolicyError("ema_weight", f"must be in (0, 1], got {self.ema_weight}")
        n = self.min_observations
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ScorePolicyError("min_observations", f"must be a positive integer, got {n!r}")
        if self.min_median < 0 or self.clamp <= 0:
            raise ScorePolicyError("min_median", "min_median must be >= 0 and clamp > 0")


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
    history: list[float] = field(default_factory=list)  # last relative observations, newest last

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

    def observe_round(self, step: int, raw_scores: Mapping[str, float]) -> list[str]:
        """Fold one round's leave-one-out agreement scores (peer -> score in [-1, 1]) into the records.

        Each score is divided by the round's median (``statistics.median``, exact for these rationals), so
        the update is relative to a typical peer of the round. Returns the peers newly banned, sorted.
        """
        peers = sorted(p for p in raw_scores if not self.is_banned(p))
        if len(peers) < 3:
            return []  # with fewer than three peers a median says nothing about who is the odd one out
        median = statistics.median(raw_scores[p] for p in peers)
        if median < self.policy.min_median:
            return []
        newly: list[str] = []
        c = self.policy.clamp
        for peer in peers:
            relative = max(-c, min(c, raw_scores[peer] / median))
            if self._observe(step, peer, relative):
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
