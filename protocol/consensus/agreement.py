"""Which list a step decides: proposals checked, votes cast, quorums counted, lists proposed.

Why votes: a list is decided once a strict majority of the active roster voted for it in one epoch. A rule
based only on timeouts and ranks ("take the best list whose leader's turn has come") lets a partition's
minority decide a list of its own whenever its fallback leader fetched a majority of payloads before the
cut; the simulator in tests/protocol found exactly that split brain. So each step runs one single-decree
Paxos instance: entering epoch e >= 1 a voter sends a ``Status`` (a promise not to vote in earlier epochs,
plus its latest vote, :func:`.epochs.enter_epoch`); the epoch's leader re-proposes the most recently voted
list among a majority of statuses, or builds its own if none was voted; voters vote for the current epoch's
proposal. Two majorities of the same roster always share a voter, so two different lists can never both be
decided, whatever the delays, drops or partitions; timeouts only decide how fast progress is.

Availability: a voter votes for a list only once it holds every listed payload, fetched and validated. So
a decided list's payloads are held by a quorum of voters, and a leader cannot get a list decided around a
payload nobody can serve (its own, announced and never served): that list gathers no votes and costs only
its epoch. Voters fetch announced payloads eagerly, so by the time a list arrives most are already held.

Quorum (partitions): besides the vote quorum, a list must include a strict majority of the active roster's
payloads, so a minority side decides nothing (and stalls, :func:`.epochs.check_stall`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from ..evidence import Equivocation
from ..membership import Roster
from ..messages import InclusionList, Vote
from .actions import Action, MembershipChanged, PeerMissed, Penalize, Publish
from .bans import Bans
from .context import Local
from .epochs import collection_complete, collection_over
from .round_state import RoundState, build_list, designated_leader
from .window import StepWindow


def check_proposals(
    rnd: RoundState, roster: Roster, order: tuple[str, ...], me: Local, out: list[Action]
) -> None:
    """Drop proposals from anyone but the epoch's designated leader, or that break the roster rules."""
    for key in [k for k in rnd.proposals if k not in rnd.checked]:
        epoch, leader = key
        lst = rnd.contents[rnd.proposals[key]]
        reason = roster.check_list(dataclasses.replace(lst, leader=leader), me.rules)
        if reason is None and designated_leader(order, epoch) != leader:
            reason = "not the designated leader of the epoch"
        rnd.checked.add(key)
        if reason is not None:
            digest = rnd.proposals.pop(key)
            rnd.checked.discard(key)
            if digest not in rnd.proposals.values():
                rnd.contents.pop(digest, None)
            me.counters.count("invalid_list")
            out.append(Penalize(leader, rnd.step, "invalid_list"))


def vote(rnd: RoundState, roster: Roster, bans: Bans, me: Local, out: list[Action]) -> None:
    """Vote for the newest valid proposal of an epoch we have not promised away nor voted in yet."""
    if not me.is_voter(roster):
        return
    left = me.left()
    best: tuple[int, bytes] | None = None
    for (epoch, _leader), digest in rnd.proposals.items():
        if epoch < rnd.promised or (rnd.my_vote is not None and epoch <= rnd.my_vote[0]):
            continue
        if best is not None and epoch <= best[0]:
            continue
        lst = rnd.contents[digest]
        if bans.refuses(rnd.step, epoch, digest, lst, me.counters):
            continue
        if not roster.has_quorum(lst, left):
            if digest not in rnd.below_quorum:
                rnd.below_quorum.add(digest)
                me.counters.count("below_quorum_list")
            continue
        if not all(entry in rnd.validated for entry in lst.entries):
            continue  # not yet: we vote only for payloads we hold (see "Availability" above)
        best = (epoch, digest)
    if best is None:
        return
    rnd.promised = best[0]
    rnd.my_vote = best
    rnd.note_vote(me.self_id, best)
    me.counters.count("votes_cast")
    out.append(Publish(Vote(me.config.run_id, rnd.step, best[0], me.self_id, best[1])))


