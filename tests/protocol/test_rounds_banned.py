"""Bans in the round state machine (``RoundMachine.on_banned``): pure, no network.

By hand: a leader neither waits for nor lists a banned peer, a voter refuses an epoch-0 list naming one,
banned peers are not fetched before a decision but are when a decided list names them. In the swarm
simulator: every replica bans a peer after applying the same step (as the node's score keeper does), and
from the next step on no decided list contains it, all replicas apply the same lists, and the roster drops it.
"""

from __future__ import annotations

from typing import Any

import pytest
from distro_node.protocol.ballots import PRECOMMIT, PREVOTE
from distro_node.protocol.consensus.actions import (
    ApplyInclusionList,
    FetchPayload,
    MembershipChanged,
)
from distro_node.protocol.consensus.leader_rank import leader_order
from distro_node.protocol.consensus.machine import RoundInputError
from distro_node.protocol.messages import InclusionList, MessageError, Vote
from protocol_swarm_sim import RUN_ID, SIG, Replica, Swarm
from test_rounds import PEERS, ann, feed_all, machine, of, proposal, published


def _leader_and_victim(step: int) -> tuple[str, str]:
    order = leader_order(RUN_ID, step, PEERS)
    return order[0], order[-1]


def test_leader_does_not_wait_for_or_list_a_banned_peer() -> None:
    leader, victim = _leader_and_victim(0)
    m = machine(leader)
    assert m.on_banned([victim], 0, 0.0) == []
    assert m.banned_at(0) == {victim}
    others = tuple(p for p in PEERS if p != victim)
    out = feed_all(m, 0, now=0.1, peers=others)  # complete without the banned peer: propose at once
    lst = published(out, InclusionList)[0]
    assert victim not in lst.peers and set(lst.peers) == set(others)
    # Its announcement, arriving now, changes nothing and is not fetched.
    out = m.on_message(ann(victim, 0), 0.2)
    assert not of(out, FetchPayload) and not published(out, InclusionList)


def test_ban_from_a_later_step_leaves_the_current_one_alone() -> None:
    leader, victim = _leader_and_victim(0)
    m = machine(leader)
    m.on_banned([victim], 1, 0.0)
    assert m.banned_at(0) == frozenset() and m.banned_at(1) == {victim}
    out = feed_all(m, 0, now=0.1)
    assert victim in published(out, InclusionList)[0].peers


def test_voter_refuses_an_epoch_zero_list_naming_a_banned_peer_but_not_a_later_epoch() -> None:
    leader, victim = _leader_and_victim(0)
    voter = next(p for p in PEERS if p not in (leader, victim))
    m = machine(voter)
    m.on_banned([victim], 0, 0.0)
    feed_all(m, 0, now=0.1)
    with_victim = proposal(0, 0, PEERS)
    out = m.on_message(with_victim, 0.2)
    assert not published(out, Vote)
    m.on_message(with_victim, 0.3)  # the same list again is counted once
    assert m.counters["banned_in_list"] == 1
    # An epoch >= 1 leader may be bound to re-propose a list others voted for: vote for it.
    order = leader_order(RUN_ID, 0, PEERS)
    late = proposal(0, 1, PEERS, leader=order[1])
    out = m.on_tick(3.05)  # collect deadline 2 s + one leader timeout: epoch 1
    out += m.on_message(late, 3.1)
    assert [v.digest for v in published(out, Vote)] == [late.digest()]


def test_voter_votes_for_a_list_without_the_banned_peer() -> None:
    leader, victim = _leader_and_victim(0)
    voter = next(p for p in PEERS if p not in (leader, victim))
    m = machine(voter)
    m.on_banned([victim], 0, 0.0)
    feed_all(m, 0, now=0.1)
    lst = proposal(0, 0, [p for p in PEERS if p != victim])
    out = m.on_message(lst, 0.2)
    assert [v.digest for v in published(out, Vote)] == [lst.digest()]


