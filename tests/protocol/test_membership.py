"""Replicated roster transitions, list checks against the roster, snapshots, and the local liveness view."""

from __future__ import annotations

import hashlib

import pytest
from distro_node.protocol.liveness import LivenessView
from distro_node.protocol.membership import (
    MembershipError,
    PeerStatus,
    Roster,
    RosterEntry,
    RosterRules,
    SyncState,
)
from distro_node.protocol.messages import InclusionList

RUN = hashlib.sha256(b"membership tests").digest()
RULES = RosterRules(warmup_rounds=2, max_missed_rounds=3, max_peers=6, max_joiners_per_round=2)


def h(peer: str) -> bytes:
    return hashlib.sha256(peer.encode()).digest()


def lst(included: tuple[str, ...], warming: tuple[str, ...] = (), departed: tuple[str, ...] = (),
        leader: str = "a", step: int = 0) -> InclusionList:
    return InclusionList(RUN, step, 0, leader, tuple((p, h(p)) for p in sorted(included)),
                         tuple(sorted(warming)), tuple(sorted(departed)),
                         signatures=(bytes(64),) * len(included))


def test_genesis_peers_are_active_and_validated() -> None:
    roster = Roster.genesis(["b", "a", "c"])
    assert roster.eligible() == ("a", "b", "c") and len(roster) == 3 and "a" in roster
    with pytest.raises(MembershipError):
        Roster.genesis([])
    with pytest.raises(ValueError):
        Roster.genesis(["has space"])


def test_missing_peer_is_dropped_after_consecutive_misses_only() -> None:
    roster = Roster.genesis("abcd")
    for _ in range(2):
        roster, changes, missed = roster.advance(lst(("a", "b", "c")), RULES)
        assert missed == ("d",) and changes == ()
    assert roster.peers["d"].misses == 2
    roster, _, _ = roster.advance(lst(("a", "b", "c", "d")), RULES)  # back in time: the count resets
    assert roster.peers["d"].misses == 0
    for _ in range(2):
        roster, _, _ = roster.advance(lst(("a", "b", "c")), RULES)
    roster, changes, missed = roster.advance(lst(("a", "b", "c")), RULES)
    assert missed == ("d",) and changes == (("d", "dropped_missed"),) and "d" not in roster


def test_departed_peer_leaves_at_once() -> None:
    roster, changes, missed = Roster.genesis("abcd").advance(lst(("a", "b", "c"), departed=("d",)), RULES)
    assert changes == (("d", "left"),) and missed == () and "d" not in roster


def test_newcomer_warms_up_then_becomes_active() -> None:
    roster = Roster.genesis("abc")
    roster, changes, _ = roster.advance(lst(("a", "b", "c"), warming=("e",)), RULES)
    assert changes == (("e", "warming"),)
    assert roster.peers["e"] == RosterEntry(PeerStatus.WARMING, warm_rounds=1)
    assert not roster.is_eligible("e") and roster.eligible() == ("a", "b", "c")
    # A warming peer cannot be included yet.
    assert roster.check_list(lst(("a", "b", "c", "e")), RULES) is not None
    roster, changes, _ = roster.advance(lst(("a", "b", "c"), warming=("e",)), RULES)
    assert changes == (("e", "activated"),) and roster.is_eligible("e")
    assert roster.check_list(lst(("a", "b", "c", "e")), RULES) is None
    assert roster.check_list(lst(("a", "b", "c"), warming=("e",)), RULES) is not None  # already active


def test_warming_peer_that_stops_announcing_is_dropped_like_any_other() -> None:
    roster, _, _ = Roster.genesis("abc").advance(lst(("a", "b", "c"), warming=("e",)), RULES)
    for _ in range(3):
        roster, changes, missed = roster.advance(lst(("a", "b", "c")), RULES)
        assert "e" not in missed  # only active peers count as missing a round
    assert "e" not in roster and changes == (("e", "dropped_missed"),)


def test_check_list_rules() -> None:
    roster = Roster.genesis("abcd")
    assert roster.check_list(lst(("a", "b", "c")), RULES) is None
    assert "leader" in (roster.check_list(lst(("a", "b", "c"), leader="z"), RULES) or "")
    assert roster.check_list(lst(("a", "b", "z")), RULES) is not None
    assert roster.check_list(lst(("a", "b", "c"), departed=("z",)), RULES) is not None
    assert "per-round cap" in (roster.check_list(lst(("a", "b", "c"), warming=("x", "y", "z")), RULES) or "")
    full = Roster.genesis("abcdef")  # max_peers 6; a warming share of 2
    assert "would exceed 6" in (full.check_list(lst(("a", "b", "c", "d"), warming=("x",)), RULES) or "")


def test_at_most_a_third_of_the_active_peers_warm_up_at_once() -> None:
    """A crowd of free identities cannot outnumber the active peers within one warm-up."""
    roster = Roster.genesis("abcd")  # 4 active: room for one newcomer at a time, though the cap is 2
    assert roster.newcomer_room(RULES.max_joiners_per_round) == 1
    assert "warming share" in (roster.check_list(lst(("a", "b", "c"), warming=("x", "y")), RULES) or "")
    roster, _, _ = roster.advance(lst(("a", "b", "c", "d"), warming=("x",)), RULES)
    assert roster.newcomer_room(RULES.max_joiners_per_round) == 0  # x is still warming
    assert roster.check_list(lst(("a", "b", "c", "d"), warming=("x", "y")), RULES) is not None
    assert roster.check_list(lst(("a", "b", "c", "d"), warming=("x",)), RULES) is None
    assert Roster.genesis("abcdefg").newcomer_room(8) == 2


