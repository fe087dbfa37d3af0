"""What a peer's message may change in our state: every check a message passes before any rule reads it.

Peers are strangers, so nothing they send may grow memory without bound or count twice: a message must be
for our run, from a peer we can track, for a step inside the window (:mod:`.window`), and within the
per-step caps. Whatever is refused is counted (``Counters``), never raised: a peer's mistake or malice is
not our bug.

Step policy: announcements for decided steps (stale) or more than ``max_future_steps`` ahead (future) are
ignored and counted. A second, different announcement for the same (peer, step) is equivocation: the peer
is penalised and excluded from that step (none of its payloads is included by an honest leader; a list from
a leader who saw only one of them still includes at most one). Two different lists from one leader for one
epoch, or two different votes from one voter for one epoch, are penalised the same way.

Messages for steps we already decided go to :mod:`.laggards` instead (the caller routes them).
"""

from __future__ import annotations

from ..ballots import Certificate, Status, Vote
from ..evidence import Equivocation
from ..messages import Announcement, Goodbye, Heartbeat, InclusionList, Message
from .actions import Action, Penalize
from .context import Local
from .epochs import follow_roster
from .round_state import PayloadKey, RoundState
from .window import StepWindow


def admit(msg: Message, me: Local, window: StepWindow) -> bool:
    """The prologue every peer message runs once: run id, our own echoes, liveness. False: drop it.

    An untracked author (the liveness memory is full of roster peers) loses its announcement, vote or
    status, since keeping them would need the memory just refused to it. Its proposal is still judged:
    whether its leader counts is the roster's call, not the liveness memory's.
    """
    if msg.run_id != me.config.run_id:
        me.counters.count("wrong_run")
        return False
    if isinstance(msg, Certificate):
        return True  # relayed by anyone, speaks for its signers: says nothing about its publisher
    author, step = _author(msg)
    if author == me.self_id and not isinstance(msg, InclusionList):
        # Our own message echoed back: we counted it when we sent it. A heartbeat or goodbye of ours
        # teaches nothing, but time passed, so the rules still run. Our own proposal goes on like anyone's
        # (the round already holds it).
        if isinstance(msg, Announcement):
            me.counters.count("duplicate_announcement")
        return isinstance(msg, Heartbeat | Goodbye)
    protected = window.protected(me.self_id)
    if isinstance(msg, Goodbye):
        if not me.liveness.goodbye(author, me.now, msg.step, protected):
            me.counters.count("stale_goodbye")  # a replay: the peer was since heard from further on
        return True
    if step is not None and step + me.config.history_steps < window.frontier:
        # A sign of life from far behind the window: a replay of an old signed message (py-libp2p forgets
        # message ids after 120 s), or a peer that must resync before it can take part. Either way it must
        # not make a dead peer look alive, which would have leaders wait for it.
        me.counters.count("stale_step")
        return False
    if me.liveness.observe(author, me.now, step, protected):
        return True
    me.counters.count("untracked_peer")
    return isinstance(msg, InclusionList | Heartbeat)


def _author(
    msg: Announcement | InclusionList | Vote | Status | Heartbeat | Goodbye,
) -> tuple[str, int | None]:
    """Who speaks, and the step it is working on where the message says so: announcements and heartbeats
    do; a proposal, vote or status may be about an old step (answering a laggard), so it proves nothing
    about its sender's progress (what :func:`.progress.check_behind` reads) or return after a goodbye."""
    if isinstance(msg, Announcement | Heartbeat):
        return msg.peer_id, msg.step
    if isinstance(msg, InclusionList):
        return msg.leader, None
    if isinstance(msg, Vote):
        return msg.voter, None
    return msg.peer_id, None


def round_for(step: int, me: Local, window: StepWindow) -> RoundState | None:
    """The round of an undecided step inside the window, created on demand; None (counted) otherwise."""
    if step < window.frontier:
        me.counters.count("stale_step")
        return None
    if step > window.frontier + me.config.max_future_steps:
        me.counters.count("future_step")
        return None
    return window.open_round(step, me.now)


# ----------------------------------------------------------------------------------------- announcements


def add_announcement(ann: Announcement, me: Local, window: StepWindow, out: list[Action]) -> bool:
    """Keep a peer's announcement in its round; True if the rules should run now."""
    if ann.payload_size > me.config.max_payload_bytes:
        me.counters.count("oversize_payload")
        out.append(Penalize(ann.peer_id, ann.step, "oversize"))
        return False
    rnd = window.rounds.get(ann.step)
    if rnd is not None and rnd.step < window.frontier:
        # Too late to count, but a second, different payload is still evidence of equivocation.
        me.counters.count("stale_step")
        _note_equivocation(rnd, ann, me, window, out)
        return False
    rnd = round_for(ann.step, me, window)
    if rnd is None:
        return True  # a far-ahead peer may mean we are behind
    if ann.peer_id in rnd.announcements:
        _note_equivocation(rnd, ann, me, window, out)
        return False
    if len(rnd.announcements) >= me.config.max_announcements_per_step:
        me.counters.count("announcement_cap")
        return False
    rnd.announcements[ann.peer_id] = ann
    if ann.peer_id in window.governing_roster(ann.step):
        rnd.see(me.now)
    return True


def _note_equivocation(rnd: RoundState, ann: Announcement, me: Local, window: StepWindow,
                       out: list[Action]) -> None:
    first = rnd.announcements.get(ann.peer_id)
    if first is None or first.payload_hash == ann.payload_hash:
        me.counters.count("duplicate_announcement")
        return
    _equivocated(rnd, ann.peer_id, (first.payload_hash, first.signature), (ann.payload_hash, ann.signature),
                 me, window, out)


