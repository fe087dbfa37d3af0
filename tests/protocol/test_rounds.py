"""Round state machine: single-machine rules driven by hand, and swarm scenarios in the simulator."""

from __future__ import annotations

import hashlib
import os
import random
from typing import TypeVar

import pytest
from distro_node.protocol.ballots import PRECOMMIT, PREVOTE
from distro_node.protocol.consensus.actions import (
    ApplyInclusionList,
    FetchPayload,
    MembershipChanged,
    PeerMissed,
    Penalize,
    Publish,
    ResyncNeeded,
    RoundStalled,
)
from distro_node.protocol.consensus.leader_rank import leader_order
from distro_node.protocol.consensus.machine import RoundInputError, RoundMachine
from distro_node.protocol.consensus.round_state import epoch_since, epoch_start
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.messages import (
    Announcement,
    Goodbye,
    Heartbeat,
    InclusionList,
    Status,
    Vote,
)
from protocol_swarm_sim import GENESIS_WEIGHTS, RUN_ID, SIG, Swarm, payload_hash, test_config, unsigned

PEERS = ("a", "b", "c", "d")
# Seeds per randomized swarm test; raise it for a soak run (each seed takes well under a second).
SIM_SEEDS = int(os.environ.get("DISTRO_PROTOCOL_SIM_SEEDS", "16"))
M = TypeVar("M")


def ann(
    peer: str, step: int, variant: int = 0, weights: bytes = GENESIS_WEIGHTS, size: int = 1000
) -> Announcement:
    return Announcement(RUN_ID, step, peer, payload_hash(peer, step, variant), size, weights, SIG)


def machine(self_id: str, peers: tuple[str, ...] = PEERS, step: int = 0, **cfg: object) -> RoundMachine:
    state = SyncState(step, Roster.genesis(peers))
    return RoundMachine(test_config(**cfg), self_id, state, now=0.0, signer=unsigned)


def not_leader(step: int, peers: tuple[str, ...] = PEERS) -> str:
    return leader_order(RUN_ID, step, peers)[-1]


def feed_all(m: RoundMachine, step: int, now: float, peers: tuple[str, ...] = PEERS) -> list[object]:
    """Announce and validate every peer's payload at ``m``."""
    out: list[object] = []
    for p in peers:
        if p == m.self_id:
            out += m.on_local_announcement(ann(p, step), now)
        else:
            out += m.on_message(ann(p, step), now)
            out += m.on_payload_validated(step, p, payload_hash(p, step), now)
    return out


def of(actions: list[object], kind: type) -> list:
    return [a for a in actions if isinstance(a, kind)]


def published(actions: list[object], kind: type[M]) -> list[M]:
    """The messages of ``kind`` the machine asked to publish, in order."""
    return [a.message for a in actions if isinstance(a, Publish) and isinstance(a.message, kind)]


# ---------------------------------------------------------------------------- single machine, by hand


def entries_for(step: int, peers: tuple[str, ...] | list[str]) -> tuple[tuple[str, bytes], ...]:
    return tuple(sorted((p, payload_hash(p, step)) for p in peers))


def proposal(step: int, epoch: int, peers: tuple[str, ...] | list[str], **kw: object) -> InclusionList:
    order = leader_order(RUN_ID, step, PEERS)
    leader = kw.pop("leader", order[epoch % len(order)])
    entries = entries_for(step, peers)
    return InclusionList(RUN_ID, step, epoch, leader, entries, signatures=(SIG,) * len(entries),
                         **kw)  # type: ignore[arg-type]


def hold(m: RoundMachine, lst: InclusionList, now: float) -> list:
    """Every payload ``lst`` names arrived and passed validation at ``m`` (a voter votes only then)."""
    out: list = []
    for p, h in lst.entries:
        out += m.on_payload_validated(lst.step, p, h, now)
    return out


