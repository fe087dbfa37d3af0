"""Signed peer records on gossip RPCs are checked once per (peer, record) and our own is built once per TTL
(protocol/pubsub_records.py); py-libp2p's check itself is counted in place of the real one, and one test
runs the real check on a real record."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from distro_node.protocol import pubsub_records
from distro_node.protocol.host import open_host
from distro_node.protocol.testing import NO_PX_LOOP
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerstore import env_to_send_in_RPC
from libp2p.pubsub import gossipsub, pubsub
from libp2p.pubsub.pb.rpc_pb2 import RPC


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    calls: list[bytes] = []

    def check(msg: RPC, host: Any, peer_id: ID) -> bool:
        calls.append(bytes(msg.senderRecord))
        return not msg.senderRecord.startswith(b"bad")

    monkeypatch.setattr(pubsub_records, "_check", check)
    monkeypatch.setattr(pubsub_records, "_verified", type(pubsub_records._verified)())
    return calls


def _peer() -> ID:
    return ID.from_pubkey(create_new_key_pair().public_key)


def test_a_record_is_checked_once_per_peer(checks: list[bytes]) -> None:
    a, b = _peer(), _peer()
    rpc = RPC(senderRecord=b"record-a")
    assert all(pubsub_records.consume_record_once(rpc, None, a) for _ in range(5))  # type: ignore[arg-type]
    assert pubsub_records.consume_record_once(rpc, None, b)  # type: ignore[arg-type]
    assert checks == [b"record-a", b"record-a"]


def test_a_bad_record_fails_every_time_and_no_record_passes(checks: list[bytes]) -> None:
    peer = _peer()
    bad = RPC(senderRecord=b"bad record")
    assert not any(pubsub_records.consume_record_once(bad, None, peer) for _ in range(3))  # type: ignore[arg-type]
    assert len(checks) == 3
    assert pubsub_records.consume_record_once(RPC(), None, peer)  # type: ignore[arg-type]
    assert len(checks) == 3


def test_memory_is_bounded(checks: list[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pubsub_records, "VERIFIED_CAPACITY", 4)
    peer = _peer()
    for i in range(10):
        pubsub_records.consume_record_once(RPC(senderRecord=b"r%d" % i), None, peer)  # type: ignore[arg-type]
    assert len(pubsub_records._verified) == 4


def test_own_record_is_built_once_per_ttl(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    now = [100.0]
    monkeypatch.setattr(pubsub_records, "_build", lambda host: (built.append(1), (b"mine", True))[1])
    monkeypatch.setattr(pubsub_records.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(pubsub_records, "_own", {})

    class Host:
        def get_id(self) -> ID:
            return ID(b"\x00\x01me")

    host: Any = Host()
    assert pubsub_records.own_record(host) == (b"mine", True)
    now[0] += pubsub_records.OWN_RECORD_TTL_S - 0.1
    assert pubsub_records.own_record(host) == (b"mine", False)
    now[0] += 0.2
    pubsub_records.own_record(host)
    assert len(built) == 2


@pytest.mark.network
def test_installed_and_a_real_record_from_a_real_host_passes() -> None:
    async def body() -> None:
        async with open_host(create_new_key_pair(), NO_PX_LOOP) as host:
            assert pubsub.maybe_consume_signed_record is pubsub_records.consume_record_once
            assert gossipsub.env_to_send_in_RPC is pubsub_records.own_record
            record, _ = env_to_send_in_RPC(host.libp2p)
            rpc = RPC(senderRecord=record)
            assert pubsub_records.consume_record_once(rpc, host.libp2p, host.peer_id)
            assert not pubsub_records.consume_record_once(rpc, host.libp2p, _peer())  # someone else's record

    trio.run(body)
