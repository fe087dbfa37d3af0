"""Real `join` processes on an imported checkpoint that only the founder holds: the founder starts from a
sharded Llama made locally with transformers (`--init-from`), two joiners without `--init-from` fetch its
files by hash from their bootstrap peer (one into <data_dir>/init/<prefix>/, one into a temporary folder
removed at exit), load them through the weights-hash check and train in lockstep with it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from distro_node.node.join_process import CLI, PeerProc, join_args
from distro_node.node.peer.init_fetch import INIT_DIR
from distro_node.node.peer.run_init import founder_init_spec
from hf_support import make_hf_model, save_hf_model

pytestmark = [pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(400)]

STEPS = 4
RUN = ["--round-timeout", "8", "--seq-len", "32", "--batch-size", "2", "--steps", str(STEPS), "--log-format",
       "json"]


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[PeerProc]]:
    """Every process a test starts, killed by pid and reaped afterwards whatever the test did."""
    procs: list[PeerProc] = []
    try:
        yield procs
    finally:
        for p in procs:
            p.reap()


def test_joiners_without_the_checkpoint_fetch_it_and_train_in_lockstep(tmp_path: Path,
                                                                        started: list[PeerProc]) -> None:
    pytest.importorskip("transformers")
    hf_dir = save_hf_model(make_hf_model(seed=5), tmp_path / "hf", max_shard_size="40KB")
    spec = founder_init_spec(hf_dir)
    assert len(spec.files) >= 4  # config.json, the index and several shards

    founder = PeerProc([*CLI, "join", "--init-from", str(hf_dir), "--genesis-peers", "3", *RUN], "founder",
                       tmp_path)
    started.append(founder)
    info = founder.info()
    command = info["join_command"]
    keeper = PeerProc([*CLI, "join", *join_args(command), "--data-dir", str(tmp_path / "keeper"), *RUN],
                      "keeper", tmp_path)
    started.append(keeper)
    passer = PeerProc([*CLI, "join", *join_args(command), *RUN], "passer", tmp_path)
    started.append(passer)
    got = {}
    for j in (keeper, passer):
        got[j.name] = j.wait_for(lambda e: e.get("event") == "init_fetched", 120, "the checkpoint's files")
        assert got[j.name]["sha256"] == spec.sha256 and got[j.name]["files"] == len(spec.files)
    assert Path(got["keeper"]["folder"]) == tmp_path / "keeper" / INIT_DIR / spec.sha256[:16]
    assert got["keeper"]["bytes"] == sum(f.size for f in spec.files)

    peers = [founder, keeper, passer]
    for p in peers:
        p.wait_for(lambda e: e.get("event") == "left", 240, "leave after the last step")
        assert p.wait_exit(30) == 0, p.tail_stderr()
    for p in peers:
        joined = next(e for e in p.events if e.get("event") == "joined")
        assert joined["weights_hash"] == spec.sha256, p.name  # genesis: the imported weights everywhere
        assert sorted(p.steps()) == list(range(STEPS)), p.name
    for s in range(STEPS):
        hashes = {p.name: p.steps()[s]["weights_hash"] for p in peers}
        assert len(set(hashes.values())) == 1, f"weights differ after step {s}: {hashes}"

    kept = Path(got["keeper"]["folder"])
    assert sorted(p.name for p in kept.iterdir()) == [f.name for f in spec.files]  # verified, no .part
    for f in spec.files:
        assert hashlib.sha256((kept / f.name).read_bytes()).hexdigest() == f.sha256
    assert not Path(got["passer"]["folder"]).exists()  # no data dir: the temporary folder went at exit


def test_a_joiner_whose_bootstrap_does_not_serve_the_files_is_told_the_hash(tmp_path: Path,
                                                                             started: list[PeerProc]) -> None:
    """A peer that joined with its own copy stored in other files (one file, not the founder's shards) trains
    on the run's weights but serves none of the manifest's weight files: a joiner bootstrapping from it
    stops before training with an error naming run.init_from and the weights hash."""
    pytest.importorskip("transformers")
    model = make_hf_model(seed=6)
    sharded = save_hf_model(model, tmp_path / "sharded", max_shard_size="40KB")
    single = save_hf_model(model, tmp_path / "single")
    spec = founder_init_spec(sharded)
    serving = [*RUN, "--steps", "1000"]  # still running when the late joiner asks (killed by the fixture)
    founder = PeerProc([*CLI, "join", "--init-from", str(sharded), "--genesis-peers", "2", *serving],
                       "founder", tmp_path)
    started.append(founder)
    own = PeerProc([*CLI, "join", *join_args(founder.info()["join_command"]), "--init-from", str(single),
                    *serving], "own", tmp_path)
    started.append(own)
    late = PeerProc([*CLI, "join", *join_args(own.info()["join_command"]), *RUN], "late", tmp_path)
    started.append(late)
    error = late.wait_for(lambda e: e.get("event") == "error", 120, "an error")
    assert error["field"] == "run.init_from" and spec.sha256 in error["reason"], error
    assert "--init-from" in error["reason"]
    assert late.wait_exit(30) == 1
    assert not [e for e in late.events if e.get("event") in ("init_fetched", "joined")]
