"""Bad checkpoint directories are refused with typed errors naming the file, the config.json field or the
tensor that is wrong. No transformers needed: the directories are our own exports, then damaged."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from distro_node.node.hf.convert import export_hf, load_hf_checkpoint
from distro_node.node.hf.errors import HFConfigError, HFFileError, HFTensorError
from distro_node.node.hf.files import CONFIG_FILE, INDEX_FILE, WEIGHTS_FILE
from distro_node.node.model import Llama, ModelConfig
from safetensors.torch import load_file, save_file

CONFIG = ModelConfig(vocab_size=256, hidden=64, intermediate=128, n_layers=2, n_heads=4, n_kv_heads=2,
                     seq_len=64, rope_theta=500000.0, norm_eps=1e-6)


@pytest.fixture
def good(tmp_path: Path) -> Path:
    export_hf(Llama(CONFIG, seed=3).state_dict(), CONFIG, tmp_path / "good")
    return tmp_path / "good"


def edit_config(directory: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = json.loads((directory / CONFIG_FILE).read_text())
    change(doc)
    (directory / CONFIG_FILE).write_text(json.dumps(doc))


def edit_tensors(directory: Path, change: Callable[[dict[str, torch.Tensor]], None]) -> None:
    tensors = load_file(str(directory / WEIGHTS_FILE))
    change(tensors)
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})


def test_the_untouched_export_imports(good: Path) -> None:
    assert load_hf_checkpoint(good).config == CONFIG


@pytest.mark.parametrize("name", [CONFIG_FILE, WEIGHTS_FILE])
def test_missing_files(good: Path, name: str) -> None:
    (good / name).unlink()
    with pytest.raises(HFFileError) as err:
        load_hf_checkpoint(good)
    assert name in str(err.value)


def test_config_that_is_not_json(good: Path) -> None:
    (good / CONFIG_FILE).write_text("{ not json")
    with pytest.raises(HFFileError) as err:
        load_hf_checkpoint(good)
    assert err.value.path == good / CONFIG_FILE and "not valid JSON" in str(err.value)


@pytest.mark.parametrize(("key", "value"), [
    ("architectures", ["MistralForCausalLM"]),
    ("model_type", "mistral"),
    ("rope_scaling", {"rope_type": "llama3", "factor": 8.0}),
    ("rope_parameters", {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0}),
    ("attention_bias", True),
    ("mlp_bias", True),
    ("hidden_act", "gelu"),
    ("head_dim", 32),
    ("attention_dropout", 0.1),
    ("quantization_config", {"quant_method": "bitsandbytes"}),
    ("num_key_value_heads", 3),
    ("hidden_size", "64"),
    ("rope_theta", 10000.0),  # disagrees with rope_parameters.rope_theta
])
def test_config_fields_that_do_not_fit_are_named(good: Path, key: str, value: Any) -> None:
    edit_config(good, lambda doc: doc.update({key: value}))
    with pytest.raises(HFConfigError) as err:
        load_hf_checkpoint(good)
    assert err.value.field == key, str(err.value)


def test_a_config_field_missing(good: Path) -> None:
    edit_config(good, lambda doc: doc.pop("vocab_size"))
    with pytest.raises(HFConfigError) as err:
        load_hf_checkpoint(good)
    assert err.value.field == "vocab_size" and "missing" in str(err.value)


def test_shapes_that_do_not_match_the_config(good: Path) -> None:
    edit_config(good, lambda doc: doc.update(intermediate_size=96))
    with pytest.raises(HFTensorError) as err:
        load_hf_checkpoint(good)
    assert err.value.tensor == "model.layers.0.mlp.gate_proj.weight"
    assert "[128, 64]" in str(err.value) and "[96, 64]" in str(err.value)


def test_missing_unexpected_and_bad_tensors(good: Path) -> None:
    edit_tensors(good, lambda t: t.pop("lm_head.weight"))
    with pytest.raises(HFTensorError) as err:
        load_hf_checkpoint(good)
    assert err.value.tensor == "lm_head.weight" and "missing" in str(err.value)

    edit_tensors(good, lambda t: t.update({"lm_head.weight": torch.zeros(256, 64),
                                           "model.layers.1.self_attn.q_proj.bias": torch.zeros(64)}))
    with pytest.raises(HFTensorError) as err:
        load_hf_checkpoint(good)
    assert err.value.tensor == "model.layers.1.self_attn.q_proj.bias" and "bias" in str(err.value)

    edit_tensors(good, lambda t: (t.pop("model.layers.1.self_attn.q_proj.bias"),
                                  t.update({"model.norm.weight": torch.ones(64, dtype=torch.int32)})))
    with pytest.raises(HFTensorError) as err:
        load_hf_checkpoint(good)
    assert err.value.tensor == "model.norm.weight" and "I32" in str(err.value)

    edit_tensors(good, lambda t: t.update({"model.norm.weight": torch.full((64,), float("nan"))}))
    with pytest.raises(HFTensorError) as err:
        load_hf_checkpoint(good)
    assert err.value.tensor == "model.norm.weight" and "NaN" in str(err.value)


@pytest.mark.parametrize("damage", ["garbage header", "huge header length", "truncated", "empty"])
def test_corrupt_safetensors(good: Path, damage: str) -> None:
    path = good / WEIGHTS_FILE
    raw = path.read_bytes()
    damaged = {
        "garbage header": raw[:8] + b"{not json" + raw[17:],
        "huge header length": struct.pack("<Q", 1 << 40) + raw[8:],
        "truncated": raw[:-100],
        "empty": b"",
    }[damage]
    path.write_bytes(damaged)
    with pytest.raises(HFFileError) as err:
        load_hf_checkpoint(good)
    assert err.value.path == path and "not a valid safetensors file" in str(err.value)


def shard(directory: Path) -> dict[str, str]:
    """Split the export into two shards with an index, as transformers' save_pretrained does."""
    tensors = load_file(str(directory / WEIGHTS_FILE))
    (directory / WEIGHTS_FILE).unlink()
    names = sorted(tensors)
    weight_map: dict[str, str] = {}
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2:])):
        file = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, str(directory / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    (directory / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return weight_map


def test_sharded_checkpoints_and_their_index(good: Path) -> None:
    sha256 = load_hf_checkpoint(good).sha256
    weight_map = shard(good)
    assert load_hf_checkpoint(good).sha256 == sha256  # the hash names weights, not files

    (good / "model-00002-of-00002.safetensors").rename(good / "gone.safetensors")
    with pytest.raises(HFFileError) as err:
        load_hf_checkpoint(good)
    assert err.value.path.name == "model-00002-of-00002.safetensors" and "missing" in str(err.value)

    first = next(iter(weight_map))
    bad = {**weight_map, first: "../elsewhere.safetensors"}
    (good / INDEX_FILE).write_text(json.dumps({"weight_map": bad}))
    with pytest.raises(HFFileError) as err:
        load_hf_checkpoint(good)
    assert "not a file name" in str(err.value)

    (good / "gone.safetensors").rename(good / "model-00002-of-00002.safetensors")
    misplaced = {**weight_map, first: "model-00002-of-00002.safetensors"}
    if weight_map[first] == misplaced[first]:
        misplaced[first] = "model-00001-of-00002.safetensors"
    (good / INDEX_FILE).write_text(json.dumps({"weight_map": misplaced}))
    with pytest.raises(HFTensorError) as err:
        load_hf_checkpoint(good)
    assert err.value.tensor == first
