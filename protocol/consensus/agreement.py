"""Which list a step decides: proposals checked, prevotes and precommits cast, quorums counted.

Byzantine agreement, one instance per step, in the shape of Tendermint's: a proposal gathers signed
prevotes; a replica that sees a quorum of prevotes for one list in one epoch (a "pol", proof of lock) locks
on it and precommits it; a quorum of precommits in one epoch decides it, and those precommits are its
certificate (protocol/ballots.py), checkable by anyone. Quorums are ``Roster.vote_quorum``: with n >= 3f + 1
active peers, any two share an honest voter.

Safety: if a list is decided in epoch e, a quorum precommitted it, so at least f + 1 honest peers are
locked on it. An honest peer prevotes a different list in a later epoch only if that proposal carries a
quorum of prevotes for it from an epoch no earlier than its lock, and by induction no such quorum can form
after e (it would need an honest prevote from a locked peer). So no other list gathers a quorum of
prevotes, no honest peer precommits one, and two lists are never both decided, whatever the delays, drops,
partitions, or the lies of up to f peers. Timeouts only decide how fast progress is.

Leader change: the leader of epoch e >= 1 re-proposes the newest list it saw a quorum of prevotes for,
with those prevotes (``InclusionList.pol``), or a fresh list if it saw none; peers locked on an older
ballot accept a re-proposal whose pol is at least as new as their lock. A leader cannot fake a pol: each
prevote is signed by its voter, checked at the gossip door (protocol/claims.py), and the voters must be a
quorum of the step's roster (:func:`check_proposals`).

Availability: a peer prevotes and precommits a list only once it holds every listed payload, fetched and
validated. So a decided list's payloads are held by a quorum of voters, and a leader cannot get a list
decided around a payload nobody can serve: that list gathers no votes and costs only its epoch.

Partitions: besides the vote quorum, a list must include a strict majority of the active roster's payloads
(``Roster.has_quorum``); a minority side decides nothing and stalls (:func:`.epochs.check_stall`).
"""

from __future__ import annotations

import dataclasses

from ..ballots import PRECOMMIT, PREVOTE, Vote, vote_statement
from ..evidence import Equivocation
from ..inclusion_list import Endorsements, InclusionList
from ..membership import Roster
from . import inclusion_bound
from .actions import Action, MembershipChanged, PeerMissed, Penalize, Publish
from .bans import Bans
from .context import Local
from .epochs import collection_complete, collection_over
from .round_state import Ballot, RoundState, build_list, designated_leader, roster_waiting
from .window import StepWindow


def check_proposals(
    rnd: RoundState, roster: Roster, order: tuple[str, ...], me: Local, out: list[Action]
) -> None:
    """Drop proposals from anyone but the epoch's designated leader, that break the roster rules, or whose
    pol is not a quorum of the step's roster."""
    for key in [k for k in rnd.proposals if k not in rnd.checked]:
        epoch, leader = key
        lst = rnd.contents[rnd.proposals[key]]
        reason = roster.check_list(dataclasses.replace(lst, leader=leader), me.rules)
        if reason is None and designated_leader(order, epoch) != leader:
            reason = "not the designated leader of the epoch"
        if reason is None and key in rnd.justifications:
            reason = _pol_flaw(roster, rnd.justifications[key][1], me)
        rnd.checked.add(key)
        if reason is not None:
            digest = rnd.proposals.pop(key)
            rnd.checked.discard(key)
            rnd.justifications.pop(key, None)
            if digest not in rnd.proposals.values():
                rnd.contents.pop(digest, None)
            me.counters.count("invalid_list")
            out.append(Penalize(leader, rnd.step, "invalid_list"))
        elif key in rnd.justifications:
            _note_valid(rnd, (rnd.justifications[key][0], rnd.proposals[key]), rnd.justifications[key][1])


def _pol_flaw(roster: Roster, voters: Endorsements, me: Local) -> str | None:
    """Why these signed prevotes are no quorum of the step's active roster (None: they are)."""
    if not all(roster.is_eligible(voter) for voter, _ in voters):
        return "pol names a peer outside the active roster"
    if len(voters) < roster.vote_quorum(me.left()):
        return "pol is smaller than a quorum"
    return None


