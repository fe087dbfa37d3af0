"""Start-up: get the run manifest, say where we listen, and get the state we start training from.

Founders start step 0 with their genesis cohort (or, back from a checkpoint, alone at the saved step);
joiners sync from the swarm, at genesis or mid-run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import trio
from distro_node.node.checkpoint.store import CheckpointStore
from distro_node.protocol.addrs import split_peer_addr
from distro_node.protocol.errors import TransportError
from distro_node.protocol.host import HostConfig, P2PHost, open_host
from distro_node.protocol.manifest_rpc import fetch_manifest
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.sync import Snapshot
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

from . import checkpointing
from .changes import ChangeSignal
from .checkpointing import Resume
from .data_fetch import fetch_folder, fetch_head
from .fetched import FetchedFolder
from .init_fetch import InitFetchError, fetch_init_files, init_folder
from .intake import GossipIntake
from .local import LocalSetupError
from .manifest import ManifestError, RunManifest
from .options import PeerError, PeerOptions
from .output import Output
from .reach_addrs import is_loopback, printable_addr
from .snapshots import GenesisCohort
from .state_sync import JoinError, SyncContext, sync_from_swarm
from .trainer import Trainer

JOIN_HEAR_TIMEOUT = 15.0  # a joiner waits this long to hear the active roster before its first round


@dataclass(frozen=True)
class RunSource:
    """Where our run comes from: the manifest's bytes, a founder's checkpoint to resume from, a joiner's
    bootstrap peer (asked first for state), for a joiner without the run's prepared dataset the folder
    its data.json, tokenizer and index were fetched into (its shards follow during training), and for a
    joiner of an imported run without ``--init-from`` the folder the checkpoint's files were fetched into."""

    manifest_bytes: bytes
    resume: Resume | None = None
    bootstrap_peer: ID | None = None
    data: FetchedFolder | None = None
    init: FetchedFolder | None = None


async def obtain_manifest(opts: PeerOptions, ckpt_store: CheckpointStore | None, out: Output) -> RunSource:
    """The run manifest: ours if we found the run (or resume it), else fetched from a bootstrap peer.

    Joiners fetch it through a throwaway host with a fresh identity. The real host must not connect to
    anyone before its gossip is running: py-libp2p opens its pubsub stream only when a connection comes
    up, and a peer that met no pubsub handler on our side never retries, so we would hear no gossip.
    A failure is raised once that host is closed: raised inside it, it would leave trio's nurseries as an
    ExceptionGroup, which the node's ``except PeerError`` does not catch (a traceback, not an error event).
    """
    if opts.manifest is not None:
        if ckpt_store is not None and opts.checkpoint_dir is not None:
            resume, why = checkpointing.find_resume(opts.checkpoint_dir, opts.manifest)
            if resume is not None:
                out.emit("resume", why, step=resume.step, run_id=resume.manifest.run_id().hex())
                return RunSource(resume.manifest.to_bytes(), resume=resume)
        return RunSource(opts.manifest.to_bytes())
    if not opts.network.bootstrap:
        raise PeerError("a joiner needs --bootstrap (or found a run without it)")
    peer, _ = split_peer_addr(opts.network.bootstrap[0])
    cfg = HostConfig(listen_addrs=opts.network.listen, px_interval=0.0, dial_timeout=10.0)
    got: tuple[bytes, RunManifest, FetchedFolder | None, FetchedFolder | None] | PeerError
    async with open_host(create_new_key_pair(), cfg) as temp:
        try:
            got = await _from_bootstrap(temp, peer, opts)
        except PeerError as exc:  # not raised inside: the host's nurseries would wrap it in groups
            got = exc
    if isinstance(got, PeerError):
        raise got
    data, manifest, head, init = got
    if head is not None:
        out.emit("data_head", f"fetched the run's data.json, tokenizer and document index into {head.folder} "
                 f"({head.fetched_bytes:,} B); shards follow as this peer's batches need them",
                 folder=str(head.folder), bytes=head.fetched_bytes)
    if init is not None:
        out.emit("init_fetched", f"fetched the run's imported checkpoint (weights sha256 "
                 f"{manifest.init.sha256[:12]}…, {len(manifest.init.files)} files) into {init.folder} "
                 f"({init.fetched_bytes:,} B over the network)", folder=str(init.folder),
                 bytes=init.fetched_bytes, files=len(manifest.init.files), sha256=manifest.init.sha256)
    return RunSource(data, bootstrap_peer=peer, data=head, init=init)


