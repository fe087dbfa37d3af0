"""The networked training peer: one trio main task per process.

Tasks: gossip intake (decode, bind to the signer, feed the round machine), an ordered gossip publisher, a
timer for the machine's deadlines, heartbeats, payload fetches (one task each), the signal watcher, and the
training loop. Torch work (gradient, prepare, encode, decode, apply, snapshots) runs in worker threads via
``trio.to_thread.run_sync`` so the event loop keeps serving payloads and votes while a step computes.

Per step s (sequential order): compute and encode our payload, store it, announce it (payload hash, size,
and the hash of the weights it was computed on), then wait until the round machine hands out
``ApplyInclusionList`` for s (payloads are fetched and validated as the machine asks), and apply exactly
the listed payloads. The machine decides; this file only carries out its actions.

Overlapped order (the run's DisTrO settings say ``overlapped: true``; every peer reads it from the manifest,
so all agree): right after announcing step s, the compute of step s + 1 (pre_forward, forward/backward,
post_backward, prepare) starts in the worker thread while the round of s (gossip, fetches, agreement) goes on
in trio; apply(s, decided payloads of s) waits for that compute, then step s + 1 is announced at once. That is
``optimizer/base.py``'s overlapped order (apply(s - 1, ...) after prepare(s)), so a step costs about
max(compute, communication) instead of their sum. Weights change only in ``apply``, which every replica calls
with the same lists in the same order, so replicas stay bit-identical whatever each one computed ahead.
The look-ahead is skipped (one step runs in sequential order) where a step boundary must hold no prepared
next step: before a periodic checkpoint, at the last step, once a stop is requested.
"""

from __future__ import annotations

import logging
import signal
import time
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import trio
from distro_node.compression.errors import PayloadError
from distro_node.compression.payload import Payload
from distro_node.node.checkpoint.store import CheckpointError, CheckpointStore
from distro_node.node.sim.scoring import round_observations
from distro_node.protocol.addrs import split_peer_addr
from distro_node.protocol.codec import CodecError, author_of, decode_signed, encode_message
from distro_node.protocol.errors import GossipError, TransportError
from distro_node.protocol.gossip import AnnouncementChannel, GossipConfig, open_gossip
from distro_node.protocol.host import HostConfig, P2PHost, open_host
from distro_node.protocol.identity import load_or_create_identity
from distro_node.protocol.manifest_rpc import fetch_manifest, install_manifest_server
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.messages import (
    Announcement,
    Goodbye,
    Heartbeat,
    InclusionList,
    Message,
    Status,
    Vote,
)
from distro_node.protocol.round_actions import (
    Action,
    ApplyInclusionList,
    FetchPayload,
    ListConflict,
    MembershipChanged,
    PeerMissed,
    Penalize,
    PublishInclusionList,
    PublishStatus,
    PublishVote,
    Reannounce,
    ResyncNeeded,
    RoundStalled,
)
from distro_node.protocol.rounds import RoundMachine
from distro_node.protocol.store import PayloadStore
from distro_node.protocol.sync import Snapshot, StateServer
from distro_node.protocol.transfer import PayloadRequest, PayloadServer, TransferConfig, fetch_payload
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

from ..faults import FaultInjector, FaultSpec
from . import checkpointing
from .bans import PeerBans, RoundScores
from .checkpointing import Resume
from .manifest import RunManifest, payload_cap
from .output import Output, step_text
from .state_sync import JoinError, sync_from_swarm
from .telemetry import Telemetry
from .trainer import Computed, LocalSettings, LocalSetupError, Trainer

logger = logging.getLogger(__name__)

_BUFFER_MESSAGES = 4096  # gossip held while we sync state, replayed into the machine afterwards
_ANNOUNCE_MEMORY = 64  # steps of announcements remembered for verifying a donor's weights hash


class PeerError(RuntimeError):
    """The peer cannot start or continue (bad bootstrap, manifest, or state sync); the message says why."""


@dataclass(frozen=True)
class PeerOptions:
    manifest: RunManifest | None = None  # founders: the run to create; joiners: None (fetched)
    bootstrap: tuple[str, ...] = ()
    expected_run_id: bytes | None = None
    listen: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    announce: tuple[str, ...] = ()  # advertised instead of the bound addresses (NAT, containers)
    key_file: Path | None = None
    data_dir: Path | None = None
    steps: int | None = None  # stop (gracefully) after applying this many steps in total
    genesis_peers: int = 1  # founders: start step 0 once this many peers (ourselves included) are in
    log_format: str = "text"
    startup_timeout: float = 120.0
    leave_budget: float = 4.0  # seconds a leaving peer may spend finishing its current round
    # A leaving peer keeps serving payloads after its goodbye until no request came for `linger` seconds and
    # no upload is running (peers still fetching the last step need ours), for at most `linger_max` seconds.
    linger: float = 1.0
    linger_max: float = 30.0
    max_state_bytes: int = 1 << 30
    metrics_host: str | None = None  # None: no /metrics endpoint
    metrics_port: int = 0
    checkpoint_dir: Path | None = None  # None: no checkpoints (and no resume)
    checkpoint_every: int = 100
    checkpoint_keep: int = 3
    # Benchmark knob only (bench/overlap.py): seconds to hold our own announcement back after the payload is
    # ready, as if uploading it took that long. It stands in for a slow link on loopback; 0 in real runs.
    comm_delay: float = 0.0
    # Demos and tests of degraded/malicious peers only: send what node/faults.py makes of our payloads.
    fault: FaultSpec | None = None
    # This process's device, precision, gradient accumulation and data file path (never in the manifest).
    local: LocalSettings = field(default_factory=LocalSettings)


