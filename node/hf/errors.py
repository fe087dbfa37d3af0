"""Typed errors of Hugging Face checkpoint import and export.

Each names what does not fit (the file, the config.json field or the tensor) so an operator knows what to
change, and each is a ``ValueError``, so the CLI prints it as ``error: ...`` and exits 2 like every other bad
input (node/cli/main.py).
"""

from __future__ import annotations

from pathlib import Path


class HFCheckpointError(ValueError):
    """Base of every import and export failure; ``path`` is the file or directory involved."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


class HFFileError(HFCheckpointError):
    """A file is missing, unreadable, not valid JSON, or not a valid safetensors file (corrupt header,
    truncated data); or an export target that may not be written."""


class HFConfigError(HFCheckpointError):
    """A config.json field does not describe a model distro-node's Llama computes exactly; ``field`` is its
    key in config.json (``rope_scaling``, ``attention_bias``, ``architectures``...)."""

    def __init__(self, path: Path, field: str, detail: str) -> None:
        super().__init__(path, f"{field}: {detail}")
        self.field = field


class HFTensorError(HFCheckpointError):
    """A tensor is missing, unexpected, of the wrong shape or dtype, or not finite; ``tensor`` is its
    Hugging Face name (``model.layers.0.self_attn.q_proj.weight``)."""

    def __init__(self, path: Path, tensor: str, detail: str) -> None:
        super().__init__(path, f"tensor {tensor}: {detail}")
        self.tensor = tensor
