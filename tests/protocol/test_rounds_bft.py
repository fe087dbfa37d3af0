"""Byzantine agreement in one round machine, driven by hand: locks and pols across a leader change,
certificates for laggards, conflicting claims about a decided step, and epoch jumps only with f + 1 peers."""

from __future__ import annotations

from distro_node.protocol.ballots import PRECOMMIT, PREVOTE
from distro_node.protocol.consensus.actions import ApplyInclusionList, ListConflict, Penalize, ResyncNeeded
from distro_node.protocol.consensus.leader_rank import leader_order
from distro_node.protocol.consensus.machine import RoundMachine
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.messages import Certificate, Heartbeat, InclusionList, Status, Vote
from protocol_swarm_sim import GENESIS_WEIGHTS, RUN_ID, SIG
from test_rounds import PEERS, feed_all, machine, of, proposal, published, votes_from


def _decided(order: tuple[str, ...]) -> tuple[RoundMachine, InclusionList]:
    """order[3] decides step 0's epoch-0 list of all four payloads with order[0] and order[1]."""
    m = machine(order[3])
    feed_all(m, 0, 0.0)
    lst = proposal(0, 0, PEERS)
    m.on_message(lst, 0.1)
    votes_from(m, lst, order[:2], 0.1)
    assert m.decided_list(0) == lst
    return m, lst

def test_next_leader_reproposes_the_list_a_quorum_prevoted_with_its_pol() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[1])  # leads epoch 1
    feed_all(m, 0, 0.0)
    first = proposal(0, 0, order[:3])
    out = m.on_message(first, 0.1)
    assert [(v.epoch, v.phase) for v in published(out, Vote)] == [(0, PREVOTE)]
    out = votes_from(m, first, [order[0], order[2]], 0.2, phases=(PREVOTE,))
    assert [(v.epoch, v.phase) for v in published(out, Vote)] == [(0, PRECOMMIT)]  # a quorum prevoted: lock
    out = m.on_tick(3.0)  # collect deadline 2.0 + epoch 0's extra leader timeout 1.0: epoch 1
    assert published(out, Status) == [Status(RUN_ID, 0, 1, order[1])]
    assert not published(out, InclusionList)  # a quorum of statuses is needed first
    out = m.on_message(Status(RUN_ID, 0, 1, order[2]), 3.1)
    out += m.on_message(Status(RUN_ID, 0, 1, order[3]), 3.1)
    again = published(out, InclusionList)[0]
    # Our own list would include all four payloads, but the prevoted one must survive the leader change,
    # with the prevotes that prove it.
    assert again.digest() == first.digest() and (again.epoch, again.leader) == (1, order[1])
    assert again.pol_epoch == 0 and [v for v, _ in again.pol] == sorted(order[:3])


def test_a_locked_peer_votes_for_another_list_only_with_a_pol_at_least_as_new_as_its_lock() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[3], liveness_timeout=30.0)
    feed_all(m, 0, 0.0)
    first = proposal(0, 0, order[:3])
    m.on_message(first, 0.1)
    out = votes_from(m, first, order[:2], 0.1, phases=(PREVOTE,))
    assert [v.phase for v in published(out, Vote)] == [PRECOMMIT]  # locked on `first` in epoch 0
    m.on_tick(3.0)
    other = proposal(0, 1, PEERS)  # a fresh list from epoch 1's leader, which never saw our lock
    assert not published(m.on_message(other, 3.1), Vote)
    m.on_tick(4.0)
    pol = tuple(sorted((v, SIG) for v in order[1:]))
    justified = proposal(0, 2, PEERS, pol_epoch=1, pol=pol)  # a quorum prevoted `other` in epoch 1
    assert [(v.epoch, v.phase) for v in published(m.on_message(justified, 4.1), Vote)] == [(2, PREVOTE)]
    m.on_tick(9.0)
    short = proposal(0, 4, PEERS, pol_epoch=1, pol=pol[:2])  # two prevotes are no quorum of four
    out = m.on_message(short, 9.1)
    assert Penalize(order[0], 0, "invalid_list") in out and not published(out, Vote)


