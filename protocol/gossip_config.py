"""The settings of a run's gossip (:class:`GossipConfig`), its size limits and its topic names.

Apart from protocol/gossip.py, which opens the channel on them, so that module stays about the channel and
what only needs the settings (the codec's size limit, a daemon's config) does not import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .gossip_lean import IDONTWANT_MIN_BYTES
from .gossip_mute import MuteConfig

# An inclusion list entry is about 160 bytes with its author signature (peer id, hash, signature) and a
# signed vote inside a re-proposal's pol or a certificate about 120, so 32 KiB holds the certificate of a
# list of about 100 peers (2/3 of them voting) plus a few equivocation proofs; a lone vote is about 250 bytes.
MAX_ANNOUNCEMENT_BYTES = 32 * 1024
# go-libp2p-pubsub's default and py-libp2p 0.8.1's outbound split size; see module docstring.
INBOUND_RPC_LIMIT = 1024 * 1024
# The settings in seconds that only need to be positive.
_SECONDS = ("link_check_interval", "slow_uplink_hold", "uplink_check_interval")


@dataclass(frozen=True)
class GossipConfig:
    max_message_bytes: int = MAX_ANNOUNCEMENT_BYTES
    max_inbound_rpc_bytes: int = INBOUND_RPC_LIMIT
    # Mesh degree 4 (libp2p's default is 6): each message reaches a peer about `degree` times, and every
    # copy costs a signature check in py-libp2p; with 8 peers on 2 shared cores degree 6 left rounds ~30%
    # slower. Gossip (IHAVE) still reaches the peers outside the mesh.
    degree: int = 4
    degree_low: int = 3
    degree_high: int = 8
    heartbeat_interval: int = 1
    # A peer whose measured upload rate is under this share of its peers' median (0: never) holds others'
    # messages ``slow_uplink_hold`` seconds and then forwards them only to mesh members that sent it no copy,
    # judged every ``uplink_check_interval`` seconds (protocol/gossip_uplink.py). The hold is what a peer
    # that only the slow one reaches waits: well under a round's leader timeout (2 s by default).
    slow_uplink_ratio: float = 0.5
    slow_uplink_hold: float = 1.0
    uplink_check_interval: float = 5.0
    # Messages with less data get no IDONTWANT (protocol/gossip_lean.py); 0 sends it for every message.
    idontwant_min_bytes: int = IDONTWANT_MIN_BYTES
    max_messages_per_topic_per_second: float = 1000.0
    # Our own per-signer limit (node/peer/rate_limit.py), applied by the validator before decoding: about 8x
    # an honest peer's rate at the tiny preset, with room for a catch-up burst.
    max_messages_per_peer_per_second: float = 200.0
    max_peer_burst: int = 400
    # The prefilter's budget (node/peer/rate_limit.py forwarder_prefilter), per (forwarder, claimed origin),
    # spent before py-libp2p starts a task and checks a signature: about twice an honest peer's own rate at
    # the tiny preset's 7 steps a second, with a catch-up burst. Two members flooding at 1,000 a second each
    # still stalled 7 daemons on 2 cores at 200 a second.
    max_forwarded_per_origin_per_second: float = 50.0
    max_forwarded_burst: int = 200
    # Goodbyes, tighter (an honest peer sends one); heartbeats get twice the round config's heartbeat rate.
    max_goodbyes_per_peer_per_second: float = 0.5
    goodbye_burst: int = 2
    heartbeat_burst: int = 4
    receive_buffer: int = 1024
    deliver_own: bool = False
    publish_timeout: float = 10.0
    stuck_after: float = 1.0  # a full outbound queue not shrunk for this long is no longer waited for
    reset_after: float = 15.0  # ...and one that has not shrunk for this long has its link reset
    link_check_interval: float = 1.0  # how often subscribers we cannot send to get a fresh stream
    mute: MuteConfig = field(default_factory=MuteConfig)  # strangers whose gossip we mostly refuse

    def __post_init__(self) -> None:
        if not 0 < self.max_message_bytes <= self.max_inbound_rpc_bytes:
            raise ValueError("GossipConfig.max_message_bytes must be in 1..max_inbound_rpc_bytes")
        if not (self.max_messages_per_peer_per_second > 0 and self.max_peer_burst >= 1):
            raise ValueError("GossipConfig needs max_messages_per_peer_per_second > 0, max_peer_burst >= 1")
        if not 0 < self.degree_low <= self.degree <= self.degree_high:
            raise ValueError("GossipConfig needs 0 < degree_low <= degree <= degree_high")
        if not 0 < self.stuck_after < self.publish_timeout:
            raise ValueError("GossipConfig.stuck_after must be in (0, publish_timeout)")
        if self.reset_after <= self.stuck_after:
            raise ValueError("GossipConfig.reset_after must be > stuck_after")
        for name in _SECONDS:
            if not 0 < getattr(self, name) < 1e6:
                raise ValueError(f"GossipConfig.{name} must be a positive number of seconds")
        if self.idontwant_min_bytes < 0:
            raise ValueError("GossipConfig.idontwant_min_bytes must be >= 0")
        if not 0 <= self.slow_uplink_ratio <= 0.5:
            raise ValueError("GossipConfig.slow_uplink_ratio must be in [0, 0.5] (0: never slow)")
        if self.heartbeat_interval < 1 or self.receive_buffer < 1:
            raise ValueError("GossipConfig.heartbeat_interval and receive_buffer must be >= 1")


def announce_topic(run_id: bytes, name: str = "announce") -> str:
    """Topic per run so unrelated runs sharing peers never see (or have to validate) each other's traffic."""
    if not run_id:
        raise ValueError("run_id must not be empty")
    if not name or "/" in name:
        raise ValueError(f"bad topic name {name!r}")
    return f"distro/{run_id.hex()}/{name}"


__all__ = ["INBOUND_RPC_LIMIT", "MAX_ANNOUNCEMENT_BYTES", "GossipConfig", "announce_topic"]
