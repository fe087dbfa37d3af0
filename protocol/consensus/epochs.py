"""When a step moves from one leader to the next: collection, epochs, absent leaders, stalls.

Round clock: a step's round starts at the first announcement or proposal seen for it, but not before the
previous step was decided (``RoundState.anchor``). Announcements are collected until ``collect_timeout``.

Leaders: the active roster ranked by sha256(run_id, step, peer) (:mod:`.leader_rank`). Epoch 0 belongs to
the best-ranked peer, which proposes as soon as every live active peer's payload is validated, else at the
collect deadline. If nothing is decided one ``leader_timeout`` after the deadline, epoch 1 starts and the
next-ranked peer leads, and so on, cycling through the roster while the step stays undecided; epoch k lasts
min(k, 4) leader timeouts (``round_state.epoch_length``), so a swarm whose gossip delays have grown still
decides. An epoch whose leader said goodbye or has been silent for ``liveness_timeout`` (while most of the
roster is heard from) is left at once (:func:`skip_absent_leaders`; epoch 0 once its leader would have
proposed). A peer that hears of a later epoch from f + 1 roster peers jumps to it (:func:`follow_roster`),
which re-aligns replicas whose rounds started at different times.

None of this touches safety: entering an epoch only promises not to vote in earlier ones, and what is
decided rests on signed vote quorums and locks (:mod:`.agreement`). Time only decides how fast progress is.
"""

from __future__ import annotations

from ..ballots import Status
from ..membership import Roster
from . import inclusion_bound
from .actions import Action, Publish, RoundStalled
from .context import Local
from .round_state import RoundState, designated_leader, roster_waiting

# Bounded jump: a lying peer can waste epochs (leaders' turns), never make us skip past the limit.
MAX_EPOCH_JUMP = 1000


def follow_roster(rnd: RoundState, roster: Roster, me: Local) -> None:
    """Jump to the latest epoch that f + 1 roster peers reached (their statuses, or a leader's proposal).

    f + 1 of them include an honest one, so a liar alone cannot drag us into epochs nobody else is in.
    That matters for progress, not safety: each jump restarts our epoch clock, and a liar sending ever later
    statuses would otherwise keep every leader from finishing an epoch, and the step from being decided.
    """
    reached = sorted(
        (e for p, e in rnd.statuses.items() if p != me.self_id and roster.is_eligible(p)), reverse=True
    )
    f = roster.faults_tolerated()
    if len(reached) > f:
        catch_up(rnd, reached[f], me)


def catch_up(rnd: RoundState, epoch: int, me: Local) -> None:
    """Jump to ``epoch``, which a roster peer reached, at most :data:`MAX_EPOCH_JUMP` epochs ahead."""
    cfg = me.config
    current = rnd.epoch(me.now, cfg.collect_timeout, cfg.leader_timeout) or 0
    target = min(epoch, current + MAX_EPOCH_JUMP)
    rnd.catch_up(target, me.now, cfg.collect_timeout, cfg.leader_timeout)


# --------------------------------------------------------------------------------------- collection


def expected_peers(rnd: RoundState, roster: Roster, banned: frozenset[str], me: Local) -> list[str]:
    """Whom a leader waits for before the deadline: live roster peers, not silent or departed ones. Warming
    peers too: a leader lists one only once its payload is validated (round_state.build_list), so waiting
    for it keeps a joiner's warm-up from slipping a round whenever its payload lands after the others'.
    Announcers outside the roster are not waited for: identities cost nothing, a host that serves does."""
    return [
        p for p in roster.peers
        if p not in rnd.equivocators and p not in banned and (p == me.self_id or me.is_alive(p))
    ]


def collection_complete(rnd: RoundState, roster: Roster, banned: frozenset[str], me: Local) -> bool:
    """Every live active peer's payload validated or refused; one whose author denied holding it will not
    come (``RoundMachine.on_payload_denied``), so it is not waited for. Under a bound K on inclusion, only
    the K best live active peers by priority that can still be included: the rest would not be listed."""
    expected = expected_peers(rnd, roster, banned, me)
    k = me.config.max_included
    if inclusion_bound.bounded(k, len(roster.eligible())):
        warming = [p for p in expected if not roster.is_eligible(p)]
        expected = warming + _turns_awaited(rnd, roster, expected, me)
    for peer in expected:
        if peer in rnd.denied:
            continue
        ann = rnd.announcements.get(peer)
        if ann is None:
            return False
        key = (peer, ann.payload_hash)
        if key not in rnd.validated and key not in rnd.invalid:
            return False
    return True


def _turns_awaited(rnd: RoundState, roster: Roster, expected: list[str], me: Local) -> list[str]:
    """The first K expected active peers in priority order, passing over those that cannot be included
    (refused payload, denied, equivocated): they are the ones a leader's list would hold."""
    cfg = me.config
    ranked = inclusion_bound.priority_order(cfg.run_id, rnd.step, roster_waiting(roster),
                                            (p for p in expected if roster.is_eligible(p)))
    awaited: list[str] = []
    for peer in ranked:
        if len(awaited) >= cfg.max_included:
            break
        ann = rnd.announcements.get(peer)
        if peer in rnd.denied or (ann is not None and (peer, ann.payload_hash) in rnd.invalid):
            continue
        awaited.append(peer)
    return awaited


