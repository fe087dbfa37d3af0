"""In-memory payload types shared by the optimizer (which builds them) and the codec (which serializes them).

A payload is sparse per tensor: for each chunk, ``k`` coefficient indices and their values. A dense tensor is
the special case ``k == chunk_numel`` with implicit indices ``0..chunk_numel-1`` (``indices is None``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

FORMAT_VERSION = 2


@dataclass(frozen=True)
class TensorSpec:
    """What one tensor's entry must look like; derived from the LOCAL model, never from a payload."""

    name: str
    n_chunks: int
    chunk_numel: int
    k: int

    @property
    def dense(self) -> bool:
        return self.k == self.chunk_numel

    @property
    def count(self) -> int:
        return self.n_chunks * self.k


@dataclass(frozen=True)
class PayloadSpec:
    """Everything a receiver needs to decode and validate a payload of one strategy.

    ``index_codec`` is one of ``compression.indices.INDEX_CODECS``; ``value_codec`` one of
    ``compression.values.VALUE_CODECS``.
    """

    strategy: str
    tensors: tuple[TensorSpec, ...]
    layout_digest: bytes
    settings: Mapping[str, Any] = field(default_factory=dict)
    index_codec: str = "auto"
    value_codec: str = "fp32"

    def __post_init__(self) -> None:
        # Fail at configuration time (unknown codec, enum where C(n, k) >= 2**63), not on the first payload.
        from .sizes import check_payload_spec  # late import: sizes imports this module

        check_payload_spec(self)

    def fingerprint(self) -> bytes:
        """Layout digest plus settings digest: equal fingerprints mean payloads valid for one are valid for
        the other."""
        return self.layout_digest + self.settings_digest()

    def settings_digest(self) -> bytes:
        """sha256 over the strategy name, codecs and settings: peers must agree on all of them."""
        doc = {
            "strategy": self.strategy,
            "index_codec": self.index_codec,
            "value_codec": self.value_codec,
            "settings": dict(sorted(self.settings.items())),
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).digest()


@dataclass(frozen=True)
class SparseTensor:
    """``values`` float32 of shape ``(n_chunks, k)``; ``indices`` int64 of the same shape or None if dense."""

    values: torch.Tensor
    indices: torch.Tensor | None = None


@dataclass(frozen=True)
class Payload:
    """One peer's contribution for one step, keyed by tensor name in layout order.

    ``validated_for`` is set by ``wire.decode`` to the :meth:`PayloadSpec.fingerprint` it checked the payload
    against, so a consumer holding the same spec can skip re-validating every entry (parse, don't validate
    twice). Payloads built in memory leave it None and are checked in full.
    """

    tensors: Mapping[str, SparseTensor]
    validated_for: bytes | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Header:
    """Envelope fields that bind a payload to a run, a step and a sender."""

    run_id: bytes
    step: int
    peer_id: str
    strategy: str
    layout_digest: bytes
    settings_digest: bytes
    version: int = FORMAT_VERSION