def _equivocated(rnd: RoundState, peer: str, a: tuple[bytes, bytes], b: tuple[bytes, bytes], me: Local,
                 window: StepWindow, out: list[Action]) -> None:
    """``peer`` signed both payloads for this step (the gossip door checked both signatures): exclude it
    here, and keep the proof for a list, which bans it on every replica (protocol/evidence.py)."""
    me.counters.count("equivocation")
    if peer not in rnd.equivocators:
        rnd.equivocators.add(peer)
        out.append(Penalize(peer, rnd.step, "equivocation"))
    window.evidence.add(Equivocation.of(peer, rnd.step, a, b), me.counters)


def _entries_against_announcements(lst: InclusionList, rnd: RoundState, me: Local, window: StepWindow,
                                   out: list[Action]) -> None:
    """A list entry whose signed hash differs from the announcement we hold proves its author signed two
    payloads for the step: the leader cannot have made the entry up (its signature was checked)."""
    for (peer, payload_hash), signature in zip(lst.entries, lst.signatures, strict=True):
        ann = rnd.announcements.get(peer)
        if ann is not None and ann.payload_hash != payload_hash and peer != me.self_id:
            _equivocated(rnd, peer, (ann.payload_hash, ann.signature), (payload_hash, signature), me, window,
                         out)


# ------------------------------------------------------------------------------ proposals, votes, statuses


def add_proposal(lst: InclusionList, me: Local, window: StepWindow, out: list[Action]) -> bool:
    """Keep a proposal for an undecided step; True if the rules should run now.

    Whether its leader may propose it at all is checked later (:func:`.agreement.check_proposals`): that
    needs the step's roster, which may not be known yet.
    """
    rnd = round_for(lst.step, me, window)
    if rnd is None:
        return False
    digest = lst.digest()
    key = (lst.epoch, lst.leader)
    known = rnd.proposals.get(key)
    if known is not None:
        if known == digest:
            me.counters.count("duplicate_list")
        else:
            # One leader, one epoch, two lists: keep the first (others may have voted for it), punish.
            me.counters.count("list_equivocation")
            out.append(Penalize(lst.leader, lst.step, "list_equivocation"))
        return False
    if not _make_room_for_proposal(rnd, lst.epoch, me.config.max_lists_per_step):
        me.counters.count("list_cap")
        return False
    rnd.proposals[key] = digest
    if lst.pol_epoch >= 0:
        rnd.justifications[key] = (lst.pol_epoch, lst.pol)
    rnd.contents.setdefault(digest, lst)
    _entries_against_announcements(lst, rnd, me, window, out)
    roster = window.governing_roster(lst.step)
    if roster.is_eligible(lst.leader):
        rnd.see(me.now)
        rnd.statuses[lst.leader] = max(lst.epoch, rnd.statuses.get(lst.leader, 0))  # it is in that epoch
        follow_roster(rnd, roster, me)
    return True


def _make_room_for_proposal(rnd: RoundState, epoch: int, cap: int) -> bool:
    """Keep the most recent epochs' proposals only: older ones can no longer gather votes."""
    if len(rnd.proposals) < cap:
        return True
    oldest = min(rnd.proposals)
    if oldest[0] >= epoch:
        return False
    digest = rnd.proposals.pop(oldest)
    rnd.checked.discard(oldest)
    rnd.justifications.pop(oldest, None)
    kept = {b[1] for b in (rnd.lock, rnd.valid) if b is not None}
    if digest not in kept and digest not in rnd.proposals.values():
        rnd.contents.pop(digest, None)
    return True


def add_vote(vote: Vote, rnd: RoundState, me: Local, out: list[Action]) -> bool:
    """Keep a signed vote (decided step or not); False if the per-step cap refused it."""
    votes = rnd.votes_of(vote.phase)
    if vote.voter not in votes and len(votes) >= me.config.max_announcements_per_step:
        me.counters.count("vote_cap")
        return False
    if not rnd.note_vote(vote.phase, vote.voter, (vote.epoch, vote.digest, vote.signature)):
        me.counters.count("vote_equivocation")
        out.append(Penalize(vote.voter, vote.step, "vote_equivocation"))
    return True


def add_status(status: Status, me: Local, window: StepWindow) -> bool:
    """Keep a status for an undecided step; True if the rules should run now. A status from the roster for
    a later epoch reached by f + 1 of the roster moves us there too (:func:`.epochs.follow_roster`)."""
    rnd = round_for(status.step, me, window)
    if rnd is None:
        return False
    cap = me.config.max_announcements_per_step
    if status.peer_id not in rnd.statuses and len(rnd.statuses) >= cap:
        me.counters.count("vote_cap")
        return False
    rnd.statuses[status.peer_id] = max(status.epoch, rnd.statuses.get(status.peer_id, 0))
    follow_roster(rnd, window.governing_roster(status.step), me)
    return True


# ------------------------------------------------------------------------------------------------ payloads


def payload_round(step: int, key: PayloadKey, me: Local, window: StepWindow) -> RoundState | None:
    """The round a transport payload result belongs to, or None (counted) if we never asked for it."""
    rnd = window.rounds.get(step)
    if rnd is None or not rnd.payload_known(key):
        me.counters.count("unexpected_payload_event")
        return None
    return rnd


def retried_payload_round(step: int, key: PayloadKey, me: Local, window: StepWindow) -> RoundState | None:
    """The round of a failed fetch we are still waiting for, or None (counted)."""
    rnd = window.rounds.get(step)
    if rnd is None or key not in rnd.fetch_requested_at:
        me.counters.count("unexpected_payload_event")
        return None
    return rnd
