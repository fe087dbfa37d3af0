"""Importing a Hugging Face Llama checkpoint: a model made locally with transformers computes the same logits
in our Llama (one file, shards, bf16, tied embeddings), and the imported weights' hash is the one a run's
manifest and every peer's genesis weights carry."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from distro_node.node.config.errors import ConfigFieldError
from distro_node.node.hashing import model_hash
from distro_node.node.hf.convert import load_hf_checkpoint, weights_sha256
from distro_node.node.hf.files import INDEX_FILE
from distro_node.node.hf.mapping import name_pairs, parameter_shapes
from distro_node.node.model import Llama
from distro_node.node.peer.local import LocalSettings, LocalSetupError
from distro_node.node.peer.manifest import InitSpec, ManifestError, RunManifest
from distro_node.node.peer.run_init import checkpoint_files, founder_init_spec, initial_weights
from distro_node.node.peer.settings import founder_manifest, load_join_settings
from distro_node.node.peer.trainer import Trainer
from distro_node.node.presets import preset
from hf_support import TINY_HF, TOLERANCE, fixed_batch, hf_logits, make_hf_model, our_logits, save_hf_model


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    return save_hf_model(make_hf_model(), tmp_path_factory.mktemp("hf") / "llama")


def test_name_pairs_follow_our_registration_order() -> None:
    """Every parameter is mapped, and the weights hash reads them in the model's own state_dict order."""
    config = preset("tiny")
    assert sorted(ours for ours, _ in name_pairs(config.n_layers)) == sorted(parameter_shapes(config))
    assert list(Llama(config, seed=0).state_dict()) == list(parameter_shapes(config))


@pytest.mark.parametrize("variant", ["single", "sharded", "bf16", "tied"])
def test_imported_model_computes_transformers_logits(tmp_path: Path, variant: str) -> None:
    pytest.importorskip("transformers")
    overrides = {"tie_word_embeddings": True} if variant == "tied" else {}
    model = make_hf_model(seed=1, **overrides)
    if variant == "bf16":
        save_hf_model(copy.deepcopy(model).to(torch.bfloat16), tmp_path / "hf")
        with torch.no_grad():  # the reference: the values the bf16 file holds, widened, computed in fp32
            for param in model.parameters():
                param.copy_(param.to(torch.bfloat16).float())
    else:
        save_hf_model(model, tmp_path / "hf", **({"max_shard_size": "40KB"} if variant == "sharded" else {}))
    if variant == "sharded":
        assert (tmp_path / "hf" / INDEX_FILE).is_file()
    imported = load_hf_checkpoint(tmp_path / "hf")
    assert imported.tied is (variant == "tied")
    assert imported.config.rope_theta == TINY_HF["rope_theta"] and imported.config.norm_eps == 1e-6
    assert (imported.config.n_heads, imported.config.n_kv_heads) == (4, 2)
    tokens = fixed_batch()
    ours = our_logits(imported.config, imported.state, tokens)
    theirs = hf_logits(model, tokens)
    diff = float((ours - theirs).abs().max())
    print(f"\nimport {variant}: max |logit diff| {diff:.3g} (logits up to {float(theirs.abs().max()):.3g})")
    assert diff <= TOLERANCE
    assert float(theirs.abs().max()) > 1.0  # logits large enough for the tolerance to mean something
    if variant == "tied":
        assert torch.equal(imported.state["head"], imported.state["embed"])
        assert imported.state["head"].data_ptr() != imported.state["embed"].data_ptr()  # trained apart