def votes_from(m: RoundMachine, lst: InclusionList, voters: tuple[str, ...] | list[str], now: float,
               phases: tuple[int, ...] = (PREVOTE, PRECOMMIT)) -> list:
    """``voters`` prevote, then precommit ``lst`` (a voter precommits only after a quorum prevoted)."""
    out: list = []
    for phase in phases:
        for v in voters:
            out += m.on_message(Vote(RUN_ID, lst.step, lst.epoch, phase, v, lst.digest(), SIG), now)
    return out


def test_leader_proposes_as_soon_as_everybody_is_in_and_decides_on_majority_votes() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[0])
    out = feed_all(m, 0, now=0.1)
    lst = published(out, InclusionList)[0]
    assert lst.peers == PEERS and lst.leader == order[0] and lst.epoch == 0
    assert [v.digest for v in published(out, Vote)] == [lst.digest()]
    assert m.next_step == 0  # our own vote is not a majority of 4
    out = votes_from(m, lst, [order[1]], 0.2)
    assert m.next_step == 0 and not of(out, ApplyInclusionList)
    out = votes_from(m, lst, [order[2]], 0.2)
    applied = of(out, ApplyInclusionList)
    assert [a.step for a in applied] == [0] and applied[0].majority_weights_hash == GENESIS_WEIGHTS
    assert m.next_step == 1 and m.next_apply_step == 1


def test_follower_fetches_every_listed_payload_then_votes() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    leader, other = order[0], order[1]
    m = machine(order[3])
    out = m.on_message(ann(other, 0), 0.0)
    assert [(f.peer_id, f.payload_hash, f.sources) for f in of(out, FetchPayload)] == [
        (other, payload_hash(other, 0), (other,))
    ]
    lst = proposal(0, 0, [other, leader, order[2]])
    out = m.on_message(lst, 0.2)
    # The list names payloads we never saw announced: fetch them from their owner and the leader, and
    # vote only once we hold every one (a list around a payload nobody serves gets no vote).
    wanted = {(f.peer_id, f.sources) for f in of(out, FetchPayload)}
    assert (order[2], (order[2], leader)) in wanted and (leader, (leader,)) in wanted
    assert published(out, Vote) == []
    for p, h in lst.entries:
        out = m.on_payload_validated(0, p, h, 0.3)
    assert published(out, Vote) == [Vote(RUN_ID, 0, 0, PREVOTE, m.self_id, lst.digest(), SIG)]
    out = votes_from(m, lst, [leader, other], 0.4)
    assert m.next_step == 1 and [a.step for a in of(out, ApplyInclusionList)] == [0]


def test_stale_and_far_future_announcements_are_ignored_and_counted() -> None:
    m = machine("a", step=10)
    assert m.on_message(ann("b", 3), 1.0) == []
    assert m.on_message(ann("b", 9), 1.0) == []
    assert m.counters["stale_step"] == 2
    assert m.on_message(ann("b", 13), 1.0) == []  # max_future_steps = 2
    assert m.counters["future_step"] == 1
    out = m.on_message(ann("b", 12), 1.0)
    assert of(out, FetchPayload)  # inside the window: kept and fetched
    # A replayed old proposal and old votes (W3) never create state for old steps.
    old = proposal(2, 0, PEERS)
    assert m.on_message(old, 1.0) == [] and votes_from(m, old, PEERS, 1.0) == []
    assert m.decided_list(2) is None and m.next_apply_step == 10


def test_wrong_run_and_oversize_are_rejected() -> None:
    m = machine("a")
    other_run = hashlib.sha256(b"other").digest()
    foreign = Announcement(other_run, 0, "b", payload_hash("b", 0), 10, GENESIS_WEIGHTS, SIG)
    assert m.on_message(foreign, 0) == []
    assert m.on_message(Vote(other_run, 0, 0, PREVOTE, "b", payload_hash("b", 0), SIG), 0) == []
    assert m.counters["wrong_run"] == 2
    out = m.on_message(ann("b", 0, size=(64 << 20) + 1), 0)
    assert of(out, Penalize) == [Penalize("b", 0, "oversize")]