def collection_over(rnd: RoundState, roster: Roster, banned: frozenset[str], me: Local) -> bool:
    """When an epoch-0 leader would propose: every live active peer is in, or the collect deadline."""
    anchor = rnd.anchor
    if anchor is not None and me.now >= anchor + me.config.collect_timeout:
        return True
    return collection_complete(rnd, roster, banned, me)


# ------------------------------------------------------------------------------------ absent leaders


def _leader_absent(peer: str, trust_silence: bool, me: Local) -> bool:
    """A leader that cannot lead: it said goodbye (signed by itself) or, if ``trust_silence``, has been
    silent (no heartbeat, no message) for ``liveness_timeout``. Never ourselves."""
    if peer == me.self_id:
        return False
    if me.liveness.has_left(peer):
        return True
    return trust_silence and not me.is_alive(peer)


def _forged(rnd: RoundState, order: tuple[str, ...], epoch: int) -> bool:
    """The epoch's leader sent a list with entries their authors did not sign: nothing of its can pass."""
    return (epoch, designated_leader(order, epoch)) in rnd.forged


def _denied(rnd: RoundState, order: tuple[str, ...], epoch: int) -> bool:
    """The epoch's leader said it does not hold the payload it signed for this step: it withholds it."""
    return designated_leader(order, epoch) in rnd.denied


def _silence_is_evidence(order: tuple[str, ...], me: Local) -> bool:
    """Silence says the leader is gone only while a strict majority of the roster is heard from.

    When most peers look silent at once, the likelier story is that we are the slow one (our process
    starved of CPU, its inbox not yet read, or cut off on a minority side). Skipping then would send a
    status for an epoch we lead, drag every peer there, and repeat each time we fall behind again.
    """
    heard = sum(1 for p in order if p == me.self_id or me.is_alive(p))
    return 2 * heard > len(order)


def skip_absent_leaders(
    rnd: RoundState, roster: Roster, order: tuple[str, ...], epoch: int, banned: frozenset[str], me: Local
) -> int:
    """Enter the next epoch at once when the current epoch's leader is absent; returns the epoch.

    Without this, a step whose epoch-0 leader left or crashed waited out the collect deadline plus a
    leader timeout, and each further absent leader one more leader timeout. Safety does not depend on
    when an epoch is entered: entering one is only a promise not to vote in earlier epochs, every epoch
    still has exactly one designated leader (a function of the replicated roster), and a list is still
    decided only by a quorum of signed precommits in one epoch, under the lock rule of :mod:`.agreement`.
    So acting on local evidence (a goodbye we received, silence we observed, a closed connection) can cost
    at most an epoch, never agreement. Replicas that lack the evidence follow through the statuses of those
    that skipped, once f + 1 of them did (:func:`follow_roster`). Silence only
    counts while most of the roster is heard from (:func:`_silence_is_evidence`); a goodbye always does,
    and so do a forged list from the epoch's leader (``RoundMachine.on_forged_proposal``) and the leader
    saying it lacks its own signed payload (``RoundMachine.on_payload_denied``).

    Epoch 0 is left no earlier than its leader would have proposed (collection complete or the collect
    deadline), so the next leader builds its list from the same payloads. If every leader is absent
    (possible only for a non-voter), nothing is skipped: the epochs would just spin.
    """
    trust_silence = _silence_is_evidence(order, me)
    # A denial holds for every epoch its author leads: if every leader is absent or denied, skipping could
    # never stop (a peer dropped from the roster, catching up on steps whose payloads were pruned, saw that).
    if all(_leader_absent(p, trust_silence, me) or p in rnd.denied for p in order):
        return epoch
    target = epoch
    while (_leader_absent(designated_leader(order, target), trust_silence, me) or _forged(rnd, order, target)
           or _denied(rnd, order, target)):
        if target == 0 and not collection_over(rnd, roster, banned, me):
            break
        target += 1
    if target == epoch:
        return epoch
    catch_up(rnd, target, me)
    current = rnd.epoch(me.now, me.config.collect_timeout, me.config.leader_timeout)
    return epoch if current is None else current


# ---------------------------------------------------------------------------------- entering, stalling


def enter_epoch(rnd: RoundState, epoch: int, me: Local, out: list[Action]) -> None:
    """Entering epoch e >= 1 promises never to vote below e, and says so in a status.

    Non-voters (warming newcomers) send statuses too, without a vote: a status is also how a peer that
    missed a decision asks the deciders for their votes and the list (see :mod:`.laggards`).
    """
    if me.leaving or epoch <= rnd.promised:
        return
    rnd.promised = epoch
    if epoch == 0:
        return
    rnd.statuses[me.self_id] = epoch
    out.append(Publish(Status(me.config.run_id, rnd.step, epoch, me.self_id)))


def check_stall(rnd: RoundState, order: tuple[str, ...], epoch: int, me: Local, out: list[Action]) -> None:
    """Every leader had an epoch and nothing was decided: say so once, and keep re-announcing.

    Typically there is no quorum (a partition): a minority side decides nothing, stalls, republishes its
    announcement in case the majority lost it, and resyncs once it sees the majority ahead.
    """
    if epoch < len(order):
        return
    if not rnd.stalled:
        rnd.stalled = True
        me.counters.count("rounds_stalled")
        out.append(RoundStalled(rnd.step, rnd.summary(epoch)))
    if rnd.own is not None and (
        rnd.last_reannounce is None or me.now - rnd.last_reannounce >= me.config.reannounce_interval
    ):
        rnd.last_reannounce = me.now
        out.append(Publish(rnd.own))
