"""Import a local Hugging Face Llama checkpoint as a run's starting weights; export trained weights as one.

Import reads config.json into our :class:`ModelConfig` and the safetensors weights into our parameter names
(node/hf/mapping.py says why that is exact), and names the result by :func:`weights_sha256`: the sha256 the
run manifest carries. It is computed over our tensors in our model's order, exactly as the daemon's weights
hash (node/hashing.py) reads a model, so the hash a joiner checks its copy against is also the genesis
weights hash every peer announces; and it does not depend on how the directory stores them (one file or
shards, bf16 or fp32), only on the weights.

Export writes config.json, model.safetensors, generation_config.json and, when given, the run's
tokenizer.json with a tokenizer_config.json (so ``AutoTokenizer`` loads it, with the run's end-of-document
token as eos) into a directory that appears complete or not at all (node/hf/files.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
from distro_node.node.hashing import tensors_hash
from distro_node.node.hf.errors import HFTensorError
from distro_node.node.hf.files import (
    CONFIG_FILE,
    GENERATION_FILE,
    TOKENIZER_CONFIG_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    copy_file,
    load_tensors,
    read_json,
    scan_weights,
    write_directory,
    write_json,
)
from distro_node.node.hf.mapping import hf_config, model_config_from_hf, parameter_shapes, plan_import, to_hf
from distro_node.node.model import ModelConfig
from safetensors.torch import save_file


@dataclass(frozen=True, eq=False)
class ImportedCheckpoint:
    """A checkpoint directory read into our names: fp32 CPU tensors ready for ``Llama.load_state_dict``."""

    directory: Path
    config: ModelConfig
    state: dict[str, torch.Tensor]
    sha256: str
    tied: bool


def read_model_config(directory: Path) -> tuple[ModelConfig, bool]:
    """(model config, tied embeddings) from ``directory/config.json`` alone; no weights are read."""
    path = directory / CONFIG_FILE
    return model_config_from_hf(read_json(path), path)


def weights_sha256(state: Mapping[str, torch.Tensor], config: ModelConfig) -> str:
    """sha256 (hex) over our tensors in the model's ``state_dict`` order: equal to ``model_hash`` of a
    ``Llama`` holding ``state``, since the model has no persistent buffers."""
    return tensors_hash((name, state[name]) for name in parameter_shapes(config))


def load_hf_checkpoint(directory: Path) -> ImportedCheckpoint:
    """Read and check a Hugging Face Llama checkpoint directory; every failure is an HFCheckpointError
    naming the file, the config.json field or the tensor."""
    config, tied = read_model_config(directory)
    found = scan_weights(directory)
    plan = plan_import(found, config, tied=tied, path=directory)
    sources = set(plan.values())
    if tied and "lm_head.weight" in found:
        sources.add("lm_head.weight")
    data = load_tensors({name: found[name] for name in sources})
    if tied and "lm_head.weight" in data and not torch.equal(data["lm_head.weight"],
                                                             data["model.embed_tokens.weight"]):
        raise HFTensorError(found["lm_head.weight"].file, "lm_head.weight",
                            "differs from model.embed_tokens.weight while tie_word_embeddings is true")
    state: dict[str, torch.Tensor] = {}
    for ours, source in plan.items():
        tensor = data[source].to(torch.float32)  # widening bf16/fp16 is exact
        if ours == "head" and source == "model.embed_tokens.weight":
            tensor = tensor.clone()  # untie: the run trains the output head apart from the embedding
        if not bool(torch.isfinite(tensor).all()):
            raise HFTensorError(found[source].file, source, "holds NaN or infinite values")
        state[ours] = tensor.contiguous()
    return ImportedCheckpoint(directory, config, state, weights_sha256(state, config), tied)


@dataclass(frozen=True)
class Exported:
    """What an export wrote, for the command's report."""

    directory: Path
    files: tuple[str, ...]
    sha256: str  # weights_sha256 of the exported weights: the run's weights hash at that step


@dataclass(frozen=True)
class ExportTokenizer:
    """A tokenizer.json to ship with the weights, and its end-of-document token when the run knows it (a
    prepared dataset records it; generation then stops there)."""

    file: Path
    eos_token: str | None = None
    eos_id: int | None = None


def generation_config(eos_id: int | None) -> dict[str, object]:
    """generation_config.json: the marker transformers writes for a config derived from the model config,
    and the token to stop at when the run has one (byte-level runs have none: see :func:`hf_config`)."""
    return {"_from_model_config": True, **({"eos_token_id": eos_id} if eos_id is not None else {})}


def tokenizer_config(tokenizer: ExportTokenizer, config: ModelConfig) -> dict[str, object]:
    """tokenizer_config.json: what ``AutoTokenizer`` needs besides tokenizer.json to load it."""
    doc: dict[str, object] = {"tokenizer_class": "PreTrainedTokenizerFast",
                              "model_max_length": config.seq_len}
    if tokenizer.eos_token is not None:
        doc["eos_token"] = tokenizer.eos_token
    return doc


def export_hf(state: Mapping[str, torch.Tensor], config: ModelConfig, out: Path, *, force: bool = False,
              tokenizer: ExportTokenizer | None = None,
              metadata: Mapping[str, str] | None = None) -> Exported:
    """Write a transformers-loadable ``LlamaForCausalLM`` directory at ``out``.

    ``metadata`` goes into the safetensors header next to ``format: pt`` (provenance: run id, step);
    ``tokenizer`` is copied as tokenizer.json. A non-empty ``out`` is refused unless ``force``.
    """
    tensors = to_hf(state, config)
    sha256 = weights_sha256(state, config)
    header = {"format": "pt", **dict(metadata or {}), "distro_node_weights_sha256": sha256}
    eos_id = tokenizer.eos_id if tokenizer is not None else None
    files = [CONFIG_FILE, GENERATION_FILE, WEIGHTS_FILE]
    files += [TOKENIZER_FILE, TOKENIZER_CONFIG_FILE] if tokenizer is not None else []

    def fill(directory: Path) -> None:
        save_file(tensors, str(directory / WEIGHTS_FILE), metadata=header)
        write_json(directory / CONFIG_FILE, {**hf_config(config), "eos_token_id": eos_id})
        write_json(directory / GENERATION_FILE, generation_config(eos_id))
        if tokenizer is not None:
            copy_file(tokenizer.file, directory / TOKENIZER_FILE)
            write_json(directory / TOKENIZER_CONFIG_FILE, tokenizer_config(tokenizer, config))

    write_directory(out, fill, force=force)
    return Exported(out, tuple(files), sha256)