def _note_valid(rnd: RoundState, ballot: Ballot, pol: Endorsements) -> None:
    """Remember the newest ballot proven by a quorum of prevotes: what we re-propose when we lead."""
    if rnd.valid is None or ballot[0] > rnd.valid[0]:
        rnd.valid, rnd.valid_pol = ballot, pol


def _acceptable(rnd: RoundState, roster: Roster, lst: InclusionList, digest: bytes, epoch: int,
                bans: Bans, me: Local) -> bool:
    """Whether we may vote for this content at all: not refused for bans, enough payloads, every payload
    held and validated (see "Availability" above)."""
    if bans.refuses(rnd.step, epoch, digest, lst, me.counters):
        return False
    if not roster.has_quorum(lst, me.left(), me.config.max_included):
        if digest not in rnd.below_quorum:
            rnd.below_quorum.add(digest)
            me.counters.count("below_quorum_list")
        return False
    return all(entry in rnd.validated for entry in lst.entries)


def prevote(rnd: RoundState, roster: Roster, bans: Bans, me: Local, out: list[Action]) -> None:
    """Prevote the newest acceptable proposal of an epoch we have not promised away nor prevoted in.

    The lock rule: locked on a ballot, we prevote only the same content, or a proposal whose pol is at least
    as new as our lock (proof that a quorum moved on, so nothing we locked on can have been decided).
    """
    if not me.is_voter(roster):
        return
    best: tuple[int, bytes] | None = None
    for (epoch, leader), digest in rnd.proposals.items():
        if epoch < rnd.promised or epoch <= rnd.prevoted or (best is not None and epoch <= best[0]):
            continue
        if (epoch, leader) not in rnd.checked:
            continue
        if rnd.lock is not None and rnd.lock[1] != digest:
            pol_epoch = rnd.justifications.get((epoch, leader), (-1, ()))[0]
            if pol_epoch < rnd.lock[0]:
                continue
        if _acceptable(rnd, roster, rnd.contents[digest], digest, epoch, bans, me):
            best = (epoch, digest)
    if best is None:
        return
    rnd.promised = max(rnd.promised, best[0])
    rnd.prevoted = best[0]
    _cast(rnd, PREVOTE, best, me, out)


def quorum_ballots(rnd: RoundState, phase: int, roster: Roster, me: Local) -> list[Ballot]:
    """The ballots a quorum of the step's active roster cast in ``phase``, oldest first."""
    quorum = roster.vote_quorum(me.left())
    return sorted(b for b, count in rnd.tally(phase, set(roster.eligible())).items() if count >= quorum)


def precommit(rnd: RoundState, roster: Roster, bans: Bans, me: Local, out: list[Action]) -> None:
    """Lock on and precommit a list once a quorum prevoted it in an epoch we have not left."""
    eligible = set(roster.eligible())
    proven = quorum_ballots(rnd, PREVOTE, roster, me)
    for ballot in sorted(proven, reverse=True):
        _note_valid(rnd, ballot, rnd.endorsements(PREVOTE, ballot, eligible))
    if not me.is_voter(roster):
        return
    for ballot in sorted(proven, reverse=True):
        epoch, digest = ballot
        if epoch < rnd.promised or epoch <= rnd.precommitted:
            continue
        lst = rnd.contents.get(digest)
        if lst is None or not _acceptable(rnd, roster, lst, digest, epoch, bans, me):
            continue
        rnd.promised = epoch
        rnd.precommitted = epoch
        rnd.lock = ballot
        _cast(rnd, PRECOMMIT, ballot, me, out)
        return


def _cast(rnd: RoundState, phase: int, ballot: Ballot, me: Local, out: list[Action]) -> None:
    epoch, digest = ballot
    cfg = me.config
    signature = me.sign(vote_statement(cfg.run_id, rnd.step, epoch, phase, me.self_id, digest))
    rnd.note_vote(phase, me.self_id, (epoch, digest, signature))
    me.counters.count("votes_cast")
    out.append(Publish(Vote(cfg.run_id, rnd.step, epoch, phase, me.self_id, digest, signature)))


