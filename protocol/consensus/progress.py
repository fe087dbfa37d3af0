"""From decided lists to applied steps: fetching payloads, applying in step order, and resyncing when
rounds alone cannot get us there.

Applying: a decided list is applied (in step order) once all its payloads are fetched and validated; then
our own announced weights hash is compared to the majority of the included peers' hashes, so a replica whose
weights diverged finds out within one round and repairs it by state sync.
"""

from __future__ import annotations

from ..messages import InclusionList
from . import inclusion_bound
from .actions import Action, ApplyInclusionList, FetchPayload, Penalize, ResyncNeeded
from .bans import Bans
from .context import Local
from .round_state import RoundState, roster_waiting, strict_majority
from .window import StepWindow


class Resyncs:
    """Asks the driver for a state sync, at most once per ``resync_cooldown`` for each reason: every
    rule that notices trouble may ask on every input, but one sync at a time is all that helps."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def request(
        self, step: int, reason: str, weights_hash: bytes | None, me: Local, out: list[Action]
    ) -> None:
        last = self._last.get(reason)
        if last is not None and me.now - last < me.config.resync_cooldown:
            return
        self._last[reason] = me.now
        me.counters.count("resyncs_requested")
        out.append(ResyncNeeded(step, reason, weights_hash))


def fetch(window: StepWindow, bans: Bans, me: Local, out: list[Action]) -> None:
    """Ask for every payload we may need and do not hold: announced ones (eagerly, the leader needs them and
    so will we), every entry of a proposal (we vote only for payloads we hold) and of a decided list
    (possibly never announced to us). Newcomers' payloads are
    fetched too, though never aggregated while they warm up: a leader lists a newcomer only once its payload
    arrived and passed validation (round_state.build_list), so an identity that cannot serve what it signed
    (one process announcing for many made-up ids) never enters the roster. Banned peers' payloads are
    fetched only once a decided list names them. Under a bound K on inclusion, an active peer's announced
    payload is fetched only while it ranks among the K + margin best announced candidates
    (:func:`.inclusion_bound.fetch_window`): the others cannot be listed, and fetching them would keep each
    peer's traffic at N payloads a step.
    """
    for step in sorted(window.rounds):
        rnd = window.rounds[step]
        if rnd.applied:
            continue
        wanted: list[tuple[str, bytes, int | None, str | None]] = []
        if rnd.decided is not None:
            for peer, payload_hash in rnd.decided.entries:
                ann = rnd.announcements.get(peer)
                size = ann.payload_size if ann is not None and ann.payload_hash == payload_hash else None
                wanted.append((peer, payload_hash, size, rnd.decided.leader))
        else:
            banned = bans.at(step)
            skipped = _beyond_bound(rnd, window, banned, me)
            for peer, ann in rnd.announcements.items():
                if peer not in rnd.equivocators and peer not in banned and peer not in skipped:
                    wanted.append((peer, ann.payload_hash, ann.payload_size, None))
            # A proposal's entries too: we vote for a list only once we hold all of it (agreement.vote).
            # (Not a banned peer's from epoch 0: we refuse such a list, bans.refuses.)
            for (epoch, proposer), digest in sorted(rnd.proposals.items()):
                for peer, payload_hash in rnd.contents[digest].entries:
                    ann = rnd.announcements.get(peer)
                    if epoch == 0 and peer in banned:
                        continue
                    if ann is None or ann.payload_hash != payload_hash:
                        wanted.append((peer, payload_hash, None, proposer))
        for peer, payload_hash, size, leader in wanted:
            key = (peer, payload_hash)
            if key in rnd.validated or key in rnd.invalid:
                continue
            asked = rnd.fetch_requested_at.get(key)
            if asked is not None and me.now - asked < me.config.fetch_retry_interval:
                continue
            rnd.fetch_requested_at[key] = me.now
            holders = (peer, leader)
            sources = tuple(dict.fromkeys(s for s in holders if s is not None and s != me.self_id))
            out.append(FetchPayload(step, peer, payload_hash, size, sources))


def _beyond_bound(rnd: RoundState, window: StepWindow, banned: frozenset[str], me: Local) -> frozenset[str]:
    """Announced active peers outside the fetch window of a bounded step (empty when nothing is bounded).
    Those that announced or may still announce compete for the window by the replicated priority."""
    cfg = me.config
    roster = window.governing_roster(rnd.step)
    if not inclusion_bound.bounded(cfg.max_included, len(roster.eligible())):
        return frozenset()
    candidates = [p for p in roster.eligible() if _may_be_listed(p, rnd, banned, me)]
    keep = inclusion_bound.fetch_window(cfg.run_id, rnd.step, roster_waiting(roster), candidates,
                                        cfg.max_included, cfg.inclusion_fetch_margin)
    return frozenset(p for p in rnd.announcements if roster.is_eligible(p) and p not in keep)


def _may_be_listed(peer: str, rnd: RoundState, banned: frozenset[str], me: Local) -> bool:
    """An active peer that announced, or is alive and may still announce, and is not ruled out. A live
    peer not yet announced keeps its place in the window, so the window does not depend on the order
    announcements arrive in (the leader waits for it too: :func:`.epochs.collection_complete`)."""
    if peer in rnd.equivocators or peer in banned or peer in rnd.denied:
        return False
    ann = rnd.announcements.get(peer)
    if ann is None:
        return peer == me.self_id or me.is_alive(peer)
    return (peer, ann.payload_hash) not in rnd.invalid


def apply(window: StepWindow, resyncs: Resyncs, me: Local, out: list[Action]) -> None:
    """Hand out every decided step whose payloads are all validated, in step order, and check our weights."""
    while window.applied_upto < window.frontier:
        rnd = window.rounds.get(window.applied_upto)
        if rnd is None or rnd.decided is None:
            return  # cannot happen: decided rounds are kept until applied
        lst = rnd.decided
        if any(e in rnd.invalid for e in lst.entries):
            _unapplicable(rnd, lst.leader, resyncs, me, out)
            return
        if not all(e in rnd.validated for e in lst.entries):
            if rnd.decided_at is not None and me.now - rnd.decided_at >= me.config.apply_timeout:
                _unapplicable(rnd, None, resyncs, me, out)
            return
        majority = _majority_weights(rnd, lst)
        rnd.applied = True
        window.applied_upto += 1
        me.counters.count("rounds_applied")
        out.append(ApplyInclusionList(rnd.step, lst, majority))
        if rnd.own is not None and majority is not None and rnd.own.weights_hash != majority:
            resyncs.request(rnd.step, "weights_diverged", majority, me, out)


def _majority_weights(rnd: RoundState, lst: InclusionList) -> bytes | None:
    """The weights hash a strict majority of the included peers announced with the listed payload."""
    return strict_majority(
        (rnd.announcements[p].weights_hash for p, h in lst.entries
         if p in rnd.announcements and rnd.announcements[p].payload_hash == h),
        len(lst.entries),
    )


def _unapplicable(
    rnd: RoundState, leader: str | None, resyncs: Resyncs, me: Local, out: list[Action]
) -> None:
    if rnd.unapplicable_reported:
        return
    rnd.unapplicable_reported = True
    if leader is not None:
        # Validation is deterministic, so an honest leader would have rejected that payload too.
        out.append(Penalize(leader, rnd.step, "invalid_list"))
    resyncs.request(rnd.step, "unapplicable", None, me, out)


def check_behind(window: StepWindow, resyncs: Resyncs, me: Local, out: list[Action]) -> None:
    """A strict majority of the active roster working on steps well past ours: we cannot catch up by
    rounds (those steps are out of our window), only by state sync.
    """
    eligible = window.rosters[window.frontier].eligible()
    target = window.frontier + me.config.behind_steps
    ahead = 0
    for peer in eligible:
        step = me.liveness.highest_step(peer)
        if peer != me.self_id and step is not None and step >= target:
            ahead += 1
    if 2 * ahead > len(eligible):
        resyncs.request(window.frontier, "behind", None, me, out)
