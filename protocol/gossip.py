"""Per-run announcement topic over gossipsub: small signed messages only.

Facts about py-libp2p 0.8.1 this module is shaped by (checked in the installed source):
- ``Pubsub(strict_signing=True)`` is the default: every published message is signed with the host key
  (``libp2p-pubsub:`` prefix) and every received one is checked against the key embedded in ``from_id``
  before validators run. We keep it on and report ``from_id`` as the sender; no extra signature layer.
- Outbound RPCs larger than the per-peer queue's ``max_message_size`` (1 MiB, not configurable) are dropped
  with a DEBUG log and ``publish()`` returns normally. We check size first and raise instead.
- Inbound frames are capped by ``Pubsub(max_inbound_rpc_size=...)`` before the body is read; over-cap frames
  reset the stream. Set explicitly, at 1 MiB: honest peers batch several messages and control data into one
  RPC up to their 1 MiB outbound split size, so a lower cap would make us reset honest peers. Each message
  inside is then held to our 32 KiB limit by the validator (rejected, not forwarded).
- Gossipsub's built-in spam guard rejects more than ``max_messages_per_topic_per_second`` (default 10) per
  forwarder, *including our own publishes*, silently. A swarm of N peers relays N announcements per round
  through each forwarder, so we raise the limit; the real per-peer limit is ours, per signer, in the
  validator (``max_messages_per_peer_per_second``, node/peer/rate_limit.py).
- Catch-up sends (a newly subscribed peer) and the mesh's choice of peers are shaped in
  protocol/gossip_router.py: catch-up goes through the per-peer queue, bounded, and the run's members are
  kept in the mesh ahead of strangers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio
from libp2p.abc import ISubscriptionAPI
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, PROTOCOL_ID_V12
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service

from .errors import AnnouncementTooLargeError, GossipError
from .gossip_config import GossipConfig, announce_topic
from .gossip_mute import RefusalLedger
from .gossip_pubsub import Prefilter, RunPubsub
from .gossip_router import MemberIds, RunRouter
from .gossip_uplink import SlowUplink, follow_uplink
from .host import P2PHost
from .wire import reset_quietly

logger = logging.getLogger(__name__)

# py-libp2p 0.8.1's per-peer outbound queue holds 32 RPCs (OutBoundQueueSize); keep bursts below half of it.
_QUEUE_HIGH_WATER = 16
_QUEUE_POLL = 0.002

Validator = Callable[[ID, bytes], bool]


@dataclass(frozen=True)
class GossipMessage:
    """One announcement as delivered to the application; ``sender`` is signature-verified by libp2p."""

    sender: ID
    data: bytes
    seqno: int


class AnnouncementChannel:
    """Publish to and receive from one run's announcement topic. Created by ``open_gossip``."""

    def __init__(self, host: P2PHost, pubsub: Pubsub, topic: str, config: GossipConfig) -> None:
        self.topic = topic
        self.config = config
        self._host = host
        self._pubsub = pubsub
        self._send, self._recv = trio.open_memory_channel[GossipMessage](config.receive_buffer)
        self.dropped = 0  # messages lost because the application did not drain ``receive`` fast enough
        self.stuck_resets = 0  # pubsub streams reset because their outbound queue stopped draining
        self._progress: dict[ID, tuple[int, float]] = {}  # full queues: (lowest depth seen, when)
        self._reset_peers: set[ID] = set()
        self.relinks = 0  # pubsub streams opened by _keep_links after py-libp2p had given up on a peer
        self.refusals = RefusalLedger(config.mute)
        self.mutes = 0  # strangers muted (protocol/gossip_mute.py)
        self._to_block: list[ID] = []  # muted, to be cut off by _keep_links (blocking needs to await)

    async def publish(self, data: bytes) -> None:
        """Sign and publish; raises AnnouncementTooLargeError rather than letting libp2p drop silently."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"announcement must be bytes, not {type(data).__name__}")
        if len(data) > self.config.max_message_bytes:
            raise AnnouncementTooLargeError(len(data), self.config.max_message_bytes)
        await self._wait_for_outbound_room()
        try:
            await self._pubsub.publish(self.topic, bytes(data))
        except Exception as exc:  # PeerDataError and friends from py-libp2p
            raise GossipError(f"publish on {self.topic} failed: {exc!r}") from exc

    async def _wait_for_outbound_room(self) -> None:
        """Back-pressure for bursts: py-libp2p drops (silently) when a peer's 32-entry outbound queue is full.

        ``publish()`` enqueues without yielding, so a tight publish loop fills the queues before the sender
        tasks ever run. Waiting until every *draining* queue is at most half full keeps bursts lossless.

        A queue that stops draining must not hold up the others: waiting for it made every publish of the
        node wait ``publish_timeout`` and then fail, so one slow link silenced the node for everybody. After
        ``stuck_after`` such a peer is left out of the wait (py-libp2p drops what does not fit its queue;
        gossip still reaches it through other mesh peers). Only after ``reset_after`` without progress is
        its link treated as dead: stream reset, connections closed, re-dialed by peer exchange. That used to
        happen after ``stuck_after`` already, and on shared cores a peer busy for a second (a newcomer
        loading its state) then lost every connection, its in-flight payload and state transfers with them,
        and the re-opened streams started the catch-up flood again (see the module docstring).
        GossipError only if no queue made progress at all.
        """
        with trio.move_on_after(self.config.publish_timeout) as scope:
            while True:
                now = trio.current_time()
                full = {p: len(q) for p, q in self._pubsub.peer_queues.items() if len(q) > _QUEUE_HIGH_WATER}
                waiting = False
                for peer_id, depth in full.items():
                    last = self._progress.get(peer_id)
                    if last is None or depth < last[0]:
                        self._progress[peer_id] = (depth, now)
                        waiting = True
                    elif now - last[1] < self.config.stuck_after:
                        waiting = True
                    elif now - last[1] >= self.config.reset_after:
                        await self._drop_stuck_peer(peer_id, depth)
                for peer_id in [p for p in self._progress if p not in full]:
                    del self._progress[peer_id]
                self._reset_peers &= set(full)
                if not waiting:
                    break
                await trio.sleep(_QUEUE_POLL)
            await trio.lowlevel.checkpoint()
        if scope.cancelled_caught:
            raise GossipError(f"outbound gossip queues did not drain within {self.config.publish_timeout:g}s")

    async def _drop_stuck_peer(self, peer_id: ID, depth: int) -> None:
        """Reset the pubsub stream of a peer whose queue made no progress (at most once per stuck episode)."""
        if peer_id in self._reset_peers:
            return
        self._reset_peers.add(peer_id)
        self.stuck_resets += 1
        logger.warning("gossip queue to %s stuck at %d RPCs for %.1fs; resetting its pubsub stream",
                       peer_id, depth, self.config.reset_after)
        stream = self._pubsub.peers.get(peer_id)
        if stream is not None:
            await reset_quietly(stream)
        # No progress for this long means the connection is half dead (the remote stopped reading it).
        # Closing every connection to the peer lets both sides notice; peer exchange re-dials it and pubsub
        # opens fresh streams on the new connection.
        await self._host.disconnect(peer_id)

    async def receive(self) -> GossipMessage:
        return await self._recv.receive()

    def __aiter__(self) -> AsyncIterator[GossipMessage]:
        return self._recv.__aiter__()

    def prefer_members(self, members: MemberIds) -> None:
        """Keep these peers (base58 ids, asked afresh each time) in the mesh ahead of strangers and send our
        own messages to each of them directly (protocol/gossip_router.py)."""
        router = self._pubsub.router
        if isinstance(router, RunRouter):
            router.prefer(members)

    async def follow_uplink(self, own_rate: Callable[[], float | None],
                            peer_uplinks: Callable[[], Sequence[float]]) -> None:
        """Judge our uplink against our peers' until cancelled; while it is slow, others' messages are held
        before forwarding (protocol/gossip_uplink.py). Rates in bytes/s, as this peer measured them."""
        router = self._pubsub.router
        if not isinstance(router, RunRouter):
            raise GossipError("follow_uplink needs the run's router")

        def set_slow(slow: bool) -> None:
            router.slow_uplink = slow

        cfg = self.config
        await follow_uplink(SlowUplink(cfg.slow_uplink_ratio), set_slow, own_rate, peer_uplinks,
                            cfg.uplink_check_interval)

    def held_forwards(self) -> tuple[int, int]:
        """Copies of others' messages held on a slow uplink, and how many of them went out when the hold
        ended (the rest were spared: the peer had sent us the message)."""
        router = self._pubsub.router
        if not isinstance(router, RunRouter):
            return 0, 0
        return router.forwards_held, router.forwards_late

    def subscribers(self) -> set[ID]:
        """Peers that told us they are subscribed to this topic."""
        return set(self._pubsub.peer_topics.get(self.topic, set()))

    async def wait_for_subscribers(self, peers: set[ID], timeout: float) -> None:
        """Wait until each peer has subscribed (so a publish reaches it); trio.TooSlowError on timeout."""
        with trio.fail_after(timeout):
            for peer_id in peers:
                await self._pubsub.wait_for_subscription(peer_id, self.topic, timeout=timeout)

    def _accept(self, forwarder: ID, msg: rpc_pb2.Message, user: Validator | None) -> bool:
        # Runs after libp2p's signature check. Oversized messages are rejected so they are not forwarded.
        ok = len(msg.data) <= self.config.max_message_bytes and self._user_accepts(msg, user)
        if forwarder != self._host.peer_id:
            self._count(forwarder, ok)
        return ok

    @staticmethod
    def _user_accepts(msg: rpc_pb2.Message, user: Validator | None) -> bool:
        if user is None:
            return True
        try:
            return bool(user(ID(msg.from_id), bytes(msg.data)))
        except Exception as exc:
            logger.debug("announcement validator raised %r; rejecting", exc)
            return False

    def _count(self, forwarder: ID, ok: bool) -> None:
        router = self._pubsub.router
        member = isinstance(router, RunRouter) and router.is_member(forwarder)
        if self.refusals.record(str(forwarder), ok, member=member, now=trio.current_time()):
            self.mutes += 1
            logger.info("muting %s for %.0fs: it forwards us mostly refused gossip", forwarder,
                        self.config.mute.mute_s)
            # The set, not py-libp2p's add_to_blacklist: that also resets the peer's stream in a task that
            # raises KeyError (and takes the host down) when the peer's stream went away meanwhile.
            self._pubsub.blacklisted_peers.add(forwarder)
            self._to_block.append(forwarder)

    async def _cut_off_muted(self) -> None:
        """Muted strangers lose their connections for the mute (the host refuses their streams and never
        dials them), so they cost us nothing more: no stream to read, no peer exchange with them."""
        pubsub = self._pubsub
        while self._to_block:
            await self._host.block(self._to_block.pop())
        for forwarder in self.refusals.expired(trio.current_time()):
            peer = ID.from_base58(forwarder)
            pubsub.blacklisted_peers.discard(peer)
            self._host.unblock(peer)

    async def _keep_links(self) -> None:
        """Open our pubsub stream to every subscriber we cannot send to.

        py-libp2p opens it once, when a connection comes up, and gives up for good if the remote refuses the
        protocol. A peer restarted with its identity and listen port is re-dialed by the others as soon as it
        listens, before its gossip is attached, so it is refused exactly then: it heard nothing from those
        peers until the connection happened to be replaced (tests/peer/test_peer_rejoin.py stalled for
        minutes). Its subscription arriving on its own stream says it speaks pubsub now.
        """
        while True:
            await trio.sleep(self.config.link_check_interval)
            pubsub = self._pubsub
            await self._cut_off_muted()
            connected = self._host.connected_peers()
            for peer_id in self.subscribers() - set(pubsub.peers) - pubsub.blacklisted_peers:
                if peer_id in connected and await pubsub.ensure_peer_stream(
                    peer_id, timeout=self.config.link_check_interval
                ):
                    self.relinks += 1
                    logger.info("gossip stream to %s re-opened (py-libp2p had given up on it)", peer_id)

    async def _pump(self, subscription: ISubscriptionAPI) -> None:
        while True:
            msg = await subscription.get()
            sender = ID(msg.from_id)
            if sender == self._host.peer_id and not self.config.deliver_own:
                continue
            item = GossipMessage(sender=sender, data=bytes(msg.data), seqno=int.from_bytes(msg.seqno, "big"))
            try:
                self._send.send_nowait(item)
            except trio.WouldBlock:
                self.dropped += 1
                logger.warning("announcement buffer full on %s; dropped (total %d)", self.topic, self.dropped)


@asynccontextmanager
async def open_gossip(
    host: P2PHost,
    run_id: bytes,
    *,
    validator: Validator | None = None,
    config: GossipConfig | None = None,
    name: str = "announce",
    prefilter: Prefilter | None = None,
) -> AsyncIterator[AnnouncementChannel]:
    """Join the run's topic for the duration of the block.

    ``validator(sender, data) -> bool`` runs for every message (ours included) before delivery and
    forwarding; a False or an exception rejects the message. Keep it cheap and synchronous: libp2p calls it
    inline on the receive path. ``prefilter(forwarder, origin id bytes) -> bool`` runs on every message a
    peer sends us before anything else, the signature check included (see protocol/gossip_pubsub.py).
    """
    cfg = config or GossipConfig()
    router = RunRouter(
        protocols=[PROTOCOL_ID_V12, PROTOCOL_ID_V11],
        degree=cfg.degree,
        degree_low=cfg.degree_low,
        degree_high=cfg.degree_high,
        heartbeat_interval=cfg.heartbeat_interval,
        idontwant_min_bytes=cfg.idontwant_min_bytes,
        slow_uplink_hold=cfg.slow_uplink_hold,
        max_messages_per_topic_per_second=cfg.max_messages_per_topic_per_second,
        # py-libp2p's "adaptive gossip" rescores the mesh every 30 s and rewrites the heartbeat interval and
        # degree bounds from that score: a healthy 4-peer swarm (mesh 3 of degree 4) scored 0.61, and the
        # 1 s heartbeat became 60 s, so mesh repair after a peer left and IHAVE gossip waited up to a minute.
        # The config above is what the run uses.
        adaptive_gossip_enabled=False,
    )
    pubsub = RunPubsub(host.libp2p, router, strict_signing=True,
                        max_inbound_rpc_size=cfg.max_inbound_rpc_bytes)
    pubsub.prefilter = prefilter
    pubsub.on_copy = router.note_copy
    # A message's id is its sender plus a sequence number, and py-libp2p starts the sequence at the current
    # time in *seconds*, one more per message. A peer sending ~10 messages a second, restarted with its
    # identity, therefore reused numbers its previous process had sent, and every peer dropped its messages
    # as already seen until the new numbers passed the old ones: on the namespace testbed for ~11 s after a
    # restart, and in bench/churn.py's N3 (a warming peer sends fewer messages) for good. Nanoseconds, as
    # go-libp2p does, leave no overlap.
    pubsub.counter = time.time_ns()
    topic = announce_topic(run_id, name)
    channel = AnnouncementChannel(host, pubsub, topic, cfg)
    pubsub.set_topic_validator(topic, lambda fwd, msg: channel._accept(fwd, msg, validator), False)
    # Pubsub registered its inbound handler unguarded. When the pubsub service stops while a peer's RPC is
    # in flight, 0.8.1 raises "Nursery is closed to new arrivals" out of that handler, through the
    # connection's task group, and takes the whole host down. Re-register it behind our guard.
    for protocol in router.get_protocols():
        host.set_handler(protocol, pubsub.stream_handler)
    try:
        async with background_trio_service(pubsub), background_trio_service(router):
            await pubsub.wait_until_ready()
            subscription = await pubsub.subscribe(topic)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(channel._pump, subscription)
                nursery.start_soon(channel._keep_links)
                # Peers connected before we attached never fired our notifee; register them explicitly.
                for peer_id in host.connected_peers():
                    nursery.start_soon(_register_existing_peer, pubsub, peer_id)
                try:
                    yield channel
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        for protocol in router.get_protocols():
            host.remove_handler(protocol)


async def _register_existing_peer(pubsub: Pubsub, peer_id: ID) -> None:
    try:
        await pubsub.ensure_peer_stream(peer_id)
    except Exception as exc:
        logger.debug("could not open pubsub stream to already-connected %s: %r", peer_id, exc)
