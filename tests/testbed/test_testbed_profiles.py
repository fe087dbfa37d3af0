"""The testbed's named link profiles, and the same profiles at a fraction of their rates (no root needed)."""

from __future__ import annotations

import pytest
from distro_node.node.testbed import netns
from distro_node.node.testbed.links import MIXED_CYCLE, SLOW, profile_links, profile_name, tbf_args


def test_a_scaled_profile_keeps_its_shape_at_a_fraction_of_the_rates() -> None:
    mixed = profile_links("mixed", 8)
    assert mixed == [MIXED_CYCLE[i % len(MIXED_CYCLE)] for i in range(8)]
    fifth = profile_links("mixed", 8, 0.2)
    for full, scaled in zip(mixed, fifth, strict=True):
        assert scaled.up_mbit == pytest.approx(full.up_mbit * 0.2)
        assert scaled.down_mbit == pytest.approx(full.down_mbit * 0.2)
    assert profile_links("home", 3, 0.2) == [SLOW] * 3  # the slow profile is home at a fifth
    assert profile_name("mixed", 0.2) == "mixed@0.2" and profile_name("mixed", 1.0) == "mixed"


@pytest.mark.parametrize("scale", [0.0, -0.5, 1.5, float("nan")])
def test_a_rate_scale_outside_zero_to_one_is_refused_by_name(scale: float) -> None:
    with pytest.raises(ValueError, match="rate_scale"):
        profile_links("home", 4, scale)


def _bucket(mbit: float, time_scale: float = 1.0) -> tuple[int, str]:
    args = tbf_args(mbit, time_scale)
    return int(args[args.index("burst") + 1]), args[args.index("latency") + 1]


def test_a_dilated_link_queues_the_bytes_it_would_at_the_profiles_rate() -> None:
    """A link at a quarter of its rate, dilated 4x, holds in its queue and burst the bytes the full-rate
    link holds: a gigabit line's 500 kB burst, the 16 KiB floor of the slow ones, 50 ms of queue each."""
    for full in (1000.0, 100.0, 2.0):
        assert _bucket(full / 4, 4.0) == (_bucket(full)[0], "200ms")
    assert _bucket(1000.0) == (500_000, "50ms")
    assert _bucket(2.0)[0] == 16 * 1024


@pytest.mark.parametrize("time_scale", [0.5, 0.0, float("nan")])
def test_a_time_scale_below_one_is_refused_by_name(time_scale: float) -> None:
    with pytest.raises(ValueError, match="time_scale"):
        tbf_args(10.0, time_scale)


def test_a_congestion_control_a_namespace_may_not_use_is_refused_with_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel that offers cubic but allows namespaces only reno and bbr (a fresh host) failed the
    testbed's sysctl deep in its build with "Operation not permitted"; the check names the setting."""
    words = {"tcp_available_congestion_control": {"reno", "bbr", "cubic"},
             "tcp_allowed_congestion_control": {"reno", "bbr"}}
    monkeypatch.setattr(netns, "_sysctl_words", lambda name: words[name])
    assert netns.congestion_controls() == {"reno", "bbr"}
    netns.check_congestion_control(None)
    netns.check_congestion_control("bbr")
    with pytest.raises(ValueError, match="tcp_allowed_congestion_control='bbr cubic reno'"):
        netns.check_congestion_control("cubic")
    with pytest.raises(ValueError, match="not one of this kernel's"):
        netns.check_congestion_control("vegas")
