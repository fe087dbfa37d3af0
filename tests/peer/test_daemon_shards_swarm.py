"""Real `join` processes on a prepared dataset: the founder names data.json and its tokenizer by sha256 in the
manifest, a joiner with its own copy of the folder trains in lockstep with a model whose vocabulary is the
tokenizer's, and a joiner holding another dataset stops before training, naming run.data.path and the hash."""

from __future__ import annotations

import hashlib
import math
import random
import shutil
from pathlib import Path

import pytest
from distro_node.node.data.prepare import PrepareSettings, prepare
from peer_procs import Procs, assert_identical

pytestmark = [pytest.mark.network, pytest.mark.timeout(150)]

STEPS = 4
SETTINGS = PrepareSettings(vocab_size=600, eod_token="<|endoftext|>", text_field="text", eval_fraction=0.2,
                           shard_tokens=4096)


def corpus(folder: Path, seed: int, documents: int = 120) -> Path:
    rng = random.Random(seed)
    words = ["".join(rng.choice("aeioukrstlmn") for _ in range(rng.randint(2, 7))) for _ in range(3000)]
    folder.mkdir(parents=True)
    for i in range(documents):
        (folder / f"{i:03d}.txt").write_text(" ".join(rng.choice(words) for _ in range(rng.randint(40, 200))))
    return folder


def test_shards_run_with_a_good_and_a_bad_joiner(procs: Procs, tmp_path: Path) -> None:
    ours = prepare([corpus(tmp_path / "text", 0)], tmp_path / "ours", SETTINGS, progress=False)
    other = prepare([corpus(tmp_path / "other-text", 1)], tmp_path / "other", SETTINGS, progress=False)
    shutil.copytree(tmp_path / "ours", tmp_path / "copy")
    founder = procs.start(["--preset", "tiny", "--round-timeout", "5", "--seq-len", "32", "--data-kind",
                           "shards", "--data-path", str(tmp_path / "ours"), "--genesis-peers", "2",
                           "--steps", str(STEPS)], "founder")
    command = founder.info()["join_command"]
    data_sha = hashlib.sha256(ours.path.read_bytes()).hexdigest()
    bad = procs.start_command(command, ["--data-path", str(other.path.parent)], "bad")
    error = bad.wait_for(lambda e: e.get("event") == "error", 60, "data error")
    assert error["field"] == "run.data.path" and "not the run's prepared data" in error["reason"], error
    assert data_sha in error["reason"] and other.manifest.tokenizer.sha256 in error["reason"]
    assert bad.wait_exit(30) == 1
    joiner = procs.start_command(command, ["--data-path", str(tmp_path / "copy"), "--steps", str(STEPS)],
                                 "joiner")
    for p in (founder, joiner):
        p.wait_for(lambda e: e.get("event") == "left", 90, "leave after the last step")
        assert p.wait_exit(15) == 0
    assert sorted(founder.steps()) == sorted(joiner.steps()) == list(range(STEPS))
    assert_identical([founder, joiner], range(STEPS))
    # The model's vocabulary is the tokenizer's (600), not the tiny preset's 256: an untrained model's loss
    # is about ln(600) = 6.4 nats, where ln(256) would be 5.5.
    assert abs(founder.steps()[0]["loss"] - math.log(ours.manifest.tokenizer.vocab_size)) < 0.3