def test_equivocation_is_penalised_once_and_the_peer_excluded() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    cheat = order[3]
    m = machine(order[0])
    out = m.on_message(ann(cheat, 0, variant=0), 0.1)
    out += m.on_message(ann(cheat, 0, variant=1), 0.1)
    out += m.on_message(ann(cheat, 0, variant=2), 0.1)
    assert of(out, Penalize) == [Penalize(cheat, 0, "equivocation")]
    assert m.counters["equivocation"] == 2
    out = feed_all(m, 0, 0.2, tuple(p for p in PEERS if p != cheat))
    lst = published(out, InclusionList)[0]  # closes early: an equivocator is not waited for
    assert cheat not in lst.peers and len(lst.peers) == 3


def test_list_with_one_of_two_equivocated_payloads_is_applied_with_that_one() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    cheat, me = order[3], order[2]
    m = machine(me)
    m.on_message(ann(cheat, 0, 0), 0.0)
    m.on_message(ann(cheat, 0, 1), 0.0)
    # The leader only saw variant 1: its list is valid and names at most one of the payloads.
    entries = tuple(sorted((p, payload_hash(p, 0, 1 if p == cheat else 0)) for p in PEERS))
    lst = InclusionList(RUN_ID, 0, 0, order[0], entries, signatures=(SIG,) * len(entries))
    out = m.on_message(lst, 0.1) + hold(m, lst, 0.1) + votes_from(m, lst, order[:2], 0.1)
    assert m.next_step == 1
    assert (cheat, payload_hash(cheat, 0, 1)) in {(f.peer_id, f.payload_hash) for f in of(out, FetchPayload)}


def test_only_the_designated_leader_of_an_epoch_may_propose() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[3])
    feed_all(m, 0, 0.0)
    out = m.on_message(proposal(0, 0, PEERS, leader=order[1]), 0.1)
    assert of(out, Penalize) == [Penalize(order[1], 0, "invalid_list")] and not published(out, Vote)
    out = m.on_message(InclusionList(RUN_ID, 0, 0, "stranger", entries_for(0, PEERS),
                                     signatures=(SIG,) * len(PEERS)), 0.1)
    assert Penalize("stranger", 0, "invalid_list") in out
    bad = InclusionList(RUN_ID, 0, 0, order[0], (*entries_for(0, PEERS), ("zz", payload_hash("zz", 0))),
                        signatures=(SIG,) * (len(PEERS) + 1))
    assert Penalize(order[0], 0, "invalid_list") in m.on_message(bad, 0.1)
    assert m.next_step == 0 and m.counters["invalid_list"] == 3


def test_new_leader_builds_its_own_list_when_nobody_voted() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[1])
    feed_all(m, 0, 0.0)
    m.on_tick(3.0)
    out = []
    for p in (order[2], order[3]):
        out += m.on_message(Status(RUN_ID, 0, 1, p), 3.1)
    lst = published(out, InclusionList)[0]
    assert lst.peers == PEERS and lst.epoch == 1
    out = votes_from(m, lst, order[2:], 3.2)
    assert of(out, ApplyInclusionList)[0].inclusion_list.digest() == lst.digest()


def test_no_vote_for_an_epoch_already_promised_away() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    # Nobody sends heartbeats here: a long liveness timeout keeps the epoch-1 leader from counting as dead.
    m = machine(order[3], liveness_timeout=30.0)
    feed_all(m, 0, 0.0)
    m.on_tick(3.0)  # entered epoch 1
    out = m.on_message(proposal(0, 0, PEERS), 3.1)  # epoch 0's proposal, too late
    assert not published(out, Vote)
    out = m.on_message(proposal(0, 1, PEERS), 3.2)
    assert [v.epoch for v in published(out, Vote)] == [1]


