"""The testbed's named link profiles, and the same profiles at a fraction of their rates (no root needed)."""

from __future__ import annotations

import pytest
from distro_node.node.testbed.netns import MIXED_CYCLE, SLOW, profile_links, profile_name


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