def test_a_decided_list_naming_a_banned_peer_is_still_fetched_and_applied() -> None:
    """A ban changes proposals and votes, never what was decided: every replica applies the same lists."""
    leader, victim = _leader_and_victim(0)
    voter = next(p for p in PEERS if p not in (leader, victim))
    m = machine(voter)
    m.on_banned([victim], 0, 0.0)
    lst = proposal(0, 0, PEERS)
    m.on_message(lst, 0.1)
    out: list[Any] = []
    for phase in (PREVOTE, PRECOMMIT):
        for v in [p for p in PEERS if p != voter][:3]:
            out += m.on_message(Vote(RUN_ID, 0, 0, phase, v, lst.digest(), SIG), 0.2)
    assert m.next_step == 1
    assert victim in {f.peer_id for f in of(out, FetchPayload)}
    for p, h in lst.entries:
        out = m.on_payload_validated(0, p, h, 0.3)
    assert [a.inclusion_list.peers for a in of(out, ApplyInclusionList)] == [PEERS]


def test_banned_newcomer_is_not_listed_as_warming() -> None:
    leader, _ = _leader_and_victim(0)
    m = machine(leader)
    m.on_banned(["zz"], 0, 0.0)
    m.on_message(ann("zz", 0), 0.05)
    out = feed_all(m, 0, now=0.1)
    lst: InclusionList = published(out, InclusionList)[0]
    assert "zz" not in lst.warming and lst.peers == PEERS


def test_bad_ban_input_is_a_typed_error() -> None:
    m = machine(PEERS[0])
    with pytest.raises(RoundInputError):
        m.on_banned(["b"], -1, 0.0)
    with pytest.raises(MessageError):
        m.on_banned([""], 0, 0.0)


class _BanningSwarm(Swarm):
    """Every honest replica bans ``victim`` right after applying ``after`` (what the node's keeper does: the
    same inputs give the same ban at the same step); with ``drop_gossip`` it then also drops the victim's
    gossip, as the node's validator does. Without it, the machine alone must keep the victim out (the victim
    itself never bans itself here, so its own proposals still name it)."""

    def __init__(self, *args: Any, victim: str, after: int, drop_gossip: bool, **kwargs: Any) -> None:
        self.victim, self.after, self.drop_gossip = victim, after, drop_gossip
        self.banned_by: set[str] = set()
        super().__init__(*args, **kwargs)

    def _handle(self, r: Replica, actions: list[Any]) -> None:
        super()._handle(r, actions)
        if r.peer_id not in self.banned_by and self.after in r.applied and r.peer_id != self.victim:
            self.banned_by.add(r.peer_id)
            self._handle(r, r.machine.on_banned([self.victim], self.after + 1, self.now))

    def _deliver(self, src: Replica, dst: Replica, msg: Any) -> None:
        author = getattr(msg, "peer_id", None) or getattr(msg, "leader", None) or getattr(msg, "voter", None)
        if self.drop_gossip and author == self.victim and dst.peer_id in self.banned_by:
            return
        super()._deliver(src, dst, msg)


@pytest.mark.parametrize("drop_gossip", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_swarm_bans_a_peer_at_the_same_step_everywhere(seed: int, drop_gossip: bool) -> None:
    peers = ["a", "b", "c", "d", "e"]
    victim, after, steps = "e", 3, 12
    swarm = _BanningSwarm(peers, seed=seed, steps=steps, victim=victim, after=after, drop_gossip=drop_gossip)
    honest = [p for p in peers if p != victim]
    swarm.run_until_applied(steps - 1, limit=300.0, peers=honest)
    assert swarm.disagreements() == []
    for p in honest:
        r = swarm.replicas[p]
        assert sorted(r.applied) == list(range(steps)), (p, sorted(r.applied))
        assert victim in r.applied_lists[0].peers
        late = [s for s in range(after + 1, steps) if victim in r.applied_lists[s].peers]
        assert late == [], f"{p}: banned peer included in steps {late}"
        dropped = [a for a in r.actions_of(MembershipChanged) if a.peer_id == victim]
        assert [a.change for a in dropped] == ["dropped_missed"]
        assert victim not in r.machine.roster
