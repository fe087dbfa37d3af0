"""Overlapped order: the compute of step s + 1 runs in the worker thread while the round of step s goes on.

Only one compute holds the model at a time (the limiter), and the training loop waits for a running
look-ahead before anything else touches the weights (apply, a resync's load).
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from .data_feed import DataFeed, DataWaitError
from .trainer import Computed, Trainer


@dataclass
class Ahead:
    """The compute of the next step, running in the worker thread while this step's round goes on."""

    step: int
    done: trio.Event
    result: Computed | None = None


class LookAhead:
    def __init__(self, *, trainer: Trainer, compute_limit: trio.CapacityLimiter,
                 nursery: trio.Nursery, feed: DataFeed | None = None) -> None:
        self._trainer = trainer
        self._feed = feed  # fetched data: the step's shards must be held verified before its compute
        self._compute_limit = compute_limit
        self._nursery = nursery
        self._ready: Ahead | None = None  # the next step, computed during the last round

    def start(self, step: int) -> Ahead:
        ahead = Ahead(step, trio.Event())
        self._nursery.start_soon(self._run, ahead)
        return ahead

    def keep(self, ahead: Ahead | None) -> None:
        """Hold ``ahead`` for the next step (None: nothing computed ahead)."""
        self._ready = ahead

    def take(self, step: int) -> Computed | None:
        """The compute of ``step`` done during the previous round, if that is what we hold."""
        ready, self._ready = self._ready, None
        if ready is None or ready.step != step or not ready.done.is_set():
            return None
        return ready.result

    async def _run(self, ahead: Ahead) -> None:
        try:
            if self._feed is not None:
                try:
                    await self._feed.ready(ahead.step)
                except DataWaitError:
                    return  # no result: the step runner computes the step itself and meets the error there
            ahead.result = await trio.to_thread.run_sync(self._trainer.compute, ahead.step,
                                                         limiter=self._compute_limit)
        finally:
            ahead.done.set()
