"""The run's pubsub: py-libp2p 0.8.1's ``Pubsub`` with a filter on each received message before anything
else is done with it (see :class:`RunPubsub`)."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from libp2p.abc import INetStream
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub

Prefilter = Callable[[ID, bytes], bool]
CopySeen = Callable[[ID, rpc_pb2.Message], None]
_FORWARDER: ContextVar[ID | None] = ContextVar("distro_gossip_forwarder", default=None)


class RunPubsub(Pubsub):
    """Pubsub with a filter on each received message before anything else is done with it.

    py-libp2p starts a task per received message and checks its signature before any validator runs, so a
    member flooding us with validly signed messages cost us a task and a signature check for each, however
    early our per-signer rate limit refused them: two such members among 7 daemons on 2 shared cores kept
    the swarm at step 0. The filter runs where py-libp2p asks whether we want the message at all (its topic
    check, inside the reading loop of the sender's stream, whose peer the handler below notes in a context
    variable). The origin a message names is not yet proven there, so a budget per origin alone would let a
    forger spend an honest peer's; the prefilter's budget is per (forwarder, claimed origin): a flood sent
    or forwarded by one peer is cut at that peer, and the origin's own messages on other paths are not.

    The same place tells ``on_copy`` of every copy a peer sends us, seen before or not, whether the
    prefilter keeps it or not: the peer has the message (a slow uplink holds its forwarding for that,
    protocol/gossip_uplink.py).
    """

    prefilter: Prefilter | None = None
    on_copy: CopySeen | None = None

    async def stream_handler(self, stream: INetStream) -> None:
        token = _FORWARDER.set(stream.muxed_conn.peer_id)
        try:
            await super().stream_handler(stream)
        finally:
            _FORWARDER.reset(token)

    def _is_subscribed_to_msg(self, msg: rpc_pb2.Message) -> bool:
        if not super()._is_subscribed_to_msg(msg):
            return False
        forwarder = _FORWARDER.get()
        if forwarder is None or forwarder == self.my_id:
            return True
        if self.on_copy is not None:
            self.on_copy(forwarder, msg)
        keep = self.prefilter
        return keep is None or keep(forwarder, bytes(msg.from_id))
