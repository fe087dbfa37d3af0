"""Fewer gossip bytes per message: two things py-libp2p 0.8.1 sends with every message that a run gains
nothing from, and a slow uplink pays for.

A count of the yamux frames each peer wrote, by protocol, in a mixed swarm of 8 (bench/exchange.py, a
2 Mbit/s uplink at a quarter of its rate, 1.45 MB payloads) found gossip was 0.09 payloads a round of a
slow peer's uplink, more than all the piece protocol's requests, polls and answers. Gossip's messages in a
run are small (announcements, votes: a few hundred bytes), yet for each one a peer received it sent

- an IDONTWANT to every mesh peer (gossipsub v1.2). IDONTWANT exists so a peer is not sent a large message
  it already has; for a message of a few hundred bytes the notice costs about what the duplicate it may
  spare would, and it goes to every mesh peer, not only those about to forward. go-libp2p sends it only
  for messages of 1 KiB and more; below ``idontwant_min_bytes`` of data we send none.
- our signed peer record (about 200 bytes: key, addresses, signature) on every RPC, each forwarded copy
  and each control message included. Nothing of ours reads the record (protocol/pubsub_records.py: where
  peers listen comes from peer exchange), and py-libp2p keeps the last one it verified, so each peer gets
  ours on the first RPC and again only when it changed (our addresses changed).

Together they were about two thirds of a slow peer's gossip bytes. A third thing went with every message,
forwarded copies included:

- the origin's public key (``key``, 38 bytes of a 284-byte announcement). The gossipsub spec omits it when
  the key is inlined in the origin's peer id, as every ed25519 id is, and py-libp2p's validator takes the
  key from the id first; the signature does not cover it. We drop it from each message we send on
  (:func:`drop_inlined_key`) when the id holds the key, and keep it for any other kind of id.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar

from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2

# go-libp2p's threshold for IDONTWANT (GossipSubIDontWantMessageThreshold)
IDONTWANT_MIN_BYTES = 1024

# Whether the message being published (forwarded or our own) is below the IDONTWANT threshold. Set for the
# duration of one ``publish`` call, in the task running it: py-libp2p decides IDONTWANT inside that call
# and hands the helper the message id only.
_small_message: ContextVar[bool] = ContextVar("small_message", default=False)


class LeanGossip(GossipSub):
    """GossipSub without IDONTWANT for small messages and with our record once per peer (module docstring).

    ``idontwant_min_bytes``: messages whose data is shorter get no IDONTWANT (0: every message, as
    py-libp2p)."""

    def __init__(self, *args: object, idontwant_min_bytes: int = IDONTWANT_MIN_BYTES,
                 **kwargs: object) -> None:
        if idontwant_min_bytes < 0:
            raise ValueError(f"idontwant_min_bytes must be >= 0, got {idontwant_min_bytes}")
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.idontwant_min_bytes = idontwant_min_bytes
        # Per peer, the record it was last sent: bounded by the peers we are connected to (remove_peer).
        self._record_sent: dict[ID, bytes] = {}
        self.idontwant_skipped = 0  # messages we sent no IDONTWANT for, for tests and profiles

    async def publish(self, msg_forwarder: ID, pubsub_msg: rpc_pb2.Message) -> None:
        drop_inlined_key(pubsub_msg)  # before py-libp2p caches it for IWANT and sends it on
        token = _small_message.set(len(pubsub_msg.data) < self.idontwant_min_bytes)
        try:
            await super().publish(msg_forwarder, pubsub_msg)
        finally:
            _small_message.reset(token)

    async def _emit_idontwant_for_message(self, msg_id: bytes, topic_ids: Iterable[str]) -> None:
        if _small_message.get():
            self.idontwant_skipped += 1
            return
        await super()._emit_idontwant_for_message(msg_id, topic_ids)

    def send_rpc(self, peer_id: ID, rpc: rpc_pb2.RPC, priority: bool = False) -> None:
        if rpc.HasField("senderRecord"):
            record = bytes(rpc.senderRecord)
            if self._record_sent.get(peer_id) == record:
                lean = rpc_pb2.RPC()
                lean.CopyFrom(rpc)
                lean.ClearField("senderRecord")
                rpc = lean
            else:
                self._record_sent[peer_id] = record
        super().send_rpc(peer_id, rpc, priority)

    def remove_peer(self, peer_id: ID) -> None:
        self._record_sent.pop(peer_id, None)
        super().remove_peer(peer_id)


def drop_inlined_key(msg: rpc_pb2.Message) -> None:
    """Clear ``msg.key`` when the origin's peer id already holds that key (module docstring); a key that
    differs from the id's is left for validation to reject."""
    if not msg.key:
        return
    inlined = ID(msg.from_id).extract_public_key()  # None for an id that is not an inlined key
    if inlined is not None and inlined.serialize() == msg.key:
        msg.ClearField("key")


__all__ = ["IDONTWANT_MIN_BYTES", "LeanGossip", "drop_inlined_key"]
