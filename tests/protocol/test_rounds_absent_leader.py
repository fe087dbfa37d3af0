"""Leader hand-over: an epoch whose leader said goodbye or went silent is left at once, not timed out.

Single machines driven by hand (time passed in), then the swarm simulator for the end-to-end effect and the
majority-vote safety (no two replicas ever apply different lists).
"""

from __future__ import annotations

from distro_node.protocol.consensus.actions import ApplyInclusionList
from distro_node.protocol.consensus.leader_rank import leader_order
from distro_node.protocol.consensus.machine import RoundMachine
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.messages import Goodbye, Heartbeat, InclusionList, Status, Vote
from protocol_swarm_sim import GENESIS_WEIGHTS, RUN_ID, Swarm, test_config, unsigned
from test_rounds import PEERS, ann, feed_all, machine, of, proposal, published, votes_from


def statuses(actions: list[object]) -> list[Status]:
    return published(actions, Status)


def test_goodbye_of_the_epoch0_leader_hands_the_step_to_the_next_leader_at_once() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[1])  # leads epoch 1
    m.on_message(Goodbye(RUN_ID, order[0], 0), 0.05)
    out = feed_all(m, 0, 0.1, order[1:])
    # Everyone still here is in: epoch 0 is over for its absent leader, long before the 2 s collect deadline.
    assert [st.epoch for st in statuses(out)] == [1]
    out = m.on_message(Status(RUN_ID, 0, 1, order[2]), 0.2)
    assert not published(out, InclusionList)  # f = 1 of the roster of 4: all 3 left must be there
    out = m.on_message(Status(RUN_ID, 0, 1, order[3]), 0.2)
    lst = published(out, InclusionList)[0]
    assert (lst.epoch, lst.leader, lst.departed) == (1, order[1], (order[0],))
    assert lst.peers == tuple(sorted(order[1:]))
    # A late epoch-0 list from the leaver can no longer win a vote here: we promised epoch 1 away.
    assert not published(m.on_message(proposal(0, 0, PEERS), 0.25), Vote)
    out = votes_from(m, lst, order[2:], 0.3)
    assert [a.step for a in of(out, ApplyInclusionList)] == [0] and m.next_step == 1


def test_epoch0_is_not_left_before_collection_is_over() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[2])
    m.on_message(Goodbye(RUN_ID, order[0], 0), 0.0)
    out = feed_all(m, 0, 0.1, order[1:3])
    assert statuses(out) == []  # order[3] is alive and its payload is still missing
    out = m.on_message(ann(order[3], 0), 0.5)
    out += m.on_payload_validated(0, order[3], ann(order[3], 0).payload_hash, 0.5)
    assert [st.epoch for st in statuses(out)] == [1]


def test_silent_leader_counts_as_dead_after_the_liveness_timeout() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[2], liveness_timeout=1.0)
    feed_all(m, 0, 0.0, order[1:])
    out = m.on_tick(0.5)
    assert statuses(out) == []
    assert m.next_wakeup() == 1.0  # when the silent leader would count as dead
    for p in order[1:]:
        m.on_message(Heartbeat(RUN_ID, p, 0, GENESIS_WEIGHTS), 0.9)
    out = m.on_tick(1.2)
    assert [st.epoch for st in statuses(out)] == [1]  # not 3.0 (collect deadline + leader timeout)


def test_silence_of_most_peers_at_once_is_not_taken_as_their_death() -> None:
    # A process starved of CPU wakes up with every peer's last message old: it is the slow one, so it must
    # not skip to an epoch it leads (and drag everyone there); the clock alone moves it on.
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[1], liveness_timeout=1.0)
    feed_all(m, 0, 0.0)
    m.on_message(Heartbeat(RUN_ID, order[3], 0, GENESIS_WEIGHTS), 0.5)
    assert statuses(m.on_tick(2.0)) == []  # only we and order[3] were heard within 1 s: 2 of 4
    out: list[object] = []
    for p in order[2:]:
        out += m.on_message(Heartbeat(RUN_ID, p, 0, GENESIS_WEIGHTS), 2.1)
    assert [st.epoch for st in statuses(out)] == [1]  # 3 of 4 heard: now order[0]'s silence counts


def test_every_absent_leader_in_a_row_is_skipped() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[2])  # leads epoch 2
    for p in order[:2]:
        m.on_message(Goodbye(RUN_ID, p, 0), 0.0)
    out = feed_all(m, 0, 0.1, order[2:])
    assert [st.epoch for st in statuses(out)] == [2]
    out = m.on_message(Status(RUN_ID, 0, 2, order[3]), 0.2)
    lst = published(out, InclusionList)[0]
    assert (lst.epoch, lst.departed) == (2, tuple(sorted(order[:2])))
    out = votes_from(m, lst, [order[3]], 0.3)  # 2 goodbyes of 4: a quorum is (2 + f = 1) // 2 + 1 = 2
    assert [a.step for a in of(out, ApplyInclusionList)] == [0]


