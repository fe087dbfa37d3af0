"""What a piece scheduler (protocol/swarm_schedule.py) is set with and exchanges with its caller: the
settings, the requests it hands out and the failures reported back.

Apart from the state machine because every user of the pieces protocol (the wire's settings, the fetch,
the flow model, the benches) needs these values without the scheduler's rules.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

ALL: Literal["all"] = "all"


class Failure(enum.Enum):
    BUSY = "busy"  # at its upload limit: back off, then try again
    LOST = "lost"  # timeout, reset, cancelled as overdue: the holder keeps its chance after a back-off
    LYING = "lying"  # bytes that fail verification, a piece not asked for: never asked again
    GONE = "gone"  # does not have it after all, or is unreachable: dropped


@dataclass(frozen=True)
class ScheduleConfig:
    max_in_flight: int = 1  # requests per holder at once (a session alternates request and reply)
    # Candidates named per request (the wire's cap): wide, so a holder can always pick a piece it has not
    # sent yet; they are reserved only until its reply names the piece (one round trip).
    choices: int = 16
    prior_rate: float = 1.0e6  # bytes/s assumed for a holder not yet measured
    rate_smoothing: float = 0.5  # weight of the newest measurement in the moving average
    backoff: float = 0.1  # seconds a BUSY or LOST holder rests
    # A BUSY holder names when to come back (protocol/swarm_turns.py); we rest that long, at most this, so a
    # holder that names an hour costs a fetch no more than this there.
    max_rest: float = 2.0
    overdue_factor: float = 4.0  # a request is overdue after this times its expected time ...
    overdue_floor: float = 2.0  # ... and never before this many seconds
    # A piece is not asked of a holder while another would deliver it this many times sooner, its rest and
    # queue counted (0: off): the slow one's uplink is the swarm's bottleneck (protocol/swarm_schedule.py).
    slower_holder_factor: float = 4.0
    # ... unless that faster holder refused us (busy) this many times in a row since it last served us: one
    # that claims pieces and never serves them must not keep us from the holders that would.
    slower_holder_refusals: int = 3

    # The fields in seconds and in bytes per second: what :meth:`dilated` scales.
    DURATIONS: ClassVar[tuple[str, ...]] = ("backoff", "max_rest", "overdue_floor")
    RATES: ClassVar[tuple[str, ...]] = ("prior_rate",)

    def __post_init__(self) -> None:
        if self.max_in_flight < 1 or self.choices < 1:
            raise ValueError("ScheduleConfig.max_in_flight and choices must be >= 1")
        for name in (*self.RATES, *self.DURATIONS, "overdue_factor"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ScheduleConfig.{name} must be > 0")
        if self.slower_holder_factor != 0 and not 1 < self.slower_holder_factor < 1e6:
            raise ValueError("ScheduleConfig.slower_holder_factor must be 0 (off) or in (1, 1e6)")
        if self.slower_holder_refusals < 1:
            raise ValueError("ScheduleConfig.slower_holder_refusals must be >= 1")
        if not 0 < self.rate_smoothing <= 1:
            raise ValueError("ScheduleConfig.rate_smoothing must be in (0, 1]")

    def dilated(self, factor: float) -> ScheduleConfig:
        """The same decisions in slower time: every duration times ``factor``, every rate divided by it.
        Why: a swarm whose links all run at 1/``factor`` of their rates, with this config, makes the choices
        the full-rate swarm makes with the original, ``factor`` times slower; that is how a machine with
        fewer cores than daemons measures a profile's schedule (bench/exchange.py ``--dilate``)."""
        if not factor > 0:
            raise ValueError(f"ScheduleConfig.dilated: factor must be > 0, got {factor}")
        return replace(self, **{n: getattr(self, n) * factor for n in self.DURATIONS},
                       **{n: getattr(self, n) / factor for n in self.RATES})


@dataclass(frozen=True)
class Request:
    id: int
    holder: str
    candidates: tuple[int, ...]
