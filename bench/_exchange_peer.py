"""One peer process of bench/exchange.py: the daemon's exchange path, without training.

Per round every peer stores a fresh random payload, announces (step, sha256) on the run's gossip topic
(the daemon's announcement path), and pulls every other peer's payload over ``/distro/payload/1.0.0``
from its announcer; with ``--pieces``, over the pieces protocol from every peer at once (the piece
swarm of protocol/swarm_fetch.py, whose scheduler the flow model of bench/flow.py runs). A peer's round
time runs from its own announcement to holding all N-1 other payloads.
Rounds are paced by a barrier (every peer's "finished round r" announcement) so a slow peer's late
fetches never overlap the next round's and inflate it. Every wait is bounded; on any timeout the process
prints what it has and exits non-zero, and the parent kills it by pid regardless.

Prints JSON lines on stdout: ``{"addr": ...}`` once listening, then ``{"times": [...], ...}`` at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

import trio
from distro_node.protocol.errors import FetchFailedError
from distro_node.protocol.gossip import AnnouncementChannel, open_gossip
from distro_node.protocol.host import HostConfig, P2PHost, open_host
from distro_node.protocol.partials import PartialPayloads
from distro_node.protocol.payload_fetch import fetch_payload
from distro_node.protocol.pieces_serve import PiecesServer
from distro_node.protocol.pieces_wire import PiecesConfig
from distro_node.protocol.store import PayloadStore
from distro_node.protocol.swarm_fetch import fetch_swarm
from distro_node.protocol.swarm_first_copies import PeerRates
from distro_node.protocol.swarm_request import FetchStats, SwarmRequest
from distro_node.protocol.swarm_schedule import ScheduleConfig
from distro_node.protocol.swarm_turns import HolderGate
from distro_node.protocol.transfer import PayloadRequest, PayloadServer, TransferConfig
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

RUN = bytes(32)
ANN = struct.Struct(">BQ32s")  # kind, step, sha256
KIND_PAYLOAD, KIND_DONE = 1, 2
WAIT_S = 120.0  # bound on any single wait (setup, a round, the barrier)
# Re-publish our announcement after this long without news while waiting for the others', each time twice
# as long after, up to RESEND_MAX_S: see Inbox.wait_or_resend.
RESEND_S = 1.0
RESEND_MAX_S = 8.0
PULL_ATTEMPTS = 3  # whole-payload pulls of one payload, each after the last failed
LINGER_S = 3.0  # after the last barrier, keep re-sending our last DONE this long (or until everyone hung up)
Resend = Callable[[], Awaitable[None]]


class Inbox:
    """Announcements by (kind, step), with an event that fires on every arrival (no polling)."""

    def __init__(self, time_scale: float = 1.0) -> None:
        self.seen: dict[tuple[int, int], dict[ID, bytes]] = {}
        self.changed = trio.Event()
        self._time_scale = time_scale
        # The message last re-published, and how long to wait before it goes out again.
        self._resending: tuple[Resend, float] | None = None

    async def pump(self, gossip: AnnouncementChannel) -> None:
        async for msg in gossip:
            if len(msg.data) != ANN.size:
                continue
            kind, step, digest = ANN.unpack(msg.data)
            self.seen.setdefault((kind, step), {})[msg.sender] = digest
            self.changed.set()
            self.changed = trio.Event()

    async def wait_count(self, kind: int, step: int, count: int, resend: Resend) -> dict[ID, bytes]:
        with trio.fail_after(WAIT_S):
            while len(self.seen.get((kind, step), {})) < count:
                await self.wait_or_resend(resend)
        return self.seen[(kind, step)]

    async def wait_or_resend(self, resend: Resend) -> None:
        """Wait for the next arrival; re-publish ours after RESEND_S without one, then after twice as long
        each time, up to RESEND_MAX_S (all times the run's time scale).

        A message published before a peer's pubsub stream to us is up is lost for that peer (gossipsub
        does not replay), so announcing once could leave a round waiting forever; duplicates are harmless
        because the inbox keeps one entry per sender. Why the back-off: each re-publish is a new message
        that every peer forwards to its mesh, and at a barrier where peers wait seconds for the slowest,
        one a second from each of them filled the slow peers' uplinks as they served their last pieces
        (a capture of a slow uplink, docs/benchmarks.md). Once streams are up nothing is lost.
        """
        last = self._resending
        wait = last[1] if last is not None and last[0] is resend else RESEND_S * self._time_scale
        changed = self.changed
        while not changed.is_set():
            with trio.move_on_after(wait):
                await changed.wait()
            if not changed.is_set():
                await resend()
                wait = min(2 * wait, RESEND_MAX_S * self._time_scale)
                self._resending = (resend, wait)  # kept also when the caller stops waiting


class Swarm:
    """The piece protocol's two sides for ``--pieces``: the server, and what this peer's fetches read."""

    def __init__(self, host: P2PHost, store: PayloadStore, size: int, turns: bool, time_scale: float) -> None:
        # Without turns, a busy holder's retry-after is capped at the back-off (the rest before it had one).
        schedule = ScheduleConfig() if turns else ScheduleConfig(max_rest=ScheduleConfig().backoff)
        config = PiecesConfig(max_payload_bytes=max(size, 1), schedule=schedule).dilated(time_scale)
        # The fetch gives up (and says where it stood) before the round's own bound ends the process.
        self.config = replace(config, fetch_timeout=WAIT_S - 10)
        self.partials = PartialPayloads()
        self.rates = PeerRates()  # as the daemon: measured by our fetches, read by our server
        self.server = PiecesServer(host, store, self.partials, self.config, rates=self.rates,
                                   on_upload=self._uploaded)
        self.upload_ended = 0.0  # perf_counter when our last piece upload ended
        self.own_first_ended = 0.0  # ... and our last first copy of our own payload
        self._own_first = 0
        self.stats = FetchStats()
        self.gate = HolderGate() if turns else None  # one request to a holder at once over our fetches
        self.server.install()

    def _uploaded(self, _: int) -> None:
        self.upload_ended = time.perf_counter()
        own_first = self.server.served_by_kind["own_first"]  # counted before the upload is reported
        if own_first != self._own_first:
            self._own_first, self.own_first_ended = own_first, self.upload_ended


async def _round(host: P2PHost, gossip: AnnouncementChannel, inbox: Inbox, store: PayloadStore,
                 xfer: TransferConfig, step: int, peers: int, size: int, swarm: Swarm | None) -> float:
    digest = store.put(step, os.urandom(size))
    if swarm is not None:
        swarm.server.mark_own(step, digest)
    t0 = time.perf_counter()

    async def announce() -> None:
        await gossip.publish(ANN.pack(KIND_PAYLOAD, step, digest))

    await announce()

    async def pull(sender: ID, want: bytes) -> None:
        if swarm is None:
            # A pull cut by a connection reset (a busy machine's, once in a CI run) is asked again; the
            # round's own bound still ends a peer that never gets it.
            for attempt in range(PULL_ATTEMPTS):
                try:
                    await fetch_payload(host, PayloadRequest(RUN, step, want), [sender], store=store,
                                        config=xfer, expected_size=size)
                    return
                except FetchFailedError:
                    if attempt + 1 == PULL_ATTEMPTS:
                        raise
            return
        others = sorted(host.connected_peers(), key=str)
        await fetch_swarm(host, SwarmRequest(RUN, step, want, size), others, store=store,
                          partials=swarm.partials, complete=[sender], config=swarm.config, stats=swarm.stats,
                          gate=swarm.gate, rates=swarm.rates)

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as pulls:
            started: set[ID] = set()
            while len(started) < peers - 1:
                for sender, want in list(inbox.seen.get((KIND_PAYLOAD, step), {}).items()):
                    if sender not in started:
                        started.add(sender)
                        pulls.start_soon(pull, sender, want)
                if len(started) < peers - 1:
                    await inbox.wait_or_resend(announce)
    return time.perf_counter() - t0


async def _linger(host: P2PHost, resend: Resend) -> None:
    """Stay a little after the last barrier: ``publish`` only queues a message, so a peer that left right
    after publishing its last DONE often closed the host before the message was written, and the other peer
    waited for it until its deadline (the 1-in-5 failure of the 2-peer smoke run). Bounded; ends early once
    every other peer hung up."""
    with trio.move_on_after(LINGER_S):
        while host.connected_peers():
            await resend()
            with trio.move_on_after(RESEND_S / 2):
                while host.connected_peers():
                    await trio.sleep(0.05)


async def peer_main(peers: int, rounds: int, size: int, bootstrap: str | None, listen: str,
                    pieces: bool, turns: bool, time_scale: float) -> int:
    # Reads paced as long as at the profiles' rates (noise_reads.py): at a fraction of them, the same bytes
    # take ``time_scale`` times longer to come in.
    cfg = HostConfig(listen_addrs=(listen,), px_interval=0.5, dial_timeout=20.0, px_timeout=10.0,
                     read_pace_max_wait=HostConfig.read_pace_max_wait * time_scale)
    xfer = TransferConfig(max_payload_bytes=max(size, 1), attempt_timeout=60.0)
    async with open_host(create_new_key_pair(), cfg) as host, open_gossip(host, RUN) as gossip:
        store = PayloadStore(RUN, window_steps=3)
        PayloadServer(host, store, xfer).install()
        swarm = Swarm(host, store, size, turns, time_scale) if pieces else None
        print(json.dumps({"addr": str(host.addrs()[0])}), flush=True)
        if bootstrap:
            await host.bootstrap([bootstrap])
        await host.wait_for_peers(peers - 1, timeout=WAIT_S)
        # Peer exchange twice a second forms the swarm fast; a daemon's default interval from here on, so
        # its replies (hundreds of bytes, several a second) stop sharing the slow uplinks with the exchange.
        host.config = replace(host.config, px_interval=HostConfig().px_interval)
        await gossip.wait_for_subscribers(host.connected_peers(), timeout=WAIT_S)
        # As the daemon with its roster: every peer of the run is a member (own messages go to each directly).
        gossip.prefer_members(lambda: {str(p) for p in host.connected_peers()})
        inbox = Inbox(time_scale)
        times: list[float] = []
        serving: list[float] = []  # per round, from its start to the end of our last upload in it
        own_first: list[float] = []  # ... and to the end of the last first copy of our own payload
        rc = 0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(inbox.pump, gossip)
            if swarm is not None:  # as the daemon: a slow uplink holds the gossip it forwards
                server = swarm.server
                nursery.start_soon(gossip.follow_uplink, server.own_upload_rate, server.peer_uplinks)
            try:
                for step in range(rounds):
                    started = time.perf_counter()
                    times.append(await _round(host, gossip, inbox, store, xfer, step, peers, size, swarm))
                    # Barrier: everyone holds everything of this round before anyone starts the next, and
                    # nobody leaves while others may still fetch from it.
                    async def done(step: int = step) -> None:
                        await gossip.publish(ANN.pack(KIND_DONE, step, bytes(32)))

                    await done()
                    await inbox.wait_count(KIND_DONE, step, peers - 1, done)
                    if swarm is not None:  # everyone holds everything: our serving for the round is over
                        serving.append(max(0.0, swarm.upload_ended - started))
                        own_first.append(max(0.0, swarm.own_first_ended - started))
                await _linger(host, done)
            except trio.TooSlowError:
                rc = 2
                step = len(times)
                heard = [len(inbox.seen.get((kind, step), {})) for kind in (KIND_PAYLOAD, KIND_DONE)]
                logging.getLogger("exchange_peer").warning(
                    "timed out at round %d: %d payload and %d done announcements of %d, %d peers connected",
                    step, *heard, peers - 1, len(host.connected_peers()))
            nursery.cancel_scope.cancel()
        held, late = gossip.held_forwards()
        moved = {} if swarm is None else {"downloaded": swarm.stats.downloaded,
                                          "uploaded": swarm.server.uploaded_bytes,
                                          "refused": swarm.server.busy, "cut": swarm.server.uploads_cut,
                                          "cpu_s": round(time.process_time(), 3),
                                          "served_by_kind": swarm.server.served_by_kind,
                                          "serving_s": serving, "own_first_s": own_first,
                                          "forwards_held": held, "forwards_late": late}
        print(json.dumps({"times": times, "timed_out": rc != 0, **moved}), flush=True)
        return rc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peers", type=int, required=True)
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--size", type=int, required=True)
    ap.add_argument("--bootstrap", default=None)
    ap.add_argument("--listen", default="/ip4/127.0.0.1/tcp/0", help="listen multiaddr")
    ap.add_argument("--pieces", action="store_true", help="fetch in pieces from every peer (piece swarm)")
    ap.add_argument("--no-turns", action="store_true", help="no retry-after rests, no holder gate")
    ap.add_argument("--time-scale", type=float, default=1.0, metavar="F",
                    help="the pieces protocol's durations times F, its prior rate over F (links at 1/F of a "
                         "profile's rates: PiecesConfig.dilated)")
    ap.add_argument("--log-level", default="warning", help="log level of the fetch and serving code (stderr)")
    args = ap.parse_args()
    if not args.time_scale >= 1:
        ap.error(f"--time-scale must be >= 1, got {args.time_scale}")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("distro_node.protocol").setLevel(args.log_level.upper())
    return trio.run(peer_main, args.peers, args.rounds, args.size, args.bootstrap, args.listen, args.pieces,
                    not args.no_turns, args.time_scale)


if __name__ == "__main__":
    sys.exit(main())