def test_votes_from_different_epochs_do_not_add_up() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[3])
    lst0, lst1 = proposal(0, 0, PEERS), proposal(0, 1, PEERS)
    m.on_message(lst0, 0.0)
    hold(m, lst0, 0.0)
    votes_from(m, lst0, [order[0]], 0.1)  # with our own vote: 2 of 4 in epoch 0
    votes_from(m, lst1, [order[1]], 0.1)  # same list, but epoch 1
    assert m.next_step == 0 and m.counters["votes_cast"] == 1
    votes_from(m, lst0, [order[2]], 0.1)
    assert m.decided_list(0) == lst0


def test_one_leader_two_lists_in_one_epoch_is_penalised() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[3])
    m.on_message(proposal(0, 0, PEERS), 0.1)
    out = m.on_message(proposal(0, 0, order[:3]), 0.1)
    assert out == [Penalize(order[0], 0, "list_equivocation")]


def test_two_votes_in_one_epoch_are_penalised_and_only_the_first_counts() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[3])
    a, b = proposal(0, 0, PEERS), proposal(0, 0, order[:3])
    votes_from(m, a, [order[1]], 0.1)
    out = votes_from(m, b, [order[1]], 0.1)
    assert out == [Penalize(order[1], 0, "vote_equivocation")] * 2  # a prevote and a precommit
    m.on_message(b, 0.2)
    hold(m, b, 0.2)  # we vote for b: with order[1]'s second vote it would look like 2 of 4
    votes_from(m, b, [order[0]], 0.2)
    assert m.decided_list(0) is None  # 3 "votes" for b, but only 2 count
    votes_from(m, b, [order[2]], 0.3)
    assert m.decided_list(0) == b


def test_list_below_quorum_gets_no_vote() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[3])
    out = m.on_message(proposal(0, 0, order[:2]), 0.1)
    assert not published(out, Vote) and m.counters["below_quorum_list"] >= 1


def test_leader_without_quorum_does_not_propose_and_the_round_stalls() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[0])
    out = feed_all(m, 0, 0.0, (order[0], order[1]))
    out += m.on_tick(2.1)
    assert not published(out, InclusionList)
    # Epoch 1 starts at collect deadline + leader timeout (3.0); epochs 1, 2, 3 last 1, 2 and 3 timeouts.
    assert of(m.on_tick(8.99), RoundStalled) == []
    out = m.on_tick(3.0 + (1 + 2 + 3) * 1.0 + 0.01)  # every leader had its epoch
    assert of(out, RoundStalled) == [RoundStalled(0)]
    # The fault says how far the round got: two of four announced, no proposal, no votes.
    summary = of(out, RoundStalled)[0].summary
    assert "epoch 4" in summary and "proposals []" in summary and "precommits {}" in summary
    assert f"announced {sorted(p[-6:] for p in order[:2])};" in summary
    assert published(m.on_tick(9.1), Announcement) == []  # rate limited
    assert len(published(m.on_tick(10.1), Announcement)) == 1


def test_goodbye_of_the_last_missing_peer_closes_the_round_at_once() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    leaver = order[3]
    m = machine(order[0])
    out = feed_all(m, 0, 0.1, order[:3])
    assert not published(out, InclusionList)
    out = m.on_message(Goodbye(RUN_ID, leaver, 0), 0.2)
    lst = published(out, InclusionList)[0]
    assert lst.departed == (leaver,) and leaver not in lst.peers
    out = votes_from(m, lst, order[1:3], 0.3)  # f = 1 of the roster of 4: 3 of the 3 peers still voting
    assert MembershipChanged(0, leaver, "left") in out and leaver not in m.roster


def test_a_replayed_goodbye_is_counted_stale_and_keeps_its_peer_in_the_quorum() -> None:
    """A goodbye older than what its peer said since (a replay with a fresh pubsub seqno): counted for
    /metrics as ``stale_goodbye`` and ignored, so the quorum's n does not shrink."""
    m = machine("a")
    m.on_message(Heartbeat(RUN_ID, "b", 3, GENESIS_WEIGHTS), 0.1)
    m.on_message(Goodbye(RUN_ID, "b", 0), 0.2)
    m.on_message(Goodbye(RUN_ID, "c", 0), 0.3)  # a fresh one: c leaves
    assert m.counters["stale_goodbye"] == 1
    assert not m._liveness.has_left("b") and m._liveness.has_left("c")


