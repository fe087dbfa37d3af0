"""Resync: the round machine said our state fell behind or diverged; replace it with the swarm's.

Gossip is held while the transfer runs and replayed afterwards, into the new state or, if the sync failed,
into the old one (node/peer/intake.py says why holding matters).
"""

from __future__ import annotations

from distro_node.protocol.membership import SyncState

from .driver import RoundDriver
from .intake import GossipIntake
from .output import Output
from .state_sync import JoinError, SyncContext, sync_from_swarm


class Resyncer:
    def __init__(self, *, sync: SyncContext, driver: RoundDriver, intake: GossipIntake, out: Output) -> None:
        self._sync = sync
        self._driver = driver
        self._intake = intake
        self._out = out
        self._running = False

    @property
    def replacing(self) -> bool:
        """A resync is requested or running: our state is about to change under anyone reading it."""
        return self._running or self._driver.decisions.resync is not None

    async def run(self) -> SyncState | None:
        """Carry out a requested resync; returns the state we now hold, or None (none was requested, or it
        failed and we keep our old state)."""
        driver = self._driver
        request = driver.decisions.take_resync()
        if request is None or driver.machine is None:
            return None
        self._running = True
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
        finally:
            self._running = False
        self._intake.release()
        return result