def test_sharded_and_single_file_name_the_same_weights(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    model = make_hf_model(seed=2)
    one = load_hf_checkpoint(save_hf_model(model, tmp_path / "one"))
    shards = load_hf_checkpoint(save_hf_model(model, tmp_path / "shards", max_shard_size="40KB"))
    assert one.sha256 == shards.sha256
    loaded = Llama(one.config, seed=None)
    loaded.load_state_dict(one.state, strict=True)
    assert model_hash(loaded) == one.sha256 == weights_sha256(one.state, one.config)


def test_a_wrong_mapping_would_be_caught(hf_dir: Path) -> None:
    """Guard on the guard: swapping two same-shaped tensors moves the logits far past the tolerance."""
    imported = load_hf_checkpoint(hf_dir)
    state = dict(imported.state)
    state["layers.0.attn.q_proj"], state["layers.0.attn.o_proj"] = state["layers.0.attn.o_proj"], \
        state["layers.0.attn.q_proj"]
    tokens = fixed_batch()
    diff = our_logits(imported.config, state, tokens) - our_logits(imported.config, imported.state, tokens)
    assert float(diff.abs().max()) > 100 * TOLERANCE


def test_founder_manifest_takes_shape_and_hash_from_the_checkpoint(hf_dir: Path) -> None:
    settings = load_join_settings(None, {"run.init_from": hf_dir}, env={})
    manifest = founder_manifest(settings)
    imported = load_hf_checkpoint(hf_dir)
    assert manifest.init == InitSpec(kind="hf", sha256=imported.sha256, model=imported.config.to_dict(),
                                     files=checkpoint_files(hf_dir))
    assert manifest.preset == "" and manifest.model_config() == imported.config
    assert RunManifest.from_bytes(manifest.to_bytes()) == manifest  # one canonical byte form
    seeded = founder_manifest(load_join_settings(None, {}, env={}))
    assert b'"init"' not in seeded.to_bytes()  # a seeded run's bytes (and run id) are as before
    with pytest.raises(ConfigFieldError) as err:
        founder_manifest(load_join_settings(None, {"run.init_from": hf_dir, "run.model": "small"}, env={}))
    assert err.value.field == "run.model"
    with pytest.raises(ConfigFieldError) as err:
        founder_manifest(load_join_settings(None, {"run.init_from": hf_dir, "run.seq_len": 65}, env={}))
    assert err.value.field == "run.seq_len"


def test_manifest_refuses_a_preset_beside_imported_weights(hf_dir: Path) -> None:
    spec = founder_init_spec(hf_dir)
    with pytest.raises(ManifestError) as err:
        RunManifest(preset="tiny", init=spec)
    assert err.value.field == "preset"
    with pytest.raises(ManifestError) as err:
        RunManifest(preset="", init=InitSpec(kind="hf", sha256="ab" * 32, model={**spec.model, "hidden": 63}))
    assert err.value.field == "init.model"


def test_every_peer_starts_from_the_imported_weights(hf_dir: Path) -> None:
    spec = founder_init_spec(hf_dir)
    manifest = RunManifest.found(preset="", init=spec)
    trainer = Trainer(manifest, "peer-a", LocalSettings(init_from=hf_dir))
    assert trainer.weights_hash.hex() == spec.sha256


def test_a_joiner_without_the_checkpoint_is_told_the_hash_it_needs(hf_dir: Path, tmp_path: Path) -> None:
    spec = founder_init_spec(hf_dir)
    manifest = RunManifest.found(preset="", init=spec)
    with pytest.raises(LocalSetupError) as err:
        Trainer(manifest, "peer-b", LocalSettings())
    assert err.value.field == "run.init_from" and spec.sha256 in str(err.value)
    other = save_hf_model(make_hf_model(seed=7), tmp_path / "other")
    with pytest.raises(LocalSetupError) as err:
        initial_weights(spec, other)
    assert spec.sha256 in str(err.value) and load_hf_checkpoint(other).sha256 in str(err.value)
    with pytest.raises(LocalSetupError) as err:
        initial_weights(InitSpec(), hf_dir)
    assert err.value.field == "run.init_from" and "seed" in str(err.value)
    with pytest.raises(LocalSetupError) as err:
        initial_weights(spec, tmp_path / "missing")
    assert err.value.field == "run.init_from" and "config.json" in str(err.value)


def test_a_founder_of_an_imported_run_resumes_it(hf_dir: Path, tmp_path: Path) -> None:
    """Restarted with the same --init-from, a founder finds its checkpoint's run (same init, other nonce)."""
    from distro_node.node.checkpoint.store import CheckpointStore
    from distro_node.node.peer import checkpointing

    settings = load_join_settings(None, {"run.init_from": hf_dir}, env={})
    first = founder_manifest(settings)
    trainer = Trainer(first, "peer-a", LocalSettings(init_from=hf_dir))
    checkpointing.save(CheckpointStore(tmp_path / "ckpts"), trainer, 4)
    resume, why = checkpointing.find_resume(tmp_path / "ckpts", founder_manifest(settings))
    assert resume is not None and resume.manifest.run_id() == first.run_id(), why
    other = save_hf_model(make_hf_model(seed=8), tmp_path / "other")
    resume, why = checkpointing.find_resume(
        tmp_path / "ckpts", founder_manifest(load_join_settings(None, {"run.init_from": other}, env={})))
    assert resume is None and "other settings" in why
