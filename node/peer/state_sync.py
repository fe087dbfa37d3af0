"""Join and resync: get the swarm's weights, optimizer state and round state, attested by a roster we trust.

1. Ask donors (the bootstrap peer first, then peers of the trusted roster, then other connected peers) to
   describe a snapshot cut at their next step boundary (``/distro/state/1.0.0`` meta).
2. Genesis: if the bootstrap founder answers with step 0 and its weights hash equals the hash of the weights
   we built from the manifest's seed, nothing needs to move: we are part of the genesis cohort.
3. Otherwise take the description that f + 1 active peers of the trusted roster gave byte for byte alike
   (node/peer/state_trust.py says why that is enough and whose roster is trusted). In a permissioned run a
   newcomer first asks the same donors for their chains of attestations and trusts the roster of the one
   that verifies from the founder to the latest step (protocol/attestation.py); a genesis answer is taken
   only from the founder itself. We stop asking as soon as one is attested, so a donor that holds its
   answer costs nothing once enough others have answered.
4. Pull the weights in chunks from every donor of that description (each chunk checked against the attested
   chunk hashes; a donor that serves a wrong one is not asked again), the optimizer state from a trusted
   donor, load, and check the resulting hash once more before adopting the round state.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import trio
from distro_node.protocol.attestation import ChainError, Link, TrustedRoster, verify_chain
from distro_node.protocol.chain_rpc import fetch_chain
from distro_node.protocol.errors import TransportError
from distro_node.protocol.host import P2PHost
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.sync import SnapshotMeta, fetch_meta, fetch_part
from libp2p.peer.id import ID

from .snapshot_io import SnapshotFormatError
from .state_trust import Attested, TrustAnchor, UntrustedDonors, choose_snapshot

logger = logging.getLogger(__name__)

MAX_DONORS = 4
GENESIS_META_TIMEOUT = 300.0  # a founder holds genesis answers until its cohort is complete
META_TIMEOUT = 40.0
CHAIN_TIMEOUT = 20.0
PART_TIMEOUT = 60.0
ATTEMPTS = 6
NO_PEER_WAIT = 20.0  # how long one attempt waits for any donor to be connected

Answers = list[tuple[ID, SnapshotMeta]]  # (donor, its description), in order of arrival


class StateLoader(Protocol):
    """The trainer: the weights it holds now, and loading a transferred state (blocking)."""

    @property
    def weights_hash(self) -> bytes: ...

    def load(self, weights: bytes, optim: bytes | None, max_bytes: int) -> bytes: ...


class Heights(Protocol):
    def highest_step(self, peer: str) -> int | None: ...


class BehindLimit(Protocol):
    @property
    def behind_steps(self) -> int: ...


class RoundView(Protocol):
    """What a sync reads of a running round machine: the roster it trusts, how far each peer got, and how far
    behind a peer may be before it must resync."""

    @property
    def roster(self) -> Roster: ...

    @property
    def liveness(self) -> Heights: ...

    @property
    def config(self) -> BehindLimit: ...


class ChainSource(Protocol):
    """Our chain keeper (node/peer/trust_chain.py): the root a donor's chain must start from, its horizon,
    and keeping a verified chain that reaches further than ours."""

    @property
    def root(self) -> TrustedRoster: ...

    @property
    def max_skip(self) -> int: ...

    def adopt(self, links: Sequence[Link]) -> bool: ...


@dataclass(frozen=True)
class SyncContext:
    """Everything a state sync uses of the running peer. The host is the concrete one: the snapshot client
    (protocol/sync.py) opens its streams."""

    host: P2PHost
    run_id: bytes
    max_state_bytes: int
    bootstrap: ID | None  # a joiner's bootstrap peer, asked first; None for a founder
    trainer: StateLoader
    round_view: Callable[[], RoundView | None]  # None before the round machine runs
    untrusted: UntrustedDonors = field(default_factory=UntrustedDonors)
    chain: ChainSource | None = None  # a permissioned run's: a newcomer trusts the roster its chain certifies


class JoinError(RuntimeError):
    """No verified state could be obtained from the swarm; the message says what was tried."""


def _donor_candidates(ctx: SyncContext, first: ID | None, anchor: TrustAnchor | None) -> list[ID]:
    """``first`` (the bootstrap peer), then the anchor's active peers, then the rest; within each, peers heard
    at the highest steps first, leaving out peers known to be behind the best of them and donors that served
    us wrong bytes. Why leave the laggards out: after a partition heals, the other peers of our side are as
    far behind as we are and hold their answer until a step boundary they cannot reach."""
    m = ctx.round_view()
    # Shuffled, never sorted by id: ids cost nothing to grind, and a fixed order would let a made-up id
    # take the donor slots of every joiner.
    peers = [p for p in ctx.host.member_peers() if str(p) not in ctx.untrusted]
    random.SystemRandom().shuffle(peers)
    if m is not None:
        steps = {p: m.liveness.highest_step(str(p)) for p in peers}
        known = [h for h in steps.values() if h is not None]
        if known:
            floor = max(known) - m.config.behind_steps
            peers = [p for p in peers if (h := steps[p]) is None or h >= floor]
        peers.sort(key=lambda p: -1 if (h := steps[p]) is None else h, reverse=True)
    if anchor is not None:
        peers.sort(key=lambda p: not anchor.roster.is_eligible(str(p)))  # stable: keeps the order above
    ordered = ([first] if first is not None and first in peers else []) + [p for p in peers if p != first]
    return ordered[:MAX_DONORS]


async def _describe(
    ctx: SyncContext, donors: list[ID], genesis_peer: ID | None, errors: list[str],
    enough: Callable[[Answers], bool],
) -> Answers:
    """Ask every donor at once; stop waiting for the rest as soon as ``enough`` of them have answered."""
    metas: Answers = []

    async def ask(donor: ID, cancel: trio.CancelScope) -> None:
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
        if enough(metas):
            cancel.cancel()

    async with trio.open_nursery() as nursery:
        for donor in donors:
            nursery.start_soon(ask, donor, nursery.cancel_scope)
    return metas


def _own_anchor(ctx: SyncContext) -> TrustAnchor | None:
    m = ctx.round_view()
    return None if m is None else TrustAnchor(m.roster, "our own roster")


async def _chain_anchor(ctx: SyncContext, chain: ChainSource, donors: list[ID],
                        errors: list[str]) -> TrustAnchor:
    """The roster of the donors' chain that verifies from the root and reaches the latest step (the root
    itself when none does: then only the founder's own description counts). Kept by our keeper too, so we
    serve it on. A liar can withhold or truncate its chain, not forge a link: the verified chain that reaches
    the latest step wins."""
    found: list[tuple[TrustedRoster, tuple[Link, ...]]] = []

    async def ask(donor: ID) -> None:
        try:
            links = await fetch_chain(ctx.host, donor, ctx.run_id, timeout=CHAIN_TIMEOUT)
            # Up to thousands of signature checks for a long chain of large rosters: off the event loop.
            tail = await trio.to_thread.run_sync(verify_chain, chain.root, links, ctx.run_id, chain.max_skip)
            found.append((tail, links))
        except (TransportError, ChainError) as exc:
            errors.append(f"{str(donor)[-8:]}: no chain: {exc}")

    async with trio.open_nursery() as nursery:
        for donor in donors:
            nursery.start_soon(ask, donor)
    best, links = max(found, key=lambda tl: -1 if tl[0].step is None else tl[0].step,
                      default=(chain.root, ()))
    chain.adopt(links)
    if best.step is None:
        return TrustAnchor(best.roster, best.source)
    return TrustAnchor(best.roster, best.source, best.step, best.step + chain.max_skip)


def _bootstrap_anchor(ctx: SyncContext, metas: Answers) -> TrustAnchor | None:
    for donor, meta in metas:
        if donor == ctx.bootstrap:
            return TrustAnchor(meta.state.roster, "the bootstrap peer's roster")
    return None


async def _fetch(ctx: SyncContext, chosen: Attested) -> tuple[bytes, bytes | None]:
    """The attested weights from every donor that described them, the optimizer part from a trusted one."""
    def wrong(donor: ID) -> None:
        ctx.untrusted.add(str(donor))

    meta = chosen.meta
    weights = await fetch_part(ctx.host, chosen.donors, ctx.run_id, meta, "weights", timeout=PART_TIMEOUT,
                               on_wrong=wrong)
    optim = None
    if "optim" in meta.parts:
        optim = await fetch_part(ctx.host, chosen.donors[:1], ctx.run_id, meta, "optim", timeout=PART_TIMEOUT,
                                 on_wrong=wrong)
    return weights, optim


def _enough(ctx: SyncContext, anchor: TrustAnchor | None, genesis: bool) -> Callable[[Answers], bool]:
    """Whether the answers so far hold an attested snapshot (a joiner's anchor comes with its bootstrap's)
    or, at genesis, the founder's genesis answer. That one ends the wait at once: the other genesis peers
    that already run step 0 hold our request until their next boundary (snapshots.py ``SNAPSHOT_WAIT``),
    and step 0 cannot end without us."""
    def enough(metas: Answers) -> bool:
        if genesis and _genesis_answer(ctx, metas) is not None:
            return True
        trusted = anchor if anchor is not None else _bootstrap_anchor(ctx, metas)
        return trusted is not None and choose_snapshot(metas, trusted)[0] is not None
    return enough


def _genesis_answer(ctx: SyncContext, metas: Answers) -> SyncState | None:
    """The founder's genesis roster, when it is what our bootstrap answered: the weights are the ones we built
    from the manifest's seed, so nothing has to be attested or moved."""
    for donor, meta in metas:
        local_init = meta.weights_hash == ctx.trainer.weights_hash
        founder = ctx.chain is None or ctx.chain.root.roster.is_eligible(str(donor))
        if donor == ctx.bootstrap and meta.step == 0 and local_init and founder:
            return meta.state
    return None