async def _from_bootstrap(temp: P2PHost, peer: ID, opts: PeerOptions
                          ) -> tuple[bytes, RunManifest, FetchedFolder | None, FetchedFolder | None]:
    """The manifest's bytes from the bootstrap peer, then what this joiner lacks of the run's files."""
    try:
        await temp.dial(opts.network.bootstrap[0])
        data = await fetch_manifest(temp, peer, expected_run_id=opts.expected_run_id)
    except TransportError as exc:
        raise PeerError(f"cannot get the run manifest from {peer}: {exc}") from exc
    try:
        manifest = RunManifest.from_bytes(data)
    except ManifestError as exc:
        raise PeerError(f"the run manifest from {peer} is invalid: {exc}") from exc
    head = await _fetch_data_head(temp, peer, manifest, opts)
    try:
        init = await _fetch_init(temp, peer, manifest, opts)
    except PeerError:
        if head is not None:
            head.remove_if_temporary()
        raise
    return data, manifest, head, init


async def _fetch_data_head(temp: P2PHost, peer: ID, manifest: RunManifest,
                           opts: PeerOptions) -> FetchedFolder | None:
    """data.json, the tokenizer and the index for a joiner without the run's prepared dataset; else None."""
    return await _fetch_into(
        fetch_folder(manifest.data, opts.local.data_path, opts.data_dir),
        lambda folder: fetch_head(temp, peer, manifest.data, folder), (TransportError, LocalSetupError),
        f"cannot get the run's data.json, tokenizer and document index from {peer}: ")


async def _fetch_init(temp: P2PHost, peer: ID, manifest: RunManifest,
                      opts: PeerOptions) -> FetchedFolder | None:
    """The imported checkpoint's files for a joiner without ``--init-from`` (node/peer/init_fetch.py)."""
    return await _fetch_into(
        init_folder(manifest.init, opts.local.init_from, opts.data_dir),
        lambda folder: fetch_init_files(temp, peer, manifest.init, folder), (InitFetchError,), "")


async def _fetch_into(where: tuple[Path, bool] | None, fetch: Callable[[Path], Awaitable[int]],
                      errors: tuple[type[Exception], ...], prefix: str) -> FetchedFolder | None:
    """Run ``fetch`` into the folder ``where`` names (None: nothing to fetch); on failure a temporary folder
    is removed and the error becomes a PeerError (``prefix`` + its text)."""
    if where is None:
        return None
    folder, temporary = where
    try:
        fetched = await fetch(folder)
    except errors as exc:
        FetchedFolder(folder, temporary).remove_if_temporary()
        raise PeerError(f"{prefix}{exc}") from exc
    return FetchedFolder(folder, temporary, fetched)


def join_command(addr: str, run_id_hex: str) -> str:
    """The command another machine runs to join through ``addr`` (``.../p2p/<id>``)."""
    return f"distro-node join --bootstrap {addr} --run-id {run_id_hex}"


def emit_listening(out: Output, host: P2PHost, opts: PeerOptions, manifest: RunManifest, *, self_id: str,
                   founder: bool, metrics_url: str | None) -> None:
    """The ``listening`` event: our addresses and the command others join with."""
    run_id = manifest.run_id()
    addrs = [f"{a}/p2p/{self_id}" for a in opts.network.announce_addrs] or [str(a) for a in host.addrs()]
    command = join_command(printable_addr(addrs[0]), run_id.hex())
    m = manifest
    flags, notes = "", ""  # printed after the command; join_command itself stays runnable as it is
    # A data file does not travel: say which one a joiner needs. Prepared data and an imported checkpoint
    # whose files the manifest names do (node/peer/data_fetch.py, init_fetch.py): a copy is optional.
    if m.init.kind != "seed" and m.init.files:
        flags += " [--init-from DIR]"
        notes += (f"\n  DIR: optional, their copy of the imported Hugging Face checkpoint (weights sha256 "
                  f"{m.init.sha256}); without it its files are fetched from the swarm")
    elif m.init.kind != "seed":
        flags += " --init-from DIR"
        notes += f"\n  DIR: their copy of the imported Hugging Face checkpoint (sha256 {m.init.sha256})"
    if m.data.kind == "shards":
        flags += " [--data-path DATA]"
        notes += (f"\n  DATA: optional, their copy of the prepared dataset, data.json sha256 "
                  f"{m.data.sha256}, tokenizer sha256 {m.data.tokenizer_sha256}; without it the shards their "
                  "batches need are fetched from the swarm")
    elif m.data.kind != "embedded":
        flags += " --data-path FILE"
        notes += f"\n  FILE: their copy of the {m.data.kind} file, sha256 {m.data.sha256} ({m.data.size:,} B)"
    if m.founder:
        flags += " --key-file KEY --ticket TICKET"
        notes += (f"\n  TICKET: a permissioned run; the founder ({m.founder}) issues it for the peer id of "
                  "KEY: `distro-node ticket id --key-file KEY`, then on the founder's machine `distro-node "
                  f"ticket issue PEER_ID --key-file FOUNDER_KEY --run-id {run_id.hex()}`")
    if not opts.network.announce_addrs and not all(is_loopback(a) for a in addrs):
        notes += ("\n  not confirmed reachable from other networks yet: once two peers dial this node back, "
                  "the command naming the confirmed public address is printed (event reachable); behind a "
                  "NAT without UPnP or port forwarding, only peers on this network can use the one above")
    extra = flags + notes
    local = opts.local
    out.emit(
        "listening",
        f"peer {self_id}\n  run {run_id.hex()} ({m.model_name}, {m.strategy}, batch "
        f"{m.batch_size}x{m.seq_len})\n  computing on {local.device} ({local.precision}"
        f"{f', {local.grad_accum} micro-batches' if local.grad_accum > 1 else ''})\n"
        f"  listening on {', '.join(addrs)}\n"
        f"  others join with:\n    {command}{extra}"
        + (f"\n  metrics at {metrics_url}" if metrics_url else ""),
        peer_id=self_id, addrs=addrs, run_id=run_id.hex(), join_command=command,
        founder=founder, metrics_url=metrics_url, device=local.device, precision=local.precision,
    )


