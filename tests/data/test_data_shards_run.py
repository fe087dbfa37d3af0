"""Runs on a prepared dataset: the manifest names data.json and the tokenizer by sha256, the model takes the
tokenizer's vocabulary, peers train in lockstep on their own copies, and a joiner with other data is refused
naming the hash. Two trainers exchanging real payloads (the daemon's compute and apply) and the in-process
simulator both train a few steps."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
from distro_node.node.data.prepare import prepare
from distro_node.node.data.shards import open_shards
from distro_node.node.peer.local import LocalSettings, LocalSetupError
from distro_node.node.peer.manifest import DataSpec, ManifestError, RoundSettings, RunManifest
from distro_node.node.peer.settings import founder_manifest, load_join_settings
from distro_node.node.peer.trainer import Trainer
from distro_node.node.presets import preset
from distro_node.node.sim.experiment import ExperimentConfig, run_experiment
from shard_corpus import SETTINGS, Prepared, copy_dataset

pytestmark = pytest.mark.usefixtures("one_thread")


def founder_on(path: Path, **flags: object) -> RunManifest:
    settings = load_join_settings(None, {"run.data.kind": "shards", "run.data.path": path,
                                         "run.seq_len": 32, **flags}, env={})
    return founder_manifest(settings, RoundSettings())


def test_manifest_names_the_dataset_and_its_tokenizer(prepared: Prepared) -> None:
    manifest = founder_on(prepared.folder)
    m = prepared.result.manifest
    assert manifest.data == DataSpec(
        kind="shards", sha256=hashlib.sha256(prepared.result.path.read_bytes()).hexdigest(),
        size=prepared.result.path.stat().st_size, token_dtype="uint16", eval_fraction=SETTINGS.eval_fraction,
        tokenizer_sha256=m.tokenizer.sha256, vocab_size=m.tokenizer.vocab_size,
    )
    raw = manifest.to_bytes()
    assert str(prepared.folder).encode() not in raw
    assert RunManifest.from_bytes(raw) == manifest
    shape = manifest.model_config()
    assert shape.vocab_size == 8000 and shape.hidden == preset("tiny").hidden  # vocabulary from the tokenizer
    # A file run's bytes carry no tokenizer fields (its run id is what it was); a shards run must have them.
    assert b"tokenizer_sha256" in raw
    with pytest.raises(ManifestError, match=r"data\.tokenizer_sha256"):
        RunManifest(data=DataSpec(kind="shards", sha256="a" * 64, size=10, token_dtype="uint16"))
    with pytest.raises(ManifestError, match=r"data\.vocab_size"):
        RunManifest(data=DataSpec(kind="shards", sha256="a" * 64, size=10, token_dtype="uint32",
                                  tokenizer_sha256="b" * 64, vocab_size=1 << 40))
    with pytest.raises(ManifestError, match=r"data\.tokenizer_sha256: only kind shards"):
        RunManifest(data=DataSpec(kind="text", sha256="a" * 64, size=10, vocab_size=5))


def test_two_peers_train_in_lockstep_on_their_own_copies(prepared: Prepared, tmp_path: Path) -> None:
    manifest = founder_on(prepared.folder, **{"run.model": "tiny", "run.batch_size": 4})
    a = Trainer(manifest, "peer-a", LocalSettings(data_path=prepared.folder))
    b = Trainer(manifest, "peer-b", LocalSettings(data_path=copy_dataset(prepared.folder, tmp_path / "b")))
    assert a.model.embed.shape[0] == b.model.embed.shape[0] == 8000
    assert a.weights_hash == b.weights_hash
    before = a.heldout_loss()
    losses = []
    for step in range(6):
        done = {t.peer_id: t.compute(step) for t in (a, b)}
        assert all(d.data is not None for d in done.values())
        losses.append(sum(d.loss for d in done.values()) / 2)
        payloads = {pid: a.decode(d.data, pid, step) for pid, d in done.items() if d.data is not None}
        assert a.apply(step, payloads) == b.apply(step, payloads)
    assert abs(losses[0] - math.log(8000)) < 1.0  # an untrained model over 8000 ids
    # It learns: the loss on one fixed batch falls (the training losses of six different batches of 4
    # sequences are too noisy to compare: 8.98164 after vs 8.98114 before in one loaded run).
    assert all(math.isfinite(x) for x in losses) and a.heldout_loss() < before


def test_joiner_with_other_data_is_refused_naming_the_hash(prepared: Prepared, tmp_path: Path) -> None:
    manifest = founder_on(prepared.folder)
    jsonl = [p for p in prepared.inputs if p.suffix == ".jsonl"]
    # The same tokenizer, other documents: the data.json hash differs.
    prepare(jsonl[:1], tmp_path / "subset", SETTINGS, tokenizer_path=prepared.folder / "tokenizer.json",
            progress=False)
    with pytest.raises(LocalSetupError, match=r"not the run's prepared data") as info:
        Trainer(manifest, "joiner", LocalSettings(data_path=tmp_path / "subset"))
    assert info.value.field == "run.data.path" and manifest.data.sha256 in str(info.value)
    assert "tokenizer" not in str(info.value).split("not the run's prepared data")[1]
    # Another tokenizer (trained at another size): the error names both tokenizer hashes.
    other = SETTINGS.__class__(**{**SETTINGS.__dict__, "vocab_size": 1000})
    prepare(jsonl, tmp_path / "other", other, progress=False)
    with pytest.raises(LocalSetupError, match=rf"the run's tokenizer is {manifest.data.tokenizer_sha256}"):
        Trainer(manifest, "joiner", LocalSettings(data_path=tmp_path / "other"))
    with pytest.raises(LocalSetupError, match="pass your copy's folder with --data-path"):
        Trainer(manifest, "joiner")


def test_a_tampered_copy_is_refused_before_training(prepared: Prepared, tmp_path: Path) -> None:
    manifest = founder_on(prepared.folder)
    copy = copy_dataset(prepared.folder, tmp_path / "copy")
    shard = copy / prepared.result.manifest.train.shards[0].file
    shard.write_bytes(shard.read_bytes()[:-4])
    with pytest.raises(LocalSetupError, match=rf"run\.data\.path: .*{shard.name}: .* is short"):
        Trainer(manifest, "joiner", LocalSettings(data_path=copy))


def test_simulated_swarm_trains_on_shards(prepared: Prepared) -> None:
    cfg = ExperimentConfig(preset="tiny", peers=2, steps=4, batch_size=4, seq_len=32, eval_batches=2)
    result = run_experiment(cfg, source=open_shards(prepared.folder))
    assert result.replicas_identical
    assert result.model_params > 2 * 8000 * preset("tiny").hidden  # the embeddings have 8000 rows
    assert math.isfinite(result.final_eval_loss) and result.final_eval_loss < math.log(8000) + 1
    assert result.loss_floor is None
