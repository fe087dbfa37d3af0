"""The ``lying-donor`` adversary kind (node/testbed/adversary.py): poisoned state for joiners and resyncers.

Every snapshot description it gives (its own, and those of ``DONOR_SYBILS`` extra identities it runs in the
same process, node/testbed/sybils.py) is a self-consistent lie: zeroed weights, their true hash, and a round
state whose roster is the adversary and its Sybils, all active, so that counted against the lie's own roster
the lie has a majority. The Sybils answer state requests alike; they never train. Before joins counted
attestations against a trusted roster, a newcomer that asked more Sybils than honest peers loaded zeroed
weights.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import torch
from distro_node.node.hashing import model_hash
from distro_node.node.peer.snapshot_io import weights_to_bytes
from distro_node.node.peer.snapshots import SnapshotDesk
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.sync import Snapshot
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

from .sybils import beside_daemon, bootstrap_arg, run_sybil

DONOR_SYBILS = 4


class _Lie:
    """The poisoned snapshot, cut once per step from the adversary's real one."""

    def __init__(self, honest: Callable[..., Awaitable[Snapshot | None]]) -> None:
        self.honest = honest  # the real SnapshotDesk.provide
        self.desks: list[SnapshotDesk] = []
        self.liars: list[str] = []
        self._cache: Snapshot | None = None

    async def provide(self, desk: SnapshotDesk, requester: ID, genesis: bool) -> Snapshot | None:
        real = await self.honest(desk, requester, genesis)
        if real is None or (genesis and real.meta.step == 0):
            return real  # the genesis cohort is the founder's word either way
        if self._cache is None or self._cache.meta.step != real.meta.step:
            model = copy.deepcopy(desk._trainer.model)
            with torch.no_grad():
                for param in model.parameters():
                    param.zero_()
            state = SyncState(real.meta.step, Roster.genesis(self.liars))
            self._cache = Snapshot.build(real.meta.step, bytes.fromhex(model_hash(model)), state,
                                         {"weights": weights_to_bytes(model), "optim": real.data["optim"]})
        return self._cache


def patch_lying_donor() -> None:
    lie = _Lie(SnapshotDesk.provide)
    original_init = SnapshotDesk.__init__

    def keep_desk(self: SnapshotDesk, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        lie.desks.append(self)

    async def provide(self: SnapshotDesk, requester: ID, genesis: bool) -> Snapshot | None:
        return await lie.provide(self, requester, genesis)

    setattr(SnapshotDesk, "__init__", keep_desk)  # noqa: B010 (a patch, on purpose)
    setattr(SnapshotDesk, "provide", provide)  # noqa: B010 (a patch, on purpose)
    bootstrap = bootstrap_arg()
    keys = [create_new_key_pair() for _ in range(DONOR_SYBILS)]

    def sybils(kwargs: dict[str, Any]) -> list[Callable[[], Awaitable[None]]]:
        lie.liars = [kwargs["self_id"], *(str(ID.from_pubkey(k.public_key)) for k in keys)]
        answer = partial(_sybil_answer, lie)
        return [partial(run_sybil, key, kwargs["run_id"], bootstrap, provide=answer) for key in keys]

    beside_daemon(sybils)


async def _sybil_answer(lie: _Lie, requester: ID, genesis: bool) -> Snapshot | None:
    return await lie.provide(lie.desks[-1], requester, genesis) if lie.desks else None


__all__ = ["DONOR_SYBILS", "patch_lying_donor"]
