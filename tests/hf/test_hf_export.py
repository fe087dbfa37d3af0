"""Exporting: our model's weights reload in transformers with the same logits, `distro-node export` finds a
node's checkpoints the way the daemon writes them, refuses what it must, and never leaves half an export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from distro_node.node.checkpoint.store import CheckpointStore
from distro_node.node.cli.main import main
from distro_node.node.hf import convert
from distro_node.node.hf.convert import export_hf, load_hf_checkpoint
from distro_node.node.hf.errors import HFFileError
from distro_node.node.model import Llama, ModelConfig, param_count
from distro_node.node.peer import checkpointing
from distro_node.node.peer.manifest import RunManifest
from distro_node.node.peer.trainer import Trainer
from hf_support import TOLERANCE, fixed_batch, hf_logits, our_logits
from safetensors import safe_open

CONFIG = ModelConfig(vocab_size=256, hidden=64, intermediate=128, n_layers=2, n_heads=4, n_kv_heads=2,
                     seq_len=64, rope_theta=500000.0, norm_eps=1e-6, init_std=0.1)
EXPECTED_FILES = {"config.json", "generation_config.json", "model.safetensors"}


def trained_state() -> dict[str, torch.Tensor]:
    """Our model with every tensor moved off its init (norms included), so no mapping error can hide."""
    model = Llama(CONFIG, seed=5)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.1 * torch.randn(param.shape, generator=torch.Generator().manual_seed(param.numel())))
    return model.state_dict()


def test_export_reloads_in_transformers_with_the_same_logits(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    state = trained_state()
    exported = export_hf(state, CONFIG, tmp_path / "out")
    assert {p.name for p in (tmp_path / "out").iterdir()} == EXPECTED_FILES
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["tie_word_embeddings"] is False
    assert (config["max_position_embeddings"], config["num_key_value_heads"]) == (64, 2)
    assert (config["rms_norm_eps"], config["rope_theta"]) == (1e-6, 500000.0)
    assert (config["torch_dtype"], config["attention_bias"], config["mlp_bias"]) == ("float32", False, False)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out")).eval()
    assert model.dtype == torch.float32 and model.config.tie_word_embeddings is False
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    transformers.GenerationConfig.from_pretrained(str(tmp_path / "out"))
    tokens = fixed_batch()
    ours, theirs = our_logits(CONFIG, state, tokens), hf_logits(model, tokens)
    diff = float((ours - theirs).abs().max())
    print(f"\nexport: max |logit diff| {diff:.3g} (logits up to {float(ours.abs().max()):.3g})")
    assert diff <= TOLERANCE and float(ours.abs().max()) > 1.0
    # Greedy generation runs on the exported model (no special tokens needed).
    out = model.generate(tokens[:1, :8], max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 12)
    assert exported.sha256 == load_hf_checkpoint(tmp_path / "out").sha256


def test_export_then_import_is_bit_exact(tmp_path: Path) -> None:
    state = trained_state()
    export_hf(state, CONFIG, tmp_path / "out")
    back = load_hf_checkpoint(tmp_path / "out")
    assert back.config == CONFIG and not back.tied
    assert set(back.state) == set(state)
    assert all(torch.equal(back.state[name], state[name]) for name in state)


def daemon_checkpoint(directory: Path, step: int = 7) -> Trainer:
    """A checkpoint as a running peer writes it (manifest and weights hash in its extras)."""
    trainer = Trainer(RunManifest.found(preset="tiny"), "peer-a")
    checkpointing.save(CheckpointStore(directory), trainer, step)
    return trainer


def test_cli_exports_the_newest_checkpoint_of_a_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    trainer = daemon_checkpoint(tmp_path / "node" / "checkpoints")
    out = tmp_path / "exports" / "tiny"
    assert main(["export", "--format", "hf", str(out), "--data-dir", str(tmp_path / "node")]) == 0
    assert {p.name for p in out.iterdir()} == EXPECTED_FILES
    printed = capsys.readouterr().out
    assert trainer.weights_hash.hex() in printed and "step 7" in printed
    with safe_open(str(out / "model.safetensors"), framework="pt") as fh:
        meta = fh.metadata()
    assert meta["distro_node_step"] == "7" and meta["distro_node_run_id"] == trainer.run_id.hex()
    assert meta["distro_node_weights_sha256"] == trainer.weights_hash.hex()
    exported = load_hf_checkpoint(out)
    assert all(torch.equal(exported.state[n], t) for n, t in trainer.model.state_dict().items())

    # A non-empty OUT is refused (exit 2, naming it) and left alone; --force replaces it.
    (out / "notes.txt").write_text("mine")
    assert main(["export", str(out), "--checkpoint", str(tmp_path / "node" / "checkpoints")]) == 2
    assert "not empty; pass --force" in capsys.readouterr().err and (out / "notes.txt").is_file()
    tokenizer = tmp_path / "tok.json"
    tokenizer.write_text('{"model": {}}')
    ckpt = next((tmp_path / "node" / "checkpoints").glob("ckpt-*"))
    assert main(["export", str(out), "--checkpoint", str(ckpt), "--force",
                 "--tokenizer", str(tokenizer)]) == 0
    assert {p.name for p in out.iterdir()} == EXPECTED_FILES | {"tokenizer.json", "tokenizer_config.json"}
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp or trash left


def test_cli_names_what_is_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path / "out"), "--data-dir", str(tmp_path / "empty")]) == 2
    assert f"no valid checkpoint in {tmp_path / 'empty' / 'checkpoints'}" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "nothing")]) == 2
    assert "--checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_whose_weights_do_not_match_its_hash_is_not_exported(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trainer = daemon_checkpoint(tmp_path / "ckpts")
    with torch.no_grad():
        trainer.model.embed.add_(1.0)  # saved with the old hash in the extras: a lie
    store = CheckpointStore(tmp_path / "ckpts")
    store.save(step=8, run_id=trainer.run_id, config_digest=trainer.run_id.hex(),
               model_state=trainer.model.state_dict(), strategy_name=trainer.strategy.name,
               strategy_state=trainer.strategy.state_dict(),
               extra={"manifest": trainer.manifest.to_bytes().decode(),
                      "weights_hash": trainer.weights_hash.hex()})
    assert main(["export", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ckpts")]) == 2
    assert "did not agree on" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_an_interrupted_export_leaves_nothing_half_written(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    state = trained_state()

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(convert, "write_json", crash)  # model.safetensors is written, config.json fails
    with pytest.raises(OSError):
        export_hf(state, CONFIG, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    export_hf(state, CONFIG, tmp_path / "out")
    before = (tmp_path / "out" / "model.safetensors").read_bytes()
    monkeypatch.setattr(convert, "write_json", crash)
    with pytest.raises(OSError):
        export_hf(Llama(CONFIG, seed=9).state_dict(), CONFIG, tmp_path / "out", force=True)
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == before  # the old export is intact
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_export_refuses_a_file_as_target(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("x")
    with pytest.raises(HFFileError) as err:
        export_hf(trained_state(), CONFIG, tmp_path / "out", force=True)
    assert err.value.path == tmp_path / "out" and "not a directory" in str(err.value)


def test_doctor_sizes_an_imported_model_from_its_config(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`doctor` with run.init_from reads the shape from config.json, not from the (unused) preset."""
    big = ModelConfig(vocab_size=1000, hidden=128, intermediate=256, n_layers=3, n_heads=4, n_kv_heads=4,
                      seq_len=64)
    export_hf(Llama(big, seed=0).state_dict(), big, tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DISTRO_NODE_RUN__INIT_FROM", str(tmp_path / "model"))
    code = main(["doctor", "--json", "--listen", "/ip4/127.0.0.1/tcp/0", "--compute-seconds", "0.1"])
    report = json.loads(capsys.readouterr().out)
    assert report["context"]["params"] == param_count(big) and report["context"]["preset"] is None
    assert report["context"]["model"] == f"imported {tmp_path / 'model'}", code


def test_a_prepared_data_run_ships_its_tokenizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run on `data prepare` output names its tokenizer by sha256: export finds this machine's copy through
    the dataset folder, checks it, and ships it so AutoTokenizer loads it with the end-of-document eos."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from distro_node.node.data.prepare import PrepareSettings, prepare
    from distro_node.node.peer.local import LocalSettings
    from distro_node.node.peer.settings import founder_manifest, load_join_settings

    (tmp_path / "input").mkdir()
    for i in range(30):
        words = [f"w{(i * 7 + j * j) % 53}" for j in range(300)]
        (tmp_path / "input" / f"doc{i}.txt").write_text(" ".join(words))
    settings = PrepareSettings(vocab_size=320, eod_token="<|endoftext|>", text_field="text",
                               eval_fraction=0.2, shard_tokens=1 << 12)
    result = prepare([tmp_path / "input"], tmp_path / "data", settings, progress=False)
    eod = result.manifest.tokenizer
    manifest = founder_manifest(load_join_settings(None, {"run.data.kind": "shards",
                                                          "run.data.path": tmp_path / "data",
                                                          "run.seq_len": 32}, env={}))
    trainer = Trainer(manifest, "peer-a", LocalSettings(data_path=tmp_path / "data"))
    checkpointing.save(CheckpointStore(tmp_path / "ckpts"), trainer, 3)
    out, ckpts = tmp_path / "out", str(tmp_path / "ckpts")

    assert main(["export", str(out), "--checkpoint", ckpts]) == 2
    assert f"tokenizer sha256 {eod.sha256}" in capsys.readouterr().err and not out.exists()
    stray = tmp_path / "other.json"
    stray.write_text("{}")
    assert main(["export", str(out), "--checkpoint", ckpts, "--tokenizer", str(stray)]) == 2
    assert eod.sha256 in capsys.readouterr().err

    assert main(["export", str(out), "--checkpoint", ckpts, "--data-path", str(tmp_path / "data")]) == 0
    assert {p.name for p in out.iterdir()} == EXPECTED_FILES | {"tokenizer.json", "tokenizer_config.json"}
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|endoftext|>", eod.eod_id)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert model.generation_config.eos_token_id == eod.eod_id
    ids = torch.tensor([tokenizer("w1 w4 w9 w16")["input_ids"]])
    assert int(ids.max()) < manifest.model_config().vocab_size
    ours = our_logits(manifest.model_config(), trainer.model.state_dict(), ids)
    assert float((hf_logits(model, ids) - ours).abs().max()) <= TOLERANCE