def test_weights_divergence_requests_resync_with_the_majority_hash() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    me = order[3]
    m = machine(me)
    mine = hashlib.sha256(b"diverged").digest()
    m.on_local_announcement(ann(me, 0, weights=mine), 0.0)
    for p in order[:3]:
        m.on_message(ann(p, 0), 0.0)
        m.on_payload_validated(0, p, payload_hash(p, 0), 0.0)
    lst = proposal(0, 0, order[:3])
    out = m.on_message(lst, 0.1) + votes_from(m, lst, order[:2], 0.1)
    assert of(out, ApplyInclusionList)[0].majority_weights_hash == GENESIS_WEIGHTS
    assert of(out, ResyncNeeded) == [ResyncNeeded(0, "weights_diverged", GENESIS_WEIGHTS)]


def test_behind_majority_requests_resync() -> None:
    m = machine("a")
    out = []
    for p in ("b", "c"):
        out += m.on_message(Heartbeat(RUN_ID, p, 7, GENESIS_WEIGHTS), 1.0)
    assert of(out, ResyncNeeded) == []  # 2 of 4 is not a majority
    out = m.on_message(Heartbeat(RUN_ID, "d", 7, GENESIS_WEIGHTS), 1.0)
    assert of(out, ResyncNeeded) == [ResyncNeeded(0, "behind", None)]
    out = m.restore(SyncState(7, Roster.genesis(PEERS)), 2.0)
    assert m.next_step == 7 and not of(out, ResyncNeeded)


def test_own_announcement_misuse_raises_typed_error() -> None:
    m = machine("a")
    with pytest.raises(RoundInputError):
        m.on_local_announcement(ann("b", 0), 0.0)
    m.on_local_announcement(ann("a", 0), 0.0)
    with pytest.raises(RoundInputError):
        m.on_local_announcement(ann("a", 0, variant=1), 0.0)


def test_memory_stays_bounded_under_a_flood() -> None:
    m = machine("a", max_tracked_peers=300, max_roster_peers=4, max_announcements_per_step=50,
                max_lists_per_step=4)
    rng = random.Random(7)
    for i in range(3000):
        peer, step, now = f"sybil{i}", rng.randrange(0, 3), 0.001 * i
        m.on_message(ann(peer, step), now)
        m.on_message(Heartbeat(RUN_ID, peer, rng.randrange(0, 50), GENESIS_WEIGHTS), now)
        epoch = rng.randrange(0, 99)
        m.on_message(Vote(RUN_ID, step, epoch, i % 2, peer, payload_hash(peer, step), SIG), now)
        m.on_message(Status(RUN_ID, step, 5, peer), now)
        m.on_message(proposal(step, rng.randrange(0, 1000), PEERS, leader=peer), now)
    assert len(m.liveness) <= 300
    for r in m._window.rounds.values():
        assert max(len(r.announcements), len(r.prevotes), len(r.precommits), len(r.statuses)) <= 50
        assert len(r.proposals) <= 4 and len(r.contents) <= 4
    assert len(m._window.rounds) <= 3
    assert all(p in m.roster for p in PEERS)  # roster peers are never evicted from tracking
    assert m.counters["announcement_cap"] > 0 and m.counters["vote_cap"] > 0


def test_decided_history_is_pruned() -> None:
    m = machine("a", peers=("a",), history_steps=3)
    for step in range(20):
        feed_all(m, step, float(step), ("a",))
    assert m.next_apply_step == 20
    assert sorted(m._window.rounds) == [17, 18, 19]
    assert len(m._window.rosters) <= 4


# ---------------------------------------------------------------------------- swarm scenarios


