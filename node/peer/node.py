"""The networked training peer: one trio main task per process. This file only builds the parts and runs them.

Once the run manifest, the host and the trainer exist, the parts are built in dependency order and their
tasks started: gossip intake (intake.py: decodes each message once, in the pubsub validator), the ordered
outbox (outbox.py), the executor of the round machine's actions with its timer and payload fetches
(driver.py, fetcher.py), heartbeats, the signal watcher (leaving.py), start-up (startup.py) and the training
loop (training.py). Torch work (gradient, prepare, encode, decode, apply, snapshots) runs in worker threads
via ``trio.to_thread.run_sync`` so the event loop keeps serving payloads and votes while a step computes.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial

import numpy as np
import trio
from distro_node.node.checkpoint.store import CheckpointError, CheckpointStore
from distro_node.protocol.admission import Admission
from distro_node.protocol.authorship import AuthorshipSigner
from distro_node.protocol.blobs import BlobCatalog, BlobConfig, BlobServer
from distro_node.protocol.consensus import RoundConfig, RoundMachine
from distro_node.protocol.dialback import DialbackServer
from distro_node.protocol.errors import TransportError
from distro_node.protocol.gossip import open_gossip
from distro_node.protocol.gossip_config import GossipConfig
from distro_node.protocol.host import HostConfig, P2PHost, open_host
from distro_node.protocol.identity import load_or_create_identity
from distro_node.protocol.manifest_rpc import install_manifest_server
from distro_node.protocol.relay_config import RelayServiceConfig
from distro_node.protocol.signatures import signer_for
from distro_node.protocol.store import PayloadStore
from distro_node.protocol.sync import StateServer
from distro_node.protocol.tickets import TicketError
from libp2p.crypto.ed25519 import create_new_key_pair

from ..faults import FaultInjector
from . import checkpointing
from .announced_mark import AnnouncedMark
from .announcements import AnnouncementLog
from .announcer import Announcer
from .bans import PeerBans
from .changes import ChangeSignal
from .checkpointing import Checkpointer
from .data_feed import DataFeed, DataWaitError
from .data_fetch import catalog_full_copy, open_fetched
from .driver import RoundDriver
from .fetcher import Fetcher
from .heartbeat import send_heartbeats
from .init_fetch import catalog_init_files
from .intake import GossipDecoder, GossipIntake
from .isolation_watch import IsolationWatch
from .leaving import Leaver, StopRequest
from .lookahead import LookAhead
from .manifest import RunManifest, payload_cap
from .nat_traversal import NatTraversal, open_nat_traversal
from .options import PeerError, PeerOptions
from .outbox import Outbox
from .output import Output
from .payload_exchange import PayloadExchange, piece_fetch_timeout
from .payloads import ByteCounters, DecodedPayloads
from .rate_limit import GossipRates, forwarder_prefilter
from .reachable import start_reachability
from .resync import Resyncer
from .scoring import RoundScorer
from .snapshots import GenesisCohort, SnapshotDesk
from .startup import RunSource, Startup, emit_listening, join_command, obtain_manifest
from .state_gate import StateRequestGate
from .state_sync import SyncContext
from .state_trust import UntrustedDonors
from .step_report import StepReporter
from .telemetry import Telemetry
from .tickets import admission_for
from .trainer import LocalSetupError, Trainer
from .training import StepRunner, TrainingLoop
from .trust_chain import open_chain

__all__ = ["PeerError", "PeerNode", "PeerOptions"]


@dataclass(frozen=True)
class _Run:
    """What every part of a started peer shares: who we are, in which run, on which host, with which
    trainer."""

    host: P2PHost
    self_id: str
    manifest: RunManifest
    run_id: bytes
    trainer: Trainer
    telemetry: Telemetry | None
    round_config: RoundConfig
    exchange: PayloadExchange  # the payload store and both payload servers
    counters: ByteCounters
    feed: DataFeed | None  # prepared data fetched on demand: the shards of each step, before its compute
    admission: Admission  # whom we serve and hear: everyone (open run) or the founder and ticket holders


class PeerNode:
    def __init__(self, options: PeerOptions) -> None:
        self.opts = options
        self.out = Output(options.log_format)
        self.founder = options.manifest is not None
        self.bans = PeerBans()  # for the whole process: a banned peer that reconnects stays banned
        self._ckpt_store = (CheckpointStore(options.checkpoint_dir, keep_last=options.checkpoint.keep_last)
                            if options.checkpoint_dir is not None else None)
        self._changes = ChangeSignal()
        self._compute_limit = trio.CapacityLimiter(1)  # one torch call at a time: the model is shared
        self._decode_limit = trio.CapacityLimiter(1)

    async def run(self) -> int:
        opts = self.opts
        key = load_or_create_identity(opts.key_file) if opts.key_file else create_new_key_pair()
        net = opts.network
        host_cfg = HostConfig(listen_addrs=net.listen, announce_addrs=net.announce_addrs,
                              px_interval=net.peer_exchange_seconds, max_peers=net.max_peers, px_timeout=5.0,
                              dial_timeout=10.0, max_peers_per_address=net.max_peers_per_address)
        try:
            source = await obtain_manifest(opts, self._ckpt_store, self.out)
        except PeerError as exc:
            cause = exc.__cause__  # a local setting that must change (run.init_from) is named as such
            where = {"field": cause.field} if isinstance(cause, LocalSetupError) else {}
            self.out.emit("error", f"error: {exc}", reason=str(exc), **where)
            return 1
        cleanup = ExitStack()  # /metrics is stopped last, once the host has closed
        if source.data is not None:
            cleanup.callback(source.data.remove_if_temporary)
        if source.init is not None:
            cleanup.callback(source.init.remove_if_temporary)
        try:
            async with open_host(key, host_cfg) as host:
                run = await self._prepare(host, source, cleanup)
                return 1 if run is None else await self._serve(run, source)
        finally:
            cleanup.close()

    async def _prepare(self, host: P2PHost, source: RunSource, cleanup: ExitStack) -> _Run | None:
        """The run's manifest, our trainer (restored from a checkpoint when resuming), /metrics and the
        payload server; None after an ``error`` event."""
        opts = self.opts
        self_id = str(host.peer_id)
        manifest = RunManifest.from_bytes(source.manifest_bytes)
        run_id = manifest.run_id()
        try:
            admission = admission_for(manifest, run_id, self_id, opts.network.ticket)
        except TicketError as exc:
            self.out.emit("error", f"error: network.ticket: {exc}", reason=str(exc), field="network.ticket")
            return None
        admission.install(host)
        install_manifest_server(host, source.manifest_bytes)
        catalog = BlobCatalog()  # the run's files we hold verified, served to members
        # A joiner that fetched the imported checkpoint loads it from where it was fetched to.
        local = opts.local if source.init is None else replace(opts.local, init_from=source.init.folder)
        try:
            fetched = None
            if source.data is not None:
                fetched = await trio.to_thread.run_sync(open_fetched, source.data.folder,
                                                        opts.local.data_cache_bytes, catalog)
            trainer = await trio.to_thread.run_sync(Trainer, manifest, self_id, local,
                                                    None if fetched is None else fetched[1])
            if fetched is None and manifest.data.kind == "shards" and opts.local.data_path is not None:
                catalog_full_copy(catalog, manifest.data, opts.local.data_path)
            if manifest.init.files and local.init_from is not None:  # its weights hash was just checked
                await trio.to_thread.run_sync(partial(catalog_init_files, catalog, manifest.init,
                                                      local.init_from, verified=source.init is not None))
        except LocalSetupError as exc:  # e.g. a joiner's data file is not the run's
            self.out.emit("error", f"error: {exc}", reason=str(exc), field=exc.field)
            return None
        blobs = BlobServer(host, catalog, BlobConfig(), allow=lambda peer: not host.is_foreign(peer))
        blobs.install()
        if source.resume is not None:
            try:
                await trio.to_thread.run_sync(checkpointing.restore, trainer, source.resume)
            except CheckpointError as exc:
                self.out.emit("error", f"error: cannot resume: {exc}", reason=str(exc))
                return None
        telemetry = None
        if opts.metrics.enabled:
            try:
                telemetry = Telemetry(opts.metrics.host, opts.metrics.port, trainer.dense_bf16_bytes(),
                                      manifest.batch_size * manifest.seq_len)
            except OSError as exc:
                self.out.emit("error", f"error: metrics.port: cannot serve /metrics on "
                              f"{opts.metrics.host}:{opts.metrics.port}: {exc}", reason=str(exc))
                return None
            cleanup.callback(telemetry.stop)
            telemetry.metrics.set_admission(admission.permissioned)
            telemetry.data.served_from(lambda: blobs.served_bytes)
            train = trainer.source.train
            if manifest.data.kind == "shards" and not isinstance(train, np.ndarray):
                telemetry.data.dataset(len(train.shards), train.tokens)
                if fetched is None:
                    telemetry.data.cached(len(train.shards))
        feed = None
        if fetched is not None and not isinstance(trainer.source.train, np.ndarray):
            feed = DataFeed(host=host, cache=fetched[0], rows=trainer.source.train, catalog=catalog,
                            run_id=run_id, peer_id=self_id, batch_size=manifest.batch_size,
                            seq_len=manifest.seq_len, bootstrap=source.bootstrap_peer, out=self.out,
                            metrics=telemetry.data if telemetry is not None else None)
        cap = payload_cap(trainer.spec)
        round_config = manifest.round_config(cap, opts.network)
        window = round_config.history_steps + round_config.max_future_steps + 2
        store = PayloadStore(run_id, window_steps=window)
        counters = ByteCounters()
        exchange = PayloadExchange(host, store, counters, max_payload_bytes=cap,
                                   fetch=opts.network.payload_fetch,
                                   fetch_timeout=piece_fetch_timeout(round_config))
        exchange.install()
        DialbackServer(host).install()
        return _Run(host, self_id, manifest, run_id, trainer, telemetry, round_config, exchange, counters,
                    feed, admission)

    async def _serve(self, run: _Run, source: RunSource) -> int:
        """Join the gossip, start every task, get our starting state, train, leave."""
        opts, out, changes, host = self.opts, self.out, self._changes, run.host
        counted = run.telemetry.gossip_rejected if run.telemetry is not None else None
        gossip_cfg = GossipConfig(publish_timeout=5.0)
        kinds = {"heartbeat": (2.0 / run.round_config.heartbeat_interval, gossip_cfg.heartbeat_burst),
                 "goodbye": (gossip_cfg.max_goodbyes_per_peer_per_second, gossip_cfg.goodbye_burst)}
        rate = GossipRates(gossip_cfg.max_messages_per_peer_per_second, gossip_cfg.max_peer_burst, kinds,
                           trio.current_time)
        decoder = GossipDecoder(self_id=run.self_id, run_id=run.run_id, bans=self.bans, on_rejected=counted,
                                rate=rate,
                                admits=run.admission.admits if run.admission.permissioned else None)
        async with (
            open_gossip(host, run.run_id, validator=decoder.validate, config=gossip_cfg,
                        prefilter=forwarder_prefilter(gossip_cfg.max_forwarded_per_origin_per_second,
                                                      gossip_cfg.max_forwarded_burst, trio.current_time,
                                                      counted)) as gossip,
            open_nat_traversal(host, out, None if run.telemetry is None else run.telemetry.metrics,
                               RelayServiceConfig(circuit_seconds=opts.network.relay_circuit_seconds,
                                                  circuit_bytes=opts.network.relay_circuit_bytes)) as nat,
            trio.open_nursery() as nursery,
        ):
            outbox = Outbox()
            announcements = AnnouncementLog()
            decoded = DecodedPayloads()
            fetcher = Fetcher(exchange=run.exchange, run_id=run.run_id, trainer=run.trainer, decoded=decoded,
                              out=out, telemetry=run.telemetry, decode_limit=self._decode_limit)
            driver = RoundDriver(out=out, outbox=outbox, fetcher=fetcher, changes=changes, nursery=nursery)
            gossip.prefer_members(driver.roster_ids)
            decoder.know_members(driver.roster_ids)
            pieces = run.exchange.piece_server
            nursery.start_soon(gossip.follow_uplink, pieces.own_upload_rate, pieces.peer_uplinks)
            intake = GossipIntake(decoder=decoder, driver=driver, announcements=announcements,
                                  changes=changes, out=out)
            gate = StateRequestGate(self.bans, trio.current_time)
            if run.telemetry is not None:
                run.telemetry.watch(lambda: driver.machine.counters if driver.machine is not None else {},
                                    lambda: gossip.mutes,
                                    lambda: {**gate.refusals(), "px_hearsay": host.peer_book.hearsay_refused})
            chain = open_chain(host, run.run_id, run.manifest.chain_root, opts.network,
                               signer_for(host.key_pair.private_key), gate)
            sync = SyncContext(host=host, run_id=run.run_id, max_state_bytes=opts.max_state_bytes,
                               bootstrap=source.bootstrap_peer, trainer=run.trainer,
                               round_view=lambda: driver.machine, untrusted=_untrusted_donors(out),
                               chain=chain)
            stop = StopRequest(out=out, changes=changes, leave_budget=opts.leave_budget)
            resyncer = Resyncer(sync=sync, driver=driver, intake=intake, out=out, changes=changes,
                                stopping=lambda: stop.requested)
            cohort = GenesisCohort(run.self_id, opts.genesis_peers, changes) if self.founder else None
            snapshots = SnapshotDesk(cohort=cohort, driver=driver, resync=resyncer, trainer=run.trainer,
                                     compute_limit=self._compute_limit, changes=changes)
            StateServer(host, run.run_id, snapshots.provide, admit=gate).install()
            emit_listening(out, host, opts, run.manifest, self_id=run.self_id, founder=self.founder,
                           metrics_url=run.telemetry.url if run.telemetry is not None else None)
            nursery.start_soon(run.admission.run, host)
            start_reachability(nursery, host, out, opts.network, partial(_on_verdict, nat, run.telemetry),
                               partial(join_command, run_id_hex=run.run_id.hex()))
            nursery.start_soon(nat.run)
            isolated = run.telemetry.metrics.set_isolated if run.telemetry is not None else None
            nursery.start_soon(IsolationWatch(host, out, isolated).run)
            nursery.start_soon(intake.run, gossip)
            nursery.start_soon(intake.watch_lost_peers, host.lost_peers())
            nursery.start_soon(outbox.run, gossip)
            if chain is not None:
                nursery.start_soon(chain.collect, host, host.member_peers)
            nursery.start_soon(partial(send_heartbeats, driver=driver, outbox=outbox, trainer=run.trainer,
                                       run_id=run.run_id, self_id=run.self_id,
                                       interval=run.round_config.heartbeat_interval))
            nursery.start_soon(stop.watch_signals)
            startup = Startup(self_id=run.self_id, opts=opts, out=out, trainer=run.trainer, cohort=cohort,
                              intake=intake, sync=sync, changes=changes, compute_limit=self._compute_limit)
            try:
                if opts.network.bootstrap:
                    await host.bootstrap(list(opts.network.bootstrap))
                state = await startup.state(source.resume)
            except (PeerError, TransportError) as exc:
                out.emit("error", f"error: {exc}", reason=str(exc))
                nursery.cancel_scope.cancel()
                return 1
            machine = RoundMachine(run.round_config, run.self_id, state, trio.current_time(),
                                   signer_for(run.host.key_pair.private_key))
            driver.start(machine)
            intake.release()
            nursery.start_soon(driver.run_timer)
            checkpointer = Checkpointer(store=self._ckpt_store, every=opts.checkpoint.every_steps,
                                        trainer=run.trainer, out=out, telemetry=run.telemetry,
                                        compute_limit=self._compute_limit,
                                        saved_step=source.resume.step if source.resume is not None else -1)
            lookahead = LookAhead(trainer=run.trainer, compute_limit=self._compute_limit, nursery=nursery,
                                  feed=run.feed)
            if run.feed is not None:
                nursery.start_soon(run.feed.prefetch)
            loop = TrainingLoop(
                self_id=run.self_id, machine=machine,
                runner=self._step_runner(run, machine, driver, outbox, decoded, announcements, lookahead,
                                         checkpointer, stop, nursery),
                resyncer=resyncer, lookahead=lookahead, snapshots=snapshots, checkpointer=checkpointer,
                stop=stop, steps=opts.steps, start_step=state.next_step, chain=chain)
            try:
                await loop.run()
            except DataWaitError as exc:
                out.emit("error", f"error: {exc}", reason=str(exc), field="run.data.path")
                nursery.cancel_scope.cancel()
                return 1
            await checkpointer.save(loop.applied, "exit")
            await Leaver(driver=driver, outbox=outbox, exchange=run.exchange, out=out, linger=opts.linger,
                         linger_max=opts.linger_max).leave()
            nursery.cancel_scope.cancel()
        return 0

    def _step_runner(self, run: _Run, machine: RoundMachine, driver: RoundDriver, outbox: Outbox,
                     decoded: DecodedPayloads, announcements: AnnouncementLog, lookahead: LookAhead,
                     checkpointer: Checkpointer, stop: StopRequest, nursery: trio.Nursery) -> StepRunner:
        opts, out = self.opts, self.out
        fault = None
        if opts.fault is not None:  # seeded by our id: two faulty peers never send identical payloads
            fault = FaultInjector(opts.fault, seed=int.from_bytes(run.host.peer_id.to_bytes()[-8:], "big"))
        signer = AuthorshipSigner(run.host.key_pair.private_key, run.self_id, run.run_id)
        mark = AnnouncedMark(opts.key_file, run.run_id)
        announcer = Announcer(self_id=run.self_id, run_id=run.run_id, signer=signer, mark=mark,
                              trainer=run.trainer, store=run.exchange.store, own=run.exchange.mark_own,
                              decoded=decoded, outbox=outbox, driver=driver, telemetry=run.telemetry,
                              fault=fault, decode_limit=self._decode_limit, comm_delay=opts.comm_delay)
        scorer = RoundScorer(self_id=run.self_id, bans=self.bans, trainer=run.trainer, driver=driver,
                             host=run.host, out=out, telemetry=run.telemetry,
                             compute_limit=self._compute_limit, nursery=nursery)
        reporter = StepReporter(self_id=run.self_id, out=out, telemetry=run.telemetry,
                                announcements=announcements, counters=run.counters, bans=self.bans)
        return StepRunner(machine=machine, decisions=driver.decisions, trainer=run.trainer,
                          announcer=announcer, lookahead=lookahead, scorer=scorer, reporter=reporter,
                          decoded=decoded, stop=stop,
                          checkpointer=checkpointer, changes=self._changes, out=out, steps=opts.steps,
                          compute_limit=self._compute_limit, feed=run.feed)


def _on_verdict(nat: NatTraversal, telemetry: Telemetry | None, verdict: str) -> None:
    nat.on_verdict(verdict)
    if telemetry is not None:
        telemetry.metrics.set_reachability(verdict)


def _untrusted_donors(out: Output) -> UntrustedDonors:
    def said(peer: str) -> None:
        out.emit("donor_untrusted", f"state donor {peer} served bytes that contradict the attested snapshot; "
                 "not asked again", peer=peer)
    return UntrustedDonors(on_add=said)