def test_present_leader_keeps_its_epoch() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[2], liveness_timeout=1.0)
    feed_all(m, 0, 0.0, order[1:])
    for t in (0.8, 1.6, 2.4):
        for p in (order[0], order[1], order[3]):
            m.on_message(Heartbeat(RUN_ID, p, 0, GENESIS_WEIGHTS), t)
    assert statuses(m.on_tick(2.5)) == []  # epoch 0 runs to collect deadline + leader timeout (3.0)
    assert [st.epoch for st in statuses(m.on_tick(3.0))] == [1]


def test_non_voter_does_not_spin_epochs_when_every_leader_is_silent() -> None:
    m = RoundMachine(test_config(), "newcomer", SyncState(0, Roster.genesis(PEERS)), now=0.0, signer=unsigned)
    m.on_message(ann(PEERS[0], 0), 0.0)
    seen: list[int] = []
    for t in (5.0, 5.05, 5.1, 10.0):
        seen += [st.epoch for st in statuses(m.on_tick(t))]
    # The clock alone (epoch 1 from 3.0, epoch k lasting min(k, 4) timeouts), no jumps on repeated ticks.
    assert seen == [2, 4]


def _leader_step(victim_pick: int = 0) -> tuple[str, int]:
    """A peer and a step >= 3 it leads while the step before is led by someone else."""
    for step in range(3, 50):
        leader = leader_order(RUN_ID, step, PEERS)[victim_pick]
        if leader_order(RUN_ID, step - 1, PEERS)[0] != leader:
            return leader, step
    raise AssertionError("no suitable step")


def test_swarm_goes_on_at_once_when_the_next_leader_leaves() -> None:
    s = Swarm(PEERS, seed=11, steps=8)
    leaver, step = _leader_step()
    s.run_until_applied(step - 1, limit=30.0)
    s.leave(leaver)
    left_at = s.now
    rest = [p for p in PEERS if p != leaver]
    s.run_until_applied(step + 1, limit=60.0, peers=rest)
    r = s.replicas[rest[0]]
    # Before: epoch 0 of the leaver's step ran to its collect deadline plus a leader timeout (3 s here).
    assert r.decided_at[step] - left_at < 1.5
    assert r.applied_lists[step].leader != leaver and leaver in r.applied_lists[step].departed
    assert s.disagreements() == []


def test_swarm_skips_a_crashed_leader_once_it_is_known_dead() -> None:
    s = Swarm(PEERS, seed=12, steps=10)
    victim, step = _leader_step()
    s.run_until_applied(step - 2, limit=40.0)
    s.crash(victim)
    rest = [p for p in PEERS if p != victim]
    s.run_until_applied(step + 1, limit=80.0, peers=rest)
    r = s.replicas[rest[0]]
    lst = r.applied_lists[step]
    assert lst.leader != victim and victim not in lst.peers
    # The step before waited for the victim (alive by liveness until 3 s of silence); the victim's own step
    # starts after that wait and is handed over as soon as the silence counts, not 3 s after its start.
    assert r.decided_at[step] - r.decided_at[step - 1] < 2.0
    assert s.disagreements() == [] and len({s.replicas[p].weights for p in rest}) == 1


def test_a_leader_that_denies_its_own_payload_loses_its_epoch_at_once() -> None:
    """The withhold attack: the epoch-0 leader announced a payload and answers NOT_FOUND for it. Its epoch
    is left as soon as everyone else is in, not after the collect deadline and a leader timeout."""
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[1])  # leads epoch 1
    m.on_message(ann(order[0], 0), 0.05)
    out = feed_all(m, 0, 0.1, order[1:])
    assert statuses(out) == []  # the leader's payload is still expected
    out = m.on_payload_failed(0, order[0], ann(order[0], 0).payload_hash, 0.2)
    out += m.on_payload_denied(0, order[0], 0.2)
    assert [st.epoch for st in statuses(out)] == [1]  # 0.2 s in, against a 2 s collect deadline
    for p in order[2:]:
        out = m.on_message(Status(RUN_ID, 0, 1, p), 0.25)
    lst = published(out, InclusionList)[0]
    assert (lst.epoch, lst.leader, lst.peers) == (1, order[1], tuple(sorted(order[1:])))
    out = votes_from(m, lst, order[2:], 0.3)
    assert [a.step for a in of(out, ApplyInclusionList)] == [0]


def test_a_denial_from_a_stranger_or_for_a_decided_step_changes_nothing() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[1])
    m.on_message(ann(order[0], 0), 0.05)
    feed_all(m, 0, 0.1, order[1:])
    assert statuses(m.on_payload_denied(0, "12D3KooWStrangerNotInTheRoster", 0.2)) == []
    assert statuses(m.on_payload_denied(7, order[0], 0.2)) == []  # no round open for that step


def test_denials_by_every_leader_do_not_spin_the_epochs() -> None:
    """A peer outside the roster (dropped while cut off) catching up on a step whose payloads their authors
    already pruned: every leader of the order denies. Skipping must stop, not loop for ever."""
    order = leader_order(RUN_ID, 0, PEERS)
    outsider = "12D3KooWOutsiderDroppedWhileCutOffxxxxxxxxxxxxxxxxx"
    m = machine(outsider)
    for p in order:
        m.on_message(ann(p, 0), 0.05)
    out: list[object] = []
    for p in order:
        out += m.on_payload_denied(0, p, 2.5)  # past the collect deadline
    assert all(st.epoch < len(order) for st in statuses(out))
