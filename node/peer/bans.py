"""The peer's part in banning: a score keeper fed only from what every honest replica shares.

Why only shared inputs: a ban changes which lists this node proposes and votes for, so replicas that banned
different peers would slow each other down (their proposals get refused). Every honest replica applies the
same decided inclusion lists with the same payloads, in the same order, and the roster that says who missed
a list is replicated too. Feeding the keeper exactly that, once per applied step, gives every replica the
same bans at the same step, with no extra messages. What one replica sees alone (a payload that failed its
own validation) is left to the round machine, which excludes the peer from that round; the missed rounds
that follow are shared, and counted. An equivocation becomes shared the same way: the decided list carries
its proof (protocol/evidence.py), and the authors it names are banned at once.

A ban decided after applying step s applies from step s + 1 (``RoundMachine.on_banned``); the node also
drops the banned peer's gossip in its validator. Records are keyed by peer id for the whole process, so a
banned peer that reconnects stays banned.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from distro_node.protocol.scores import ScoreKeeper, ScorePolicy


@dataclass(frozen=True)
class Ban:
    """``peer`` banned by the observation of applied step ``step``; excluded from ``step + 1`` on."""

    peer: str
    step: int
    reason: str
    score: float


@dataclass(frozen=True)
class RoundScores:
    """What one applied round told the keeper: the figures for metrics, and the bans it caused."""

    step: int
    agreement: Mapping[str, float]
    bans: tuple[Ban, ...]

    @property
    def agreement_min(self) -> float | None:
        return min(self.agreement.values()) if self.agreement else None

    @property
    def agreement_median(self) -> float | None:
        return statistics.median(self.agreement.values()) if self.agreement else None


class PeerBans:
    """One node's keeper; call :meth:`observe` once per applied step, in step order."""

    def __init__(self, policy: ScorePolicy | None = None) -> None:
        self.keeper = ScoreKeeper(policy)

    def is_banned(self, peer: str) -> bool:
        return self.keeper.is_banned(peer)

    def observe(
        self,
        step: int,
        agreement: Mapping[str, float],
        norms: Mapping[str, float],
        missed: Iterable[str],
        equivocators: Iterable[str] = (),
    ) -> RoundScores:
        """Fold applied step ``step`` in: the included peers' agreement scores and payload norms
        (``node/sim/scoring.py``), the active roster peers the decided list left out, and the peers its
        equivocation proofs name (banned at once: two signed payloads for one step have no honest cause)."""
        keeper = self.keeper
        newly = keeper.observe_round(step, agreement, norms)
        for peer in sorted(set(equivocators)):
            if not keeper.is_banned(peer) and keeper.penalize_equivocation(step, peer):
                newly.append(peer)
        for peer in sorted(set(missed)):
            if not keeper.is_banned(peer) and keeper.penalize_missed(step, peer):
                newly.append(peer)
        bans = []
        for peer in sorted(newly):
            rec = keeper.record(peer)
            bans.append(Ban(peer, step, rec.ban_reason or "low_score", rec.score))
        return RoundScores(step, dict(agreement), tuple(bans))
