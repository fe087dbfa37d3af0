"""How distro-node's Llama (node/model.py) and transformers' ``LlamaForCausalLM`` name the same model: the
config.json fields and the tensor names, both ways. Pure: no file access, and transformers is never imported
(the daemon does not depend on it; tests/hf/ uses it to prove the files load).

Why the mapping is exact (checked against transformers' modeling_llama.py, 4.40 to 5.x):

- Tensors: every parameter is the same matrix in the same layout ([out, in], as ``F.linear`` and
  ``nn.Linear`` both take it), so converting is renaming only; values are copied bit for bit (fp32 here; a
  bf16 or fp16 checkpoint is widened to fp32, which is exact).
- Attention heads: q/k/v rows are viewed as (heads, head_dim) in the same head-major order on both sides,
  and both apply RoPE in the rotate-half layout (``cat(-x2, x1)``) to that view, so no q/k row permutation
  is needed. (Meta's original consolidated checkpoints use the interleaved layout and need the permutation
  transformers' conversion script applies; a Hugging Face directory already has it.)
- GQA: query head h reads KV head h // (n_heads / n_kv_heads) on both sides (our ``repeat_interleave``,
  transformers' ``repeat_kv``).
- RMSNorm: normalised in fp32, then the weight multiplies the result cast back to the input dtype, with
  ``rms_norm_eps`` = ``norm_eps``; neither side has a bias or subtracts a mean.
- Attention scale 1/sqrt(head_dim), causal mask, no dropout at inference; MLP down(silu(gate(x)) * up(x)).
- Untied embeddings: ``embed`` and ``head`` are two tensors (``tie_word_embeddings: false``).
- RoPE tables: the same angles pos * theta^(-2i/head_dim), but we compute them in float64 and round once
  while transformers computes inv_freq and the products in float32. The tables differ by that rounding only:
  measured max |cos - cos_hf| 1.2e-6 at 64 positions (theta 500000), 1.1e-4 at 2048 (theta 10000), 6e-4 at
  8192 (theta 500000), growing with the position. Ours is the correctly rounded one, and changing it would
  change every existing run's numerics, so it stays. That is the only numeric difference: at the 64
  positions of tests/hf/ the logits agree within 1e-5.

Refused on import (:class:`HFConfigError` naming the field), because our model would compute something else:
an architecture other than LlamaForCausalLM, scaled RoPE of any kind, partial rotary, biases, an activation
other than silu, a head_dim other than hidden_size / num_attention_heads, dropout, quantization. Tied
embeddings are accepted by copying the embedding into ``head`` (which is what transformers computes with them
tied); the run then trains the two apart, and an export says ``tie_word_embeddings: false``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from distro_node.node.hf.errors import HFConfigError, HFTensorError
from distro_node.node.model import Llama, ModelConfig, ModelConfigError

ARCHITECTURE = "LlamaForCausalLM"
MODEL_TYPE = "llama"
# Buffers older transformers versions saved next to the weights; derived from the config, so ignored.
DERIVED_SUFFIXES = (".rotary_emb.inv_freq",)
# safetensors dtype names read on import; all widen to float32 exactly.
FLOAT_DTYPES: dict[str, torch.dtype] = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
# transformers' LlamaConfig defaults, used where config.json leaves a key out (as transformers would).
HF_DEFAULTS: dict[str, Any] = {
    "max_position_embeddings": 2048, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "initializer_range": 0.02,
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
    "tie_word_embeddings": False,
}
# Our ModelConfig field -> its config.json key, so a ModelConfigError names the key in the file.
HF_FIELD: dict[str, str] = {
    "vocab_size": "vocab_size", "hidden": "hidden_size", "intermediate": "intermediate_size",
    "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads", "n_kv_heads": "num_key_value_heads",
    "seq_len": "max_position_embeddings", "rope_theta": "rope_theta", "norm_eps": "rms_norm_eps",
    "init_std": "initializer_range",
}
_SILU = ("silu", "swish")  # one function under two names in transformers' ACT2FN


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as a safetensors header describes it, before any data is read."""

    file: Path
    dtype: str
    shape: tuple[int, ...]


