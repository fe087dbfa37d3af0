"""Blob protocol between real hosts on loopback: ranged pulls, resume, a lying holder, refusals, caps."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest
import trio
from distro_node.protocol.blobs import (
    BLOB_PROTOCOL,
    PIECE_BYTES,
    BlobCatalog,
    BlobConfig,
    BlobFetchFailedError,
    BlobServer,
    fetch_blob,
)
from distro_node.protocol.errors import PayloadTooLargeError
from distro_node.protocol.testing import WAIT, connect_all_to, start_hosts
from distro_node.protocol.wire import read_exactly

pytestmark = pytest.mark.network

SIZE = 2 * PIECE_BYTES + 12345  # three pieces, the last one short


def _file(path: Path, seed: int, size: int = SIZE) -> bytes:
    data = random.Random(seed).randbytes(size)
    path.write_bytes(data)
    return hashlib.sha256(data).digest()


def test_a_file_is_pulled_in_pieces_verified_and_renamed_into_place(tmp_path: Path) -> None:
    digest = _file(tmp_path / "shard", 1)

    async def body() -> None:
        async with start_hosts(2) as (holder, fetcher):
            catalog = BlobCatalog()
            catalog.add(tmp_path / "shard")
            server = BlobServer(holder, catalog)
            server.install()
            with trio.fail_after(WAIT):
                await connect_all_to([holder, fetcher], holder)
                got = await fetch_blob(fetcher, digest, SIZE, [holder.peer_id], tmp_path / "out" / "shard")
            assert got.path.read_bytes() == (tmp_path / "shard").read_bytes()
            assert got.served_by == [str(holder.peer_id)] and got.faulty == [] and got.resumed_from == 0
            assert server.served_bytes == SIZE
            assert not (tmp_path / "out" / "shard.part").exists()
            with trio.fail_after(WAIT):  # already there and verified: nothing is asked again
                again = await fetch_blob(fetcher, digest, SIZE, [holder.peer_id], tmp_path / "out" / "shard")
            assert again.served_by == [] and server.served_bytes == SIZE

    trio.run(body)


def test_a_cut_off_fetch_resumes_from_the_partial_file(tmp_path: Path) -> None:
    digest = _file(tmp_path / "shard", 2)
    dest = tmp_path / "out" / "shard"
    dest.parent.mkdir()
    (dest.parent / "shard.part").write_bytes((tmp_path / "shard").read_bytes()[:PIECE_BYTES])

    async def body() -> None:
        async with start_hosts(2) as (holder, fetcher):
            catalog = BlobCatalog()
            catalog.add(tmp_path / "shard")
            server = BlobServer(holder, catalog)
            server.install()
            with trio.fail_after(WAIT):
                await connect_all_to([holder, fetcher], holder)
                got = await fetch_blob(fetcher, digest, SIZE, [holder.peer_id], dest)
            assert got.resumed_from == PIECE_BYTES
            assert server.served_bytes == SIZE - PIECE_BYTES
            assert dest.read_bytes() == (tmp_path / "shard").read_bytes()

    trio.run(body)


def test_bytes_failing_the_hash_name_their_holder_and_another_one_completes_the_file(tmp_path: Path) -> None:
    digest = _file(tmp_path / "good", 3)
    bad = bytearray((tmp_path / "good").read_bytes())
    bad[PIECE_BYTES + 7] ^= 0xFF
    (tmp_path / "bad").write_bytes(bytes(bad))

    async def body() -> None:
        async with start_hosts(3) as (liar, honest, fetcher):
            lying = BlobCatalog()
            lying.add(tmp_path / "bad", digest=digest)  # claims the digest, serves other bytes
            BlobServer(liar, lying).install()
            good = BlobCatalog()
            good.add(tmp_path / "good")
            BlobServer(honest, good).install()
            with trio.fail_after(WAIT):
                await connect_all_to([liar, honest, fetcher], liar)
                await fetcher.bootstrap([str(honest.addrs()[0])])
                holders = [liar.peer_id, honest.peer_id]
                got = await fetch_blob(fetcher, digest, SIZE, holders, tmp_path / "out")
            assert got.faulty == [str(liar.peer_id)]
            assert got.served_by == [str(honest.peer_id)]
            assert got.path.read_bytes() == (tmp_path / "good").read_bytes()

    trio.run(body)


def test_refused_and_unknown_blobs_fail_with_every_attempt_named(tmp_path: Path) -> None:
    digest = _file(tmp_path / "shard", 4)

    async def body() -> None:
        async with start_hosts(3) as (members_only, empty, fetcher):
            catalog = BlobCatalog()
            catalog.add(tmp_path / "shard")
            server = BlobServer(members_only, catalog, allow=lambda peer: False)
            server.install()
            BlobServer(empty, BlobCatalog()).install()
            with trio.fail_after(WAIT):
                await connect_all_to([members_only, empty, fetcher], members_only)
                await fetcher.bootstrap([str(empty.addrs()[0])])
                with pytest.raises(BlobFetchFailedError) as err:
                    await fetch_blob(fetcher, digest, SIZE, [members_only.peer_id, empty.peer_id],
                                     tmp_path / "out")
            assert [peer for peer, _ in err.value.attempts] == [str(members_only.peer_id), str(empty.peer_id)]
            assert err.value.faulty == [] and server.refused == 1
            assert not (tmp_path / "out").exists()

    trio.run(body)


def test_sizes_outside_the_cap_are_refused_before_any_request(tmp_path: Path) -> None:
    async def body() -> None:
        async with start_hosts(1) as (fetcher,):
            cfg = BlobConfig(max_blob_bytes=9)
            for size in (0, -1, 10, True):
                with pytest.raises(PayloadTooLargeError):
                    await fetch_blob(fetcher, b"\0" * 32, size, [], tmp_path / "x", cfg)

    trio.run(body)


def test_the_server_answers_garbage_and_out_of_range_requests_with_bad_request(tmp_path: Path) -> None:
    digest = _file(tmp_path / "shard", 5, size=100)

    async def body() -> None:
        async with start_hosts(2) as (holder, asker):
            catalog = BlobCatalog()
            catalog.add(tmp_path / "shard")
            BlobServer(holder, catalog).install()
            with trio.fail_after(WAIT):
                await connect_all_to([holder, asker], holder)
                past_the_end = b"\x01" + digest + (90).to_bytes(8, "big") + (20).to_bytes(4, "big")
                for request in (b"\x09" + b"\0" * 44, past_the_end):
                    stream = await asker.open_stream(holder.peer_id, BLOB_PROTOCOL)
                    await stream.write(request)
                    assert await read_exactly(stream, 5) == b"\x02\0\0\0\0"
                    await stream.close()

    trio.run(body)
