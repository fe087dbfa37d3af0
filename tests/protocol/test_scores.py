"""The score keeper: bans by relative agreement, penalties, and bans that survive reconnects and restarts."""

from __future__ import annotations

import json

import pytest
from distro_node.protocol.scores import ScoreKeeper, ScorePolicy, ScorePolicyError

HONEST = [f"h{i}" for i in range(6)]


def _round(keeper: ScoreKeeper, step: int, bad: dict[str, float]) -> list[str]:
    raw = {p: 0.06 + 0.01 * (i % 3) for i, p in enumerate(HONEST)}
    return keeper.observe_round(step, {**raw, **bad})


def test_sign_flipper_banned_after_min_observations_honest_never() -> None:
    keeper = ScoreKeeper()
    bans: dict[str, int] = {}
    for step in range(40):
        for peer in _round(keeper, step, {"flip": -0.08, "random": 0.0}):
            bans[peer] = step
    assert set(bans) == {"flip", "random"}
    assert bans["flip"] == keeper.policy.min_observations - 1
    assert keeper.record("flip").ban_reason == "low_score"
    assert not any(keeper.is_banned(p) for p in HONEST)
    assert keeper.eligible([*HONEST, "flip"]) == sorted(HONEST)


def test_no_signal_round_is_not_observed() -> None:
    keeper = ScoreKeeper()
    assert keeper.observe_round(0, dict.fromkeys(HONEST, 0.0)) == []
    assert keeper.record("h0").observations == 0
    assert keeper.observe_round(0, {"a": 1.0, "b": -1.0}) == []  # fewer than three peers


def test_banned_peer_stays_banned_across_reconnect_and_restart() -> None:
    keeper = ScoreKeeper()
    assert keeper.penalize_equivocation(3, "eq")
    assert not keeper.connect("eq")  # it "reconnects": still refused
    for step in range(4, 30):
        _round(keeper, step, {"eq": 0.07})  # even perfect agreement later does not lift a ban
    assert keeper.is_banned("eq") and keeper.record("eq").banned_at == 3
    restored = ScoreKeeper.from_dict(json.loads(json.dumps(keeper.to_dict())))
    assert restored.is_banned("eq") and not restored.connect("eq")
    assert restored.connect("h0")
    assert restored.record("eq").ban_reason == "equivocation"


def test_missed_rounds_alone_never_ban_but_invalid_payloads_do() -> None:
    keeper = ScoreKeeper()
    for step in range(100):
        assert not keeper.penalize_missed(step, "flaky")
    assert keeper.record("flaky").score > keeper.policy.ban_below
    banned_at = None
    for step in range(20):
        if keeper.penalize_invalid(step, "corrupt"):
            banned_at = step
            break
    assert banned_at is not None and banned_at < 20
    assert keeper.record("corrupt").invalid == banned_at + 1


def test_one_invalid_payload_does_not_ban_a_good_peer() -> None:
    keeper = ScoreKeeper()
    for step in range(20):
        _round(keeper, step, {})
    assert not keeper.penalize_invalid(20, "h0")
    assert not keeper.is_banned("h0")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"ema_weight": 0.0}, "ema_weight"),
        ({"ema_weight": float("nan")}, "ema_weight"),
        ({"min_observations": 0}, "min_observations"),
        ({"ban_below": "x"}, "ban_below"),
    ],
)
def test_policy_errors_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ScorePolicyError) as err:
        ScorePolicy(**kwargs)  # type: ignore[arg-type]
    assert err.value.field == field


def test_from_dict_rejects_malformed_state() -> None:
    with pytest.raises(ScorePolicyError):
        ScoreKeeper.from_dict({"peers": []})
    with pytest.raises(ScorePolicyError):
        ScoreKeeper.from_dict({"peers": {"p": {"score": 1.0, "bogus": 1}}})
    with pytest.raises(ScorePolicyError):
        ScoreKeeper.from_dict({"peers": {"p": {"score": 1.0, "banned_at": 1, "ban_reason": "whim"}}})


def test_scores_module_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, distro_node.protocol.scores; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


def test_three_flippers_banned_even_when_honest_scores_are_near_zero() -> None:
    """threats.md B3: with 3 of 8 flipping, honest scores (and so the median) fall to ~0; a ratio to the
    median then carries no signal, the z-score still separates the flippers."""
    keeper = ScoreKeeper()
    bans: dict[str, int] = {}
    for step in range(30):
        honest = {f"h{i}": (0.0, 0.011, 0.006, -0.006, 0.017)[(i + step) % 5] for i in range(5)}
        flippers = {f"f{i}": (-0.05, -0.03, -0.07)[(i + step) % 3] for i in range(3)}
        for peer in keeper.observe_round(step, {**honest, **flippers}):
            bans[peer] = step
    assert set(bans) == {"f0", "f1", "f2"}
    assert max(bans.values()) <= 15
