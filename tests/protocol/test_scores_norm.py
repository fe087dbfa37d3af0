"""The norm term of the score keeper: a scale attacker (honest direction, loud magnitudes) is banned, honest
norm spread and 1-bit rounds change nothing."""

from __future__ import annotations

import math

import pytest
from distro_node.protocol.scores import ScoreInputError, ScoreKeeper, ScorePolicy, ScorePolicyError

HONEST = [f"h{i}" for i in range(3)]
# Honest log norms measured within 0.073 of the round median (protocol/scores.py): spread them by ~5%.
HONEST_NORMS = {"h0": 1.00, "h1": 1.05, "h2": 0.96}


def _agreement(step: int, peers: list[str]) -> dict[str, float]:
    """Small, drifting honest-looking agreement scores (the attacker copies the honest direction)."""
    return {p: 0.05 + 0.01 * ((i + step) % 3) for i, p in enumerate(peers)}


def test_scaled_peer_banned_after_min_observations_honest_never() -> None:
    keeper = ScoreKeeper()
    bans: dict[str, int] = {}
    for step in range(30):
        norms = {**HONEST_NORMS, "loud": 100.0}
        for peer in keeper.observe_round(step, _agreement(step, [*HONEST, "loud"]), norms):
            bans[peer] = step
    assert bans == {"loud": keeper.policy.min_observations - 1}
    assert keeper.record("loud").ban_reason == "low_score"
    assert all(keeper.record(p).score > -0.1 for p in HONEST)


def test_a_tiny_or_zero_norm_is_as_suspicious_as_a_huge_one() -> None:
    keeper = ScoreKeeper()
    for step in range(keeper.policy.min_observations):
        keeper.observe_round(step, _agreement(step, [*HONEST, "mute"]), {**HONEST_NORMS, "mute": 0.0})
    assert keeper.is_banned("mute") and not any(keeper.is_banned(p) for p in HONEST)


def test_norm_signal_is_observed_even_when_agreement_has_none() -> None:
    keeper = ScoreKeeper()
    peers = [*HONEST, "loud"]
    assert keeper.observe_round(0, dict.fromkeys(peers, 0.0), {**HONEST_NORMS, "loud": 100.0}) == []
    assert keeper.record("loud").history == [-keeper.policy.clamp]
    assert keeper.record("h0").history == [0.0]


def test_norms_within_tolerance_change_nothing() -> None:
    """Equal norms (1-bit values) or honest spread: the keeper ends exactly where it ends without norms."""
    plain, equal, spread = ScoreKeeper(), ScoreKeeper(), ScoreKeeper()
    peers = [*HONEST, "h3"]
    for step in range(20):
        scores = _agreement(step, peers)
        plain.observe_round(step, scores)
        equal.observe_round(step, scores, dict.fromkeys(peers, 8.0))
        spread.observe_round(step, scores, {**HONEST_NORMS, "h3": math.exp(0.07)})
    for keeper in (equal, spread):
        assert keeper.to_dict() == plain.to_dict()
    # No signal at all (equal scores, equal norms): not an observation.
    assert ScoreKeeper().observe_round(0, dict.fromkeys(peers, 0.1), dict.fromkeys(peers, 1.0)) == []


def test_moderate_scale_beyond_tolerance_is_penalised_proportionally() -> None:
    policy = ScorePolicy()
    keeper = ScoreKeeper(policy)
    factor = math.exp(policy.norm_floor * (policy.norm_tolerance + 1.0))  # |z| = tolerance + 1 (MAD floored)
    norms = {"h0": 1.0, "h1": 1.0, "h2": 1.0, "x": factor}
    keeper.observe_round(0, dict.fromkeys(norms, 0.0), norms)
    assert keeper.record("x").history == [pytest.approx(-1.0)]


@pytest.mark.parametrize("bad", [None, float("nan"), float("inf"), -1.0, True])
def test_bad_norms_are_typed_errors(bad: object) -> None:
    norms: dict[str, object] = {**HONEST_NORMS, "x": bad}
    if bad is None:
        del norms["x"]
    with pytest.raises(ScoreInputError) as err:
        ScoreKeeper().observe_round(0, _agreement(0, [*HONEST, "x"]), norms)  # type: ignore[arg-type]
    assert err.value.field == "norms"


@pytest.mark.parametrize(("kwargs", "field"), [({"norm_floor": 0.0}, "norm_floor"),
                                               ({"norm_tolerance": -1.0}, "norm_tolerance")])
def test_norm_policy_errors_name_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ScorePolicyError) as err:
        ScorePolicy(**kwargs)
    assert err.value.field == field


def test_lowest_score_ignores_banned_peers() -> None:
    keeper = ScoreKeeper()
    assert keeper.lowest_score() is None
    keeper.penalize_missed(0, "slow")
    keeper.penalize_equivocation(0, "eq")
    assert keeper.lowest_score() == pytest.approx(-0.05)
