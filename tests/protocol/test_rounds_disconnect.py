"""A closed connection is local evidence that a peer is gone: the round stops waiting for it at once.

A crashed process's kernel closes its sockets, so the driver hears of a crash long before
``liveness_timeout`` of silence. These tests use a 30 s liveness timeout and a 2 s collect deadline, so any
list before 2 s can only come from the disconnect.
"""

from __future__ import annotations

from distro_node.protocol.consensus.actions import ApplyInclusionList
from distro_node.protocol.consensus.leader_rank import leader_order
from distro_node.protocol.messages import Heartbeat, InclusionList, Status
from protocol_swarm_sim import GENESIS_WEIGHTS, RUN_ID
from test_rounds import PEERS, feed_all, machine, of, published, votes_from


def test_leader_proposes_without_a_disconnected_peer_at_once() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[0], liveness_timeout=30.0)
    assert not published(feed_all(m, 0, 0.1, order[:3]), InclusionList)
    out = m.on_disconnected(order[3], 0.2)
    lst = published(out, InclusionList)[0]
    assert lst.peers == tuple(sorted(order[:3])) and lst.departed == ()  # missed, not gone for good
    out = votes_from(m, lst, [order[1], order[2]], 0.3)
    assert [a.step for a in of(out, ApplyInclusionList)] == [0]


def test_a_disconnected_peer_that_speaks_again_is_waited_for_again() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[0], liveness_timeout=30.0)
    m.on_disconnected(order[3], 0.05)
    m.on_message(Heartbeat(RUN_ID, order[3], 0, GENESIS_WEIGHTS), 0.06)  # it reconnected
    assert not published(feed_all(m, 0, 0.1, order[:3]), InclusionList)
    assert published(m.on_tick(1.0), InclusionList) == []


def test_a_disconnected_epoch0_leader_hands_the_step_over_at_once() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[1], liveness_timeout=30.0)  # leads epoch 1
    m.on_disconnected(order[0], 0.05)
    out = feed_all(m, 0, 0.1, order[1:])
    assert [a.epoch for a in published(out, Status)] == [1]
    out = m.on_message(Status(RUN_ID, 0, 1, order[2]), 0.2)
    assert not published(out, InclusionList)  # a lost peer still counts in the quorum: 3 of 4 statuses
    out = m.on_message(Status(RUN_ID, 0, 1, order[3]), 0.2)
    lst = published(out, InclusionList)[0]
    assert (lst.epoch, lst.leader) == (1, order[1]) and order[0] not in lst.peers


def test_disconnects_of_unknown_peers_and_of_ourselves_change_nothing() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[0], liveness_timeout=30.0)
    tracked = len(m.liveness)
    assert m.on_disconnected("stranger", 0.1) == [] and len(m.liveness) == tracked
    m.on_disconnected(order[0], 0.1)
    assert not published(feed_all(m, 0, 0.2, order[:3]), InclusionList)  # still waits for order[3]
