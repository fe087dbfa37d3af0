"""The reachability verdict from dial-back answers (protocol/reachability.py): no verdict on one word."""

from __future__ import annotations

import pytest
from distro_node.protocol.reachability import Reachability, ReachabilityConfig


def test_public_only_once_enough_distinct_probers_reached_one_address() -> None:
    r = Reachability()
    r.record("a", "203.0.113.7", {4001: True})
    assert r.verdict() == "unknown" and r.confirmed() == []
    r.record("a", "203.0.113.7", {4001: True})  # the same prober again counts once
    assert r.verdict() == "unknown"
    r.record("b", "203.0.113.7", {4001: True, 4002: False})
    assert r.verdict() == "public" and r.confirmed() == [("203.0.113.7", 4001)]


def test_private_when_enough_probers_reached_nothing() -> None:
    r = Reachability()
    r.record("a", "198.51.100.1", {4001: False})
    assert r.verdict() == "unknown"
    r.record("b", "198.51.100.1", {4001: False})
    assert r.verdict() == "private"


def test_a_lone_liar_cannot_make_us_public_and_a_newer_answer_replaces_an_older_one() -> None:
    r = Reachability()
    r.record("liar", "192.0.2.9", {4001: True})
    r.record("b", "198.51.100.1", {4001: False})
    r.record("c", "198.51.100.1", {4001: False})
    assert r.verdict() == "unknown"  # someone says reached: not private either
    r.record("liar", "198.51.100.1", {4001: False})
    assert r.verdict() == "private"
    r.forget("b")
    r.forget("c")
    assert r.verdict() == "unknown"


def test_memory_is_bounded_and_config_checked() -> None:
    r = Reachability(ReachabilityConfig(confirmations=1, max_probers=2))
    for name in ("a", "b", "c"):
        r.record(name, "203.0.113.7", {1: name == "a"})
    assert r.verdict() == "private"  # "a" was forgotten first
    with pytest.raises(ValueError):
        ReachabilityConfig(confirmations=0)
