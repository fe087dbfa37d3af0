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


ASKER = ID(b"\x00\x01x")


def make_desk(w: World, resync: NotResyncing) -> SnapshotDesk:
    return SnapshotDesk(cohort=None, driver=Driver(w.machine), resync=resync,  # type: ignore[arg-type]
                        trainer=w.trainer, compute_limit=trio.CapacityLimiter(1),  # type: ignore[arg-type]
                        changes=ChangeSignal())


async def cut_while_asked(desk: SnapshotDesk, step: int) -> object:
    """A request waits for the next boundary; the training loop reaches ``step`` and cuts."""
    got: list[object] = []

    async def ask() -> None:
        got.append(await desk.provide(ASKER, False))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        await desk.cut(step)
    return got[0]


def test_requests_at_one_boundary_share_one_cut_and_a_new_step_or_load_cuts_again() -> None:
    async def body() -> None:
        w = World()
        desk = make_desk(w, NotResyncing())
        first = await cut_while_asked(desk, 5)
        assert first is not None and w.trainer.cuts == 1
        for _ in range(50):  # a flood at the same boundary: no new cut
            assert await desk.provide(ASKER, False) is first
        assert w.trainer.cuts == 1
        w.trainer.weights_hash = hashlib.sha256(b"loaded by a resync").digest()
        with trio.move_on_after(0.05):
            await desk.provide(ASKER, False)  # waits for the next boundary: the old cut is stale
        assert w.trainer.cuts == 1

    trio.run(body)


def test_a_resyncing_peer_keeps_serving_its_last_cut() -> None:
    """While our state is being replaced we cannot cut, but the last cut still describes state our rounds
    decided: answering nothing left a resyncing swarm with a liar as its only donor."""
    async def body() -> None:
        w = World()
        resync = NotResyncing()
        desk = make_desk(w, resync)
        resync.replacing = True
        assert await desk.provide(ASKER, False) is None  # nothing cut yet: nothing to serve
        resync.replacing = False
        cut = await cut_while_asked(desk, 5)
        resync.replacing = True
        w.trainer.weights_hash = hashlib.sha256(b"half loaded").digest()
        assert await desk.provide(ASKER, False) is cut
        assert w.trainer.cuts == 1

    trio.run(body)
