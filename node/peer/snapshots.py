"""Answering snapshot requests (``/distro/state/1.0.0``): the genesis cohort, and snapshots cut at a boundary.

A founder answers genesis requests by adding the requester to its cohort and answering once the cohort is
complete, so every member gets the same genesis roster. Any other request is answered with a snapshot cut
at our next step boundary, where the round machine's state describes exactly our weights; the training loop
cuts it there (:meth:`SnapshotDesk.cut`) and the waiting request takes it.
"""

from __future__ import annotations

from typing import Protocol

import trio
from distro_node.protocol.sync import Snapshot
from libp2p.peer.id import ID

from .changes import ChangeSignal
from .driver import RoundDriver
from .trainer import Trainer

SNAPSHOT_WAIT = 30.0  # seconds a request waits for our next step boundary


class StateReplacement(Protocol):
    @property
    def replacing(self) -> bool:
        """Whether we are about to replace (or are replacing) our own state by a resync."""
        ...


class GenesisCohort:
    """A founder's genesis peers: gathered from their genesis requests until ``size`` are in."""

    def __init__(self, self_id: str, size: int, changes: ChangeSignal) -> None:
        self._self_id = self_id
        self._size = size
        self._changes = changes
        self.members: set[str] = set()
        self._complete = trio.Event()
        self._genesis: Snapshot | None = None

    @property
    def complete(self) -> bool:
        return self._complete.is_set()

    async def gather(self, timeout: float) -> bool:
        """Count ourselves in and wait for the others; returns whether the cohort completed in time."""
        self.members.add(self._self_id)
        if len(self.members) >= self._size:
            self._complete.set()
        with trio.move_on_after(timeout):
            await self._complete.wait()
        return self.complete

    def resume_alone(self) -> None:
        """A founder resuming from its checkpoint restarts the run alone; everyone else joins mid-run."""
        self.members = {self._self_id}
        self._complete.set()

    def publish(self, genesis: Snapshot) -> None:
        self._genesis = genesis
        self._changes.bump()

    async def answer(self, requester: str) -> Snapshot | None:
        """A genesis request: admitted while there is room, answered once the cohort is complete and its
        snapshot exists; None for a requester left out."""
        if len(self.members) < self._size:
            self.members.add(requester)
        if len(self.members) >= self._size:
            self._complete.set()
        if requester not in self.members:
            return None
        await self._complete.wait()
        while self._genesis is None:
            await self._changes.wait()
        return self._genesis


class SnapshotDesk:
    def __init__(self, *, cohort: GenesisCohort | None, driver: RoundDriver, resync: StateReplacement,
                 trainer: Trainer, compute_limit: trio.CapacityLimiter, changes: ChangeSignal) -> None:
        self._cohort = cohort  # founders only
        self._driver = driver
        self._resync = resync
        self._trainer = trainer
        self._compute_limit = compute_limit
        self._changes = changes
        self._requested = False
        self._ready = trio.Event()
        self._latest: Snapshot | None = None

    async def provide(self, requester: ID, genesis: bool) -> Snapshot | None:
        """The StateServer's provider: a snapshot for ``requester``, or None (not ready; it asks others)."""
        cohort = self._cohort
        if cohort is not None and not cohort.complete:
            return await cohort.answer(str(requester)) if genesis else None
        m = self._driver.machine
        if m is None:
            return None
        if self._resync.replacing:
            # Our state is about to be replaced: nothing worth cutting, but the last snapshot we cut still
            # describes state our rounds decided. Answering NOT_READY instead left a resyncing swarm with the
            # liar as the only donor; a stale answer simply fails to gather f + 1 alike and costs nothing.
            return self._latest
        latest = self._latest
        if (latest is not None and latest.meta.step == m.next_apply_step
                and latest.meta.weights_hash == self._trainer.weights_hash):
            # Nothing applied (nor loaded by a resync) since the last cut: it describes our weights exactly,
            # so every asker gets it.
            # Cutting (serializing and hashing the whole state) once per request let any connected host
            # make us do that work as often as it liked.
            return latest
        self._requested = True
        ready = self._ready
        self._changes.bump()
        with trio.move_on_after(SNAPSHOT_WAIT):
            await ready.wait()
        return self._latest if ready.is_set() else None

    async def cut(self, step: int) -> None:
        """At the boundary before ``step``: cut the snapshot a request is waiting for, if any."""
        m = self._driver.machine
        if not self._requested or m is None or m.next_apply_step != step:
            return  # only at a boundary where the machine's state describes exactly our weights
        state = m.export_state()
        parts = await trio.to_thread.run_sync(self._trainer.snapshot_parts, limiter=self._compute_limit)
        self._latest = Snapshot.build(step, self._trainer.weights_hash, state, parts)
        self._requested = False
        ready, self._ready = self._ready, trio.Event()
        ready.set()
