"""The steps a replica keeps: a sliding window of rounds and rosters around the first undecided step.

Memory stays bounded whatever peers send: rounds exist only from ``history_steps`` before the first
unapplied step to ``max_future_steps`` after the first undecided one (the admission rules refuse the
rest), and rosters only for the steps still kept.
"""

from __future__ import annotations

from ..membership import Roster, SyncState
from .evidence_pool import EvidencePool
from .round_state import RoundState


class StepWindow:
    """``frontier`` is the first step without a decided list; ``applied_upto`` the first decided step not
    yet handed out to apply. Decided steps stay below the frontier until applied and then for
    ``history_steps`` more, for payload fetching, weights checks, conflict detection and laggards.
    """

    def __init__(self, state: SyncState) -> None:
        self.rounds: dict[int, RoundState] = {}
        self.rosters: dict[int, Roster] = {state.next_step: state.roster}
        self.frontier = self.applied_upto = state.next_step
        self.evidence = EvidencePool()  # kept across restarts: a proof stays true whatever state we load

    def restart(self, state: SyncState, max_future_steps: int) -> None:
        """Start over at a donor's state.

        Undecided rounds at or after the new start keep what they collected and, crucially, our votes and
        proposals: voting twice in one epoch or proposing two lists would break agreement.
        """
        last = state.next_step + max_future_steps
        self.rounds = {
            s: r for s, r in self.rounds.items() if state.next_step <= s <= last and r.decided is None
        }
        self.rosters = {state.next_step: state.roster}
        self.frontier = self.applied_upto = state.next_step

    def open_round(self, step: int, now: float) -> RoundState:
        """The round of ``step``, created on demand (the admission rules decide whether it may exist)."""
        rnd = self.rounds.get(step)
        if rnd is None:
            rnd = RoundState(step=step)
            if step == self.frontier:
                rnd.frontier_since = now
            self.rounds[step] = rnd
        return rnd

    def decided_round(self, step: int) -> RoundState | None:
        rnd = self.rounds.get(step)
        return rnd if rnd is not None and rnd.decided is not None else None

    def governing_roster(self, step: int) -> Roster:
        """The roster of ``step`` if known, else the newest one: good enough for whom to fetch or wait for."""
        return self.rosters.get(step) or self.rosters[max(self.rosters)]

    def protected(self, self_id: str) -> frozenset[str]:
        """Peers the liveness memory must never forget to make room: the current roster and ourselves."""
        roster = self.rosters.get(self.frontier)
        peers = set(roster.peers) if roster is not None else set()
        peers.add(self_id)
        return frozenset(peers)

    def move_frontier(self, decided_step: int, next_roster: Roster, now: float) -> None:
        """``decided_step`` was decided: the next step becomes ours and its round clock may start."""
        self.rosters[decided_step + 1] = next_roster
        self.frontier = decided_step + 1
        nxt = self.rounds.get(self.frontier)
        if nxt is not None:
            nxt.frontier_since = now

    def prune(self, history_steps: int) -> int:
        """Forget steps more than ``history_steps`` below the first unapplied one; returns the lowest kept."""
        low = self.applied_upto - history_steps
        for step in [s for s in self.rounds if s < low]:
            del self.rounds[step]
        for step in [s for s in self.rosters if s < low and s != self.frontier]:
            del self.rosters[step]
        return low
