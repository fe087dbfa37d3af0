"""Shared by tests/hf/: a tiny transformers Llama made locally (random weights, nothing downloaded), the
fixed token batch every comparison runs on, and our model's logits for a state dict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from distro_node.node.model import Llama, ModelConfig

# Small enough for a busy 2-core machine, large enough to exercise GQA (2 KV heads for 4 query heads),
# several layers, a non-default RoPE theta and norm eps (a mapping that ignored them would be caught).
TINY_HF: dict[str, Any] = {
    "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "initializer_range": 0.1, "tie_word_embeddings": False,
}
TOLERANCE = 1e-5


def fixed_batch(vocab: int = 256, seq: int = 64) -> torch.Tensor:
    """Two sequences of the model's full length, from a private generator (the same every run)."""
    return torch.randint(0, vocab, (2, seq), generator=torch.Generator().manual_seed(1234))


def make_hf_model(seed: int = 0, **overrides: Any) -> Any:
    """A random ``LlamaForCausalLM``; the norm weights are randomised too (transformers starts them at one,
    which would hide a swapped norm)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**{**TINY_HF, **overrides})).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
    return model


def save_hf_model(model: Any, directory: Path, **kwargs: Any) -> Path:
    model.save_pretrained(str(directory), **kwargs)
    return directory


def hf_logits(model: Any, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens).logits.float()


def our_logits(config: ModelConfig, state: dict[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    model = Llama(config, seed=None)
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        return model(tokens)
