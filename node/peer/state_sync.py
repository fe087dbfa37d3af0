"""Join and resync: get the swarm's weights, optimizer state and round state, verified by a majority.

1. Ask donors (the bootstrap peer first, then other connected peers) to describe a snapshot cut at their next
   step boundary (``/distro/state/1.0.0`` meta).
2. Genesis: if the bootstrap founder answers with step 0 and its weights hash equals the hash of the weights
   we built from the manifest's seed, nothing needs to move: we are part of the genesis cohort.
3. Otherwise group the descriptions by (step, weights hash) and take the largest group. Its hash is trusted
   only when a strict majority of that step's active roster vouches for it: donors in the group plus peers
   whose signed gossip announcement for that step carried the same hash (announcements are computed on
   exactly the weights of that boundary). We wait a bounded time for those announcements.
4. Pull the weights in chunks from every donor of the group (byte-identical blobs), the optimizer state from
   one of them, load, and check the resulting hash once more before adopting the round state.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import trio
from distro_node.protocol.errors import TransportError
from distro_node.protocol.host import P2PHost
from distro_node.protocol.membership import SyncState
from distro_node.protocol.sync import SnapshotMeta, fetch_meta, fetch_part
from libp2p.peer.id import ID

from .snapshot_io import SnapshotFormatError

logger = logging.getLogger(__name__)

MAX_DONORS = 4
GENESIS_META_TIMEOUT = 300.0  # a founder holds genesis answers until its cohort is complete
META_TIMEOUT = 40.0
VERIFY_TIMEOUT = 15.0
PART_TIMEOUT = 60.0
ATTEMPTS = 6


class StateLoader(Protocol):
    """The trainer: the weights it holds now, and loading a transferred state (blocking)."""

    @property
    def weights_hash(self) -> bytes: ...

    def load(self, weights: bytes, optim: bytes | None, max_bytes: int) -> bytes: ...


class Vouchers(Protocol):
    """Signed gossip announcements: which peers announced ``step`` computed on ``weights_hash``."""

    def announcers(self, step: int, weights_hash: bytes) -> set[str]: ...


class Heights(Protocol):
    def highest_step(self, peer: str) -> int | None: ...


class BehindLimit(Protocol):
    @property
    def behind_steps(self) -> int: ...


class RoundView(Protocol):
    """What donor ranking reads of a running round machine: how far each peer got, and how far behind a
    peer may be before it must resync."""

    @property
    def liveness(self) -> Heights: ...

    @property
    def config(self) -> BehindLimit: ...


class Changes(Protocol):
    async def wait(self) -> None: ...


@dataclass(frozen=True)
class SyncContext:
    """Everything a state sync uses of the running peer. The host is the concrete one: the snapshot client
    (protocol/sync.py) opens its streams."""

    host: P2PHost
    run_id: bytes
    max_state_bytes: int
    bootstrap: ID | None  # a joiner's bootstrap peer, asked first; None for a founder
    trainer: StateLoader
    vouchers: Vouchers
    changes: Changes
    round_view: Callable[[], RoundView | None]  # None before the round machine runs


class JoinError(RuntimeError):
    """No verified state could be obtained from the swarm; the message says what was tried."""


def _donor_candidates(ctx: SyncContext, first: ID | None) -> list[ID]:
    """``first`` (the bootstrap peer), then the peers heard at the highest steps, leaving out peers known to
    be behind the best of them. Why: after a partition heals, the other peers of our side are as far behind
    as we are and hold their answer until a step boundary they cannot reach, and a sync waits for every
    donor it asked: one such donor cost each attempt ~30 s."""
    m = ctx.round_view()
    # Shuffled, never sorted by id: ids cost nothing to grind, and a fixed order would let a made-up id
    # take the donor slots of every joiner.
    peers = list(ctx.host.member_peers())
    random.SystemRandom().shuffle(peers)
    if m is not None:
        steps = {p: m.liveness.highest_step(str(p)) for p in peers}
        known = [h for h in steps.values() if h is not None]
        if known:
            floor = max(known) - m.config.behind_steps
            peers = [p for p in peers if (h := steps[p]) is None or h >= floor]
        peers.sort(key=lambda p: -1 if (h := steps[p]) is None else h, reverse=True)
    ordered = ([first] if first is not None and first in peers else []) + [p for p in peers if p != first]
    return ordered[:MAX_DONORS]


async def _describe(
    ctx: SyncContext, donors: list[ID], genesis_peer: ID | None, errors: list[str]
) -> list[tuple[ID, SnapshotMeta]]:
    metas: list[tuple[ID, SnapshotMeta]] = []

    async def ask(donor: ID) -> None:
        genesis = donor == genesis_peer
        try:
            meta = await fetch_meta(ctx.host, donor, ctx.run_id, genesis=genesis,
                                    timeout=GENESIS_META_TIMEOUT if genesis else META_TIMEOUT,
                                    max_state_bytes=ctx.max_state_bytes)
        except TransportError as exc:
            logger.debug("no snapshot from %s: %s", donor, exc)
            errors.append(f"{str(donor)[-8:]}: {exc}")
            return
        metas.append((donor, meta))

    async with trio.open_nursery() as nursery:
        for donor in donors:
            nursery.start_soon(ask, donor)
    return metas


def _vouchers(ctx: SyncContext, meta: SnapshotMeta, group: list[ID]) -> tuple[int, int]:
    """(peers of the roster vouching for the group's hash, active roster size)."""
    eligible = set(meta.state.roster.eligible())
    vouch = {str(d) for d in group} | ctx.vouchers.announcers(meta.step, meta.weights_hash)
    return len(vouch & eligible), len(eligible)


async def _verified(ctx: SyncContext, meta: SnapshotMeta, group: list[ID]) -> bool:
    with trio.move_on_after(VERIFY_TIMEOUT):
        while True:
            have, total = _vouchers(ctx, meta, group)
            if 2 * have > total:
                return True
            await ctx.changes.wait()
    return False


async def sync_from_swarm(ctx: SyncContext, *, genesis: bool) -> tuple[SyncState, str]:
    """Verified state (weights already loaded into ``ctx.trainer``); returns (state, how)."""
    bootstrap = ctx.bootstrap
    problems: list[str] = []
    for _attempt in range(ATTEMPTS):
        donors = _donor_candidates(ctx, bootstrap)
        if not donors:
            problems.append("no connected peers")
            await trio.sleep(1.0)
            continue
        errors: list[str] = []
        metas = await _describe(ctx, donors, bootstrap if genesis else None, errors)
        if not metas:
            problems.append("no donor described a snapshot (" + "; ".join(errors[:3]) + ")")
            await trio.sleep(1.0)
            continue
        for donor, meta in metas:
            local_init = meta.weights_hash == ctx.trainer.weights_hash
            if donor == bootstrap and genesis and meta.step == 0 and local_init:
                return meta.state, "genesis"
        groups: dict[tuple[int, bytes], list[tuple[ID, SnapshotMeta]]] = {}
        for donor, meta in metas:
            groups.setdefault((meta.step, meta.weights_hash), []).append((donor, meta))
        (step, _), members = max(groups.items(), key=lambda kv: (len(kv[1]), kv[0][0]))
        meta = members[0][1]
        group = [d for d, _ in members]
        if not await _verified(ctx, meta, group):
            have, total = _vouchers(ctx, meta, group)
            problems.append(f"weights hash of step {step} vouched by only {have} of {total} active peers")
            continue
        try:
            weights = await fetch_part(ctx.host, group, ctx.run_id, meta, "weights", timeout=PART_TIMEOUT)
            optim = None
            if "optim" in meta.parts:
                optim = await fetch_part(ctx.host, group[:1], ctx.run_id, members[0][1], "optim",
                                         timeout=PART_TIMEOUT)
        except TransportError as exc:
            problems.append(f"transfer failed: {exc}")
            continue
        try:
            got = await trio.to_thread.run_sync(ctx.trainer.load, weights, optim, ctx.max_state_bytes)
        except (SnapshotFormatError, ValueError) as exc:
            problems.append(f"state does not load: {exc}")
            continue
        if got != meta.weights_hash:
            problems.append(f"loaded weights hash {got.hex()[:12]} != vouched {meta.weights_hash.hex()[:12]}")
            continue
        return meta.state, f"state sync from {len(group)} donor(s)"
    raise JoinError("; ".join(problems[-4:]) or "state sync failed")