def test_decided_peer_answers_a_laggard_with_its_certificate_which_decides_the_step_there() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m, lst = _decided(order)
    out = m.on_message(Status(RUN_ID, 0, 2, order[2]), 9.0)
    (cert,) = published(out, Certificate)
    assert cert.decided.digest() == lst.digest() and cert.decided.epoch == 0
    assert [v for v, _ in cert.precommits] == sorted([*order[:2], order[3]])
    assert m.on_message(Status(RUN_ID, 0, 3, order[1]), 9.1) == []  # rate limited
    assert published(m.on_message(Status(RUN_ID, 0, 3, order[1]), 10.0), Certificate) == [cert]
    laggard = machine(order[2])
    feed_all(laggard, 0, 9.0)
    out = laggard.on_message(cert, 9.2)
    assert laggard.decided_list(0) == lst and of(out, ApplyInclusionList)
    assert laggard.counters["votes_cast"] == 0  # decided on the certificate alone


def test_a_certificate_short_of_a_quorum_decides_nothing() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[3])
    feed_all(m, 0, 0.0)
    lst = proposal(0, 0, PEERS)
    short = Certificate(lst, tuple(sorted((v, SIG) for v in order[:2])))
    strangers = Certificate(lst, tuple(sorted((v, SIG) for v in ("x", "y", "z"))))
    assert not of(m.on_message(short, 0.1) + m.on_message(strangers, 0.1), ApplyInclusionList)
    assert m.decided_list(0) is None and m.counters["conflicting_claim"] == 2


def test_a_different_list_for_a_decided_step_is_a_claim_unless_certified_and_never_a_resync() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m, lst = _decided(order)
    other = proposal(0, 2, order[:3])  # an honest leader that missed the decision may propose this
    out = m.on_message(other, 5.0)
    assert not of(out, ListConflict) and not of(out, ResyncNeeded)
    assert m.counters["conflicting_claim"] == 1
    forged = Certificate(other, tuple(sorted((v, SIG) for v in order[:3])))  # more than f signed both ways
    out = m.on_message(forged, 5.1)
    conflict = of(out, ListConflict)
    assert len(conflict) == 1 and conflict[0].kind == "certificate" and not of(out, ResyncNeeded)
    assert m.decided_list(0) == lst


def test_one_peer_alone_cannot_drag_the_others_into_a_far_epoch() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[3], liveness_timeout=30.0)
    feed_all(m, 0, 0.0)
    m.on_message(Status(RUN_ID, 0, 500, order[1]), 0.1)  # f = 1: one peer's word is not enough
    assert published(m.on_tick(0.2), Status) == []
    out = m.on_message(Status(RUN_ID, 0, 400, order[2]), 0.3)  # f + 1 = 2 peers are at 400 or later
    assert [st.epoch for st in published(out, Status)] == [400]


def test_a_replayed_old_heartbeat_does_not_make_a_dead_peer_look_alive() -> None:
    m = machine("a", liveness_timeout=1.0, history_steps=2)
    m.restore(SyncState(10, Roster.genesis(PEERS)), 0.0)
    assert m.liveness.is_alive("b", 5.0, 1.0) is False
    m.on_message(Heartbeat(RUN_ID, "b", 7, GENESIS_WEIGHTS), 5.0)  # step 7 + 2 < 10: from the past
    assert m.liveness.is_alive("b", 5.0, 1.0) is False and m.counters["stale_step"] == 1
    m.on_message(Heartbeat(RUN_ID, "b", 8, GENESIS_WEIGHTS), 5.0)  # within the window
    assert m.liveness.is_alive("b", 5.0, 1.0) is True


def test_a_certified_list_that_breaks_the_roster_rules_decides_nothing() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[3])
    bad = proposal(0, 0, [*PEERS, "zz"])  # a peer outside the roster: only more than f liars sign this
    out = m.on_message(Certificate(bad, tuple(sorted((v, SIG) for v in order[:3]))), 0.1)
    assert not of(out, ApplyInclusionList) and m.decided_list(0) is None
    assert m.counters["conflicting_claim"] == 1