def hf_config(config: ModelConfig) -> dict[str, Any]:
    """config.json for ``config``. RoPE is written both ways transformers reads it (top-level ``rope_theta``
    for 4.x, ``rope_parameters`` for 5.x). No special tokens: the runs' vocabularies (bytes, the embedded
    corpus, pre-tokenized ids) define none, and transformers' defaults (bos 1, eos 2) would invent them."""
    return {
        "architectures": [ARCHITECTURE],
        "model_type": MODEL_TYPE,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden,
        "intermediate_size": config.intermediate,
        "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads,
        "head_dim": config.head_dim,
        "max_position_embeddings": config.seq_len,
        "rms_norm_eps": config.norm_eps,
        "rope_theta": config.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "initializer_range": config.init_std,
        "pretraining_tp": 1,
        "torch_dtype": "float32",
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }


def _fail(path: Path, field: str, detail: str) -> HFConfigError:
    return HFConfigError(path, field, detail)


def _int(doc: Mapping[str, Any], key: str, path: Path, default: int | None = None) -> int:
    value = doc.get(key, default)
    if value is None:
        raise _fail(path, key, "missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(path, key, f"must be an integer, got {value!r}")
    return value


def _float(doc: Mapping[str, Any], key: str, path: Path) -> float:
    value = doc.get(key, HF_DEFAULTS[key])
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(path, key, f"must be a finite number, got {value!r}")
    return float(value)


def _rope_theta(doc: Mapping[str, Any], path: Path) -> float:
    """theta from ``rope_parameters`` (5.x) or top-level ``rope_theta`` (4.x); anything but plain RoPE is
    refused, since our tables are unscaled."""
    inner: float | None = None
    for key in ("rope_scaling", "rope_parameters"):
        value = doc.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise _fail(path, key, f"must be an object or null, got {value!r}")
        kind = value.get("rope_type", value.get("type", "default"))
        if kind != "default":
            raise _fail(path, key, f"rope_type {kind!r}: scaled RoPE (linear, dynamic, llama3, yarn...) is "
                                   "not implemented by distro-node's Llama, only plain RoPE")
        if value.get("partial_rotary_factor", 1.0) != 1.0:
            raise _fail(path, f"{key}.partial_rotary_factor", "partial rotary embeddings are not supported")
        if "rope_theta" in value:
            inner = _float(value, "rope_theta", path)
    if doc.get("partial_rotary_factor", 1.0) not in (None, 1, 1.0):
        raise _fail(path, "partial_rotary_factor", "partial rotary embeddings are not supported")
    top = _float(doc, "rope_theta", path) if "rope_theta" in doc else None
    if top is not None and inner is not None and top != inner:
        raise _fail(path, "rope_theta", f"{top} disagrees with rope_parameters.rope_theta {inner}")
    return inner if inner is not None else top if top is not None else float(HF_DEFAULTS["rope_theta"])


def model_config_from_hf(doc: Mapping[str, Any], path: Path) -> tuple[ModelConfig, bool]:
    """(our ModelConfig, whether the embeddings are tied) for a config.json; HFConfigError names the first
    field that does not fit. Keys it leaves out take transformers' LlamaConfig defaults."""
    architectures = doc.get("architectures")
    if architectures is not None and architectures != [ARCHITECTURE]:
        raise _fail(path, "architectures", f"is {architectures!r}; only [{ARCHITECTURE!r}] can be imported")
    if doc.get("model_type") != MODEL_TYPE:
        raise _fail(path, "model_type", f"is {doc.get('model_type')!r}; only {MODEL_TYPE!r} can be imported")
    if doc.get("quantization_config") is not None:
        raise _fail(path, "quantization_config", "quantized checkpoints cannot be imported")
    act = doc.get("hidden_act", HF_DEFAULTS["hidden_act"])
    if act not in _SILU:
        raise _fail(path, "hidden_act", f"is {act!r}; distro-node's Llama uses silu")
    for key in ("attention_bias", "mlp_bias", "tie_word_embeddings"):
        if not isinstance(doc.get(key, HF_DEFAULTS[key]), bool):
            raise _fail(path, key, f"must be true or false, got {doc.get(key)!r}")
    for key in ("attention_bias", "mlp_bias"):
        if doc.get(key, False):
            raise _fail(path, key, "is true; distro-node's Llama has no biases")
    if _float(doc, "attention_dropout", path) != 0.0:
        raise _fail(path, "attention_dropout", "must be 0: distro-node's Llama has no dropout")
    n_heads = _int(doc, "num_attention_heads", path)
    kv = doc.get("num_key_value_heads")
    try:
        config = ModelConfig(
            vocab_size=_int(doc, "vocab_size", path),
            hidden=_int(doc, "hidden_size", path),
            intermediate=_int(doc, "intermediate_size", path),
            n_layers=_int(doc, "num_hidden_layers", path),
            n_heads=n_heads,
            n_kv_heads=n_heads if kv is None else _int(doc, "num_key_value_heads", path),
            seq_len=_int(doc, "max_position_embeddings", path, HF_DEFAULTS["max_position_embeddings"]),
            rope_theta=_rope_theta(doc, path),
            norm_eps=_float(doc, "rms_norm_eps", path),
            init_std=_float(doc, "initializer_range", path),
        )
    except ModelConfigError as exc:
        raise _fail(path, HF_FIELD.get(exc.field, exc.field), exc.detail) from None
    head_dim = doc.get("head_dim")
    if head_dim is not None and head_dim != config.head_dim:
        raise _fail(path, "head_dim", f"is {head_dim!r}; distro-node's Llama needs hidden_size / "
                                      f"num_attention_heads = {config.head_dim}")
    return config, bool(doc.get("tie_word_embeddings", False))


def name_pairs(n_layers: int) -> list[tuple[str, str]]:
    """(our name, transformers' name) of every parameter, layer by layer (the weights hash reads them in the
    model's own order instead: :func:`parameter_shapes`)."""
    pairs = [("embed", "model.embed_tokens.weight")]
    for i in range(n_layers):
        ours, hf = f"layers.{i}.", f"model.layers.{i}."
        pairs.append((f"{ours}attn_norm.weight", f"{hf}input_layernorm.weight"))
        pairs += [(f"{ours}attn.{p}", f"{hf}self_attn.{p}.weight") for p in ("q_proj", "k_proj", "v_proj",
                                                                           "o_proj")]
        pairs.append((f"{ours}mlp_norm.weight", f"{hf}post_attention_layernorm.weight"))
        pairs += [(f"{ours}mlp.{p}", f"{hf}mlp.{p}.weight") for p in ("gate_proj", "up_proj", "down_proj")]
    pairs += [("norm.weight", "model.norm.weight"), ("head", "lm_head.weight")]
    return pairs


def parameter_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Our parameter names and shapes in the model's ``state_dict`` order (its own parameters, embed and
    head, before the submodules'), from a shape-only (meta) model: no memory, and no second copy of the
    layout to keep in step with node/model.py."""
    with torch.device("meta"):
        model = Llama(config, seed=None)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def plan_import(found: Mapping[str, TensorInfo], config: ModelConfig, *, tied: bool,
                path: Path) -> dict[str, str]:
    """Which file tensor each of our parameters is read from (our name -> transformers' name), after
    checking names, shapes and dtypes from the headers alone; HFTensorError names the first bad tensor."""
    shapes = parameter_shapes(config)
    plan: dict[str, str] = {}
    for ours, hf in name_pairs(config.n_layers):
        source = "model.embed_tokens.weight" if tied and ours == "head" else hf
        info = found.get(source)
        if info is None:
            raise HFTensorError(path, source, "missing")
        if info.shape != shapes[ours]:
            raise HFTensorError(info.file, source, f"shape {list(info.shape)}, config.json implies "
                                                   f"{list(shapes[ours])}")
        if info.dtype not in FLOAT_DTYPES:
            raise HFTensorError(info.file, source, f"dtype {info.dtype}; only {', '.join(FLOAT_DTYPES)} "
                                                   "can be imported")
        plan[ours] = source
    known = {hf for _, hf in name_pairs(config.n_layers)}
    for name, info in sorted(found.items()):
        if name in known or name.endswith(DERIVED_SUFFIXES):
            continue
        why = "a bias: distro-node's Llama has none" if name.endswith(".bias") else "not a Llama parameter"
        raise HFTensorError(info.file, name, f"unexpected ({why})")
    return plan


def to_hf(state: Mapping[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Our state dict renamed to transformers' names, as contiguous fp32 CPU tensors; a missing, extra or
    misshapen tensor is a ValueError (a checkpoint that does not match its own manifest)."""
    shapes = parameter_shapes(config)
    if set(state) != set(shapes):
        missing, extra = sorted(set(shapes) - set(state)), sorted(set(state) - set(shapes))
        raise ValueError(f"model state does not match the model config: missing {missing}, extra {extra}")
    out: dict[str, torch.Tensor] = {}
    for ours, hf in name_pairs(config.n_layers):
        tensor = state[ours].detach().to("cpu", torch.float32).contiguous()
        if tuple(tensor.shape) != shapes[ours]:
            raise ValueError(f"{ours}: shape {list(tensor.shape)}, the config implies {list(shapes[ours])}")
        out[hf] = tensor
    return out
