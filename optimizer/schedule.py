"""Learning rate as a pure function of the step.

A pure function (no scheduler object with hidden counters) is what lets every peer, a node resumed from a
checkpoint, and the overlapped mode (which needs the lr of step ``s - 1`` at step ``s``) agree on the value.
"""

from __future__ import annotations

import math

from .config import ScheduleConfig
from .errors import ConfigError


def lr_at(schedule: ScheduleConfig, step: int) -> float:
    """Learning rate for ``step`` (0-based)."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ConfigError("step", f"must be a non-negative integer, got {step!r}")
    peak = schedule.lr
    if step < schedule.warmup_steps:
        # (step + 1) so that step 0 already moves the weights: a zero-lr first step wastes a whole exchange.
        return peak * (step + 1) / schedule.warmup_steps
    if schedule.kind == "constant":
        return peak
    floor = peak * schedule.min_lr_ratio
    if step >= schedule.total_steps:
        return floor
    if schedule.kind == "cosine":
        progress = (step - schedule.warmup_steps) / (schedule.total_steps - schedule.warmup_steps)
        return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    # wsd: stable plateau, then a linear decay over the last decay_steps steps.
    decay_start = schedule.total_steps - schedule.decay_steps
    if step < decay_start:
        return peak
    progress = (step - decay_start) / schedule.decay_steps
    return peak + (floor - peak) * progress
