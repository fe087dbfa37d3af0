"""Round machine under a bound on inclusion (``RoundConfig.max_included``): full, fair, identical lists;
nobody counted missed for waiting its turn; each replica fetches about K payloads a step, not N."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
from distro_node.protocol.ballots import PREVOTE
from distro_node.protocol.consensus.actions import FetchPayload, MembershipChanged, PeerMissed, Penalize
from distro_node.protocol.consensus.inclusion_bound import priority_order
from distro_node.protocol.consensus.leader_rank import leader_order
from distro_node.protocol.messages import Vote
from protocol_swarm_sim import RUN_ID, Swarm, test_config
from test_rounds import PEERS, feed_all, machine, proposal, published

EIGHT = tuple("abcdefgh")


def inclusion_gaps(lists: dict, peers: tuple[str, ...], steps: int) -> dict[str, int]:
    """Per peer, the most steps between two lists that include it (from before the first to after the
    last)."""
    gaps = {}
    for p in peers:
        marks = [-1, *(s for s in sorted(lists) if p in lists[s].peers), steps]
        gaps[p] = max(b - a for a, b in itertools.pairwise(marks))
    return gaps


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lists_hold_k_entries_fairly_and_identically_with_no_miss(seed: int) -> None:
    k, steps = 3, 12
    s = Swarm(EIGHT, seed=seed, steps=steps, config=test_config(max_included=k))
    s.run_until_applied(steps - 1, limit=60.0)
    assert s.disagreements() == []
    a = s.replicas["a"]
    assert sorted(a.applied) == list(range(steps))
    assert all(len(lst.entries) == k for lst in a.applied_lists.values())
    gaps = inclusion_gaps(a.applied_lists, EIGHT, steps)
    assert max(gaps.values()) <= math.ceil(len(EIGHT) / k) + 1, gaps
    for r in s.replicas.values():
        assert not r.actions_of(PeerMissed)
        assert not [c for c in r.actions_of(MembershipChanged) if c.change == "dropped_missed"]
    rosters = {r.peer_id: r.machine.roster for r in s.replicas.values()}
    assert len(set(rosters.values())) == 1  # the waiting counts are replicated state: identical everywhere


def test_each_replica_fetches_at_most_k_plus_margin_payloads_a_step() -> None:
    k, steps = 2, 10
    cfg = test_config(max_included=k)
    s = Swarm(EIGHT, seed=4, steps=steps, config=cfg)
    s.run_until_applied(steps - 1, limit=60.0)
    assert s.disagreements() == []
    for r in s.replicas.values():
        distinct = {(f.step, f.peer_id) for f in r.actions_of(FetchPayload)}
        fetched = Counter(step for step, _ in distinct)
        # The window counts our own payload, which we never fetch.
        assert max(fetched.values()) <= k + cfg.inclusion_fetch_margin, (r.peer_id, fetched)
    unbounded = Swarm(EIGHT, seed=4, steps=steps)
    unbounded.run_until_applied(steps - 1, limit=60.0)
    per_step = Counter(f.step for f in unbounded.replicas["a"].actions_of(FetchPayload))
    assert min(per_step.values()) == len(EIGHT) - 1  # without a bound, everybody else's payload


def test_k_at_least_n_changes_nothing() -> None:
    peers = tuple("abcd")
    bounded = Swarm(peers, seed=1, steps=6, config=test_config(max_included=4))
    plain = Swarm(peers, seed=1, steps=6)
    for s in (bounded, plain):
        s.run(until=6.0)
        assert s.disagreements() == []
    assert bounded.replicas["a"].applied == plain.replicas["a"].applied


def test_bound_below_the_payload_quorum_still_decides_and_a_crashed_peer_is_dropped() -> None:
    peers = tuple("abcdefg")  # quorum of payloads 4 > K = 2
    s = Swarm(peers, seed=3, steps=14, config=test_config(max_included=2))
    s.crash("g")
    s.run_until_applied(13, limit=120.0, peers="abcdef")
    assert s.disagreements() == []
    a = s.replicas["a"]
    assert all(len(lst.entries) == 2 and "g" not in lst.peers for lst in a.applied_lists.values())
    assert MembershipChanged(next(c.step for c in a.actions_of(MembershipChanged)), "g", "dropped_missed") \
        in a.actions_of(MembershipChanged)
    assert {m.peer_id for m in a.actions_of(PeerMissed)} == {"g"}  # the live ones only waited their turn


def test_a_list_over_the_bound_is_refused_and_one_within_it_gets_a_vote_even_if_it_skips_our_pick() -> None:
    """Voters check what every replica checks alike (no more than K entries), never whether the leader
    skipped a candidate they validated: views differ, and a leader may simply not have it yet."""
    order = leader_order(RUN_ID, 0, PEERS)
    m = machine(order[3], max_included=2)
    feed_all(m, 0, 0.0)
    out = m.on_message(proposal(0, 0, PEERS[:3]), 0.1)
    assert Penalize(order[0], 0, "invalid_list") in out and not published(out, Vote)
    # The two worst-ranked by the rule are as good a list as any: it still gets our prevote.
    picked = priority_order(RUN_ID, 0, {}, PEERS)[-2:]
    out = m.on_message(proposal(0, 0, picked), 0.2)
    assert [v.phase for v in published(out, Vote)] == [PREVOTE]
