"""Named model shapes, so a run manifest can say ``model = "small"`` and every peer builds the same model.

The ladder goes from what CI can train in seconds on one CPU core up to the DisTrO report's 1.2B (Table 1).
The small presets use a byte vocabulary (256) so they run on the embedded dataset and on raw text files
without a tokenizer; the larger ones use the report's 32000-token vocabulary and need pre-tokenized data.

A run whose data comes with a tokenizer (a prepared dataset, ``distro-node data prepare``) takes the
tokenizer's vocabulary size instead of the preset's (:func:`with_vocab`): the embedding must have a row for
every id the tokenizer can produce and has no use for more, and the rest of the shape stays the preset's.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from distro_node.node.model import ModelConfig

_PRESETS: dict[str, ModelConfig] = {
    # CI and the demo: trains visibly on the embedded dataset within a minute on CPU. GQA (2 KV heads for
    # 4 query heads) is on so the cheapest runs exercise the same code path as grouped-KV production models.
    "tiny": ModelConfig(
        vocab_size=256, hidden=64, intermediate=256, n_layers=2, n_heads=4, n_kv_heads=2, seq_len=64
    ),
    # The benchmark preset: eight simulated peers stepping it must stay interactive on a 2-core CPU.
    "small": ModelConfig(
        vocab_size=256, hidden=128, intermediate=512, n_layers=4, n_heads=4, n_kv_heads=2, seq_len=128
    ),
    "20m": ModelConfig(
        vocab_size=32000, hidden=256, intermediate=768, n_layers=6, n_heads=4, n_kv_heads=4, seq_len=512
    ),
    "150m": ModelConfig(
        vocab_size=32000, hidden=768, intermediate=2048, n_layers=14, n_heads=12, n_kv_heads=12, seq_len=1024
    ),
    # DisTrO report, Table 1: untied embeddings, no biases, full multi-head attention: 1,204,881,408 params.
    "1.2b": ModelConfig(
        vocab_size=32000, hidden=2048, intermediate=8192, n_layers=16, n_heads=8, n_kv_heads=8, seq_len=2048
    ),
}

PRESETS: MappingProxyType[str, ModelConfig] = MappingProxyType(_PRESETS)


class UnknownPresetError(KeyError):
    """The requested preset does not exist; the message lists the valid names."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        # KeyError's default str() is the repr of the key, which hides the list of valid names.
        return f"unknown model preset {self.name!r}; valid presets: {', '.join(PRESETS)}"


def preset(name: str) -> ModelConfig:
    """The config registered as ``name`` (case-insensitive, so "1.2B" works as written in the report)."""
    try:
        return PRESETS[name.lower()]
    except (KeyError, AttributeError):
        raise UnknownPresetError(name) from None


def with_vocab(config: ModelConfig, vocab_size: int) -> ModelConfig:
    """``config`` with the vocabulary of the run's tokenizer (embedding and output head rows)."""
    return replace(config, vocab_size=vocab_size)
