"""In-memory payload types shared by the optimizer (which builds them) and the codec (which serializes them).

A payload is sparse per tensor: for each chunk, ``k`` coefficient indices and their values. A dense tensor is
the special case ``k == chunk_numel`` with implicit indices ``0..chunk_numel-1`` (``indices is None``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

# The spec types are defined in .spec and named here too: every consumer that builds or reads payloads
# needs them, and one import line for the payload vocabulary is what all of them use.
from .spec import PayloadSpec, TensorSpec

__all__ = ["FORMAT_VERSION", "Header", "Payload", "PayloadSpec", "SparseTensor", "TensorSpec"]

FORMAT_VERSION = 2


@dataclass(frozen=True)
class SparseTensor:
    """``values`` float32 of shape ``(n_chunks, k)``; ``indices`` int64 of the same shape or None if dense."""

    values: torch.Tensor
    indices: torch.Tensor | None = None

    def to(self, device: torch.device) -> SparseTensor:
        return SparseTensor(self.values.to(device), None if self.indices is None else self.indices.to(device))


@dataclass(frozen=True)
class Payload:
    """One peer's contribution for one step, keyed by tensor name in layout order.

    ``validated_for`` is set by ``wire.decode`` to the :meth:`PayloadSpec.fingerprint` it checked the payload
    against, so a consumer holding the same spec can skip re-validating every entry (parse, don't validate
    twice). Payloads built in memory leave it None and are checked in full.
    """

    tensors: Mapping[str, SparseTensor]
    validated_for: bytes | None = field(default=None, compare=False)

    def to(self, device: torch.device) -> Payload:
        """The same payload with its tensors on ``device`` (still validated: the values are the same). Moving
        it once before several replicas on an accelerator apply it saves each of them a copy per tensor."""
        if all(t.values.device == device for t in self.tensors.values()):
            return self
        return Payload({name: t.to(device) for name, t in self.tensors.items()}, self.validated_for)


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

    @classmethod
    def of(cls, spec: PayloadSpec, run_id: bytes, step: int, peer_id: str) -> Header:
        """The envelope of ``peer_id``'s payload for ``step`` under ``spec``: every sender builds it so."""
        return cls(run_id=run_id, step=step, peer_id=peer_id, strategy=spec.strategy,
                   layout_digest=spec.layout_digest, settings_digest=spec.settings_digest())