def test_all_peers_in_round_closes_immediately_and_identically() -> None:
    s = Swarm(PEERS, seed=1, steps=6)
    s.run(until=4.0)  # six rounds would take at least 12 s if any waited for its collect deadline
    assert all(sorted(r.applied) == list(range(6)) for r in s.replicas.values())
    assert s.disagreements() == []
    lists = s.replicas["a"].applied_lists
    assert all(lists[k].peers == PEERS for k in lists)
    assert not any(r.actions_of(PeerMissed) for r in s.replicas.values())
    assert len({r.weights for r in s.replicas.values()}) == 1


def test_silent_peer_is_left_out_at_the_deadline_then_dropped() -> None:
    s = Swarm(PEERS, seed=2, steps=6)
    s.replicas["d"].silent = True
    s.run(until=30.0)
    live = [s.replicas[p] for p in "abc"]
    assert all(sorted(r.applied) == list(range(6)) for r in live) and s.disagreements() == []
    a = s.replicas["a"]
    assert all("d" not in lst.peers and len(lst.peers) == 3 for lst in a.applied_lists.values())
    assert a.decided_at[0] >= 2.0  # waited for the collect deadline: d was alive (heartbeats)
    assert [x.step for x in a.actions_of(PeerMissed)] == [0, 1, 2]
    assert MembershipChanged(2, "d", "dropped_missed") in a.actions_of(MembershipChanged)
    # Once dropped, rounds close as soon as the three are in.
    assert a.decided_at[5] - a.decided_at[4] < 1.0


@pytest.mark.parametrize("reach", [set(), {"first"}])
def test_leader_crash_fallback_and_identical_lists(reach: set[str]) -> None:
    s = Swarm(PEERS, seed=3, steps=6)
    order = leader_order(RUN_ID, 2, PEERS)
    crashed = order[0]
    # Crash while publishing: the list reaches nobody, or only one peer (which gossips it on).
    s.replicas[crashed].crash_on_publish[2] = {order[1]} if reach else set()
    s.run(until=40.0)
    live = [r for r in s.replicas.values() if r.peer_id != crashed]
    assert all(sorted(r.applied) == list(range(6)) for r in live)
    assert s.disagreements() == []
    lst = live[0].applied_lists[2]
    assert lst.leader == (crashed if reach else order[1])
    assert len({r.weights for r in live}) == 1


def test_graceful_leave_next_round_does_not_wait() -> None:
    s = Swarm(PEERS, seed=4, steps=8)
    s.run_until_applied(1, limit=10.0)
    s.leave("d")
    left_at = s.now
    s.run_until_applied(3, limit=30.0, peers="abc")
    a = s.replicas["a"]
    assert a.decided_at[3] - left_at < 2.0  # no collect deadline (2 s) was waited for
    assert any("d" in lst.departed for lst in a.applied_lists.values())
    assert "d" not in a.machine.roster
    assert not any(x.peer_id == "d" for x in a.actions_of(PeerMissed))
    assert s.disagreements() == []


def test_joiner_warms_up_then_is_included() -> None:
    s = Swarm(PEERS, seed=5, steps=10)
    s.run_until_applied(2, limit=10.0)
    e = s.join("e", donor="a")
    s.run(until=40.0)
    assert s.disagreements() == []
    lists = s.replicas["a"].applied_lists
    warming = [k for k in sorted(lists) if "e" in lists[k].warming]
    included = [k for k in sorted(lists) if "e" in lists[k].peers]
    assert len(warming) == 2 and included and included[0] == warming[-1] + 1
    assert included == list(range(included[0], 10))
    assert not any("e" in lists[k].peers for k in warming)
    changes = [(c.peer_id, c.change) for c in s.replicas["b"].actions_of(MembershipChanged)]
    assert ("e", "warming") in changes and ("e", "activated") in changes
    assert e.weights == s.replicas["a"].weights and sorted(e.applied) == list(range(min(e.applied), 10))