class Startup:
    def __init__(
        self,
        *,
        self_id: str,
        opts: PeerOptions,
        out: Output,
        trainer: Trainer,
        cohort: GenesisCohort | None,
        intake: GossipIntake,
        sync: SyncContext,
        changes: ChangeSignal,
        compute_limit: trio.CapacityLimiter,
    ) -> None:
        self._self_id = self_id
        self._opts = opts
        self._out = out
        self._trainer = trainer
        self._cohort = cohort  # founders only
        self._intake = intake
        self._sync = sync
        self._changes = changes
        self._compute_limit = compute_limit

    async def state(self, resume: Resume | None) -> SyncState:
        """Founders wait for their genesis cohort; joiners sync from the swarm (genesis or mid-run)."""
        if self._cohort is not None:
            if resume is not None:
                return await self._resumed(self._cohort, resume)
            return await self._found(self._cohort)
        try:
            state, how = await sync_from_swarm(self._sync, genesis=True)
        except JoinError as exc:
            raise PeerError(str(exc)) from exc
        await self._wait_heard(set(state.roster.eligible()), JOIN_HEAR_TIMEOUT)
        self._out.emit("joined", f"joined at step {state.next_step} ({how})", step=state.next_step,
                       genesis=how == "genesis", roster=len(state.roster), how=how,
                       weights_hash=self._trainer.weights_hash.hex())
        return state

    async def _found(self, cohort: GenesisCohort) -> SyncState:
        opts = self._opts
        if not await cohort.gather(opts.startup_timeout):
            raise PeerError(f"only {len(cohort.members)} of {opts.genesis_peers} genesis peers arrived")
        state = SyncState(0, Roster.genesis(sorted(cohort.members)))
        # Genesis weights come from the manifest's seed: cohort members build and check them locally.
        cohort.publish(Snapshot.build(0, self._trainer.weights_hash, state, {"weights": b""}))
        await self._wait_heard(set(state.roster.peers), opts.startup_timeout / 4)
        self._out.emit("joined", f"founded run at step 0 with {len(cohort.members)} peer(s)", step=0,
                       genesis=True, roster=len(cohort.members),
                       weights_hash=self._trainer.weights_hash.hex())
        return state

    async def _resumed(self, cohort: GenesisCohort, resume: Resume) -> SyncState:
        """A founder back from its checkpoint restarts the run alone at the saved step; everyone else joins
        mid-run and syncs from it (the usual verified path: the founder is the whole active roster)."""
        cohort.resume_alone()
        heldout = await trio.to_thread.run_sync(self._trainer.heldout_loss, limiter=self._compute_limit)
        self._out.emit("joined", f"resumed the run at step {resume.step} from {resume.checkpoint.path.name} "
                       f"(held-out loss {heldout:.4f})", step=resume.step, genesis=False, roster=1,
                       how="checkpoint", resumed=True, heldout_loss=heldout,
                       weights_hash=self._trainer.weights_hash.hex())
        return SyncState(resume.step, Roster.genesis([self._self_id]))

    async def _wait_heard(self, peers: set[str], timeout: float) -> None:
        """Until gossip from every one of ``peers`` reached us: then our mesh links exist both ways and
        step 0's announcements will not be lost. Bounded: missing peers only cost a round deadline."""
        with trio.move_on_after(timeout):
            while not self._intake.heard_all(peers - {self._self_id}):
                await self._changes.wait()
