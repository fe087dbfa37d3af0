"""Steps we already decided: helping peers that are still deciding them, and spotting conflicting lists.

A replica that decided a step still answers statuses for it (its status carries its vote, and it
re-proposes the decided list when it leads the asked epoch), so a peer that missed votes catches up. The
decided list is the only one that can be decided anyway, so repeating it is always safe.

A different list that could still be decided for such a step (a later epoch's proposal, a majority of votes)
is impossible among honest peers: it means lying peers or a bug, so it is reported and answered with a
resync; the next round's weights-hash check tells who diverged.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from ..membership import Roster
from ..messages import InclusionList, Status, Vote
from .actions import Action, ListConflict, Publish
from .context import Local
from .leader_rank import leader_order
from .progress import Resyncs
from .round_state import RoundState, designated_leader


def on_decided_proposal(
    rnd: RoundState, roster: Roster | None, lst: InclusionList, resyncs: Resyncs, me: Local, out: list[Action]
) -> None:
    """A proposal for a decided step: vote again for our list (helps laggards), report a different one."""
    if roster is None or rnd.decided_digest is None or rnd.decided_epoch is None:
        me.counters.count("stale_step")
        return
    order = leader_order(me.config.run_id, rnd.step, roster.eligible())
    if designated_leader(order, lst.epoch) != lst.leader:
        me.counters.count("invalid_list")
        return
    digest = lst.digest()
    if digest == rnd.decided_digest:
        if me.is_voter(roster) and (rnd.my_vote is None or lst.epoch > rnd.my_vote[0]):
            rnd.my_vote = (lst.epoch, digest)
            rnd.note_vote(me.self_id, rnd.my_vote)
            me.counters.count("votes_cast")
            out.append(Publish(Vote(me.config.run_id, rnd.step, lst.epoch, me.self_id, digest)))
        else:
            me.counters.count("duplicate_list")
    elif lst.epoch > rnd.decided_epoch:
        _report_conflict(rnd, digest, lst.leader, "later_proposal", resyncs, me, out)
    else:
        me.counters.count("stale_step")  # an older epoch's proposal that lost


def check_decided_votes(
    rnd: RoundState, roster: Roster | None, resyncs: Resyncs, me: Local, out: list[Action]
) -> None:
    """After a vote for a decided step: a majority for another list means some replica may decide it."""
    if roster is None:
        return
    eligible = set(roster.eligible())
    tally = Counter(b for p, b in rnd.votes.items() if p in eligible)
    quorum = roster.quorum_size(me.left())
    for (_epoch, digest), count in tally.items():
        if count >= quorum and digest != rnd.decided_digest:
            voter = next(p for p, b in rnd.votes.items() if b[1] == digest)
            _report_conflict(rnd, digest, voter, "vote_majority", resyncs, me, out)
            return


def _report_conflict(
    rnd: RoundState, digest: bytes, source: str, kind: str, resyncs: Resyncs, me: Local, out: list[Action]
) -> None:
    me.counters.count("list_conflict")
    if rnd.decided_digest is None or rnd.conflict_reported:
        return
    rnd.conflict_reported = True
    out.append(ListConflict(rnd.step, rnd.decided_digest, digest, source, kind))
    resyncs.request(rnd.step, "conflict", None, me, out)


def answer_laggard(
    rnd: RoundState, roster: Roster | None, status: Status, me: Local, out: list[Action]
) -> None:
    """Someone is still trying to decide a step we decided: tell it our vote, and if we lead the epoch
    it is in, propose the decided list again.

    Answers are rate limited per step (newer epochs only, at most one per half leader timeout), so
    statuses from any peer, voter or not, cost a bounded amount of gossip.
    """
    if roster is None or rnd.decided is None or status.epoch <= rnd.answered_epoch:
        return
    if not me.is_voter(roster):
        return
    if rnd.answered_at is not None and me.now - rnd.answered_at < me.config.leader_timeout / 2:
        return
    rnd.answered_epoch = status.epoch
    rnd.answered_at = me.now
    if rnd.my_vote is not None:
        epoch = max(status.epoch, rnd.my_vote[0] + 1)
        out.append(Publish(Status(me.config.run_id, rnd.step, epoch, me.self_id, *rnd.my_vote)))
    order = leader_order(me.config.run_id, rnd.step, roster.eligible())
    if designated_leader(order, status.epoch) == me.self_id and rnd.proposed_epoch < status.epoch:
        rnd.proposed_epoch = status.epoch
        out.append(Publish(dataclasses.replace(rnd.decided, epoch=status.epoch, leader=me.self_id)))
