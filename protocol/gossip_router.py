"""The gossipsub router of a run's topic: py-libp2p 0.8.1's GossipSub with two behaviours changed.

Catch-up through the queue. Catch-up traffic bypasses the per-peer outbound queue in 0.8.1: when a peer
subscribes (or its pubsub stream is re-opened) ``GossipSub.send_recent_messages`` writes the whole
message-cache window (every message of the last ``gossip_window`` heartbeats: 600-900 measured in the 4-peer
join test) straight onto the new stream, and ``flush_pending_messages`` does the same with messages held
while the peer was being identified, both concurrently with the queue's own sending task. This was the
mid-run join failure: each existing peer flooded the newcomer's fresh stream with hundreds of RPCs, the
newcomer (busy loading state, on shared cores) could not validate them as fast, the yamux window closed, the
peer's queue stopped draining, our stuck-queue guard reset the link, and the re-opened stream got the (by
then larger) window again: a loop that left one direction of a link silent for tens of seconds (and the
newcomer's in-flight transfers lost with the closed connections). Both kinds go through the peer's queue
here, newest ``CATCH_UP_MESSAGES`` only: enough for the race they exist for (a message published just before
the peer's subscription arrived); anything older is recovered by the round protocol (statuses,
re-announces).

Members first. In an open run anyone may subscribe to the topic, and gossipsub picks mesh peers at random
among subscribers and accepts every GRAFT up to ``degree_high``. With 10 made-up identities beside 4 honest
peers, an honest peer's mesh of 4 was mostly strangers, its messages reached the other members only through
them, and the honest step rate fell to 0.16x (docs/benchmarks.md, "A crowd of made-up identities"). Once
the application names the run's members (``prefer``: the roster, warming newcomers included):
- the mesh is filled with members before strangers, and at each heartbeat a stranger in the mesh makes way
  for a member outside it while fewer than ``degree`` members are in it;
- a stranger's GRAFT is refused (PRUNE) when the mesh already holds ``degree`` peers, and strangers are
  pruned first when the mesh is over ``degree_high``;
- our own messages go to every subscribed member directly (flood publishing, as go-libp2p does for its
  own messages), so a member's vote or announcement never waits on a stranger's forwarding.
Relayed last. A member we reach only through a relay (a peer behind another NAT whose hole punch failed)
is left out of the mesh and of our own flood publishing while a member over a direct connection is in
reach: a public member's mesh carries the message to it anyway, and every copy over a circuit costs the
relay's uplink and a second hop. Behind resetting NATs, with the three NAT'd peers meshed over circuits,
steps took 2.9x those of the same swarm port-forwarded; with no circuits between them, about 1x
(bench/nat.py). Where no direct member is in reach, relayed ones are used as any other.
Held on a slow uplink. A peer that judges its uplink slow (protocol/gossip_uplink.py) holds others' messages
for ``slow_uplink_hold`` seconds before forwarding them to the members it reaches directly, and then sends
them only to those that sent it no copy meanwhile.
Strangers still get gossip (IHAVE) and a mesh slot where members leave room, so an honest newcomer follows
the run until it is listed, and then it is a member. A stranger muted for flooding (protocol/gossip_mute.py,
py-libp2p's blacklist) gets neither: it is left out of every choice of peers and pruned from the mesh.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable

import trio
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2

from .circuits import Kind, connection_kind
from .gossip_lean import LeanGossip
from .gossip_uplink import HeldForwards

# Catch-up messages queued for a newly subscribed peer; below the channel's queue high water mark.
CATCH_UP_MESSAGES = 8
_EVERYONE = 1 << 30

MemberIds = Callable[[], Collection[str]]


def _nobody() -> Collection[str]:
    return ()


class RunRouter(LeanGossip):
    """GossipSub with bounded, queued catch-up and a members-first mesh (see the module docstring), and
    fewer bytes per message (protocol/gossip_lean.py)."""

    def __init__(self, *args: object, slow_uplink_hold: float = 0.0, **kwargs: object) -> None:
        if not 0 <= slow_uplink_hold < 1e6:
            raise ValueError(f"slow_uplink_hold must be a number of seconds >= 0, got {slow_uplink_hold}")
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._members: MemberIds = _nobody
        self.heartbeats = 0  # mesh heartbeats run, for tests that wait on the heartbeat
        # Held on a slow uplink (protocol/gossip_uplink.py); slow_uplink is set by the uplink's judge.
        self.slow_uplink = False
        self.slow_uplink_hold = slow_uplink_hold
        self._held = HeldForwards()
        self.forwards_held = 0  # copies held back, for tests and profiles
        self.forwards_late = 0  # ...of which sent when the hold ended (the peer sent us no copy)

    def prefer(self, members: MemberIds) -> None:
        """Name the run's members (base58 peer ids); called for every mesh decision and own publish."""
        self._members = members

    def is_member(self, peer_id: ID) -> bool:
        return str(peer_id) in self._members()

    def _member_set(self) -> frozenset[str]:
        return frozenset(self._members())

    # -- catch-up ---------------------------------------------------------------------------------------

    async def send_recent_messages(self, peer_id: ID, topic: str) -> None:
        cache = self.mcache
        newest_first = [
            entry.mid
            for entries in cache.history[: cache.window_size]
            for entry in reversed(entries)
            if topic in entry.topics
        ]
        for mid in reversed(newest_first[:CATCH_UP_MESSAGES]):
            msg = cache.get(mid)
            if msg is not None and self._may_send(peer_id, list(msg.topicIDs)):
                self.send_rpc(peer_id, rpc_pb2.RPC(publish=[msg]))

    def _may_send(self, peer_id: ID, topics: list[str]) -> bool:
        return self.scorer is None or self.scorer.allow_publish(peer_id, topics)

    async def flush_pending_messages(self, peer_id: ID) -> None:
        self._prune_pending_messages(peer_id)
        held = self._pending_messages.pop(peer_id, [])
        pubsub = self.pubsub
        if pubsub is None:
            return
        topics = {t for t, peers in pubsub.peer_topics.items() if peer_id in peers}
        for _, rpc in held[-CATCH_UP_MESSAGES:]:
            msg_topics = [t for m in rpc.publish for t in m.topicIDs]
            if topics.intersection(msg_topics) and self._may_send(peer_id, msg_topics):
                self.send_rpc(peer_id, rpc)

    # -- members first ----------------------------------------------------------------------------------

    def _get_in_topic_gossipsub_peers_from_minus(
        self, topic: str, num_to_select: int, minus: Iterable[ID], backoff_check: bool = False
    ) -> list[ID]:
        muted = self.pubsub.blacklisted_peers if self.pubsub is not None else set()
        everyone = super()._get_in_topic_gossipsub_peers_from_minus(topic, _EVERYONE, minus, backoff_check)
        pool = [p for p in everyone if p not in muted]
        members = self._member_set()
        relayed = self._relayed_left_out(topic, pool, members)
        pool = [p for p in pool if p not in relayed]
        first = [p for p in pool if str(p) in members]
        rest = [p for p in pool if str(p) not in members]
        random.shuffle(first)
        random.shuffle(rest)
        return (first + rest)[: max(0, num_to_select)]

    def mesh_heartbeat(self) -> tuple[defaultdict[ID, list[str]], defaultdict[ID, list[str]]]:
        self.heartbeats += 1
        graft, prune = super().mesh_heartbeat()
        muted = self.pubsub.blacklisted_peers if self.pubsub is not None else set()
        members = self._member_set()
        for topic, mesh in self.mesh.items():
            relayed = self._relayed_left_out(topic, list(mesh), members)
            for peer in [p for p in mesh if p in muted or p in relayed]:
                self._evict(topic, peer, graft, prune)
        if members:
            for topic in list(self.mesh):
                self._seat_members(topic, members, graft, prune)
        return graft, prune

    def _seat_members(self, topic: str, members: frozenset[str], graft: defaultdict[ID, list[str]],
                      prune: defaultdict[ID, list[str]]) -> None:
        """Graft members outside the mesh while fewer than ``degree`` are in it, evicting strangers."""
        pubsub = self.pubsub
        if pubsub is None or topic not in pubsub.peer_topics:
            return
        mesh = self.mesh[topic]
        strangers = [p for p in mesh if str(p) not in members]
        seated = len(mesh) - len(strangers)
        outside = [p for p in self._get_in_topic_gossipsub_peers_from_minus(topic, _EVERYONE, mesh, True)
                   if str(p) in members]
        for peer in outside[: max(0, self.degree - seated)]:
            if len(mesh) >= self.degree and strangers:
                self._evict(topic, strangers.pop(), graft, prune)
            elif len(mesh) >= self.degree_high:
                return
            mesh.add(peer)
            self._notify_mesh_peer_added(peer, topic)
            if self.scorer is not None:
                self.scorer.on_join_mesh(peer, topic)
            graft[peer].append(topic)
        # A member that grafted us itself (between heartbeats) took a seat without evicting anyone: strangers
        # above ``degree`` would otherwise keep their seats for good, the mesh being within degree_high.
        while strangers and len(mesh) > self.degree:
            self._evict(topic, strangers.pop(), graft, prune)

    def _evict(self, topic: str, peer: ID, graft: defaultdict[ID, list[str]],
               prune: defaultdict[ID, list[str]]) -> None:
        self.mesh[topic].discard(peer)
        if self.scorer is not None:
            self.scorer.on_leave_mesh(peer, topic)
        if topic in graft.get(peer, []):
            graft[peer].remove(topic)
            if not graft[peer]:
                del graft[peer]
        else:
            prune[peer].append(topic)

    def _select_peers_for_pruning(self, topic: str, num_to_prune: int) -> list[ID]:
        members = self._member_set()
        if not members:
            return list(super()._select_peers_for_pruning(topic, num_to_prune))
        mesh = list(self.mesh.get(topic, ()))
        strangers = [p for p in mesh if str(p) not in members]
        seated = [p for p in mesh if str(p) in members]
        random.shuffle(strangers)
        random.shuffle(seated)
        return (strangers + seated)[: max(0, num_to_prune)]

    async def handle_graft(self, graft_msg: rpc_pb2.ControlGraft, sender_peer_id: ID) -> None:
        topic = graft_msg.topicID
        mesh = self.mesh.get(topic)
        members = self._member_set()
        if (members and mesh is not None and sender_peer_id not in mesh and len(mesh) >= self.degree
                and str(sender_peer_id) not in members):
            await self.emit_prune(topic, sender_peer_id, False, False)
            return
        if mesh is not None and sender_peer_id in self._relayed_left_out(topic, [sender_peer_id], members):
            await self.emit_prune(topic, sender_peer_id, False, False)
            return
        await super().handle_graft(graft_msg, sender_peer_id)

    def _get_peers_to_send(
        self, topic_ids: Iterable[str], msg_forwarder: ID, origin: ID, msg_id: bytes | None = None
    ) -> Iterable[ID]:
        topics = list(topic_ids)
        chosen = set(super()._get_peers_to_send(topics, msg_forwarder, origin, msg_id))
        pubsub = self.pubsub
        if pubsub is not None and origin == pubsub.my_id:
            members = self._member_set()
            for topic in topics:
                chosen.update(p for p in pubsub.peer_topics.get(topic, ()) if str(p) in members)
            chosen.discard(origin)
            for topic in topics:
                chosen -= self._relayed_left_out(topic, list(chosen), members)
        elif self.slow_uplink and self.slow_uplink_hold > 0 and msg_id is not None:
            chosen -= self._hold(msg_id, chosen)
        return chosen

    # -- held on a slow uplink ----------------------------------------------------------------------------

    def _hold(self, msg_id: bytes, chosen: Collection[ID]) -> set[ID]:
        """Hold the forwarding of ``msg_id`` to the members among ``chosen`` we reach directly; returns them
        (none when nothing could be held). py-libp2p put the message in its cache just before asking."""
        pubsub = self.pubsub
        msg = self.mcache.get(msg_id)
        if pubsub is None or msg is None:
            return set()
        members = self._member_set()
        held = {p for p in chosen if str(p) in members and connection_kind(pubsub.host, p) is Kind.DIRECT}
        if not held or not self._held.hold(msg_id, held):
            return set()
        self.forwards_held += len(held)
        self.manager.run_task(self._forward_when_held, msg_id, msg)
        return held

    async def _forward_when_held(self, msg_id: bytes, msg: rpc_pb2.Message) -> None:
        await trio.sleep(self.slow_uplink_hold)
        lacking = self._held.release(msg_id)
        pubsub = self.pubsub
        if pubsub is None:
            return
        topics = list(msg.topicIDs)
        rpc = rpc_pb2.RPC(publish=[msg])
        for peer in lacking:
            if peer in pubsub.peers and self._may_send(peer, topics):
                self.forwards_late += 1
                self.send_rpc(peer, rpc)

    def note_copy(self, forwarder: ID, msg: rpc_pb2.Message) -> None:
        """``forwarder`` sent us ``msg`` (RunPubsub, as it reads it): it needs no copy from us."""
        if self.slow_uplink and self.pubsub is not None:
            self._held.copy_from(self.pubsub.get_message_id(msg), forwarder)

    # -- relayed last -------------------------------------------------------------------------------------

    def _relayed_left_out(self, topic: str, peers: Collection[ID], members: frozenset[str]) -> set[ID]:
        """Those of ``peers`` we reach only through a relay, when a member of ``topic`` over a direct
        connection is in reach (our mesh or a subscriber); none otherwise."""
        pubsub = self.pubsub
        if pubsub is None:
            return set()
        host = pubsub.host
        relayed = {p for p in peers if connection_kind(host, p) is Kind.RELAYED}
        if not relayed:
            return set()
        reach = set(self.mesh.get(topic, ())) | set(pubsub.peer_topics.get(topic, ()))
        direct_member = any((not members or str(p) in members) and connection_kind(host, p) is Kind.DIRECT
                            for p in reach)
        return relayed if direct_member else set()
