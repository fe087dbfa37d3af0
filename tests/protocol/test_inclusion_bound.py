"""Bounded inclusion: the pure rule (protocol/consensus/inclusion_bound.py) and what the roster does
with it."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from distro_node.protocol.consensus.inclusion_bound import (
    due_peers,
    fetch_window,
    next_waiting,
    priority_order,
    select_included,
)
from distro_node.protocol.membership import (
    MembershipError,
    PeerStatus,
    Roster,
    RosterEntry,
    RosterRules,
    SyncState,
)
from distro_node.protocol.messages import InclusionList
from protocol_swarm_sim import RUN_ID, SIG


def names(n: int) -> list[str]:
    return [f"p{i:02d}" for i in range(n)]


def included_steps(
    n: int, k: int, steps: int, late: dict[int, set[str]] | None = None
) -> dict[str, list[int]]:
    """Drive the rule alone for ``steps`` steps; ``late`` names peers that are no candidates at a step."""
    peers = names(n)
    waiting: dict[str, int] = {}
    seen: dict[str, list[int]] = {p: [] for p in peers}
    for step in range(steps):
        candidates = [p for p in peers if p not in (late or {}).get(step, set())]
        chosen = select_included(RUN_ID, step, waiting, candidates, k)
        for p in chosen:
            seen[p].append(step)
        waiting = next_waiting(waiting, peers, chosen)
    return seen


def max_gap(steps_of: list[int], total: int) -> int:
    marks = [-1, *steps_of, total]
    return max(b - a for a, b in itertools.pairwise(marks))


@pytest.mark.parametrize(("n", "k"), [(32, 8), (8, 3), (7, 2), (5, 1), (16, 5)])
def test_every_peer_is_included_at_least_once_every_ceil_n_over_k_plus_one_steps(n: int, k: int) -> None:
    total = 6 * math.ceil(n / k) + 3
    seen = included_steps(n, k, total)
    bound = math.ceil(n / k) + 1
    gaps = {p: max_gap(s, total) for p, s in seen.items()}
    assert max(gaps.values()) <= bound, gaps
    per_step = sum(len(s) for s in seen.values()) / total
    assert per_step == k  # every list is full while every peer is on time


def test_a_peer_left_out_because_it_was_late_is_first_in_line_at_the_next_step() -> None:
    n, k = 12, 3
    seen = included_steps(n, k, 20)
    # Find a step where p05 was due (included) and make it late there: it must be in the very next list.
    due_step = seen["p05"][1]
    late = included_steps(n, k, 20, late={due_step: {"p05"}})
    assert due_step not in late["p05"] and due_step + 1 in late["p05"]


def test_unbounded_or_k_at_least_n_includes_every_candidate() -> None:
    peers = names(6)
    for k in (0, 6, 10):
        assert select_included(RUN_ID, 3, {"p01": 4}, peers, k) == tuple(peers)
        assert due_peers(RUN_ID, 3, {}, peers, k) == frozenset(peers)
        assert fetch_window(RUN_ID, 3, {}, peers, k, 2) == frozenset(peers)


def test_the_order_is_a_function_of_replicated_state_only() -> None:
    peers = names(20)
    waiting = {p: i % 4 for i, p in enumerate(peers)}
    shuffled = list(peers)
    random.Random(7).shuffle(shuffled)
    assert priority_order(RUN_ID, 9, waiting, peers) == priority_order(RUN_ID, 9, dict(waiting), shuffled)
    order = priority_order(RUN_ID, 9, waiting, peers)
    assert [waiting[p] for p in order] == sorted(waiting.values(), reverse=True)  # longest waiting first
    # Ties are broken by a step-salted rank, so no peer id comes first in every step.
    firsts = {priority_order(RUN_ID, s, {}, peers)[0] for s in range(30)}
    assert len(firsts) > 5


def test_fetch_window_is_k_plus_margin_and_due_peers_k() -> None:
    peers = names(32)
    waiting = {p: i for i, p in enumerate(peers)}
    window = fetch_window(RUN_ID, 0, waiting, peers, 8, 2)
    assert window == frozenset(peers[-10:])  # the ten that waited longest
    assert due_peers(RUN_ID, 0, waiting, peers, 8) == frozenset(peers[-8:])
    assert set(select_included(RUN_ID, 0, waiting, peers, 8)) == set(peers[-8:])


# ------------------------------------------------------------------------------------------------ roster


RULES = RosterRules(warmup_rounds=2, max_missed_rounds=3, max_peers=64, max_joiners_per_round=2,
                    max_included=2)


def lst(included: tuple[str, ...], leader: str = "a") -> InclusionList:
    return InclusionList(run_id=RUN_ID, step=0, epoch=0, leader=leader,
                         entries=tuple((p, bytes(32)) for p in included),
                         signatures=tuple(SIG for _ in included))


def test_a_peer_left_out_by_the_bound_is_not_missed_and_waits_longer() -> None:
    roster = Roster.genesis("abcde")
    new, changes, missed = roster.advance(lst(("a", "b")), RULES, due=("a", "c"))
    assert missed == ("c",) and changes == ()
    assert new.peers["c"] == RosterEntry(PeerStatus.ACTIVE, misses=1, waiting=1)
    assert new.peers["d"] == RosterEntry(PeerStatus.ACTIVE, misses=0, waiting=1)
    assert new.peers["a"] == RosterEntry(PeerStatus.ACTIVE)
    # Without a due set (no bound) every active peer left out is missed, as before.
    _, _, missed_all = roster.advance(lst(("a", "b")), RULES)
    assert missed_all == ("c", "d", "e")


def test_a_crashed_peer_becomes_due_and_is_dropped_under_the_bound() -> None:
    roster = Roster.genesis(names(6))
    live = names(6)[:5]
    dropped_at = None
    for step in range(20):
        waiting = {p: e.waiting for p, e in roster.peers.items()}
        chosen = select_included(RUN_ID, step, waiting, live, RULES.max_included)
        due = due_peers(RUN_ID, step, waiting, roster.eligible(), RULES.max_included)
        roster, changes, _ = roster.advance(lst(chosen, leader=chosen[0]), RULES, due)
        if ("p05", "dropped_missed") in changes:
            dropped_at = step
            break
    assert dropped_at is not None and dropped_at <= math.ceil(6 / 2) + RULES.max_missed_rounds
    assert all(p in roster for p in live)  # nobody alive was dropped for waiting its turn


def test_check_list_refuses_more_entries_than_the_bound_and_quorum_is_capped_by_it() -> None:
    roster = Roster.genesis("abcde")
    assert roster.check_list(lst(("a", "b", "c")), RULES) is not None
    assert roster.check_list(lst(("a", "b")), RULES) is None
    assert roster.quorum_size() == 3 and roster.quorum_size(max_included=2) == 2
    assert roster.has_quorum(lst(("a", "b")), (), max_included=2)
    assert not roster.has_quorum(lst(("a", "b")), ())
    assert not roster.has_quorum(lst(("a",)), (), max_included=2)


def test_waiting_travels_with_the_synced_roster() -> None:
    roster = Roster({"a": RosterEntry(PeerStatus.ACTIVE, waiting=3), "b": RosterEntry(PeerStatus.ACTIVE)})
    state = SyncState(4, roster)
    assert SyncState.from_dict(state.to_dict()) == state
    assert state.to_dict()["roster"]["peers"][0] == ["a", "active", 0, 0, 3]
    with pytest.raises(MembershipError, match="waiting"):
        Roster.from_dict({"peers": [["a", "active", 0, 0, -1]]})