def try_decide(rnd: RoundState, roster: Roster, window: StepWindow, me: Local, out: list[Action]) -> bool:
    """Decide a list once a quorum of the active roster precommitted it in the same epoch."""
    for ballot in quorum_ballots(rnd, PRECOMMIT, roster, me):
        if ballot[1] in rnd.contents:
            certificate = rnd.endorsements(PRECOMMIT, ballot, set(roster.eligible()))
            decide(rnd, roster, ballot, certificate, window, me, out)
            return True
    return False


def decide(
    rnd: RoundState, roster: Roster, ballot: Ballot, certificate: Endorsements, window: StepWindow,
    me: Local, out: list[Action],
) -> None:
    epoch, digest = ballot
    content = rnd.contents[digest]  # the first copy we saw, maybe from another epoch: name the deciding one
    leader = next((p for (e, p), d in rnd.proposals.items() if e == epoch and d == digest), content.leader)
    lst = dataclasses.replace(content, epoch=epoch, leader=leader, pol_epoch=-1, pol=())
    rnd.decided, rnd.decided_digest, rnd.decided_epoch, rnd.decided_at = lst, digest, epoch, me.now
    rnd.certificate = certificate
    me.counters.count("rounds_decided")
    window.evidence.settle(proof.peer for proof in lst.evidence)
    due = inclusion_bound.due_peers(me.config.run_id, rnd.step, roster_waiting(roster), roster.eligible(),
                                    me.config.max_included)
    new_roster, changes, missed = roster.advance(lst, me.rules, due)
    window.move_frontier(rnd.step, new_roster, me.now)
    out.extend(PeerMissed(rnd.step, p) for p in missed)
    out.extend(MembershipChanged(rnd.step, p, change) for p, change in changes)


def maybe_propose(
    rnd: RoundState, roster: Roster, order: tuple[str, ...], epoch: int, bans: Bans, me: Local,
    out: list[Action], evidence: tuple[Equivocation, ...] = (),
) -> bool:
    """Propose if we lead this epoch: at most one list per epoch, ever.

    Epoch 0 proposes a fresh list once collection is complete or over. A later epoch waits for a quorum of
    statuses (so the peers are there to vote, and we likely heard their prevotes), then re-proposes the
    newest list we saw a quorum of prevotes for, with its pol; a fresh list only if we saw none.
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
                         cfg.max_joiners_per_round, cfg.max_roster_peers, evidence, cfg.max_included)
    else:
        eligible = set(roster.eligible())
        reporters = [p for p, e in rnd.statuses.items() if e == epoch and p in eligible]
        if len(reporters) < roster.vote_quorum(left):
            return False
        if rnd.valid is not None:
            content = rnd.contents.get(rnd.valid[1])
            if content is None:
                return False  # a quorum prevoted a list we never got; the next epoch's leader may have it
            lst = dataclasses.replace(content, epoch=epoch, leader=me.self_id, pol_epoch=rnd.valid[0],
                                      pol=rnd.valid_pol)
        elif not collection_over(rnd, roster, banned, me):
            return False  # took over early from an absent leader: build from what epoch 0 would have
        else:
            lst = build_list(bans.without_banned(rnd), roster, cfg.run_id, epoch, me.self_id, left,
                             cfg.max_joiners_per_round, cfg.max_roster_peers, evidence, cfg.max_included)
    if lst is None:
        return False
    digest = lst.digest()
    key = (epoch, me.self_id)
    rnd.proposed_epoch = epoch
    rnd.proposals[key] = digest
    rnd.checked.add(key)
    if lst.pol_epoch >= 0:
        rnd.justifications[key] = (lst.pol_epoch, lst.pol)
    rnd.contents.setdefault(digest, lst)
    me.counters.count("lists_published")
    out.append(Publish(lst))
    return True
