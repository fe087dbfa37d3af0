"""Per-signer gossip rate limits (node/peer/rate_limit.py) and the validator that applies them."""

from __future__ import annotations

import hashlib

from distro_node.node.peer.intake import GossipDecoder
from distro_node.node.peer.rate_limit import GossipRates, PeerRateLimit, forwarder_prefilter
from distro_node.protocol.codec import encode_message
from distro_node.protocol.messages import Heartbeat, Status
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


def test_the_validator_refuses_a_flooding_signer_and_counts_it() -> None:
    clock = Clock()
    flooder = ID.from_pubkey(create_new_key_pair().public_key)
    other = ID.from_pubkey(create_new_key_pair().public_key)
    reasons: list[str] = []
    rates = GossipRates(rate=100.0, burst=10, per_kind={"heartbeat": (2.0, 3)}, clock=clock)
    decoder = GossipDecoder(self_id="me", run_id=RUN, bans=NoBans(), on_rejected=reasons.append, rate=rates)

    def status(sender: ID, epoch: int) -> bytes:
        return encode_message(Status(RUN, 0, epoch, str(sender)))

    verdicts = [decoder.validate(flooder, status(flooder, e)) for e in range(1, 51)]
    assert verdicts == [True] * 10 + [False] * 40 and reasons == ["rate"] * 40
    assert decoder.validate(other, status(other, 1))  # the others are unaffected
    clock.now = 0.05
    assert sum(decoder.validate(flooder, status(flooder, 100 + e)) for e in range(10)) == 5


def test_heartbeats_have_a_much_tighter_bucket_of_their_own() -> None:
    clock = Clock()
    sender = ID.from_pubkey(create_new_key_pair().public_key)
    rates = GossipRates(rate=100.0, burst=100, per_kind={"heartbeat": (2.0, 3)}, clock=clock)
    decoder = GossipDecoder(self_id="me", run_id=RUN, bans=NoBans(), rate=rates)
    beats = [decoder.validate(sender, encode_message(Heartbeat(RUN, str(sender), s, RUN))) for s in range(20)]
    assert beats == [True] * 3 + [False] * 17  # a flood of distinct heartbeats: 3 pass, none forwarded
    assert decoder.validate(sender, encode_message(Status(RUN, 0, 1, str(sender))))  # other kinds still do
    clock.now = 1.0
    assert decoder.validate(sender, encode_message(Heartbeat(RUN, str(sender), 99, RUN)))


def test_the_prefilter_budget_is_per_forwarder_and_claimed_origin() -> None:
    """A flood one peer sends (or forwards) in an origin's name is cut at that peer; the same origin's
    messages through another forwarder are untouched, so a forger cannot spend an honest origin's budget."""
    now = [0.0]
    refused: list[str] = []
    keep = forwarder_prefilter(2.0, 2, lambda: now[0], refused.append)
    flooder, honest, origin = (ID.from_pubkey(create_new_key_pair().public_key) for _ in range(3))
    origin_id = origin.to_bytes()
    assert [keep(flooder, origin_id) for _ in range(4)] == [True, True, False, False]
    assert keep(honest, origin_id) and keep(honest, origin_id)
    assert refused == ["rate", "rate"]
    now[0] += 0.5
    assert keep(flooder, origin_id)
