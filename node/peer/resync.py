"""Resync: the round machine said our state fell behind or diverged; replace it with the swarm's.

Gossip is held while the transfer runs and replayed afterwards, into the new state or, if the sync failed,
into the old one (node/peer/intake.py says why holding matters).

A failed sync is tried again (after 2, 4, 8 ... up to ``RETRY_MAX_S`` seconds) until it works or the node
is stopping. Why not give up: the round machine asks for a resync only when a message shows we are behind,
and a peer whose every link is down hears none; a resync given up while cut off left such a node waiting
for a decision that never came, for good (issue 15: two of two runs hung until SIGTERM).
"""

from __future__ import annotations

from collections.abc import Callable

import trio
from distro_node.protocol.membership import SyncState

from .changes import ChangeSignal
from .driver import RoundDriver
from .intake import GossipIntake
from .output import Output
from .state_sync import JoinError, SyncContext, sync_from_swarm

RETRY_FIRST_S = 2.0
RETRY_MAX_S = 30.0


def retry_delays(first: float = RETRY_FIRST_S, cap: float = RETRY_MAX_S) -> Callable[[int], float]:
    """The wait before retry ``n`` (0-based): doubling from ``first``, at most ``cap``."""
    def delay(n: int) -> float:
        return min(cap, first * 2 ** min(n, 32))
    return delay


class Resyncer:
    def __init__(self, *, sync: SyncContext, driver: RoundDriver, intake: GossipIntake, out: Output,
                 changes: ChangeSignal | None = None, stopping: Callable[[], bool] = lambda: False,
                 delay: Callable[[int], float] | None = None) -> None:
        self._sync = sync
        self._driver = driver
        self._intake = intake
        self._out = out
        self._changes = changes or ChangeSignal()
        self._stopping = stopping
        self._delay = delay or retry_delays()
        self._running = False

    @property
    def replacing(self) -> bool:
        """A resync is requested or running: our state is about to change under anyone reading it."""
        return self._running or self._driver.decisions.resync is not None

    async def run(self) -> SyncState | None:
        """Carry out a requested resync, retrying until it works; returns the state we now hold, or None
        (none was requested, or the node is stopping and keeps its old state)."""
        driver = self._driver
        request = driver.decisions.take_resync()
        if request is None or driver.machine is None:
            return None
        self._running = True
        try:
            failures = 0
            while True:
                state = await self._attempt()
                if state is not None or self._stopping():
                    return state
                driver.decisions.take_resync()  # this loop is already carrying it out
                wait = self._delay(failures)
                failures += 1
                self._out.emit("resync_retry", f"retrying the resync in {wait:g} s (attempt {failures + 1})",
                               attempt=failures + 1, delay_seconds=wait)
                with trio.move_on_after(wait):
                    while not self._stopping():
                        await self._changes.wait()
                if self._stopping():
                    return None
        finally:
            self._running = False

    async def _attempt(self) -> SyncState | None:
        driver = self._driver
        self._intake.hold()
        result: SyncState | None = None
        try:
            state, how = await sync_from_swarm(self._sync, genesis=False)
        except JoinError as exc:  # still our old state: what arrived meanwhile is replayed into it
            self._out.emit("resync_failed", f"resync failed: {exc}", reason=str(exc))
        else:
            driver.decisions.applies.clear()
            driver.feed(lambda m, now: m.restore(state, now))
            self._out.emit("resynced", f"resynced to step {state.next_step} ({how})", step=state.next_step,
                           weights_hash=self._sync.trainer.weights_hash.hex())
            result = state
        self._intake.release()
        return result