class _CountingStore:
    """What the payload server sees of the store: counts the bytes it hands out (bytes we upload)."""

    def __init__(self, store: PayloadStore) -> None:
        self._store = store
        self.run_id = store.run_id
        self.bytes_out = 0

    def get(self, step: int, digest: bytes) -> bytes | None:
        data = self._store.get(step, digest)
        if data is not None:
            self.bytes_out += len(data)
        return data


@dataclass
class _Ahead:
    """The compute of the next step, running in the worker thread while this step's round goes on."""

    step: int
    done: trio.Event
    result: Computed | None = None


class PeerNode:
    def __init__(self, options: PeerOptions) -> None:
        self.opts = options
        self.out = Output(options.log_format)
        self.founder = options.manifest is not None
        self.machine: RoundMachine | None = None
        self._changed = trio.Event()
        self._applies: dict[int, ApplyInclusionList] = {}
        self._decoded: dict[tuple[int, str, bytes], Payload] = {}
        self._fetching: set[tuple[int, str, bytes]] = set()  # payload fetches in flight
        self._payload_server: PayloadServer | None = None
        self._buffer: deque[Message] = deque(maxlen=_BUFFER_MESSAGES)
        self._heard: set[str] = set()
        self._announced: OrderedDict[int, dict[bytes, set[str]]] = OrderedDict()
        # When each peer's announcement of a step first reached us: a round's time splits into waiting for
        # the slowest peer's compute (its announcement) and the exchange after it.
        self._announced_at: OrderedDict[int, dict[str, float]] = OrderedDict()
        self._resync: ResyncNeeded | None = None
        # While a resync runs, gossip is held and replayed after the restore, as for a joiner: dispatched
        # at once, the lists and votes of the steps decided during the transfer were far-future steps for
        # our old state and were dropped, so the resynced peer waited for laggard answers that came too late
        # (the deciders had pruned those steps) and had to resync again, over and over.
        self._resyncing = False
        self._stop_requested = False
        self._left = False
        self._stop_deadline = 0.0
        self._applied = 0  # the step our weights are at (next to apply)
        self.recv_bytes = 0
        self._cohort: set[str] = set()
        self._cohort_ready = trio.Event()
        self._genesis: Snapshot | None = None
        self._snap_requested = False
        self._snap_ready = trio.Event()
        self._latest_snapshot: Snapshot | None = None
        self._compute_limit = trio.CapacityLimiter(1)
        self._decode_limit = trio.CapacityLimiter(1)
        self._outbox_send, self._outbox_recv = trio.open_memory_channel[bytes](1024)
        self._outbox_drained = trio.Event()  # set when the publisher has sent everything, goodbye included
        self.telemetry: Telemetry | None = None
        self._resume: Resume | None = None
        self._ckpt_store = (CheckpointStore(options.checkpoint_dir, keep_last=options.checkpoint_keep)
                            if options.checkpoint_dir is not None else None)
        self._saved_step = -1
        self._ready: _Ahead | None = None  # overlapped mode: the next step, computed during the last round
        self.bans = PeerBans()
        self._missed: dict[int, list[str]] = {}  # step -> active roster peers its decided list left out
        self._fault: FaultInjector | None = None

    # ------------------------------------------------------------------------------------------ lifecycle

    async def run(self) -> int:
        opts = self.opts
        key = load_or_create_identity(opts.key_file) if opts.key_file else create_new_key_pair()
        host_cfg = HostConfig(listen_addrs=opts.listen, announce_addrs=opts.announce, px_interval=1.0,
                              px_timeout=5.0, dial_timeout=10.0)
        try:
            manifest_bytes = await self._obtain_manifest()
        except PeerError as exc:
            self.out.emit("error", f"error: {exc}", reason=str(exc))
            return 1
        try:
            return await self._run_host(key, host_cfg, manifest_bytes)
        finally:
            if self.telemetry is not None:
                self.telemetry.stop()

    async def _run_host(self, key: object, host_cfg: HostConfig, manifest_bytes: bytes) -> int:
        opts = self.opts
        async with open_host(key, host_cfg) as host:  # type: ignore[arg-type]
            self.host = host
            self.self_id = str(host.peer_id)
            if opts.fault is not None:  # seeded by our id: two faulty peers never send identical payloads
                seed = int.from_bytes(host.peer_id.to_bytes()[-8:], "big")
                self._fault = FaultInjector(opts.fault, seed=seed)
            self.manifest = RunManifest.from_bytes(manifest_bytes)
            self.run_id = self.manifest.run_id()
            install_manifest_server(host, manifest_bytes)
            try:
                self.trainer = await trio.to_thread.run_sync(Trainer, self.manifest, self.self_id, opts.local)
            except LocalSetupError as exc:  # e.g. a joiner's data file is not the run's
                self.out.emit("error", f"error: {exc}", reason=str(exc), field=exc.field)
                return 1
            if self._resume is not None:
                try:
                    await trio.to_thread.run_sync(checkpointing.restore, self.trainer, self._resume)
                except CheckpointError as exc:
                    self.out.emit("error", f"error: cannot resume: {exc}", reason=str(exc))
                    return 1
            if opts.metrics_host is not None:
                try:
                    self.telemetry = Telemetry(opts.metrics_host, opts.metrics_port,
                                               self.trainer.dense_bf16_bytes(),
                                               self.manifest.batch_size * self.manifest.seq_len)
                except OSError as exc:
                    self.out.emit("error", f"error: metrics.port: cannot serve /metrics on "
                                  f"{opts.metrics_host}:{opts.metrics_port}: {exc}", reason=str(exc))
                    return 1
            cap = payload_cap(self.trainer.spec)
            self.round_config = self.manifest.round_config(cap)
            window = self.round_config.history_steps + self.round_config.max_future_steps + 2
            self.store = PayloadStore(self.run_id, window_steps=window)
            self._served = _CountingStore(self.store)
            self.xfer = TransferConfig(max_payload_bytes=cap, attempt_timeout=20.0)
            server = PayloadServer(host, self._served, self.xfer)  # type: ignore[arg-type]
            server.install()
            self._payload_server = server
            StateServer(host, self.run_id, self._provide_snapshot).install()
            gossip_cfg = GossipConfig(publish_timeout=5.0)
            async with open_gossip(host, self.run_id, validator=self._validate, config=gossip_cfg) as gossip:
                self.gossip = gossip
                self._emit_listening(host)
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    nursery.start_soon(self._gossip_loop)
                    nursery.start_soon(self._lost_peer_loop, host.lost_peers())
                    nursery.start_soon(self._publisher)
                    nursery.start_soon(self._heartbeat_loop)
                    nursery.start_soon(self._signal_loop)
                    try:
                        if opts.bootstrap:
                            await host.bootstrap(list(opts.bootstrap))
                        state = await self._start_state()
                    except (PeerError, TransportError) as exc:
                        self.out.emit("error", f"error: {exc}", reason=str(exc))
                        nursery.cancel_scope.cancel()
                        return 1
                    self._start_machine(state)
                    nursery.start_soon(self._tick_loop)
                    await self._train_loop()
                    nursery.cancel_scope.cancel()
        return 0

    async def _obtain_manifest(self) -> bytes:
        """The run manifest: ours if we found the run, else fetched from a bootstrap peer.

        Joiners fetch it through a throwaway host with a fresh identity. The real host must not connect to
        anyone before its gossip is running: py-libp2p opens its pubsub stream only when a connection comes
        up, and a peer that met no pubsub handler on our side never retries, so we would hear no gossip.
        """
        if self.opts.manifest is not None:
            if self._ckpt_store is not None and self.opts.checkpoint_dir is not None:
                self._resume, why = checkpointing.find_resume(self.opts.checkpoint_dir, self.opts.manifest)
                if self._resume is not None:
                    self.out.emit("resume", why, step=self._resume.step,
                                  run_id=self._resume.manifest.run_id().hex())
                    return self._resume.manifest.to_bytes()
            return self.opts.manifest.to_bytes()
        if not self.opts.bootstrap:
            raise PeerError("a joiner needs --bootstrap (or found a run without it)")
        peer, _ = split_peer_addr(self.opts.bootstrap[0])
        self.bootstrap_peer = peer
        cfg = HostConfig(listen_addrs=self.opts.listen, px_interval=0.0, dial_timeout=10.0)
        async with open_host(create_new_key_pair(), cfg) as temp:
            try:
                await temp.dial(self.opts.bootstrap[0])
                return await fetch_manifest(temp, peer, expected_run_id=self.opts.expected_run_id)
            except TransportError as exc:
                raise PeerError(f"cannot get the run manifest from {peer}: {exc}") from exc

    def _emit_listening(self, host: P2PHost) -> None:
        addrs = [f"{a}/p2p/{self.self_id}" for a in self.opts.announce] or [str(a) for a in host.addrs()]
        metrics_url = self.telemetry.url if self.telemetry is not None else None
        command = f"distro-node join --bootstrap {addrs[0]} --run-id {self.run_id.hex()}"
        m = self.manifest
        extra = ""
        if m.data.kind != "embedded":  # the file itself never travels: say which one a joiner needs
            extra = (f" --data-path FILE\n  FILE: their copy of the {m.data.kind} file, "
                     f"sha256 {m.data.sha256} ({m.data.size:,} B)")
        self.out.emit(
            "listening",
            f"peer {self.self_id}\n  run {self.run_id.hex()} ({m.preset}, {m.strategy}, batch "
            f"{m.batch_size}x{m.seq_len})\n  listening on {', '.join(addrs)}\n"
            f"  others join with:\n    {command}{extra}"
            + (f"\n  metrics at {metrics_url}" if metrics_url else ""),
            peer_id=self.self_id, addrs=addrs, run_id=self.run_id.hex(), join_command=command,
            founder=self.founder, metrics_url=metrics_url,
        )

    async def _start_state(self) -> SyncState:
        """Founders wait for their genesis cohort; joiners sync from the swarm (genesis or mid-run)."""
        if self.founder and self._resume is not None:
            return await self._resumed_state(self._resume)
        if self.founder:
            self._cohort.add(self.self_id)
            if len(self._cohort) >= self.opts.genesis_peers:
                self._cohort_ready.set()
            with trio.move_on_after(self.opts.startup_timeout) as scope:
                await self._cohort_ready.wait()
            if scope.cancelled_caught:
                raise PeerError(
                    f"only {len(self._cohort)} of {self.opts.genesis_peers} genesis peers arrived")
            state = SyncState(0, Roster.genesis(sorted(self._cohort)))
            # Genesis weights come from the manifest's seed: cohort members build and check them locally.
            self._genesis = Snapshot.build(0, self.trainer.weights_hash, state, {"weights": b""})
            self._bump()
            await self._wait_heard(set(state.roster.peers), self.opts.startup_timeout / 4)
            self.out.emit("joined", f"founded run at step 0 with {len(self._cohort)} peer(s)", step=0,
                          genesis=True, roster=len(self._cohort),
                          weights_hash=self.trainer.weights_hash.hex())
            return state
        try:
            state, how = await sync_from_swarm(self, genesis=True)
        except JoinError as exc:
            raise PeerError(str(exc)) from exc
        await self._wait_heard(set(state.roster.eligible()), 15.0)
        self.out.emit("joined", f"joined at step {state.next_step} ({how})", step=state.next_step,
                      genesis=how == "genesis", roster=len(state.roster), how=how,
                      weights_hash=self.trainer.weights_hash.hex())
        return state

    async def _resumed_state(self, resume: Resume) -> SyncState:
        """A founder back from its checkpoint restarts the run alone at the saved step; everyone else joins
        mid-run and syncs from it (the usual verified path: the founder is the whole active roster)."""
        self._cohort = {self.self_id}
        self._cohort_ready.set()
        heldout = await trio.to_thread.run_sync(self.trainer.heldout_loss, limiter=self._compute_limit)
        self._saved_step = resume.step
        self.out.emit("joined", f"resumed the run at step {resume.step} from {resume.checkpoint.path.name} "
                      f"(held-out loss {heldout:.4f})", step=resume.step, genesis=False, roster=1,
                      how="checkpoint", resumed=True, heldout_loss=heldout,
                      weights_hash=self.trainer.weights_hash.hex())
        return SyncState(resume.step, Roster.genesis([self.self_id]))

    async def _wait_heard(self, peers: set[str], timeout: float) -> None:
        """Until gossip from every one of ``peers`` reached us: then our mesh links exist both ways and
        step 0's announcements will not be lost. Bounded: missing peers only cost a round deadline."""
        with trio.move_on_after(timeout):
            while not peers - {self.self_id} <= self._heard:
                await self._wait_changed()

    def _start_machine(self, state: SyncState) -> None:
        self._applied = state.next_step
        self.machine = RoundMachine(self.round_config, self.self_id, state, trio.current_time())
        self._replay_buffer()

    def _replay_buffer(self) -> None:
        """Messages that arrived while we synced, in step order: a joiner learns the lists and votes of the
        steps decided during its transfer instead of waiting for laggard timeouts."""
        pending = list(self._buffer)
        self._buffer.clear()
        pending.sort(key=lambda m: m.step)
        for msg in pending:
            self._dispatch(msg)

    # ------------------------------------------------------------------------------------------ gossip

    def _validate(self, sender: ID, data: bytes) -> bool:
        """Signed by ``sender``, well formed, and not from a peer we banned (not delivered, not forwarded)."""
        author = str(sender)
        if author != getattr(self, "self_id", None) and self.bans.is_banned(author):
            return False
        try:
            decode_signed(data, str(sender), self.run_id)
        except CodecError:
            return False
        return True

    async def _gossip_loop(self) -> None:
        gossip: AnnouncementChannel = self.gossip
        async for item in gossip:
            try:
                msg = decode_signed(item.data, str(item.sender), self.run_id)
            except CodecError as exc:
                logger.debug("dropping gossip from %s: %s", item.sender, exc)
                continue
            self._heard.add(author_of(msg))
            if isinstance(msg, Announcement):
                self._remember_announcement(msg)
            if self.machine is None or self._resyncing:
                self._buffer.append(msg)
                self._bump()
                continue
            self._dispatch(msg)

    async def _lost_peer_loop(self, lost: trio.MemoryReceiveChannel[ID]) -> None:
        """A peer's last connection closed: the machine stops waiting for it (a crash is seen at once instead
        of after ``liveness_timeout``; see RoundMachine.on_disconnected)."""
        async for peer_id in lost:
            m = self.machine
            if m is not None:
                self._handle(m.on_disconnected(str(peer_id), trio.current_time()))
                self._bump()  # deadlines moved even when there is nothing to do yet

    def _remember_announcement(self, ann: Announcement) -> None:
        by_hash = self._announced.setdefault(ann.step, {})
        by_hash.setdefault(ann.weights_hash, set()).add(ann.peer_id)
        self._announced_at.setdefault(ann.step, {}).setdefault(ann.peer_id, trio.current_time())
        for memory in (self._announced, self._announced_at):
            while len(memory) > _ANNOUNCE_MEMORY:
                memory.popitem(last=False)

    def _last_announced(self, step: int, peers: Iterable[str], since: float) -> float:
        """When the last of ``peers``' announcements of ``step`` arrived (``since`` if all came before)."""
        seen = self._announced_at.get(step, {})
        return max([since, *(seen[p] for p in peers if p in seen)])

    def announcers(self, step: int, weights_hash: bytes) -> set[str]:
        """Peers whose announcement for ``step`` carried ``weights_hash`` (signed, so each counts once)."""
        return set(self._announced.get(step, {}).get(weights_hash, set()))

    def _dispatch(self, msg: Message) -> None:
        m = self.machine
        if m is None:
            return
        now = trio.current_time()
        if isinstance(msg, Announcement):
            actions = m.on_announcement(msg, now)
        elif isinstance(msg, InclusionList):
            actions = m.on_inclusion_list(msg, now)
        elif isinstance(msg, Vote):
            actions = m.on_vote(msg, now)
        elif isinstance(msg, Status):
            actions = m.on_status(msg, now)
        elif isinstance(msg, Heartbeat):
            actions = m.on_heartbeat(msg, now)
        elif isinstance(msg, Goodbye):
            actions = m.on_goodbye(msg, now)
            self.out.emit("goodbye", f"peer {msg.peer_id[-8:]} left at step {msg.step}", peer=msg.peer_id,
                          step=msg.step)
        else:
            return
        self._handle(actions)

    def _publish(self, msg: Message) -> None:
        try:
            self._outbox_send.send_nowait(encode_message(msg))
        except trio.WouldBlock:
            logger.warning("gossip outbox full; dropped a %s", type(msg).__name__)
        except trio.ClosedResourceError:
            logger.debug("left the swarm; not publishing a %s", type(msg).__name__)

    async def _publisher(self) -> None:
        """One task publishes everything, in order: a vote never overtakes the list it votes for, and nothing
        we queued before our goodbye arrives after it (a heartbeat for the goodbye's step arriving later
        reads as our return, and the others would wait for us again)."""
        async for data in self._outbox_recv:
            try:
                await self.gossip.publish(data)
            except GossipError as exc:
                logger.warning("gossip publish failed: %s", exc)
        self._outbox_drained.set()

    # ------------------------------------------------------------------------------------------ actions

    def _bump(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _wait_changed(self) -> None:
        await self._changed.wait()

    def _handle(self, actions: Sequence[Action]) -> None:
        for a in actions:
            if isinstance(a, FetchPayload):
                self._nursery.start_soon(self._fetch, a)
            elif isinstance(a, PublishInclusionList):
                self._publish(a.inclusion_list)
            elif isinstance(a, PublishVote):
                self._publish(a.vote)
            elif isinstance(a, PublishStatus):
                self._publish(a.status)
            elif isinstance(a, Reannounce):
                self._publish(a.announcement)
            elif isinstance(a, ApplyInclusionList):
                self._applies[a.step] = a
            elif isinstance(a, ResyncNeeded):
                self._resync = a
                self.out.emit("resync_needed", f"resync needed at step {a.step}: {a.reason}", step=a.step,
                              reason=a.reason)
            elif isinstance(a, PeerMissed):
                self._missed.setdefault(a.step, []).append(a.peer_id)
            elif isinstance(a, MembershipChanged):
                self.out.emit("membership", f"peer {a.peer_id[-8:]} {a.change} at step {a.step}",
                              step=a.step, peer=a.peer_id, change=a.change)
            elif isinstance(a, Penalize | ListConflict | RoundStalled):
                self.out.emit("fault", f"{type(a).__name__}: {a}", kind=type(a).__name__, detail=str(a))
        if actions:
            self._bump()

    async def _fetch(self, a: FetchPayload) -> None:
        """Fetch, decode and report one payload; a repeat request while one is in flight is dropped.

        The round machine repeats a fetch every ``fetch_retry_interval`` until it hears a result. A pull
        that takes longer than that (a 2.8 MB payload over a 10 Mbit link takes ~2 s) must not start a
        second download of the same bytes: on shaped links that doubled the bytes each peer pulled.
        """
        key = (a.step, a.peer_id, a.payload_hash)
        m = self.machine
        if m is None:
            return
        if key in self._decoded:
            self._handle(m.on_payload_validated(a.step, a.peer_id, a.payload_hash, trio.current_time()))
            return
        if key in self._fetching:
            return  # the running fetch reports its result
        self._fetching.add(key)
        try:
            await self._fetch_once(m, a, key)
        finally:
            self._fetching.discard(key)

    async def _fetch_once(self, m: RoundMachine, a: FetchPayload, key: tuple[int, str, bytes]) -> None:
        preferred = [ID.from_base58(s) for s in a.sources]
        others = sorted(self.host.connected_peers() - set(preferred), key=str)
        cached = self.store.get(a.step, a.payload_hash)
        try:
            data = cached if cached is not None else await fetch_payload(
                self.host, PayloadRequest(self.run_id, a.step, a.payload_hash), [*preferred, *others],
                store=self.store, config=self.xfer, expected_size=a.payload_size, spread=False)
        except TransportError as exc:
            logger.debug("fetch failed: %s", exc)
            self._handle(m.on_payload_failed(a.step, a.peer_id, a.payload_hash, trio.current_time()))
            return
        if cached is None:
            self.recv_bytes += len(data)
        try:
            payload = await trio.to_thread.run_sync(self.trainer.decode, data, a.peer_id, a.step,
                                                    limiter=self._decode_limit)
        except PayloadError as exc:
            self.out.emit("rejected", f"payload of {a.peer_id[-8:]} step {a.step} rejected: {exc.reason}",
                          peer=a.peer_id, step=a.step, reason=exc.reason)
            if self.telemetry is not None:
                self.telemetry.rejected(exc.reason)
            self._handle(m.on_payload_invalid(a.step, a.peer_id, a.payload_hash, trio.current_time()))
            return
        self._decoded[key] = payload
        self._handle(m.on_payload_validated(a.step, a.peer_id, a.payload_hash, trio.current_time()))

    # ------------------------------------------------------------------------------------------ timers

    async def _tick_loop(self) -> None:
        while True:
            m = self.machine
            now = trio.current_time()
            wake = m.next_wakeup() if m is not None else None
            delay = 0.2 if wake is None else min(0.2, max(0.0, wake - now))
            await trio.sleep(delay)
            if self.machine is not None:
                self._handle(self.machine.on_tick(trio.current_time()))

    async def _heartbeat_loop(self) -> None:
        while True:
            m = self.machine
            weights = self.trainer.weights_hash if hasattr(self, "trainer") else bytes(32)
            hb = (m.make_heartbeat(weights) if m is not None
                  else Heartbeat(self.run_id, self.self_id, 0, weights))
            if not self._left:
                self._publish(hb)
            await trio.sleep(self.round_config.heartbeat_interval)

    async def _signal_loop(self) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                if self._stop_requested:
                    self.out.emit("exit", "second signal: leaving now", signal=int(signum))
                    raise KeyboardInterrupt
                self._stop_requested = True
                self._stop_deadline = trio.current_time() + self.opts.leave_budget
                self.out.emit("stopping", f"signal {signum}: finishing the current round, then leaving",
                              signal=int(signum))
                self._bump()

    # ------------------------------------------------------------------------------------------ snapshots

    async def _provide_snapshot(self, requester: ID, genesis: bool) -> Snapshot | None:
        """Founders answer genesis requests by adding the requester to the cohort and answering once it is
        complete (so every cohort member gets the same genesis roster); otherwise cut a snapshot at our next
        step boundary."""
        if self.founder and not self._cohort_ready.is_set():
            if not genesis:
                return None
            if len(self._cohort) < self.opts.genesis_peers:
                self._cohort.add(str(requester))
            if len(self._cohort) >= self.opts.genesis_peers:
                self._cohort_ready.set()
            if str(requester) not in self._cohort:
                return None
            await self._cohort_ready.wait()
            while self._genesis is None:
                await self._wait_changed()
            return self._genesis
        if self.machine is None or self._resync is not None or self._resyncing:
            return None  # replacing our own state: nothing worth cutting (the asker tries others)
        self._snap_requested = True
        ready = self._snap_ready
        self._bump()
        with trio.move_on_after(30.0):
            await ready.wait()
        return self._latest_snapshot if ready.is_set() else None

    async def _cut_snapshot(self, step: int) -> None:
        m = self.machine
        if not self._snap_requested or m is None or m.next_apply_step != step:
            return  # only at a boundary where the machine's state describes exactly our weights
        state = m.export_state()
        parts = await trio.to_thread.run_sync(self.trainer.snapshot_parts, limiter=self._compute_limit)
        self._latest_snapshot = Snapshot.build(step, self.trainer.weights_hash, state, parts)
        self._snap_requested = False
        ready, self._snap_ready = self._snap_ready, trio.Event()
        ready.set()

    # ------------------------------------------------------------------------------------------ training

    async def _train_loop(self) -> None:
        steps = self.opts.steps
        extra_rounds = 0
        while True:
            if self._resync is not None:
                await self._do_resync()
            s = self._applied
            if steps is not None and s >= steps:
                break
            if self._stop_requested:
                if not self._should_stay_for(s) or extra_rounds >= 2:
                    break
                extra_rounds += 1
            await self._cut_snapshot(s)
            row = await self._step(s)
            if row is None:
                break  # abandoned (stop requested and the round did not close in time)
            if row and self._applied % self.opts.checkpoint_every == 0:
                await self._checkpoint("periodic")
        await self._checkpoint("exit")
        await self._leave()

    async def _checkpoint(self, why: str) -> None:
        """Save the state at our current step boundary (once per boundary). A failed save is reported and
        training goes on: a full disk must not take the swarm's peer down with it."""
        store = self._ckpt_store
        step = self._applied
        if store is None or step <= self._saved_step or step == 0:
            return
        t0 = time.perf_counter()
        try:
            path, heldout = await trio.to_thread.run_sync(checkpointing.save, store, self.trainer, step,
                                                          limiter=self._compute_limit)
        except (CheckpointError, OSError) as exc:
            self.out.emit("checkpoint_failed", f"checkpoint at step {step} failed: {exc}", step=step,
                          reason=str(exc))
            return
        self._saved_step = step
        if self.telemetry is not None:
            self.telemetry.checkpoint_saved(time.time())
        self.out.emit("checkpoint", f"checkpoint {path.name} ({why}, held-out loss {heldout:.4f})",
                      step=step, path=str(path), why=why, heldout_loss=heldout,
                      seconds=round(time.perf_counter() - t0, 3),
                      weights_hash=self.trainer.weights_hash.hex())

    def _should_stay_for(self, step: int) -> bool:
        """A leaver that would lead the next round stays for it: an absent epoch-0 leader costs every other
        peer a leader timeout, while staying costs us one round (bounded by the leave budget)."""
        m = self.machine
        if m is None or trio.current_time() >= self._stop_deadline:
            return False
        order = m.leader_order(step)
        return bool(order) and order is not None and order[0] == self.self_id

    @property
    def overlapped(self) -> bool:
        """Whether this run uses the overlapped order (a manifest setting, so the same on every peer)."""
        return self.trainer.overlapped

    def _may_run_ahead(self, step: int) -> bool:
        """Whether to compute ``step`` during the round before it. Not past the last step, not once we are
        leaving (the work would be thrown away), and not for a step right after a checkpoint boundary: a
        checkpoint must hold the optimizer state of a boundary, not a prepared but never sent step."""
        if self.opts.steps is not None and step >= self.opts.steps:
            return False
        if self._stop_requested or self._resync is not None:
            return False
        return not (self._ckpt_store is not None and step % self.opts.checkpoint_every == 0)

    async def _run_ahead(self, ahead: _Ahead) -> None:
        try:
            ahead.result = await trio.to_thread.run_sync(self.trainer.compute, ahead.step,
                                                         limiter=self._compute_limit)
        finally:
            ahead.done.set()

    def _start_ahead(self, step: int) -> _Ahead:
        ahead = _Ahead(step, trio.Event())
        self._nursery.start_soon(self._run_ahead, ahead)
        return ahead

    def _take_ready(self, step: int) -> Computed | None:
        """The compute of ``step`` done during the previous round, if that is what we hold."""
        ready, self._ready = self._ready, None
        if ready is None or ready.step != step or not ready.done.is_set():
            return None
        return ready.result

    async def _announce(self, s: int, done: Computed, phases: dict[str, float]) -> int:
        """Store, self-decode and announce our payload of step ``s``; returns its size in bytes.

        With ``--fault`` the bytes are first rewritten by the fault injector: nothing (silent), other bytes,
        or two different payloads (equivocate: both announced, the first one is ours). Bytes that fail our
        own validation are announced but never offered to our round machine, as an honest peer would treat
        them.
        """
        m = self.machine
        if m is None or done.data is None:
            return 0
        t0 = time.perf_counter()
        messages = [done.data]
        if self._fault is not None:
            messages = await trio.to_thread.run_sync(self._fault.rewrite, s, done.data, self.trainer.spec,
                                                     self.run_id, self.self_id, limiter=self._decode_limit)
            if not messages:
                return 0
        data = messages[0]
        digest = self.store.put(s, data)
        payload: Payload | None = None
        try:
            payload = await trio.to_thread.run_sync(self.trainer.decode, data, self.self_id, s,
                                                    limiter=self._decode_limit)
        except PayloadError:
            if self._fault is None:
                raise  # our honest encoder produced bytes we cannot read: a bug, not a peer fault
        if payload is not None:
            self._decoded[(s, self.self_id, digest)] = payload
        phases["codec"] = time.perf_counter() - t0
        if self.opts.comm_delay > 0:  # benchmark knob: the payload is ready, its "upload" takes this long
            t0 = time.perf_counter()
            await trio.sleep(self.opts.comm_delay)
            phases["comm_delay"] = time.perf_counter() - t0
        # The hash of the weights at this step boundary (what a joiner syncing at step s gets vouched for).
        # Sequential: the weights the gradient was taken on. Overlapped: the gradient was taken one update
        # earlier, but every peer announces the same boundary hash, which the round machine compares.
        ann = Announcement(self.run_id, s, self.self_id, digest, len(data), self.trainer.weights_hash)
        if self.telemetry is not None:
            self.telemetry.payload_sent(len(data))
        self._publish(ann)
        if payload is not None:
            self._handle(m.on_local_announcement(ann, trio.current_time()))
        for other in messages[1:]:
            self._publish(Announcement(self.run_id, s, self.self_id, self.store.put(s, other), len(other),
                                       self.trainer.weights_hash))
        return len(data)

    async def _step(self, s: int) -> dict[str, object] | None:
        m = self.machine
        if m is None:
            return None
        t_start = trio.current_time()
        loss: float | None = None
        phases: dict[str, float] = {}
        own_hash: bytes | None = None
        payload_bytes = 0
        ahead: _Ahead | None = None
        ready = self._take_ready(s)
        if m.next_step <= s:
            if ready is None:
                ready = await trio.to_thread.run_sync(self.trainer.compute, s, limiter=self._compute_limit)
            done = ready
            phases.update(done.seconds)
            loss = done.loss
            own_hash = self.trainer.weights_hash
            if self.overlapped and self._may_run_ahead(s + 1):
                # Started before the announcement so that everything the round waits on (including the
                # benchmark's comm delay) runs while the next gradient is computed.
                ahead = self._start_ahead(s + 1)
            payload_bytes = await self._announce(s, done, phases)
        t_announced = trio.current_time()
        try:
            while s not in self._applies:
                if self._resync is not None:
                    return {}
                if self._stop_requested:
                    remaining = self._stop_deadline - trio.current_time()
                    if remaining <= 0:
                        self.out.emit("abandoned", f"left step {s} undecided", step=s)
                        return None
                    with trio.move_on_after(remaining):
                        await self._wait_changed()
                else:
                    await self._wait_changed()
        finally:
            if ahead is not None:
                # Nothing else may touch the model while the worker thread computes on it (resync loads
                # weights, apply updates them); a compute is bounded, so this wait is too.
                with trio.CancelScope(shield=True):
                    await ahead.done.wait()
        action = self._applies.pop(s)
        t_decided = trio.current_time()
        lst = action.inclusion_list
        payloads = {p: self._decoded[(s, p, h)] for p, h in lst.entries}
        t0 = time.perf_counter()
        new_hash = await trio.to_thread.run_sync(self.trainer.apply, s, payloads, limiter=self._compute_limit)
        phases["apply"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        scored = await self._score(s, payloads)
        phases["score"] = time.perf_counter() - t0
        phases["round"] = t_decided - t_announced
        t_last = self._last_announced(s, (p for p, _ in lst.entries if p != self.self_id), t_announced)
        self._applied = s + 1
        self._ready = ahead
        for key in [k for k in self._decoded if k[0] < s]:
            del self._decoded[key]
        roster = self.machine.roster if self.machine is not None else None
        row: dict[str, object] = {
            "step": s, "loss": loss, "included": len(lst.entries),
            "roster": len(roster.eligible()) if roster is not None else 0,
            "self_included": any(p == self.self_id for p, _ in lst.entries),
            "warming": len(lst.warming), "leader": lst.leader, "epoch": lst.epoch,
            "sent_bytes": self._served.bytes_out, "recv_bytes": self.recv_bytes,
            "payload_bytes": payload_bytes, "overlapped": self.overlapped,
            "round_s": round(t_decided - t_announced, 4), "step_s": round(trio.current_time() - t_start, 4),
            "wait_s": round(min(t_last, t_decided) - t_announced, 4),
            "phases": {k: round(v, 4) for k, v in phases.items()}, "weights_hash": new_hash.hex(),
            "agreement_min": scored.agreement_min, "banned": len(self.bans.keeper.banned()),
        }
        if self.telemetry is not None:
            self._observe(s, loss, phases, row, own_hash=own_hash)
        self.out.emit("step", step_text(row), **row)
        return row

    async def _score(self, s: int, payloads: Mapping[str, Payload]) -> RoundScores:
        """Feed applied step ``s`` to the ban keeper (node/peer/bans.py: only inputs every honest replica
        shares) and put new bans into force from step s + 1."""
        specs = self.trainer.spec.tensors
        agreement, norms = await trio.to_thread.run_sync(round_observations, specs, payloads,
                                                         limiter=self._compute_limit)
        for step in [k for k in self._missed if k < s]:
            del self._missed[step]
        scored = self.bans.observe(s, agreement, norms, self._missed.pop(s, ()))
        m = self.machine
        if scored.bans and m is not None:
            self._handle(m.on_banned([b.peer for b in scored.bans], s + 1, trio.current_time()))
        for ban in scored.bans:
            who = "this peer" if ban.peer == self.self_id else f"peer {ban.peer[-8:]}"
            text = (f"banned {who} after step {ban.step}: {ban.reason} (score {ban.score:.2f}); excluded "
                    f"from step {ban.step + 1}")
            self.out.emit("banned", text, peer=ban.peer, step=ban.step, reason=ban.reason,
                          score=round(ban.score, 4), from_step=ban.step + 1, is_self=ban.peer == self.self_id)
            if ban.peer != self.self_id and self._nursery is not None:
                self._nursery.start_soon(self.host.block, ID.from_base58(ban.peer))
        if self.telemetry is not None:
            self.telemetry.round_scored(scored, self.bans.keeper.lowest_score())
        return scored

    def _observe(self, s: int, loss: float | None, phases: dict[str, float], row: dict[str, object],
                 own_hash: bytes | None) -> None:
        t = self.telemetry
        if t is None:
            return
        included, roster = int(row["included"]), int(row["roster"])  # type: ignore[call-overload]
        t.step(s, loss, phases, sent_total=self._served.bytes_out, received_total=self.recv_bytes,
               step_seconds=float(row["step_s"]), peers=roster,  # type: ignore[arg-type]
               complete=included >= roster)
        t.agreement(self._announced.get(s, {}), own_hash, self.self_id)

    async def _do_resync(self) -> None:
        request, self._resync = self._resync, None
        m = self.machine
        if request is None or m is None:
            return
        self._resyncing = True
        try:
            state, how = await sync_from_swarm(self, genesis=False)
        except JoinError as exc:  # still our old state: what arrived meanwhile is replayed into it
            self.out.emit("resync_failed", f"resync failed: {exc}", reason=str(exc))
        else:
            self._applies.clear()
            self._ready = None  # computed on the weights we just replaced
            self._applied = state.next_step
            self._handle(m.restore(state, trio.current_time()))
            self.out.emit("resynced", f"resynced to step {state.next_step} ({how})", step=state.next_step,
                          weights_hash=self.trainer.weights_hash.hex())
        finally:
            self._resyncing = False
        self._replay_buffer()

    async def _leave(self) -> None:
        m = self.machine
        self._left = True
        if m is not None:
            goodbye = m.make_goodbye()
            self._publish(goodbye)  # behind whatever is still queued, so the goodbye is the last word
            self._outbox_send.close()
            with trio.move_on_after(2.0):
                await self._outbox_drained.wait()
            sent = self._outbox_drained.is_set()
            how = "sent" if sent else "queued (the outbox did not drain within 2 s)"
            self.out.emit("left", f"goodbye {how} at step {goodbye.step}", step=goodbye.step, sent=sent)
        await self._linger()

    async def _linger(self) -> None:
        """Serve until the swarm stops asking. On slow links the last step's copies of our payload can take
        many seconds to reach every peer (7 copies of 365 KB at 2 Mbit: 10 s); a peer that left after a fixed
        second stranded the slowest peers of a run, which then could not apply its last step."""
        server = self._payload_server
        start = trio.current_time()
        with trio.move_on_after(self.opts.linger_max):
            while True:
                now = trio.current_time()
                last = max(start, server.last_request_at or start) if server is not None else start
                busy = server is not None and server.uploads_in_progress > 0
                if not busy and now - last >= self.opts.linger:
                    return
                await trio.sleep(min(0.1, self.opts.linger))