async def sync_from_swarm(ctx: SyncContext, *, genesis: bool) -> tuple[SyncState, str]:
    """Attested state (weights already loaded into ``ctx.trainer``); returns (state, how)."""
    bootstrap = ctx.bootstrap
    problems: list[str] = []
    anchor = _own_anchor(ctx)  # a resyncing peer's; a newcomer's comes from its chain or its bootstrap
    for _attempt in range(ATTEMPTS):
        donors = _donor_candidates(ctx, bootstrap, anchor)
        if not donors:
            # Cut off: discovery keeps redialing known peers (protocol/discovery.py); wait for one to come
            # back rather than burn the attempts in seconds.
            problems.append("no connected peers")
            with trio.move_on_after(NO_PEER_WAIT):
                while not _donor_candidates(ctx, bootstrap, anchor):
                    await ctx.host.wait_for_change()
            continue
        errors: list[str] = []
        # A newcomer's anchor comes from its chain. A resyncing peer keeps its own and asks for no chain: a
        # chain request to a peer across a link that is still down held every resync attempt 20 s longer.
        if ctx.chain is not None and ctx.round_view() is None:
            anchor = await _chain_anchor(ctx, ctx.chain, donors, errors)
        enough = _enough(ctx, anchor, genesis)
        metas = await _describe(ctx, donors, bootstrap if genesis else None, errors, enough)
        if not metas:
            problems.append("no donor described a snapshot (" + "; ".join(errors[:3]) + ")")
            await trio.sleep(1.0)
            continue
        if genesis and (state := _genesis_answer(ctx, metas)) is not None:
            return state, "genesis"
        anchor = anchor if anchor is not None else _bootstrap_anchor(ctx, metas)
        if anchor is None:
            problems.append("the bootstrap peer described no snapshot (no other donor is trusted without it)")
            await trio.sleep(1.0)
            continue
        chosen, why = choose_snapshot(metas, anchor)
        if chosen is None:
            problems.append(why)
            continue
        meta = chosen.meta
        try:
            weights, optim = await _fetch(ctx, chosen)
        except TransportError as exc:
            problems.append(f"transfer failed: {exc}")
            continue
        try:
            got = await trio.to_thread.run_sync(ctx.trainer.load, weights, optim, ctx.max_state_bytes)
        except (SnapshotFormatError, ValueError) as exc:
            problems.append(f"state does not load: {exc}")
            continue
        if got != meta.weights_hash:
            problems.append(f"loaded weights {got.hex()[:12]} != attested {meta.weights_hash.hex()[:12]}")
            continue
        how = (f"state sync from {len(chosen.donors)} donor(s), attested by {len(chosen.attesters)} active "
               f"peer(s) of {anchor.source}")
        return meta.state, how
    raise JoinError("; ".join(problems[-4:]) or "state sync failed")