def test_quorum_is_a_strict_majority_and_only_trusted_departures_shrink_it() -> None:
    roster = Roster.genesis("abcd")
    assert roster.quorum_size() == 3
    assert not roster.has_quorum(lst(("a", "b")), known_left=())
    assert roster.has_quorum(lst(("a", "b", "c")), known_left=())
    claim = lst(("a", "b"), departed=("c", "d"))
    assert not roster.has_quorum(claim, known_left=())  # the leader's claim alone is not enough
    assert roster.has_quorum(claim, known_left=("c", "d"))
    # Five peers split 3/2: only the three can ever form a quorum.
    five = Roster.genesis("abcde")
    assert five.has_quorum(lst(("a", "b", "c")), ()) and not five.has_quorum(lst(("d", "e")), ())


def test_roster_snapshot_round_trip_and_strict_decoding() -> None:
    roster, _, _ = Roster.genesis("abcd").advance(lst(("a", "b", "c"), warming=("e",)), RULES)
    state = SyncState(next_step=42, roster=roster)
    assert SyncState.from_dict(state.to_dict()) == state
    good = state.to_dict()
    bad_docs = [
        {},
        {**good, "extra": 1},
        {**good, "next_step": -1},
        {**good, "next_step": True},
        {**good, "roster": {"peers": []}},
        {**good, "roster": {"peers": [["a", "boss", 0, 0, 0]]}},
        {**good, "roster": {"peers": [["a", "active", 0, -1, 0]]}},
        {**good, "roster": {"peers": [["a", "active", 0, 0, 0], ["a", "active", 0, 0, 0]]}},
        {**good, "roster": {"peers": [["e", "warming", 1, 0, 0]]}},  # nobody active
        {**good, "roster": {"peers": [["a b", "active", 0, 0, 0]]}},
        {**good, "roster": {"peers": [["a", "active", 0, 0]]}},  # no waiting count
    ]
    for doc in bad_docs:
        with pytest.raises(MembershipError):
            SyncState.from_dict(doc)


def test_liveness_tracks_last_seen_and_progress() -> None:
    view = LivenessView(max_tracked=10)
    assert view.observe("a", 1.0, 5, protected=())
    view.observe("a", 0.5, 3, protected=())  # late, older message: nothing goes backwards
    assert view.highest_step("a") == 5
    assert view.is_alive("a", 3.0, timeout=2.0) and not view.is_alive("a", 3.5, timeout=2.0)
    assert view.highest_step("zz") is None and not view.is_alive("zz", 0.0, 1.0)


def test_a_replayed_old_goodbye_does_not_take_a_returned_peer_out() -> None:
    view = LivenessView(8)
    assert view.goodbye("a", 1.0, step=5, protected=())
    view.observe("a", 9.0, 8, protected=())  # back, and three steps on
    assert not view.has_left("a")
    assert not view.goodbye("a", 10.0, step=5, protected=())  # the old signed goodbye, replayed
    assert not view.has_left("a") and view.stale_goodbyes == 1 and view.last_seen("a") == 9.0
    view.observe("a", 11.0, 9, protected=())  # an overlapped peer announces one step ahead of its goodbye
    view.goodbye("a", 11.5, step=8, protected=())
    assert view.has_left("a")


def test_goodbye_stands_against_late_messages_and_is_undone_by_a_rejoin() -> None:
    view = LivenessView(max_tracked=10)
    view.observe("a", 1.0, 4, protected=())
    view.goodbye("a", 2.0, step=5, protected=())
    assert view.has_left("a") and not view.is_alive("a", 2.0, 10.0) and view.left_peers() == {"a"}
    view.observe("a", 2.5, 4, protected=())  # delivered late: sent before the goodbye
    assert view.has_left("a")
    view.observe("a", 9.0, 5, protected=())  # a message for the goodbye step or later: it is back
    assert not view.has_left("a") and view.is_alive("a", 9.0, 1.0)


def test_a_lost_connection_silences_a_peer_until_it_is_heard_again() -> None:
    view = LivenessView(max_tracked=10)
    view.observe("a", 1.0, 4, protected=())
    view.lost("a")
    assert not view.is_alive("a", 1.0, 30.0) and not view.has_left("a")
    view.observe("a", 1.5, None, protected=())  # a heartbeat: it is alive after all
    assert view.is_alive("a", 1.5, 30.0)
    view.lost("zz")  # never heard of: nothing is tracked
    assert len(view) == 1 and not view.is_alive("zz", 1.5, 30.0)


def test_liveness_is_bounded_and_never_evicts_protected_peers() -> None:
    view = LivenessView(max_tracked=3)
    protected = {"a", "b"}
    for peer in ("a", "b"):
        view.observe(peer, 0.0, None, protected)
    for i in range(100):
        assert view.observe(f"s{i}", float(i + 1), None, protected)
    assert len(view) == 3 and view.evicted == 99
    assert view.is_alive("a", 0.0, 1.0) and view.is_alive("s99", 100.0, 1.0)
    full = LivenessView(max_tracked=2)
    full.observe("a", 0.0, None, {"a", "b"})
    full.observe("b", 0.0, None, {"a", "b"})
    assert not full.observe("c", 1.0, None, {"a", "b"}) and full.refused == 1
    with pytest.raises(MembershipError):
        LivenessView(max_tracked=0)