def test_equivocator_flagged_and_never_included_twice() -> None:
    s = Swarm(PEERS, seed=6, steps=4)
    s.replicas["b"].equivocate = True
    s.run(until=30.0)
    honest = [s.replicas[p] for p in "acd"]
    assert all(sorted(r.applied) == list(range(4)) for r in honest) and s.disagreements() == []
    for r in honest:
        assert {(p.peer_id, p.reason) for p in r.actions_of(Penalize)} == {("b", "equivocation")}
    for lst in honest[0].applied_lists.values():
        assert sum(1 for p in lst.peers if p == "b") <= 1


def test_weights_divergence_is_detected_and_repaired_by_resync() -> None:
    s = Swarm(PEERS, seed=7, steps=8)
    s.replicas["c"].weights_fault_at = 3
    s.run(until=40.0)
    c = s.replicas["c"]
    assert "weights_diverged" in [reason for _, reason in c.resyncs]
    assert "c" not in s.replicas["a"].applied_lists[3].peers  # the leader kept the diverged gradient out
    assert len({r.weights for r in s.replicas.values()}) == 1
    assert "c" in s.replicas["a"].applied_lists[7].peers
    assert s.disagreements() == []


def test_partition_in_halves_applies_nothing_then_heals() -> None:
    s = Swarm(PEERS, seed=8, steps=8)
    s.run_until_applied(1, limit=10.0)
    s.partition("ab", "cd")
    decided = {p: r.machine.next_step for p, r in s.replicas.items()}
    s.run(until=s.now + 20.0)
    # Neither half holds a strict majority of the 4 active peers: nothing is decided anywhere (a step
    # decided before the cut may still be applied).
    assert {p: r.machine.next_step for p, r in s.replicas.items()} == decided
    assert all(max(r.applied) < decided[p] for p, r in s.replicas.items())
    assert all(r.actions_of(RoundStalled) for r in s.replicas.values())
    s.heal()
    s.run(until=s.now + 30.0)
    assert all(sorted(r.applied)[-1] == 7 for r in s.replicas.values())
    assert s.disagreements() == [] and len({r.weights for r in s.replicas.values()}) == 1


def test_partition_five_two_minority_applies_nothing_and_resyncs() -> None:
    peers = ("a", "b", "c", "d", "e", "f", "g")  # n = 7, f = 2: a quorum is 5
    s = Swarm(peers, seed=9, steps=12)
    s.run_until_applied(1, limit=10.0)
    s.partition("abcde", "fg")
    decided = {p: s.replicas[p].machine.next_step for p in "fg"}
    s.run(until=s.now + 15.0)
    assert {p: s.replicas[p].machine.next_step for p in "fg"} == decided
    assert all(max(s.replicas[p].applied) < decided[p] for p in "fg")
    assert all(max(s.replicas[p].applied) >= 5 for p in "abcde")  # the quorum side kept training
    s.heal()
    s.run(until=s.now + 30.0)
    assert all(r.machine.next_apply_step == 12 for r in s.replicas.values())
    assert any(reason == "behind" for p in "fg" for _, reason in s.replicas[p].resyncs)
    assert s.disagreements() == [] and len({r.weights for r in s.replicas.values()}) == 1


def test_partition_three_two_of_five_stalls_both_sides_until_it_heals() -> None:
    # n = 5 tolerates f = 1 liar, so a quorum is 4: three peers cannot tell a partition from two liars
    # and must not decide alone. Nothing diverges; training resumes once the cut heals.
    peers = ("a", "b", "c", "d", "e")
    s = Swarm(peers, seed=9, steps=8)
    s.run_until_applied(1, limit=10.0)
    s.partition("abc", "de")
    before = {p: r.machine.next_step for p, r in s.replicas.items()}
    s.run(until=s.now + 15.0)
    assert all(r.machine.next_step <= before[p] + 1 for p, r in s.replicas.items())
    s.heal()
    s.run(until=s.now + 40.0)
    assert all(r.machine.next_apply_step == 8 for r in s.replicas.values())
    assert s.disagreements() == [] and len({r.weights for r in s.replicas.values()}) == 1