def try_decide(rnd: RoundState, roster: Roster, window: StepWindow, me: Local, out: list[Action]) -> bool:
    """Decide a list once a strict majority of the active roster voted for it in the same epoch.

    Peers whose goodbye we saw no longer count: they vote no more, so any two majorities of the peers
    still voting share a voter. (A goodbye is signed by the peer leaving.)
    """
    eligible = set(roster.eligible())
    tally = Counter(ballot for peer, ballot in rnd.votes.items() if peer in eligible)
    quorum = roster.quorum_size(me.left())
    for (epoch, digest), count in sorted(tally.items()):
        if count >= quorum and digest in rnd.contents:
            _decide(rnd, roster, epoch, digest, window, me, out)
            return True
    return False


def _decide(
    rnd: RoundState, roster: Roster, epoch: int, digest: bytes, window: StepWindow, me: Local,
    out: list[Action],
) -> None:
    lst = rnd.contents[digest]
    rnd.decided, rnd.decided_digest, rnd.decided_epoch, rnd.decided_at = lst, digest, epoch, me.now
    me.counters.count("rounds_decided")
    window.evidence.settle(proof.peer for proof in lst.evidence)
    new_roster, changes, missed = roster.advance(lst, me.rules)
    window.move_frontier(rnd.step, new_roster, me.now)
    out.extend(PeerMissed(rnd.step, p) for p in missed)
    out.extend(MembershipChanged(rnd.step, p, change) for p, change in changes)


def maybe_propose(
    rnd: RoundState, roster: Roster, order: tuple[str, ...], epoch: int, bans: Bans, me: Local,
    out: list[Action], evidence: tuple[Equivocation, ...] = (),
) -> bool:
    """Propose if we lead this epoch: at most one list per epoch, ever.

    Epoch 0 needs no statuses (nobody can have voted before it). Later epochs must re-propose the most
    recently voted list among a strict majority of statuses: if some list was decided in an earlier
    epoch, a majority voted for it and at least one of them is in any majority we hear from.
    """
    if not me.is_voter(roster) or rnd.proposed_epoch >= epoch:
        return False
    if designated_leader(order, epoch) != me.self_id:
        return False
    anchor = rnd.anchor
    if anchor is None:
        return False
    cfg = me.config
    left = me.left()
    banned = bans.at(rnd.step)
    lst: InclusionList | None
    if epoch == 0:
        if me.now < anchor + cfg.collect_timeout and not collection_complete(rnd, roster, banned, me):
            return False
        lst = build_list(bans.without_banned(rnd), roster, cfg.run_id, 0, me.self_id, left,
                         cfg.max_joiners_per_round, cfg.max_roster_peers, evidence)
    else:
        eligible = set(roster.eligible())
        reporters = [p for p, e in rnd.statuses.items() if e == epoch and p in eligible]
        if len(reporters) < roster.quorum_size(left):
            return False
        ballots = [rnd.votes[p] for p in reporters if p in rnd.votes and rnd.votes[p][0] < epoch]
        if ballots:
            content = rnd.contents.get(max(ballots)[1])
            if content is None:
                return False  # we never received that list; the next epoch's leader may have it
            lst = dataclasses.replace(content, epoch=epoch, leader=me.self_id)
        elif not collection_over(rnd, roster, banned, me):
            return False  # took over early from an absent leader: build from what epoch 0 would have
        else:
            lst = build_list(bans.without_banned(rnd), roster, cfg.run_id, epoch, me.self_id, left,
                             cfg.max_joiners_per_round, cfg.max_roster_peers, evidence)
    if lst is None:
        return False
    digest = lst.digest()
    rnd.proposed_epoch = epoch
    rnd.proposals[(epoch, me.self_id)] = digest
    rnd.checked.add((epoch, me.self_id))
    rnd.contents.setdefault(digest, lst)
    me.counters.count("lists_published")
    out.append(Publish(lst))
    return True
