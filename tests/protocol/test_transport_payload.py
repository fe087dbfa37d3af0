"""Payload stream protocol over real loopback hosts: honest transfers, re-serving, holder fallback."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
from distro_node.protocol.errors import (
    FetchFailedError,
    MalformedReplyError,
    PayloadNotFoundError,
    PayloadTooLargeError,
)
from distro_node.protocol.host import P2PHost
from distro_node.protocol.payload_fetch import fetch_payload
from distro_node.protocol.store import PayloadStore, payload_digest
from distro_node.protocol.testing import WAIT, connect_all_to, start_hosts
from distro_node.protocol.transfer import (
    PayloadRequest,
    PayloadServer,
    TransferConfig,
    fetch_from,
    order_holders,
)

RUN = bytes.fromhex("cd" * 32)
PAYLOAD_SIZE = 2_800_000
CFG = TransferConfig(attempt_timeout=WAIT)


@asynccontextmanager
async def serving_swarm(count: int) -> AsyncIterator[tuple[list[P2PHost], list[PayloadServer]]]:
    async with start_hosts(count) as hosts:
        servers = [PayloadServer(h, PayloadStore(RUN), CFG) for h in hosts]
        for s in servers:
            s.install()
        with trio.fail_after(WAIT):
            await connect_all_to(hosts, hosts[0])
        yield hosts, servers


@pytest.mark.network
def test_payload_fetched_and_hash_verified() -> None:
    async def body() -> None:
        async with serving_swarm(2) as (hosts, servers):
            data = os.urandom(PAYLOAD_SIZE)
            digest = servers[0].store.put(5, data)
            req = PayloadRequest(RUN, 5, digest)
            got = await fetch_payload(hosts[1], req, [hosts[0].peer_id], store=servers[1].store, config=CFG)
            assert got == data and payload_digest(got) == digest
            assert servers[1].store.get(5, digest) == data  # kept, so this peer serves it now
            assert servers[0].served == 1
            # What a leaving peer watches to know the swarm stopped asking (node/peer/node.py _linger).
            assert servers[0].last_request_at is not None and servers[1].last_request_at is None
            assert servers[0].uploads_in_progress == 0

    trio.run(body)


@pytest.mark.network
def test_peer_serves_what_it_fetched() -> None:
    """C can only ask B, which never had the payload of its own: B must serve the copy it fetched from A."""

    async def body() -> None:
        async with serving_swarm(3) as (hosts, servers):
            a, b, c = hosts
            data = os.urandom(PAYLOAD_SIZE)
            digest = servers[0].store.put(9, data)
            req = PayloadRequest(RUN, 9, digest)
            await fetch_payload(b, req, [a.peer_id], store=servers[1].store, config=CFG)
            got = await fetch_payload(c, req, [b.peer_id], store=servers[2].store, config=CFG)
            assert got == data
            assert servers[1].served == 1 and servers[0].served == 1

    trio.run(body)


@pytest.mark.network
def test_fetch_falls_back_to_next_holder_and_reports_all_failures() -> None:
    async def body() -> None:
        async with serving_swarm(3) as (hosts, servers):
            a, b, c = hosts
            data = os.urandom(100_000)
            digest = servers[1].store.put(2, data)  # only B holds it; A answers NOT_FOUND
            req = PayloadRequest(RUN, 2, digest)
            got = await fetch_payload(c, req, [a.peer_id, b.peer_id], config=CFG, spread=False)
            assert got == data
            assert servers[0].not_found == 1

            missing = PayloadRequest(RUN, 2, payload_digest(b"nobody has this"))
            with pytest.raises(FetchFailedError) as info:
                await fetch_payload(c, missing, [a.peer_id, b.peer_id], config=CFG)
            assert len(info.value.attempts) == 2
            assert all(isinstance(err, PayloadNotFoundError) for _, err in info.value.attempts)

    trio.run(body)


@pytest.mark.network
def test_reply_length_checked_against_cap_and_announced_size() -> None:
    async def body() -> None:
        async with serving_swarm(2) as (hosts, servers):
            data = os.urandom(50_000)
            digest = servers[0].store.put(1, data)
            req = PayloadRequest(RUN, 1, digest)
            small = TransferConfig(max_payload_bytes=10_000, attempt_timeout=WAIT)
            with pytest.raises(PayloadTooLargeError):
                await fetch_from(hosts[1], hosts[0].peer_id, req, config=small)
            with pytest.raises(MalformedReplyError):
                await fetch_from(hosts[1], hosts[0].peer_id, req, config=CFG, expected_size=len(data) - 1)
            # The server is unharmed by both resets.
            again = await fetch_from(hosts[1], hosts[0].peer_id, req, config=CFG, expected_size=len(data))
            assert again == data

    trio.run(body)


def test_holder_order_is_deterministic_spread_and_excludes_self() -> None:
    from libp2p.crypto.ed25519 import create_new_key_pair
    from libp2p.peer.id import ID

    ids = [ID.from_pubkey(create_new_key_pair().public_key) for _ in range(8)]
    digest = payload_digest(b"p")
    first = order_holders(ids[0], digest, ids)
    assert ids[0] not in first and sorted(first, key=str) == sorted(ids[1:], key=str)
    assert order_holders(ids[0], digest, reversed(ids)) == first
    starts = {order_holders(me, digest, ids)[0] for me in ids}
    assert len(starts) > 1  # different fetchers start at different holders


def test_request_validation() -> None:
    from distro_node.protocol.errors import BadRequestError

    with pytest.raises(BadRequestError):
        PayloadRequest(b"", 1, b"\0" * 32)
    with pytest.raises(BadRequestError):
        PayloadRequest(RUN, -1, b"\0" * 32)
    with pytest.raises(BadRequestError):
        PayloadRequest(RUN, 1, b"\0" * 31)
    assert len(PayloadRequest(RUN, 1, b"\0" * 32).encode()) == 2 + 32 + 8 + 32
