"""Signed gossip written straight into pubsub's per-peer queues: how the test adversaries flood cheaply.

Publishing through ``AnnouncementChannel.publish`` tops out near 100 messages a second on shared cores
(py-libp2p's publish path and our own back-pressure), far below what an attacker with machines of its own
sends. Building and signing the messages here and handing one RPC of many to every subscriber's queue costs
the attacker about a tenth of that, so the victims see the rate the attack names while the attacker's
process leaves the shared cores to them. Test machinery only.
"""

from __future__ import annotations

from collections.abc import Sequence

from distro_node.protocol.codec import encode_message
from distro_node.protocol.gossip import AnnouncementChannel
from distro_node.protocol.messages import Message
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import PUBSUB_SIGNING_PREFIX


def sign(channel: AnnouncementChannel, messages: Sequence[Message]) -> list[rpc_pb2.Message]:
    """Each message as ``Pubsub.publish`` builds and signs it (strict signing), with a fresh seqno."""
    pubsub = channel._pubsub
    key = pubsub.sign_key
    if key is None:
        raise RuntimeError("raw gossip needs pubsub's signing key")
    public = pubsub.host.get_public_key().serialize()
    out = []
    for message in messages:
        msg = rpc_pb2.Message(data=encode_message(message), topicIDs=[channel.topic],
                              from_id=pubsub.my_id.to_bytes(), seqno=pubsub._next_seqno())
        msg.signature = key.sign(PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString())
        msg.key = public
        out.append(msg)
    return out


def send(channel: AnnouncementChannel, signed: Sequence[rpc_pb2.Message]) -> int:
    """One RPC of already signed messages to every subscriber we have a pubsub stream to; returns how many
    peers it was queued for (py-libp2p drops it for a peer whose queue is full)."""
    pubsub = channel._pubsub
    router = pubsub.router
    if not isinstance(router, GossipSub):
        raise RuntimeError("raw gossip needs the gossipsub router")
    rpc = rpc_pb2.RPC(publish=list(signed))
    peers = channel.subscribers() & set(pubsub.peers)
    for peer in peers:
        router.send_rpc(peer, rpc)
    return len(peers)


def send_signed(channel: AnnouncementChannel, messages: Sequence[Message]) -> int:
    """:func:`sign` then :func:`send`."""
    return send(channel, sign(channel, messages))
