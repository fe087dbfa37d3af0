"""The compute half of a peer: model, strategy and data for one run, used from one worker thread at a time.

Everything here is blocking torch work; the node calls it through ``trio.to_thread.run_sync`` with a limiter
of one, so the event loop keeps gossip, payload serving and the round machine alive meanwhile, and the
strategy never sees two calls at once. The step order is the one ``optimizer/base.py`` prescribes and
``node/simulate.py`` follows.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from distro_node.compression.errors import PayloadError
from distro_node.compression.payload import Header, Payload, PayloadSpec
from distro_node.compression.wire import decode, encode
from distro_node.optimizer.registry import build_strategy

from ..data.embedded import markov_source
from ..data.sampling import sample_batch
from ..hashing import model_hash
from ..model import Llama, next_token_loss
from ..presets import preset
from .manifest import RunManifest
from .snapshot_io import (
    load_weights,
    optim_from_bytes,
    optim_to_bytes,
    weights_to_bytes,
    without_local_momentum,
)

GRAD_CLIP = 1.0
HELDOUT_PEER = "heldout"


@dataclass(frozen=True)
class Computed:
    """One step's local work: the encoded payload (None when the strategy sends nothing) and timings."""

    step: int
    loss: float
    data: bytes | None
    weights_hash: bytes
    seconds: dict[str, float]


class Trainer:
    def __init__(self, manifest: RunManifest, peer_id: str) -> None:
        self.manifest = manifest
        self.peer_id = peer_id
        self.run_id = manifest.run_id()
        self.model = Llama(preset(manifest.preset), seed=manifest.seed)
        self.strategy = build_strategy(manifest.strategy, self.model, dict(manifest.settings))
        self.spec: PayloadSpec = self.strategy.spec()
        self.source = markov_source(manifest.data_seed)
        self.source.check_vocab(preset(manifest.preset).vocab_size)
        self._weights_hash = self._hash()

    def _hash(self) -> bytes:
        return bytes.fromhex(model_hash(self.model))

    @property
    def weights_hash(self) -> bytes:
        """Hash of the weights at the current step boundary (refreshed after every apply and load)."""
        return self._weights_hash

    @property
    def overlapped(self) -> bool:
        """Whether the strategy wants the overlapped order (compute s before apply(s - 1))."""
        return bool(getattr(self.strategy, "overlapped", False))

    def compute(self, step: int) -> Computed:
        """pre_forward, forward/backward, clip, post_backward, prepare and encode for ``step``.

        Overlapped runs call this before ``apply(step - 1)``, while the round of ``step - 1`` goes on; the
        weights only look ahead between pre_forward and post_backward and are restored exactly, so nothing
        outside this call ever sees them changed. ``weights_hash`` is the hash the compute started from.
        """
        m = self.manifest
        t0 = time.perf_counter()
        weights_hash = self._weights_hash
        self.strategy.pre_forward(step)
        self.model.zero_grad(set_to_none=True)
        inputs, targets = sample_batch(self.source, run_id=self.run_id, step=step, peer=self.peer_id,
                                       batch_size=m.batch_size, seq_len=m.seq_len)
        loss = next_token_loss(self.model(inputs), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), GRAD_CLIP)
        self.strategy.post_backward(step)
        t1 = time.perf_counter()
        payload = self.strategy.prepare(step)
        data = None
        if payload is not None:
            header = Header(run_id=self.run_id, step=step, peer_id=self.peer_id, strategy=self.spec.strategy,
                            layout_digest=self.spec.layout_digest,
                            settings_digest=self.spec.settings_digest())
            data = encode(header, payload, self.spec)
        t2 = time.perf_counter()
        return Computed(step, float(loss.detach()), data, weights_hash,
                        {"compute": t1 - t0, "prepare": t2 - t1})

    def decode(self, data: bytes, sender: str, step: int) -> Payload:
        """Validate peer bytes bound to the sender and step; raises PayloadError."""
        _, payload = decode(data, self.spec, run_id=self.run_id, sender=sender, step=step)
        return payload

    def apply(self, step: int, payloads: Mapping[str, Payload]) -> bytes:
        """Apply exactly these payloads (sorted by peer id inside the strategy); returns the new hash."""
        self.strategy.apply(step, payloads)
        self._weights_hash = self._hash()
        return self._weights_hash

    def refresh_hash(self) -> bytes:
        """Recompute the weights hash after the model was changed from outside (checkpoint restore)."""
        self._weights_hash = self._hash()
        return self._weights_hash

    def heldout_loss(self) -> float:
        """Loss on a fixed batch no training peer ever draws (peer name "heldout" is not a peer id), so a
        value logged before a stop and after a resume measures the same weights on the same tokens."""
        m = self.manifest
        inputs, targets = sample_batch(self.source, run_id=self.run_id, step=0, peer=HELDOUT_PEER,
                                       batch_size=m.batch_size, seq_len=m.seq_len)
        with torch.no_grad():
            return float(next_token_loss(self.model(inputs), targets))

    def dense_bf16_bytes(self) -> int:
        """What a dense all-reduce of the gradient would send per step in bf16: the reduction's baseline."""
        return 2 * sum(p.numel() for p in self.model.parameters())

    def snapshot_parts(self) -> dict[str, bytes]:
        return {"weights": weights_to_bytes(self.model), "optim": optim_to_bytes(self.strategy.state_dict())}

    def load(self, weights: bytes, optim: bytes | None, max_bytes: int) -> bytes:
        """Adopt a donor's weights (and the replicated part of its optimizer state); returns the new hash."""
        load_weights(self.model, weights)
        if optim is not None:
            state = without_local_momentum(self.manifest.strategy, optim_from_bytes(optim, max_bytes))
            self.strategy.load_state_dict(state)
        self._weights_hash = self._hash()
        return self._weights_hash


__all__ = ["Computed", "PayloadError", "Trainer"]
