"""Five more kinds of the test-only adversary (node/testbed/adversary.py), each the real daemon with a few
functions replaced, every message it sends signed by its own key:

    withhold           at every step it leads (epoch 0), its payload server answers NOT_FOUND for every
                       payload of that step, its own included: its list names an entry nobody can serve.
    conflicting-claim  after applying each step, publishes the decided list minus one entry, as the
                       designated leader of a later epoch of that step, without a certificate.
    replay-goodbye     signs a goodbye (and a heartbeat) for the step it is at when it becomes a member, then,
                       from ``REPLAY_AFTER_STEPS`` steps later on, re-publishes both every ``REPLAY_EVERY_S``
                       with a fresh pubsub seqno (so py-libp2p's seen-cache does not drop them).
    meta-flood         asks every connected peer for snapshot descriptions and state chunks as fast as
                       answers come, ``FLOOD_WORKERS`` requests in flight per peer and kind.
    px-rewrite         answers peer-exchange requests with every third party's address rewritten to a closed
                       loopback port.

Why these: the round-machine simulator covers withheld payloads and claims for decided steps, but only real
daemons have a payload server, a gossip seen-cache, a state gate and an address book to get them wrong.
The recorded goodbye is never sent fresh: sending it at its step would be a real leave, and a message of the
sender's for that step or later cancels a goodbye anyway, so replaying it later is what an eavesdropper that
recorded it could do (for others' messages it would have to keep the original seqno and wait out the 120 s
seen-cache, which a bench cannot afford). Each attacker prints what it got as a JSON line
``{"event": "adversary", ...}`` once a second on stdout, beside the daemon's own events.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import msgpack
import trio
from distro_node.node.peer import node as peer_node
from distro_node.node.peer.driver import RoundDriver
from distro_node.protocol.addrs import split_peer_addr, with_peer_id
from distro_node.protocol.consensus import progress
from distro_node.protocol.consensus.actions import ApplyInclusionList, Publish
from distro_node.protocol.consensus.leader_rank import leader_order
from distro_node.protocol.discovery import PeerDiscovery
from distro_node.protocol.errors import BadMultiaddrError, TransportError
from distro_node.protocol.host import P2PHost
from distro_node.protocol.messages import Goodbye, Heartbeat, InclusionList
from distro_node.protocol.pieces_serve import PiecesServer
from distro_node.protocol.rpc import RpcRefusedError, call
from distro_node.protocol.sync import STATE_PROTOCOL, SnapshotMeta, fetch_meta
from distro_node.protocol.transfer import PayloadServer, ServedPayloads
from multiaddr import Multiaddr

from .sybils import beside_daemon

REPLAY_AFTER_STEPS = 3
REPLAY_EVERY_S = 3.0  # under the per-kind goodbye bucket (one per 2 s): the rate limit is not what refuses it
FLOOD_WORKERS = 4
FLOOD_TIMEOUT_S = 5.0
FAILED_PAUSE_S = 0.1
MAX_STATE_BYTES = 1 << 30
BOGUS_PORT = 9  # discard: nothing listens there on the test machines, so a dial to it fails at once
REPORT_EVERY_S = 1.0


@dataclass
class Report:
    """What the attack did and got, printed as an ``adversary`` event."""

    kind: str
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    async def print_forever(self) -> None:
        while True:
            await trio.sleep(REPORT_EVERY_S)
            print(json.dumps({"event": "adversary", "kind": self.kind, **self.counts}), flush=True)


def _keep_instances(cls: type) -> list[Any]:
    """Patch ``cls.__init__`` to remember every instance (newest last)."""
    kept: list[Any] = []
    original: Callable[..., None] = getattr(cls, "__init__")  # noqa: B009 (the class's, not an instance's)

    def keep(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        kept.append(self)

    setattr(cls, "__init__", keep)  # noqa: B010 (a patch, on purpose)
    return kept


def member(driver: RoundDriver, self_id: str) -> bool:
    """Whether we are in the roster (an attack that needs a member's voice waits for it)."""
    return driver.machine is not None and self_id in driver.machine.roster


# --- withhold ----------------------------------------------------------------------------------------------


class _Withheld:
    """The payload server's view of the store: nothing of a step we lead at epoch 0."""

    def __init__(self, store: ServedPayloads, self_id: str, drivers: list[RoundDriver],
                 report: Report) -> None:
        self._store, self._self_id, self._drivers, self._report = store, self_id, drivers, report

    @property
    def run_id(self) -> bytes:
        return self._store.run_id

    def get(self, step: int, digest: bytes) -> bytes | None:
        machine = self._drivers[-1].machine if self._drivers else None
        order = machine.leader_order(step) if machine is not None else None
        if order and order[0] == self._self_id:
            self._report.add("withheld")
            return None
        return self._store.get(step, digest)


def patch_withhold() -> None:
    report = Report("withhold")
    drivers: list[RoundDriver] = _keep_instances(RoundDriver)
    for server in (PayloadServer, PiecesServer):  # both payload protocols see the same withheld store
        _withhold_in(server, drivers, report)
    beside_daemon(lambda _kwargs: [report.print_forever])


def _withhold_in(server: type[PayloadServer] | type[PiecesServer], drivers: list[RoundDriver],
                 report: Report) -> None:
    original_init = server.__init__

    def withholding(self: Any, host: P2PHost, store: ServedPayloads, *args: Any, **kwargs: Any) -> None:
        original_init(self, host, _Withheld(store, str(host.peer_id), drivers, report), *args, **kwargs)

    setattr(server, "__init__", withholding)  # noqa: B010 (a patch, on purpose)


# --- conflicting-claim -------------------------------------------------------------------------------------


def _claim(lst: InclusionList, order: tuple[str, ...], self_id: str) -> InclusionList | None:
    """The decided list less its last entry not ours, in the first later epoch we are designated to lead."""
    if self_id not in order:
        return None
    drop = next((i for i in reversed(range(len(lst.entries))) if lst.entries[i][0] != self_id), None)
    if drop is None or len(lst.entries) < 2:
        return None
    epoch = lst.epoch + 1
    while order[epoch % len(order)] != self_id:
        epoch += 1
    keep = [i for i in range(len(lst.entries)) if i != drop]
    return dataclasses.replace(
        lst, epoch=epoch, leader=self_id, entries=tuple(lst.entries[i] for i in keep),
        signatures=tuple(lst.signatures[i] for i in keep), pol_epoch=-1, pol=())


def patch_conflicting_claim() -> None:
    report = Report("conflicting-claim")
    honest_apply: Callable[..., None] = progress.apply

    def apply_then_claim(window: Any, resyncs: Any, me: Any, out: list[Any]) -> None:
        before = len(out)
        honest_apply(window, resyncs, me, out)
        for action in out[before:]:
            if not isinstance(action, ApplyInclusionList):
                continue
            roster = window.rosters.get(action.step)
            if roster is None:
                continue
            order = leader_order(me.config.run_id, action.step, roster.eligible())
            claim = _claim(action.inclusion_list, order, me.self_id)
            if claim is not None:
                out.append(Publish(claim))
                report.add("claims_sent")

    setattr(progress, "apply", apply_then_claim)  # noqa: B010 (a patch, on purpose)
    beside_daemon(lambda _kwargs: [report.print_forever])


# --- replay-goodbye ----------------------------------------------------------------------------------------


async def _replay(kwargs: dict[str, Any], report: Report) -> None:
    driver, outbox, self_id, run_id = kwargs["driver"], kwargs["outbox"], kwargs["self_id"], kwargs["run_id"]
    while not member(driver, self_id):
        await trio.sleep(0.5)
    step = driver.machine.next_step
    weights = kwargs["trainer"].weights_hash
    recorded = (Goodbye(run_id, self_id, step), Heartbeat(run_id, self_id, step, weights))
    while driver.machine is None or driver.machine.next_step < step + REPLAY_AFTER_STEPS:
        await trio.sleep(0.5)
    while True:
        for message in recorded:  # through the outbox: the same message, a fresh pubsub seqno each time
            outbox.publish(message)
        report.add("goodbyes_replayed")
        await trio.sleep(REPLAY_EVERY_S)


def patch_replay_goodbye() -> None:
    report = Report("replay-goodbye")
    beside_daemon(lambda kwargs: [partial(_replay, kwargs, report), report.print_forever])


# --- meta-flood ---------------------------------------------------------------------------------------------


def _keep_hosts() -> list[P2PHost]:
    hosts: list[P2PHost] = []
    honest_open: Callable[..., Any] = peer_node.open_host

    @asynccontextmanager
    async def keep(*args: Any, **kwargs: Any) -> AsyncIterator[P2PHost]:
        async with honest_open(*args, **kwargs) as host:
            hosts.append(host)
            yield host

    setattr(peer_node, "open_host", keep)  # noqa: B010 (a patch, on purpose)
    return hosts


async def _failed(what: str, exc: TransportError, report: Report) -> None:
    """Count a refusal (the peer answered BUSY, NOT_FOUND, ...) or a failure of our own (no stream, a
    timeout); after the latter wait ``FAILED_PAUSE_S``: a stream that cannot open fails at once, and retrying
    in a tight loop only burns the shared cores (the attack is the requests that reach the peer)."""
    if isinstance(exc, RpcRefusedError):
        report.add(f"{what}_refused")
        return
    report.add(f"{what}_failed")
    await trio.sleep(FAILED_PAUSE_S)


async def _ask_meta(host: P2PHost, peer: Any, run_id: bytes, metas: dict[Any, SnapshotMeta],
                    report: Report) -> None:
    while True:
        try:
            metas[peer] = await fetch_meta(host, peer, run_id, genesis=False, timeout=FLOOD_TIMEOUT_S,
                                           max_state_bytes=MAX_STATE_BYTES)
            report.add("meta_served")
        except TransportError as exc:
            await _failed("meta", exc, report)


def _chunk_requests(run_id: bytes, meta: SnapshotMeta) -> Iterator[bytes]:
    for name, info in sorted(meta.parts.items()):
        for index in range(len(info.chunk_hashes)):
            yield msgpack.packb({"op": "chunk", "run_id": run_id, "sha256": info.sha256, "part": name,
                                 "index": index}, use_bin_type=True)


async def _ask_chunks(host: P2PHost, peer: Any, run_id: bytes, metas: dict[Any, SnapshotMeta],
                      report: Report) -> None:
    while True:
        meta = metas.get(peer)
        if meta is None:
            await trio.sleep(0.1)
            continue
        for request in _chunk_requests(run_id, meta):
            try:
                await call(host, peer, STATE_PROTOCOL, request, max_reply=MAX_STATE_BYTES,
                           timeout=FLOOD_TIMEOUT_S)
                report.add("chunks_served")
            except TransportError as exc:
                await _failed("chunks", exc, report)


async def _flood_peers(host: P2PHost, kwargs: dict[str, Any], report: Report) -> None:
    """Every ``FLOOD_WORKERS`` askers of each kind per connected peer, new peers joining as they connect."""
    metas: dict[Any, SnapshotMeta] = {}
    flooded: set[Any] = set()
    async with trio.open_nursery() as nursery:
        while True:
            for peer in host.connected_peers() - flooded:
                flooded.add(peer)
                for _ in range(FLOOD_WORKERS):
                    nursery.start_soon(_ask_meta, host, peer, kwargs["run_id"], metas, report)
                    nursery.start_soon(_ask_chunks, host, peer, kwargs["run_id"], metas, report)
            await trio.sleep(1.0)


def patch_meta_flood() -> None:
    report = Report("meta-flood")
    hosts = _keep_hosts()
    beside_daemon(lambda kwargs: [partial(_flood_peers, hosts[-1], kwargs, report), report.print_forever])


# --- px-rewrite ---------------------------------------------------------------------------------------------


def _bogus(addr: Multiaddr, self_id: Any) -> Multiaddr:
    """A third party's address turned to a closed loopback port; our own stays (it is our word)."""
    try:
        peer, _transport = split_peer_addr(addr)
    except BadMultiaddrError:
        return addr
    if peer == self_id:
        return addr
    return with_peer_id(Multiaddr(f"/ip4/127.0.0.1/tcp/{BOGUS_PORT}"), peer)


def patch_px_rewrite() -> None:
    report = Report("px-rewrite")
    honest: Callable[..., list[Multiaddr]] = PeerDiscovery._advertised_peers

    def rewritten(self: PeerDiscovery, exclude: Any) -> list[Multiaddr]:
        me = self._host.peer_id
        given = honest(self, exclude)
        out = [_bogus(a, me) for a in given]
        report.add("addresses_rewritten", sum(1 for a, b in zip(given, out, strict=True) if a != b))
        return out

    setattr(PeerDiscovery, "_advertised_peers", rewritten)  # noqa: B010 (a patch, on purpose)
    beside_daemon(lambda _kwargs: [report.print_forever])


PATCHES_MORE: dict[str, Callable[[], None]] = {
    "withhold": patch_withhold, "conflicting-claim": patch_conflicting_claim,
    "replay-goodbye": patch_replay_goodbye, "meta-flood": patch_meta_flood, "px-rewrite": patch_px_rewrite,
}

__all__ = ["PATCHES_MORE", "Report", "member"]
