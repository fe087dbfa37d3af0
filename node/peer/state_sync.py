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
from typing import TYPE_CHECKING

import trio
from distro_node.protocol.errors import TransportError
from distro_node.protocol.membership import SyncState
from distro_node.protocol.sync import SnapshotMeta, fetch_meta, fetch_part
from libp2p.peer.id import ID

from .snapshot_io import SnapshotFormatError

if TYPE_CHECKING:
    from .node import PeerNode

logger = logging.getLogger(__name__)

MAX_DONORS = 4
GENESIS_META_TIMEOUT = 300.0  # a founder holds genesis answers until its cohort is complete
META_TIMEOUT = 40.0
VERIFY_TIMEOUT = 15.0
PART_TIMEOUT = 60.0
ATTEMPTS = 6


class JoinError(RuntimeError):
    """No verified state could be obtained from the swarm; the message says what was tried."""


def _donor_candidates(node: PeerNode, first: ID | None) -> list[ID]:
    """``first`` (the bootstrap peer), then the peers heard at the highest steps, leaving out peers known to
    be behind the best of them. Why: after a partition heals, the other peers of our side are as far behind
    as we are and hold their answer until a step boundary they cannot reach, and a sync waits for every
    donor it asked: one such donor cost each attempt ~30 s."""
    m = node.machine
    peers = sorted(node.host.connected_peers(), key=str)
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
    node: PeerNode, donors: list[ID], genesis_peer: ID | None, errors: list[str]
) -> list[tuple[ID, SnapshotMeta]]:
    metas: list[tuple[ID, SnapshotMeta]] = []

    async def ask(donor: ID) -> None:
        genesis = donor == genesis_peer
        try:
            meta = await fetch_meta(node.host, donor, node.run_id, genesis=genesis,
                                    timeout=GENESIS_META_TIMEOUT if genesis else META_TIMEOUT,
                                    max_state_bytes=node.opts.max_state_bytes)
        except TransportError as exc:
            logger.debug("no snapshot from %s: %s", donor, exc)
            errors.append(f"{str(donor)[-8:]}: {exc}")
            return
        metas.append((donor, meta))

    async with trio.open_nursery() as nursery:
        for donor in donors:
            nursery.start_soon(ask, donor)
    return metas


def _vouchers(node: PeerNode, meta: SnapshotMeta, group: list[ID]) -> tuple[int, int]:
    """(peers of the roster vouching for the group's hash, active roster size)."""
    eligible = set(meta.state.roster.eligible())
    vouch = {str(d) for d in group} | node.announcers(meta.step, meta.weights_hash)
    return len(vouch & eligible), len(eligible)


async def _verified(node: PeerNode, meta: SnapshotMeta, group: list[ID]) -> bool:
    with trio.move_on_after(VERIFY_TIMEOUT):
        while True:
            have, total = _vouchers(node, meta, group)
            if 2 * have > total:
                return True
            await node._wait_changed()
    return False


async def sync_from_swarm(node: PeerNode, *, genesis: bool) -> tuple[SyncState, str]:
    """Verified state for ``node`` (weights already loaded into its trainer); returns (state, how)."""
    bootstrap: ID | None = getattr(node, "bootstrap_peer", None)
    problems: list[str] = []
    for _attempt in range(ATTEMPTS):
        donors = _donor_candidates(node, bootstrap)
        if not donors:
            problems.append("no connected peers")
            await trio.sleep(1.0)
            continue
        errors: list[str] = []
        metas = await _describe(node, donors, bootstrap if genesis else None, errors)
        if not metas:
            problems.append("no donor described a snapshot (" + "; ".join(errors[:3]) + ")")
            await trio.sleep(1.0)
            continue
        for donor, meta in metas:
            local_init = meta.weights_hash == node.trainer.weights_hash
            if donor == bootstrap and genesis and meta.step == 0 and local_init:
                return meta.state, "genesis"
        groups: dict[tuple[int, bytes], list[tuple[ID, SnapshotMeta]]] = {}
        for donor, meta in metas:
            groups.setdefault((meta.step, meta.weights_hash), []).append((donor, meta))
        (step, _), members = max(groups.items(), key=lambda kv: (len(kv[1]), kv[0][0]))
        meta = members[0][1]
        group = [d for d, _ in members]
        if not await _verified(node, meta, group):
            have, total = _vouchers(node, meta, group)
            problems.append(f"weights hash of step {step} vouched by only {have} of {total} active peers")
            continue
        try:
            weights = await fetch_part(node.host, group, node.run_id, meta, "weights", timeout=PART_TIMEOUT)
            optim = None
            if "optim" in meta.parts:
                optim = await fetch_part(node.host, group[:1], node.run_id, members[0][1], "optim",
                                         timeout=PART_TIMEOUT)
        except TransportError as exc:
            problems.append(f"transfer failed: {exc}")
            continue
        try:
            got = await trio.to_thread.run_sync(node.trainer.load, weights, optim, node.opts.max_state_bytes)
        except (SnapshotFormatError, ValueError) as exc:
            problems.append(f"state does not load: {exc}")
            continue
        if got != meta.weights_hash:
            problems.append(f"loaded weights hash {got.hex()[:12]} != vouched {meta.weights_hash.hex()[:12]}")
            continue
        return meta.state, f"state sync from {len(group)} donor(s)"
    raise JoinError("; ".join(problems[-4:]) or "state sync failed")