def test_crashed_peer_recovers_and_ends_bit_identical() -> None:
    # threats.md C3: one of 4 peers fails at step 2 and recovers.
    # Down for about 3 rounds: dropped from the roster, so it comes back through warm-up.
    s = Swarm(PEERS, seed=10, steps=16)
    s.run_until_applied(1, limit=10.0)
    s.crash("c")
    s.run(until=s.now + 4.0)
    s.recover("c", donor="a")
    s.run(until=s.now + 40.0)
    assert all(r.machine.next_apply_step == 16 for r in s.replicas.values())
    assert s.disagreements() == [] and len({r.weights for r in s.replicas.values()}) == 1
    assert "c" in s.replicas["a"].applied_lists[15].peers


@pytest.mark.parametrize("seed", range(SIM_SEEDS))
def test_random_delays_drops_and_crashes_never_split_replicas(seed: int) -> None:
    rng = random.Random(1000 + seed)
    n = rng.randint(3, 6)
    peers = tuple(f"p{i}" for i in range(n))
    cfg = test_config(leader_timeout=2.0, collect_timeout=2.0, max_future_steps=2)
    s = Swarm(peers, seed=seed, config=cfg, steps=8, delay=(0.005, 0.15), drop=0.1, list_drop=0.05,
              compute=(0.1, 0.6))
    victim = rng.choice(peers)
    crash_at = rng.uniform(0.5, 6.0)
    s.at(crash_at, lambda: s.crash(victim))
    if rng.random() < 0.5:
        donor = next(p for p in peers if p != victim)
        s.at(crash_at + rng.uniform(1.0, 8.0), lambda: s.recover(victim, donor))
    s.run(until=90.0)
    assert s.disagreements() == []
    live = [r for r in s.replicas.values() if r.alive]
    # One crash never stops a majority from finishing (with 3 peers, 2 of 3 is still a quorum).
    assert all(r.machine.next_apply_step == 8 for r in live)
    assert len({r.weights for r in live}) == 1


@pytest.mark.parametrize("seed", range(SIM_SEEDS))
def test_random_partitions_never_split_replicas_and_heal(seed: int) -> None:
    rng = random.Random(5000 + seed)
    n = rng.randint(3, 7)
    peers = tuple(f"p{i}" for i in range(n))
    s = Swarm(peers, seed=seed, steps=10, delay=(0.005, 0.3), drop=0.1, list_drop=0.1, compute=(0.1, 0.6))
    t = 0.0
    for _ in range(rng.randint(1, 3)):
        t += rng.uniform(0.5, 6.0)
        shuffled = list(peers)
        rng.shuffle(shuffled)
        cut = rng.randint(1, n - 1)
        s.at(t, lambda a=shuffled[:cut], b=shuffled[cut:]: s.partition(a, b))
        t += rng.uniform(0.5, 8.0)
        s.at(t, s.heal)
    s.run(until=t + 60.0)
    assert s.disagreements() == []
    assert all(r.machine.next_apply_step == 10 for r in s.replicas.values())
    assert len({r.weights for r in s.replicas.values()}) == 1


def test_epochs_grow_to_a_cap_and_every_clock_agrees() -> None:
    """Epoch k lasts min(k, 4) leader timeouts; a clock restarted at a later epoch keeps the same lengths."""
    lt = 0.5
    starts = [epoch_start(1, 10.0, k, lt) for k in range(1, 8)]
    assert starts == [10.0, 10.5, 11.5, 13.0, 15.0, 17.0, 19.0]
    for k, t in enumerate(starts, start=1):
        assert epoch_since(1, 10.0, t, lt) == k
        assert epoch_since(1, 10.0, t - 1e-6, lt) == k - 1 or k == 1
        assert epoch_since(k, t, t + 4 * lt, lt) == epoch_since(1, 10.0, t + 4 * lt, lt)
    assert epoch_since(1, 10.0, 10.0 + 1000 * lt, lt) == 4 + (1000 - 6) // 4
