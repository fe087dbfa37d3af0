"""Real `join` processes on a prepared dataset whose joiners hold none of it: each fetches data.json, the
tokenizer and the document index, then only the shards its own batches read, every file verified by sha256,
and trains in lockstep with the founder; a peer serving shard bytes that fail their hash is rejected, the
shard comes from another peer, and the fetcher counts the server in distro_blob_faulty_total."""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.request
from pathlib import Path

import pytest
from distro_node.node.data.prepare import PrepareResult, PrepareSettings, prepare
from peer_procs import PeerProc, Procs, assert_identical
from test_daemon_shards_swarm import corpus

pytestmark = [pytest.mark.network, pytest.mark.timeout(240)]

STEPS = 5
# Small shards, so the dataset has many and a joiner's few batches read only some of them.
SETTINGS = PrepareSettings(vocab_size=600, eod_token="<|endoftext|>", text_field="text", eval_fraction=0.2,
                           shard_tokens=1024)
RUN = ["--preset", "tiny", "--round-timeout", "8", "--seq-len", "32", "--batch-size", "2", "--data-kind",
       "shards", "--steps", str(STEPS)]


def fetched(p: PeerProc) -> list[dict[str, object]]:
    return [e for e in p.poll_events() if e.get("event") == "data_fetched"]


def metric(p: PeerProc, name: str) -> float:
    url = p.info()["metrics_url"]
    with urllib.request.urlopen(url, timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not in {url}")


def finish(peers: list[PeerProc]) -> None:
    for p in peers:
        p.wait_for(lambda e: e.get("event") == "left", 150, "leave after the last step")
        assert p.wait_exit(20) == 0, p.tail_stderr()
    for p in peers:
        assert sorted(p.steps()) == list(range(STEPS)), p.name
    assert_identical(peers, range(STEPS))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> PrepareResult:
    root = tmp_path_factory.mktemp("fetch")
    return prepare([corpus(root / "text", 0, documents=160)], root / "ours", SETTINGS, progress=False)


def test_joiners_without_data_fetch_only_their_shards(procs: Procs, tmp_path: Path,
                                                      dataset: PrepareResult) -> None:
    train = dataset.manifest.train.shards
    assert len(train) >= 12
    founder = procs.start([*RUN, "--data-path", str(dataset.path.parent), "--genesis-peers", "3"], "founder")
    command = founder.info()["join_command"]
    joiners = [procs.start_command(command, ["--steps", str(STEPS), "--data-dir", str(tmp_path / f"j{i}")],
                                   f"joiner{i}") for i in range(2)]
    for j in joiners:
        head = j.wait_for(lambda e: e.get("event") == "data_head", 60, "data.json, tokenizer and index")
        assert Path(head["folder"]).parent == tmp_path / j.name.replace("joiner", "j") / "data-cache"
        # Between two steps, while the process still runs: what its /metrics says about the data.
        j.wait_step(2, 120)
        assert metric(j, "distro_data_shards") == len(train)
        assert metric(j, "distro_data_shards_fetched_total") >= 1
    finish([founder, *joiners])
    for j in joiners:
        shards = [int(str(e["shard"])) for e in fetched(j)]
        assert shards and len(set(shards)) == len(shards) < len(train), shards
        assert not [e for e in j.events if e.get("event") == "blob_faulty"]
        cache = Path(next(e for e in j.events if e.get("event") == "data_head")["folder"])
        for i in shards:  # every byte on disk is the manifest's
            assert hashlib.sha256((cache / train[i].file).read_bytes()).hexdigest() == train[i].sha256
        assert not list(cache.glob("*.part"))


def test_a_shard_that_fails_its_hash_comes_from_another_peer(procs: Procs, tmp_path: Path,
                                                             dataset: PrepareResult) -> None:
    ours = shutil.copytree(dataset.path.parent, tmp_path / "ours")
    copy = shutil.copytree(dataset.path.parent, tmp_path / "copy")
    founder = procs.start([*RUN, "--data-path", str(ours), "--genesis-peers", "3"], "founder")
    command = founder.info()["join_command"]
    # The founder verified and mapped every shard; now its disk serves other bytes under the same names (a
    # bit flip after verification). Its training keeps the verified maps: only what it serves is wrong.
    for entry in dataset.manifest.train.shards:
        data = bytearray((ours / entry.file).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (ours / f".{entry.file}").write_bytes(bytes(data))
        os.replace(ours / f".{entry.file}", ours / entry.file)
    honest = procs.start_command(command, ["--steps", str(STEPS), "--data-path", str(copy)], "honest")
    fetcher = procs.start_command(command, ["--steps", str(STEPS)], "fetcher")
    bad = fetcher.wait_for(lambda e: e.get("event") == "blob_faulty", 120, "a shard rejected")
    assert bad["peer"] == founder.info()["peer_id"]
    good = fetcher.wait_for(lambda e: e.get("event") == "data_fetched" and e.get("shard") == bad["shard"],
                            120, "the rejected shard from another peer")
    assert good["served_by"] == [honest.info()["peer_id"]], good
    assert metric(fetcher, "distro_blob_faulty_total") >= 1
    finish([founder, honest, fetcher])
    for e in fetched(fetcher):
        assert founder.info()["peer_id"] not in e["served_by"], e  # never asked again once it lied
