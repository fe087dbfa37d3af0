"""What a payload of one strategy must look like, and the check that such a payload can exist at all.

The spec types and their sanity check live together, apart from the payload containers and from the size
arithmetic, because both of those need the spec: with the check in the size module and the spec in the
payload module, each imported the other. Constructing a :class:`PayloadSpec` runs the check, so an unknown
codec or an ``enum`` index code that cannot fit in 63 bits fails at configuration time, not on the first
payload.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .indices import INDEX_CODECS
from .values import VALUE_CODECS


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


def check_tensor_spec(spec: TensorSpec, index_codec: str, value_codec: str) -> None:
    """Raise ValueError when the codecs cannot carry this tensor (e.g. ``enum`` with C(n, k) >= 2**63)."""
    if index_codec not in INDEX_CODECS:
        raise ValueError(f"unknown index codec {index_codec!r}; known: {sorted(INDEX_CODECS)}")
    if value_codec not in VALUE_CODECS:
        raise ValueError(f"unknown value codec {value_codec!r}; known: {sorted(VALUE_CODECS)}")
    if spec.n_chunks < 1:
        raise ValueError(f"tensor {spec.name!r}: n_chunks must be >= 1, got {spec.n_chunks}")
    if spec.chunk_numel < 1 or not 1 <= spec.k <= spec.chunk_numel:
        raise ValueError(
            f"tensor {spec.name!r}: need 1 <= k <= chunk_numel, got k={spec.k} of {spec.chunk_numel}"
        )
    if not spec.dense:
        try:
            INDEX_CODECS[index_codec].check(spec.chunk_numel, spec.k)
        except ValueError as exc:
            raise ValueError(f"tensor {spec.name!r}: {exc}") from None


def check_payload_spec(spec: PayloadSpec) -> None:
    """Raise ValueError for a spec no payload could satisfy, so misconfiguration fails at startup."""
    names = [t.name for t in spec.tensors]
    if len(set(names)) != len(names):
        raise ValueError("tensor names in a payload spec must be unique")
    if not isinstance(spec.layout_digest, bytes):
        raise ValueError("layout_digest must be bytes")
    for t in spec.tensors:
        check_tensor_spec(t, spec.index_codec, spec.value_codec)
