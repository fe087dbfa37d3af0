"""The gossip validator is the only decoder: what it accepted reaches the intake loop as the same object.

No network here: the validator and ``take`` are called as py-libp2p and protocol/gossip.py call them
(validate on receipt, then deliver the same (sender, bytes)), with the codec's decoder counted.
"""

from __future__ import annotations

import pytest
from distro_node.node.peer import intake
from distro_node.node.peer.intake import GossipDecoder
from distro_node.protocol.codec import CodecError, decode_message, encode_message
from distro_node.protocol.messages import Heartbeat
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

RUN = b"r" * 32


def _peer() -> ID:
    return ID.from_pubkey(create_new_key_pair().public_key)


class _Bans:
    def __init__(self, *banned: str) -> None:
        self.banned = set(banned)

    def is_banned(self, peer: str) -> bool:
        return peer in self.banned


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every call of the codec's decoder made through the intake module."""
    calls: list[bytes] = []

    def counting(data: bytes) -> object:
        calls.append(data)
        return decode_message(data)

    monkeypatch.setattr(intake, "decode_message", counting)
    return calls


def _heartbeat(peer: ID, step: int = 3) -> bytes:
    return encode_message(Heartbeat(RUN, str(peer), step, b"w" * 32))


def test_accepted_message_is_decoded_once_and_handed_on(decodes: list[bytes]) -> None:
    me, other = _peer(), _peer()
    decoder = GossipDecoder(self_id=str(me), run_id=RUN, bans=_Bans())
    data = _heartbeat(other)
    assert decoder.validate(other, data)
    msg = decoder.take(other, data)
    assert isinstance(msg, Heartbeat) and msg.peer_id == str(other) and msg.step == 3
    assert len(decodes) == 1 and decoder.redecoded == 0


def test_equal_bytes_validated_twice_are_delivered_twice(decodes: list[bytes]) -> None:
    """Two messages with one payload (a repeated heartbeat: signatures are deterministic) differ only in
    the pubsub sequence number, which the validator never sees."""
    me, other = _peer(), _peer()
    decoder = GossipDecoder(self_id=str(me), run_id=RUN, bans=_Bans())
    data = _heartbeat(other)
    assert decoder.validate(other, data) and decoder.validate(other, data)
    assert decoder.take(other, data) == decoder.take(other, data)
    assert len(decodes) == 2 and decoder.redecoded == 0


def test_rejections_are_counted_by_reason() -> None:
    me, banned, other = _peer(), _peer(), _peer()
    seen: list[str] = []
    decoder = GossipDecoder(self_id=str(me), run_id=RUN, bans=_Bans(str(banned)), on_rejected=seen.append)
    assert not decoder.validate(banned, _heartbeat(banned))
    assert not decoder.validate(other, b"\xc1not msgpack")
    assert not decoder.validate(other, _heartbeat(banned))  # signed by `other`, speaks for `banned`
    assert seen == ["banned", "unpack", "author"]
    assert decoder.rejected == {"banned": 1, "unpack": 1, "author": 1}


def test_own_messages_are_checked_but_not_held(decodes: list[bytes]) -> None:
    """Our own messages are validated on publish but never delivered back, so holding them would only
    fill the map."""
    me = _peer()
    decoder = GossipDecoder(self_id=str(me), run_id=RUN, bans=_Bans(str(me)))
    data = _heartbeat(me)
    assert decoder.validate(me, data)  # a ban of ourselves never silences us
    decoder.take(me, data)
    assert len(decodes) == 2 and decoder.redecoded == 1


def test_overflow_falls_back_to_one_decode_in_the_loop(decodes: list[bytes]) -> None:
    me, other = _peer(), _peer()
    decoder = GossipDecoder(self_id=str(me), run_id=RUN, bans=_Bans(), capacity=2)
    data = [_heartbeat(other, step) for step in range(3)]
    for d in data:
        assert decoder.validate(other, d)
    assert [decoder.take(other, d).step for d in data] == [0, 1, 2]
    assert decoder.redecoded == 1 and len(decodes) == 4


def test_undecodable_delivery_raises_the_codec_error() -> None:
    """Only reachable if a message was delivered without passing this validator (it never is)."""
    decoder = GossipDecoder(self_id=str(_peer()), run_id=RUN, bans=_Bans())
    with pytest.raises(CodecError):
        decoder.take(_peer(), b"\xc1")


def test_a_permissioned_run_drops_a_strangers_gossip_unread(decodes: list[bytes]) -> None:
    """A stranger's own gossip streams are reset (protocol/admission.py); what an admitted peer forwards
    from it is dropped here, before decoding."""
    me, member, stranger = _peer(), _peer(), _peer()
    decoder = GossipDecoder(self_id=str(me), run_id=RUN, bans=_Bans(), admits=lambda p: p != str(stranger))
    assert not decoder.validate(stranger, _heartbeat(stranger))
    assert decoder.validate(member, _heartbeat(member))
    assert decoder.rejected == {"not_admitted": 1} and len(decodes) == 1


def test_a_heartbeat_from_outside_the_roster_is_refused_once_a_roster_is_known() -> None:
    """A heartbeat only says a roster peer is alive: from a stranger it is refused (and not forwarded), so
    a crowd of made-up identities cannot make every peer carry its heartbeats. Before start-up knows a
    roster, nobody is refused."""
    me, member, stranger = _peer(), _peer(), _peer()
    decoder = GossipDecoder(self_id=str(me), run_id=RUN, bans=_Bans())
    roster: list[str] = []
    decoder.know_members(lambda: roster)
    assert decoder.validate(stranger, _heartbeat(stranger))
    roster.extend([str(me), str(member)])
    assert not decoder.validate(stranger, _heartbeat(stranger))
    assert decoder.validate(member, _heartbeat(member))
    assert decoder.rejected == {"stranger": 1}
