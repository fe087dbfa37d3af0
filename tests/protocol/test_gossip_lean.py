"""Fewer gossip bytes per message (protocol/gossip_lean.py), with real hosts on loopback in a star around a
hub: no IDONTWANT for small messages (still one for large ones), and our signed peer record on a peer's
first RPC only, again when it changed."""

from __future__ import annotations

import multihash
import pytest
import trio
from distro_node.protocol.gossip_config import GossipConfig
from distro_node.protocol.gossip_lean import IDONTWANT_MIN_BYTES, drop_inlined_key
from distro_node.protocol.testing import WAIT, wait_until
from gossip_support import router, sent_rpcs, star
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2


@pytest.mark.network
def test_small_messages_get_no_idontwant_and_large_ones_do() -> None:
    async def body() -> None:
        async with star(3) as (_, chans):
            hub = router(chans[0])
            told: list[bytes] = []
            original = hub.handle_idontwant

            async def spy(msg: rpc_pb2.ControlIDontWant, sender: ID) -> None:
                told.extend(msg.messageIDs)
                await original(msg, sender)

            hub.handle_idontwant = spy  # type: ignore[method-assign]
            small, large = b"vote", b"x" * (IDONTWANT_MIN_BYTES + 100)
            await chans[0].publish(small)
            await chans[0].publish(large)
            for chan in chans[1:]:
                with trio.fail_after(WAIT):
                    assert (await chan.receive()).data == small
                    assert (await chan.receive()).data == large
            # Each spoke tells the hub it has the large one; the small one's notice would have come first.
            await wait_until(lambda: len(told) >= 2, "an IDONTWANT from each spoke for the large message")
            assert len(told) == 2 and len(set(told)) == 1
            assert all(router(chan).idontwant_skipped >= 1 for chan in chans[1:])

    trio.run(body)


@pytest.mark.network
def test_our_record_goes_to_each_peer_once_until_it_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    rpcs = sent_rpcs(monkeypatch)

    def sent() -> list[tuple[ID, bytes | None]]:
        return [(peer, bytes(rpc.senderRecord) if rpc.HasField("senderRecord") else None)
                for _, peer, rpc in rpcs]

    async def body() -> None:
        async with star(3) as (hosts, chans):
            for i in range(4):
                await chans[0].publish(b"announce %d" % i)
            for chan in chans[1:]:
                for i in range(4):
                    with trio.fail_after(WAIT):
                        assert (await chan.receive()).data == b"announce %d" % i
            for spoke in hosts[1:]:
                records = [r for peer, r in sent() if peer == spoke.peer_id and r is not None]
                assert len(records) <= 1, "the hub's record went to a spoke more than once"
            # Driven directly: the same record is dropped from a later RPC, a changed one goes out once.
            hub, peer = router(chans[0]), hosts[1].peer_id
            rpcs.clear()
            for record in (b"first", b"first", b"second", b"second"):
                hub.send_rpc(peer, rpc_pb2.RPC(senderRecord=record))
            assert [r for _, r in sent()] == [b"first", None, b"second", None]
            hub.remove_peer(peer)
            hub.send_rpc(peer, rpc_pb2.RPC(senderRecord=b"second"))
            assert sent()[-1][1] == b"second", "a peer that left and came back gets the record again"

    trio.run(body)


def test_idontwant_threshold_is_checked() -> None:
    with pytest.raises(ValueError, match="idontwant_min_bytes"):
        GossipConfig(idontwant_min_bytes=-1)


@pytest.mark.network
def test_messages_go_out_without_a_key_their_origin_id_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Published and forwarded copies carry no ``key`` (ed25519 ids inline it), and still validate: a
    spoke's message reaches the other spoke through the hub."""
    rpcs = sent_rpcs(monkeypatch)

    async def body() -> None:
        async with star(3) as (hosts, chans):
            await chans[1].publish(b"from a spoke")
            with trio.fail_after(WAIT):
                got = await chans[2].receive()
            published = [msg for _, _, rpc in rpcs for msg in rpc.publish]
            assert got.data == b"from a spoke" and got.sender == hosts[1].peer_id
            assert len(published) >= 2  # the spoke's own copy and the hub's forwarded one
            assert all(msg.signature and not msg.key for msg in published)

    trio.run(body)


def test_a_key_the_origin_id_does_not_hold_is_kept() -> None:
    pair = create_new_key_pair()
    ed_id = ID.from_pubkey(pair.public_key)
    key = pair.public_key.serialize()
    msg = rpc_pb2.Message(from_id=ed_id.to_bytes(), key=key, data=b"x")
    drop_inlined_key(msg)
    assert not msg.key
    other = create_new_key_pair().public_key.serialize()
    mismatched = rpc_pb2.Message(from_id=ed_id.to_bytes(), key=other)  # validation rejects it, with its key
    drop_inlined_key(mismatched)
    assert mismatched.key == other
    hashed = rpc_pb2.Message(from_id=multihash.digest(key, "sha2-256").encode(), key=key)  # e.g. an RSA id
    drop_inlined_key(hashed)
    assert hashed.key == key
