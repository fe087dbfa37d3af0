"""Sampling from data.json's document index alone: the same batches as a peer holding every shard, and the
exact set of shards a batch reads, known before any shard is on disk (what a joiner fetches on demand)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from distro_node.node.data.data_manifest import DataManifest
from distro_node.node.data.errors import ShardError
from distro_node.node.data.lazy import ShardNotReadyError, lazy_source, read_index, shard_dtype
from distro_node.node.data.sampling import batch_shards, eval_batches, sample_batch
from distro_node.node.data.shards import open_shards, read_manifest
from distro_node.node.data.source import TokenSource
from shard_corpus import Prepared, copy_dataset, edit_manifest

RUN = b"\x05" * 32


@pytest.fixture
def copy(prepared: Prepared, tmp_path: Path) -> Path:
    return copy_dataset(prepared.folder, tmp_path / "ds")


def recording_source(folder: Path, touched: set[int], allowed: set[int] | None = None) -> TokenSource:
    manifest, _ = read_manifest(folder)
    dtype = shard_dtype(manifest)

    def train(i: int) -> np.ndarray:
        if allowed is not None and i not in allowed:
            raise ShardNotReadyError("train", i)
        touched.add(i)
        return np.memmap(folder / manifest.train.shards[i].file, dtype=dtype, mode="r")

    def heldout(i: int) -> np.ndarray:
        return np.memmap(folder / manifest.heldout.shards[i].file, dtype=dtype, mode="r")

    assert manifest.index is not None
    return lazy_source(manifest, folder / manifest.index.file, train, heldout, "lazy")


def test_prepare_writes_an_index_that_open_shards_checks(prepared: Prepared) -> None:
    m = prepared.result.manifest
    assert m.index is not None and m.index.file in m.files
    train, heldout = read_index(prepared.folder / m.index.file, m)
    source = open_shards(prepared.folder)
    assert np.array_equal(train, source.train.lengths) and np.array_equal(heldout, source.eval.lengths)


def test_batches_from_the_index_equal_those_from_the_shards(prepared: Prepared) -> None:
    full = open_shards(prepared.folder)
    touched: set[int] = set()
    lazy = recording_source(prepared.folder, touched)
    for step in range(12):
        for peer in ("peer-a", "peer-b"):
            want = sample_batch(full, run_id=RUN, step=step, peer=peer, batch_size=4, seq_len=64)
            got = sample_batch(lazy, run_id=RUN, step=step, peer=peer, batch_size=4, seq_len=64)
            assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    for a, b in zip(eval_batches(full, batch_size=4, seq_len=32, max_batches=3),
                    eval_batches(lazy, batch_size=4, seq_len=32, max_batches=3), strict=True):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_batch_shards_names_exactly_the_shards_a_batch_reads(prepared: Prepared) -> None:
    shards = len(prepared.result.manifest.train.shards)
    assert shards >= 4
    for step in range(10):
        touched: set[int] = set()
        lazy = recording_source(prepared.folder, touched)
        needed = batch_shards(lazy.train, run_id=RUN, step=step, peer="p", batch_size=2, seq_len=64)
        assert isinstance(lazy.train, type(lazy.eval))
        sample_batch(lazy, run_id=RUN, step=step, peer="p", batch_size=2, seq_len=64)
        assert touched == needed and 1 <= len(needed) < shards
        # Without those shards the batch cannot be read: nothing unheld is ever opened.
        missing = recording_source(prepared.folder, set(), allowed=set(range(shards)) - {min(needed)})
        with pytest.raises(ShardNotReadyError):
            sample_batch(missing, run_id=RUN, step=step, peer="p", batch_size=2, seq_len=64)


def test_a_window_across_a_shard_boundary_needs_both_shards(prepared: Prepared) -> None:
    source = open_shards(prepared.folder)
    rows = source.train
    shard_tokens = prepared.result.manifest.shard_tokens
    row = int(np.searchsorted(rows.starts + rows.lengths, shard_tokens, side="right"))
    start = int(rows.starts[row])
    assert start < shard_tokens < start + int(rows.lengths[row])  # this document crosses the boundary
    assert list(rows.shards_of(row, 0, int(rows.lengths[row]))) == [0, 1]
    assert list(rows.shards_of(row, 0, shard_tokens - start)) == [0]


def test_an_index_that_disagrees_with_the_shards_is_refused(copy: Path) -> None:
    manifest, _ = read_manifest(copy)
    assert manifest.index is not None
    path = copy / manifest.index.file
    lengths = np.fromfile(path, dtype="<u8")
    lengths[0], lengths[1] = lengths[1], lengths[0]  # same sum: only the comparison with the shards sees it
    if lengths[0] == lengths[1]:
        pytest.skip("first two documents of equal length")
    raw = lengths.tobytes()
    path.write_bytes(raw)
    edit_manifest(copy, lambda d: d["index"].update(sha256=hashlib.sha256(raw).hexdigest()))
    with pytest.raises(ShardError, match=r"index\.u64: .*differ from the documents"):
        open_shards(copy)
    edit_manifest(copy, lambda d: d["index"].update(sha256="0" * 64))
    with pytest.raises(ShardError, match=r"index\.sha256"):
        open_shards(copy)


def test_a_dataset_without_an_index_still_opens(prepared: Prepared, tmp_path: Path) -> None:
    folder = copy_dataset(prepared.folder, tmp_path / "old")
    doc = edit_manifest(folder, lambda d: d.pop("index"))
    (folder / "index.u64").unlink()
    manifest = DataManifest.from_bytes((folder / "data.json").read_bytes())
    assert manifest.index is None and "index" not in json.loads(manifest.to_bytes())
    assert manifest.to_bytes() == (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()
    assert open_shards(folder).train.rows == prepared.result.manifest.train.documents
    with pytest.raises(ShardError, match="names no document index"):
        read_index(folder / "index.u64", manifest)
