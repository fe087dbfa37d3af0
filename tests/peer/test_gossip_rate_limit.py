"""Per-signer gossip rate limits (node/peer/rate_limit.py) and the validator that applies them."""

from __future__ import annotations

import hashlib

from distro_node.node.peer.intake import GossipDecoder
from distro_node.node.peer.rate_limit import PeerRateLimit
from distro_node.protocol.codec import encode_message
from distro_node.protocol.messages import Heartbeat
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

RUN = hashlib.sha256(b"rate").digest()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class NoBans:
    def is_banned(self, peer: str) -> bool:
        return False


def test_a_bucket_allows_its_burst_then_its_rate() -> None:
    clock = Clock()
    limit = PeerRateLimit(rate=10.0, burst=5, clock=clock)
    assert [limit.allow("a") for _ in range(7)] == [True] * 5 + [False] * 2
    assert limit.allow("b")  # another peer has its own bucket
    clock.now = 0.3  # three tokens back
    assert [limit.allow("a") for _ in range(4)] == [True] * 3 + [False]


def test_memory_is_bounded_by_evicting_the_least_recent_peer() -> None:
    limit = PeerRateLimit(rate=1.0, burst=1, clock=Clock(), max_peers=3)
    for i in range(100):
        limit.allow(f"p{i}")
    assert len(limit._buckets) == 3


def test_the_validator_refuses_a_flooding_signer_before_decoding_and_counts_it() -> None:
    clock = Clock()
    flooder = ID.from_pubkey(create_new_key_pair().public_key)
    other = ID.from_pubkey(create_new_key_pair().public_key)
    reasons: list[str] = []
    decoder = GossipDecoder(self_id="me", run_id=RUN, bans=NoBans(), on_rejected=reasons.append,
                            rate=PeerRateLimit(rate=100.0, burst=10, clock=clock))

    def heartbeat(sender: ID, step: int) -> bytes:
        return encode_message(Heartbeat(RUN, str(sender), step, RUN))

    verdicts = [decoder.validate(flooder, heartbeat(flooder, s)) for s in range(50)]
    assert verdicts == [True] * 10 + [False] * 40 and reasons == ["rate"] * 40
    assert decoder.validate(other, heartbeat(other, 0))  # the others are unaffected
    clock.now = 0.05
    assert sum(decoder.validate(flooder, heartbeat(flooder, 100 + s)) for s in range(10)) == 5
