"""The shard cache of a peer fetching on demand: a byte budget with a floor, least recently used first out,
never evicting what the next steps need, and only verified shards ever opened."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from distro_node.node.data.data_manifest import Blob
from distro_node.node.data.errors import DataSettingError
from distro_node.node.data.lazy import ShardNotReadyError
from distro_node.node.data.shard_cache import CacheFullError, ShardCache

DTYPE = np.dtype("<u2")


def shards(folder: Path, count: int, tokens: int = 100) -> tuple[list[Blob], list[bytes]]:
    blobs, datas = [], []
    for i in range(count):
        data = np.full(tokens, i, dtype=DTYPE).tobytes()
        blobs.append(Blob(f"train-{i:05d}.u16", hashlib.sha256(data).hexdigest(), len(data)))
        datas.append(data)
    return blobs, datas


def put(cache: ShardCache, i: int, data: bytes, keep: set[int] | None = None) -> list[int]:
    evicted = cache.make_room(len(data), keep or {i})
    cache.path(i).write_bytes(data)
    cache.admit(i)
    return evicted


def test_a_budget_below_the_largest_shard_is_refused(tmp_path: Path) -> None:
    blobs, _ = shards(tmp_path, 3)
    with pytest.raises(DataSettingError, match=r"cache_bytes: 199 bytes is smaller than"):
        ShardCache(tmp_path / "c", 199, blobs, DTYPE)
    ShardCache(tmp_path / "c", 200, blobs, DTYPE)


def test_least_recently_used_goes_first_and_never_a_kept_one(tmp_path: Path) -> None:
    blobs, datas = shards(tmp_path, 5)
    gone: list[str] = []
    cache = ShardCache(tmp_path / "c", 600, blobs, DTYPE, on_evict=lambda b: gone.append(b.file))
    for i in range(3):
        assert put(cache, i, datas[i]) == []
    assert cache.used == 600
    cache.open(0)  # 0 is now the most recently used: 1 goes first
    assert put(cache, 3, datas[3]) == [1] and gone == [blobs[1].file]
    assert not cache.path(1).exists() and cache.held() == [2, 0, 3]
    # 2 is the oldest but a coming step needs it: 0 goes instead.
    assert put(cache, 4, datas[4], keep={2, 4}) == [0]
    assert sorted(cache.held()) == [2, 3, 4] and cache.used <= cache.budget
    with pytest.raises(CacheFullError, match="raise --data-cache-bytes"):
        cache.make_room(200, keep={2, 3, 4})
    assert sorted(cache.held()) == [2, 3, 4]  # a refused make_room evicts nothing


def test_only_admitted_shards_open(tmp_path: Path) -> None:
    blobs, datas = shards(tmp_path, 2)
    cache = ShardCache(tmp_path / "c", 400, blobs, DTYPE)
    cache.path(0).write_bytes(datas[0])  # on disk but not verified through the cache
    with pytest.raises(ShardNotReadyError, match="train shard 0 is not fetched"):
        cache.open(0)
    cache.admit(0)
    assert (cache.open(0) == 0).all() and cache.open(0).shape == (100,)


def test_scan_rehashes_what_a_previous_run_left(tmp_path: Path) -> None:
    blobs, datas = shards(tmp_path, 3)
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / blobs[0].file).write_bytes(datas[0])
    (folder / blobs[1].file).write_bytes(datas[2])  # right name, wrong bytes
    (folder / blobs[2].file).write_bytes(datas[2][:50])  # truncated
    cache = ShardCache(folder, 600, blobs, DTYPE)
    assert cache.scan() == [0]
    assert cache.held() == [0] and not (folder / blobs[1].file).exists()
    assert not (folder / blobs[2].file).exists()
