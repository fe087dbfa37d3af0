"""The flow model's unheard holders: who would answer a HAVE poll, kept as pieces land and news arrives."""

from __future__ import annotations

from distro_node.node.sim.flow_unheard import UnheardHolders


def test_only_holders_of_a_piece_the_fetch_lacks_and_was_not_told_of_answer() -> None:
    u = UnheardHolders(4)
    u.add(7, {0, 1})  # holds 0 and 1, unbeknown to the fetch
    u.add(9, {2})
    assert u.with_news(held_or_coming=set()) == {7, 9}
    assert u.with_news(held_or_coming={0, 1}) == {9}  # what 7 has, the fetch holds or receives already
    u.told(9, {2, 3})  # a HAVE answer from 9 named piece 2
    assert u.with_news(held_or_coming={0}) == {7}
    u.polled(7)
    assert u.with_news(held_or_coming=set()) == set() and u.holders == {9}


def test_a_holder_added_again_keeps_what_it_was_not_told_of() -> None:
    u = UnheardHolders(3)
    u.add(1, {0})
    u.add(1, {2})  # it gained piece 2 as well
    assert u.with_news(held_or_coming={0}) == {1}
    u.told(1, {2})
    assert u.with_news(held_or_coming={0}) == set()
    assert u.with_news(held_or_coming=set()) == {1}
