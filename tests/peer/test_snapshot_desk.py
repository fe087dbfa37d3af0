"""Snapshot requests are answered from the last cut while nothing changed, so a flood of requests cannot make
a node serialize and hash its whole state once per request (node/peer/snapshots.py)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import trio
import trio.testing
from distro_node.node.peer.changes import ChangeSignal
from distro_node.node.peer.snapshots import SnapshotDesk
from distro_node.protocol.membership import Roster, SyncState
from libp2p.peer.id import ID


@dataclass
class Machine:
    next_apply_step: int

    def export_state(self) -> SyncState:
        return SyncState(self.next_apply_step, Roster.genesis(["a", "b"]))


@dataclass
class Driver:
    machine: Machine


@dataclass
class Trainer:
    weights_hash: bytes = hashlib.sha256(b"w0").digest()
    cuts: int = 0

    def snapshot_parts(self) -> dict[str, bytes]:
        self.cuts += 1
        return {"weights": b"w" * 100}


@dataclass
class NotResyncing:
    replacing: bool = False


@dataclass
class World:
    trainer: Trainer = field(default_factory=Trainer)
    machine: Machine = field(default_factory=lambda: Machine(5))


def test_requests_at_one_boundary_share_one_cut_and_a_new_step_or_load_cuts_again() -> None:
    async def body() -> None:
        w = World()
        desk = SnapshotDesk(cohort=None, driver=Driver(w.machine), resync=NotResyncing(),  # type: ignore[arg-type]
                            trainer=w.trainer, compute_limit=trio.CapacityLimiter(1),  # type: ignore[arg-type]
                            changes=ChangeSignal())
        asker = ID(b"\x00\x01x")
        async with trio.open_nursery() as nursery:
            got: list[object] = []

            async def ask() -> None:
                got.append(await desk.provide(asker, False))

            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            await desk.cut(5)  # the training loop reaches the boundary a request waits for
        first = got[0]
        assert first is not None and w.trainer.cuts == 1
        for _ in range(50):  # a flood at the same boundary: no new cut
            assert await desk.provide(asker, False) is first
        assert w.trainer.cuts == 1
        w.trainer.weights_hash = hashlib.sha256(b"loaded by a resync").digest()
        with trio.move_on_after(0.05):
            await desk.provide(asker, False)  # waits for the next boundary: the old cut is stale
        assert w.trainer.cuts == 1

    trio.run(body)
