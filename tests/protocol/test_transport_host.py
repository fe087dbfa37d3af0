"""Host start-up, identity persistence, bootstrap dialing and peer exchange over real loopback hosts."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import trio
from distro_node.protocol.errors import (
    BadMultiaddrError,
    BootstrapError,
    CorruptKeyFileError,
    WrongKeyTypeError,
)
from distro_node.protocol.host import P2PHost, open_host
from distro_node.protocol.identity import load_identity, load_or_create_identity, peer_id_of
from distro_node.protocol.testing import FAST_PX as FAST
from distro_node.protocol.testing import NO_PX_LOOP as QUIET
from distro_node.protocol.testing import WAIT, start_hosts
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyType
from libp2p.crypto.rsa import create_new_key_pair as create_rsa_key_pair


async def _wait_full_mesh(hosts: list[P2PHost]) -> None:
    with trio.fail_after(WAIT):
        for h in hosts:
            await h.wait_for_peers(len(hosts) - 1, timeout=WAIT)


def test_identity_created_0600_and_reloaded(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "node.key"
    first = load_or_create_identity(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert first.private_key.get_type() == KeyType.Ed25519
    again = load_or_create_identity(path)
    assert peer_id_of(again) == peer_id_of(first)
    assert not [p for p in path.parent.iterdir() if p.name != "node.key"]  # no temp files left


@pytest.mark.parametrize("content", [b"", b"not a key at all", b"\x08\x01", b"\x08\x01\x12\x05short"])
def test_corrupt_key_file_raises_and_is_kept(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "node.key"
    path.write_bytes(content)
    with pytest.raises(CorruptKeyFileError) as info:
        load_or_create_identity(path)
    assert info.value.path == path
    assert str(path) in str(info.value)
    assert path.read_bytes() == content


def test_wrong_key_type_raises(tmp_path: Path) -> None:
    path = tmp_path / "rsa.key"
    blob = create_rsa_key_pair(bits=1024).private_key.serialize()
    path.write_bytes(blob)
    with pytest.raises(WrongKeyTypeError, match="RSA"):
        load_identity(path)
    assert path.read_bytes() == blob


def test_oversized_key_file_rejected(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"\0" * 10_000)
    with pytest.raises(CorruptKeyFileError, match="larger than"):
        load_identity(path)


@pytest.mark.network
def test_identity_survives_restart(tmp_path: Path) -> None:
    async def body() -> None:
        key_path = tmp_path / "node.key"
        async with open_host(load_or_create_identity(key_path), QUIET) as h:
            first_id = h.peer_id
            first_addrs = h.addrs()
        async with open_host(load_or_create_identity(key_path), QUIET) as h:
            assert h.peer_id == first_id
            assert all(str(a).endswith(f"/p2p/{first_id}") for a in h.addrs())
        assert first_addrs and "/tcp/0/" not in str(first_addrs[0])

    trio.run(body)


@pytest.mark.network
def test_bad_bootstrap_multiaddr_raises_typed_error() -> None:
    async def body() -> None:
        async with start_hosts(1) as (h,):
            for bad in ["garbage", "/ip4/127.0.0.1/tcp/1", "/ip4/999.0.0.1/tcp/1/p2p/x", ""]:
                with pytest.raises(BadMultiaddrError):
                    await h.bootstrap([bad])
            assert not h.connected_peers()

    trio.run(body)


@pytest.mark.network
def test_unreachable_bootstrap_raises() -> None:
    async def body() -> None:
        async with start_hosts(2) as (_a, b):
            gone = str(b.addrs()[0])
        async with start_hosts(1) as (h,):
            with trio.fail_after(WAIT), pytest.raises(BootstrapError):
                await h.bootstrap([gone])

    trio.run(body)


@pytest.mark.network
def test_two_hosts_connect_via_bootstrap() -> None:
    async def body() -> None:
        async with start_hosts(2) as (a, b):
            with trio.fail_after(WAIT):
                reached = await b.bootstrap([str(a.addrs()[0])])
            assert reached == [a.peer_id]
            await _wait_full_mesh([a, b])
            assert a.peer_id in b.peer_book and b.peer_id in a.peer_book

    trio.run(body)


@pytest.mark.network
def test_four_hosts_learn_swarm_from_one_bootstrap_sequential() -> None:
    """Each joiner knows only the first host; peer exchange must give it the others."""

    async def body() -> None:
        async with start_hosts(4) as hosts:
            seed = str(hosts[0].addrs()[0])
            for h in hosts[1:]:
                with trio.fail_after(WAIT):
                    await h.bootstrap([seed])
            await _wait_full_mesh(hosts)

    trio.run(body)


@pytest.mark.network
def test_four_hosts_converge_when_joining_concurrently() -> None:
    """Concurrent joins race the bootstrap's peer list; the periodic exchange must close the gaps."""

    async def body() -> None:
        async with start_hosts(4, config=FAST) as hosts:
            seed = str(hosts[0].addrs()[0])
            with trio.fail_after(WAIT):
                async with trio.open_nursery() as nursery:
                    for h in hosts[1:]:
                        nursery.start_soon(h.bootstrap, [seed])
            await _wait_full_mesh(hosts)

    trio.run(body)


@pytest.mark.network
def test_lost_peers_reports_a_peer_once_its_last_connection_closes() -> None:
    """What the round machine hears when a peer's process goes away (see RoundMachine.on_disconnected)."""

    async def body() -> None:
        async with start_hosts(2) as (a, b):
            lost = a.lost_peers()
            async with open_host(create_new_key_pair(), QUIET) as c:
                with trio.fail_after(WAIT):
                    await b.bootstrap([str(a.addrs()[0])])
                    await c.bootstrap([str(a.addrs()[0])])
                    await a.wait_for_peers(2, timeout=WAIT)
                with pytest.raises(trio.WouldBlock):
                    lost.receive_nowait()
            with trio.fail_after(WAIT):
                assert await lost.receive() == c.peer_id
            assert a.is_connected(b.peer_id)
            await a.disconnect(b.peer_id)
            with trio.fail_after(WAIT):
                assert await lost.receive() == b.peer_id

    trio.run(body)


@pytest.mark.network
def test_a_lost_known_peer_is_redialed_although_no_exchange_names_it() -> None:
    """After a partition nobody across the cut is connected, so only the peer book can bring it back."""

    async def body() -> None:
        async with start_hosts(2) as (a, b):
            with trio.fail_after(WAIT):
                await b.bootstrap([str(a.addrs()[0])])
                await a.wait_for_peers(1, timeout=WAIT)
            lost = a.lost_peers()
            await a.disconnect(b.peer_id)
            with trio.fail_after(WAIT):
                await lost.receive()
            assert not a.is_connected(b.peer_id) and b.peer_id in a.peer_book
            with trio.fail_after(WAIT):
                await a.discover()
            assert a.is_connected(b.peer_id)

    trio.run(body)
