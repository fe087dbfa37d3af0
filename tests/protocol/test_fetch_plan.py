"""The fetch plan (protocol/fetch_plan.py): route order, hedging, and asking a NOT_FOUND holder again."""

from __future__ import annotations

from distro_node.protocol.fetch_plan import FetchPlan, PlanConfig, Route

CFG = PlanConfig(hedge_after=2.0, not_found_retries=2, not_found_backoff=0.1)


def test_direct_holders_go_first_in_the_given_order_then_relayed_then_dialed() -> None:
    once = PlanConfig(hedge_after=2.0, not_found_retries=0, not_found_backoff=0.1)
    holders = [("origin", Route.RELAYED), ("gone", Route.DIAL), ("b", Route.DIRECT), ("a", Route.DIRECT)]
    plan = FetchPlan(holders, author="origin", config=once)
    order = []
    now = 0.0
    while not plan.exhausted():
        started = plan.due(now)
        assert len(started) == 1
        order += started
        plan.failed(started[0], now, not_found=False)
    assert order == ["b", "a", "origin", "gone"]


def test_a_relayed_author_waits_while_a_public_holder_that_said_not_found_is_asked_again() -> None:
    plan = FetchPlan([("founder", Route.DIRECT), ("origin", Route.RELAYED)], author="origin", config=CFG)
    assert plan.due(0.0) == ["founder"]
    plan.failed("founder", 0.05, not_found=True)
    assert plan.due(0.06) == []  # the relay waits: the founder is asked again first
    assert plan.next_wakeup(0.06) == 0.05 + 0.1
    assert plan.due(0.05 + 0.1) == ["founder"]
    plan.failed("founder", 0.25, not_found=True)
    assert plan.next_wakeup(0.25) == 0.25 + 0.2  # backoff doubles
    assert plan.due(0.25 + 0.2) == ["founder"]
    plan.failed("founder", 0.5, not_found=True)  # its first chance spent: now the relay, too
    assert plan.due(0.5) == ["origin"]
    assert plan.next_wakeup(0.5) == 0.5 + 0.2  # the founder is asked on while the relayed attempt runs
    assert plan.due(0.7) == ["founder"]
    plan.failed("origin", 0.8, not_found=True)  # the author's NOT_FOUND is final
    plan.failed("founder", 0.9, not_found=True)  # nobody else left: the founder's chance ends too
    assert plan.due(10.0) == [] and plan.exhausted()


def test_a_not_found_holder_is_asked_on_while_a_relayed_attempt_hangs_but_boundedly() -> None:
    plan = FetchPlan([("founder", Route.DIRECT), ("origin", Route.RELAYED)], author="origin", config=CFG)
    now, asks = 0.0, 0
    for _ in range(100):
        for h in plan.due(now):
            if h == "founder":
                asks += 1
                plan.failed(h, now, not_found=True)
        wake = plan.next_wakeup(now)
        if wake is None:
            break
        now = wake
    assert "origin" in plan.running  # hangs throughout
    assert asks == 1 + 4 * CFG.not_found_retries  # _PATIENCE times the first chance, then it stops
    assert plan.next_wakeup(now) is None and not plan.exhausted()


def test_a_silent_holder_is_raced_after_hedge_after_but_one_that_answered_is_not() -> None:
    holders = [("a", Route.DIRECT), ("b", Route.DIRECT), ("c", Route.RELAYED)]
    plan = FetchPlan(holders, author=None, config=CFG)
    assert plan.due(0.0) == ["a"]
    assert plan.due(1.9) == [] and plan.next_wakeup(1.9) == 2.0
    assert plan.due(2.0) == ["b"]
    plan.answered("b")
    assert plan.due(9.0) == [] and plan.next_wakeup(9.0) is None
    plan.failed("b", 9.5, not_found=False)  # it broke off mid-body; "a" has been silent for long
    assert plan.due(9.5) == ["c"]
    assert plan.running == frozenset({"a", "c"})


def test_other_direct_holders_are_asked_while_a_retry_waits() -> None:
    plan = FetchPlan([("a", Route.DIRECT), ("b", Route.DIRECT)], author=None, config=CFG)
    assert plan.due(0.0) == ["a"]
    plan.failed("a", 0.0, not_found=True)
    assert plan.due(0.0) == ["b"]
    plan.failed("b", 0.01, not_found=False)
    assert plan.due(0.1) == ["a"]
    assert not plan.exhausted()


def test_retries_are_bounded_and_duplicates_asked_once() -> None:
    plan = FetchPlan([("a", Route.DIRECT), ("a", Route.DIAL)], author=None, config=CFG)
    now, asked = 0.0, 0
    for _ in range(20):
        for h in plan.due(now):
            asked += 1
            plan.failed(h, now, not_found=True)
        if plan.exhausted():
            break
        wake = plan.next_wakeup(now)
        assert wake is not None
        now = wake
    assert plan.exhausted() and asked == 1 + CFG.not_found_retries
    assert plan.route("a") is Route.DIRECT
