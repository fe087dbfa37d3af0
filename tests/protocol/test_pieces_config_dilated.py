"""A dilated pieces config is the same protocol in slower time: what a testbed at a fraction of the
profiles' rates runs (bench/exchange.py --dilate), so that its choices are the full-rate swarm's."""

from __future__ import annotations

import dataclasses

import pytest
from distro_node.protocol.pieces_wire import PiecesConfig
from distro_node.protocol.swarm_schedule import ScheduleConfig

# Float settings that are neither a duration nor a rate: a dilation leaves them as they are. A new float
# field fails the classification test below until it is put in DURATIONS, RATES or here.
UNITLESS = {"rate_smoothing", "overdue_factor", "first_copy_factor", "slower_holder_factor"}


def _floats(config: PiecesConfig | ScheduleConfig) -> set[str]:
    return {f.name for f in dataclasses.fields(config) if f.type in ("float", float)}


def test_every_float_setting_is_a_duration_a_rate_or_unitless() -> None:
    durations, rates = set(ScheduleConfig.DURATIONS), set(ScheduleConfig.RATES)
    assert not durations & rates
    assert _floats(ScheduleConfig()) - durations - rates <= UNITLESS
    assert _floats(PiecesConfig()) - set(PiecesConfig.DURATIONS) <= UNITLESS
    # And each one named is a setting (a renamed field is not silently left out of the dilation).
    assert durations | rates <= _floats(ScheduleConfig())
    assert set(PiecesConfig.DURATIONS) <= _floats(PiecesConfig())


def test_dilation_scales_durations_up_and_rates_down_and_keeps_the_rest() -> None:
    base = PiecesConfig(slot_wait=0.3, schedule=ScheduleConfig(backoff=0.2, prior_rate=2e6))
    slow = base.dilated(4)
    for name in PiecesConfig.DURATIONS:
        assert getattr(slow, name) == pytest.approx(4 * getattr(base, name)), name
    for name in ScheduleConfig.DURATIONS:
        assert getattr(slow.schedule, name) == pytest.approx(4 * getattr(base.schedule, name)), name
    assert slow.schedule.prior_rate == pytest.approx(5e5)
    # Counts, sizes and ratios are the same swarm's.
    assert (slow.upload_slots, slow.max_payload_bytes, slow.first_copy_factor, slow.max_losses) == (
        base.upload_slots, base.max_payload_bytes, base.first_copy_factor, base.max_losses)
    assert (slow.schedule.overdue_factor, slow.schedule.choices, slow.schedule.rate_smoothing) == (
        base.schedule.overdue_factor, base.schedule.choices, base.schedule.rate_smoothing)
    assert base.dilated(1) == base


@pytest.mark.parametrize("factor", [0.0, -2.0, float("nan")])
def test_a_dilation_factor_must_be_positive(factor: float) -> None:
    with pytest.raises(ValueError, match=r"PiecesConfig\.dilated: factor"):
        PiecesConfig().dilated(factor)
    with pytest.raises(ValueError, match=r"ScheduleConfig\.dilated: factor"):
        ScheduleConfig().dilated(factor)
