"""When a host dials known peers it lost again (pure schedule; the host test is in test_transport_host.py)."""

from __future__ import annotations

from distro_node.protocol.peer_exchange import RedialSchedule
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID


def _peer() -> ID:
    return ID.from_pubkey(create_new_key_pair().public_key)


def test_a_lost_peer_is_due_at_once_then_backs_off_and_is_forgiven_on_success() -> None:
    a, b = _peer(), _peer()
    sched = RedialSchedule(base=1.0, cap=4.0, give_up_after=100)
    assert set(sched.due([a, b], 0.0)) == {a, b}
    assert sched.failed(a, 0.0) is False
    assert sched.due([a, b], 0.5) == [b]  # a waits 1 s
    assert sched.due([a], 1.0) == [a]
    sched.failed(a, 1.0)  # then 2 s
    assert sched.due([a], 2.9) == [] and sched.due([a], 3.0) == [a]
    for t in (3.0, 7.0, 11.0):
        sched.failed(a, t)
    assert sched.due([a], 14.9) == [] and sched.due([a], 15.0) == [a]  # capped at 4 s
    sched.succeeded(a)
    assert sched.due([a], 15.0) == [a] and len(sched) == 0


def test_an_unreachable_peer_is_given_up_and_memory_follows_the_candidates() -> None:
    a, b = _peer(), _peer()
    sched = RedialSchedule(base=1.0, cap=2.0, give_up_after=3)
    assert [sched.failed(a, float(t)) for t in range(3)] == [False, False, True]
    sched.failed(b, 0.0)
    assert len(sched) == 1
    sched.due([], 0.0)  # b is connected again or forgotten by the book: nothing kept for it
    assert len(sched) == 0


def test_uncounted_failures_back_off_but_never_forget() -> None:
    """A node with no connection at all cannot tell a dead peer from its own dead link (discovery.py)."""
    a = _peer()
    sched = RedialSchedule(base=1.0, cap=4.0, give_up_after=5)
    assert not any(sched.failed(a, float(t), count=False) for t in range(0, 200, 5))
    assert sched.due([a], 198.9) == [] and sched.due([a], 199.0) == [a]  # backed off to the cap, no more
    assert sched.failed(a, 300.0) is False  # the count stopped where the cap was reached (3, now 4 of 5)
