"""The compute half of a peer: model, strategy and data for one run, used from one worker thread at a time.

Everything here is blocking torch work; the node calls it through ``trio.to_thread.run_sync`` with a limiter
of one, so the event loop keeps gossip, payload serving and the round machine alive meanwhile, and the
strategy never sees two calls at once. The step order is the one ``optimizer/base.py`` prescribes and
``node/sim/swarm.py`` follows.

Devices. The weights every replica must agree on bit for bit live in a CPU master copy (``self.model``) that
the strategy owns: decode, aggregation, the inverse DCT and the parameter update all run there, whatever
``device`` this process chose. Why not on the accelerator: aggregation is order-fixed elementwise adds there
too (optimizer/aggregate.py), but the update goes through the inverse DCT, a matmul, whose bits differ between
cuBLAS (TF32, split-K), MPS and CPU BLAS; a sign update could tolerate that only where no coefficient sits at
zero, and the Adam rule (``u / sqrt(v)``) not at all. So on cuda/mps a working copy (``self.work``) takes the
master weights before each forward pass (exact copies), runs forward/backward there (optionally under bf16
autocast, with micro-batches), clips its gradient there, and hands the gradient back to the master's
``.grad``. The strategy's local compression (DCT, top-k, error feedback) runs on CPU with it: it shares
state with the update in one strategy object, and splitting the two is an optimizer change. On cpu the
working copy is the master itself and nothing is copied, so a CPU peer computes exactly what it did before
devices existed.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from distro_node.compression.errors import PayloadError
from distro_node.compression.payload import Header, Payload, PayloadSpec
from distro_node.compression.wire import decode, encode
from distro_node.optimizer.registry import build_strategy

from ..data.sampling import sample_batch
from ..data.source import TokenSource
from ..device import autocast, synchronize
from ..hashing import model_hash
from ..model import Llama, next_token_loss
from .local import LocalSettings, LocalSetupError
from .manifest import RunManifest
from .run_data import open_run_source
from .run_init import initial_weights
from .snapshot_io import (
    load_weights,
    optim_from_bytes,
    optim_to_bytes,
    weights_to_bytes,
    without_local_momentum,
)

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
    def __init__(self, manifest: RunManifest, peer_id: str, local: LocalSettings | None = None,
                 source: TokenSource | None = None) -> None:
        """Raises :class:`LocalSetupError` (naming the setting) when this peer's local settings do not fit
        the run: a grad_accum that does not divide batch_size, a data file or an imported checkpoint that is
        not the run's. ``source``: the run's prepared data as fetched on demand (node/peer/data_fetch.py),
        already checked against the manifest's hashes; None opens ``local.data_path``."""
        self.manifest = manifest
        self.peer_id = peer_id
        self.local = local or LocalSettings()
        self.micro_batch = self.local.micro_batch(manifest.batch_size)
        self.run_id = manifest.run_id()
        shape = manifest.model_config()
        if source is None:
            source = open_run_source(manifest.data, manifest.data_seed, self.local.data_path,
                                     shape.vocab_size)
        elif source.vocab_size > shape.vocab_size:
            raise LocalSetupError("run.model", f"data vocabulary {source.vocab_size} exceeds the model's "
                                               f"{shape.vocab_size}")
        self.source = source
        initial = initial_weights(manifest.init, self.local.init_from)
        self.model = Llama(shape, seed=manifest.seed if initial is None else None)
        if initial is not None:
            self.model.load_state_dict(initial, strict=True)
        self.strategy = build_strategy(manifest.strategy, self.model, dict(manifest.settings))
        self.spec: PayloadSpec = self.strategy.spec()
        self.device = torch.device(self.local.device)
        self.work = self.model if self.device.type == "cpu" else copy.deepcopy(self.model).to(self.device)
        self._autocast = autocast(self.local.device, self.local.precision)
        self._weights_hash = self._hash()
        # Seconds of the last forward_backward by part: copying the master weights into the working copy,
        # the passes themselves (device work waited for), copying the gradient back. The copies are what the
        # CPU master costs an accelerator peer (zero on cpu, where nothing is copied).
        self.last_phases: dict[str, float] = {}
        self._pinned: list[torch.Tensor] | None = None  # host buffers the gradient is copied into (cuda)

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
        loss = self.forward_backward(inputs, targets)
        self.strategy.post_backward(step)
        t1 = time.perf_counter()
        payload = self.strategy.prepare(step)
        data = None
        if payload is not None:
            data = encode(Header.of(self.spec, self.run_id, step, self.peer_id), payload, self.spec)
        t2 = time.perf_counter()
        return Computed(step, loss, data, weights_hash, {"compute": t1 - t0, "prepare": t2 - t1})

    def forward_backward(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        """The batch's mean loss; leaves the clipped gradient of the whole batch in the master's ``.grad``.

        With ``grad_accum`` N the batch is cut into N equal micro-batches, each backward scaled by 1/N, so
        the summed gradient is the whole batch's mean-loss gradient (up to float rounding) at 1/N of the
        activation memory. N = 1 keeps the single backward of a plain step."""
        work = self.work
        device = self.device.type
        t0 = time.perf_counter()
        if work is not self.model:
            work.zero_grad(set_to_none=True)
            with torch.no_grad():
                for w, p in zip(work.parameters(), self.model.parameters(), strict=True):
                    w.copy_(p)
            synchronize(device)
        t1 = time.perf_counter()
        n = self.local.grad_accum
        losses: list[torch.Tensor] = []
        for x, y in zip(inputs.split(self.micro_batch), targets.split(self.micro_batch), strict=True):
            with self._autocast():
                loss = next_token_loss(work(x.to(self.device)), y.to(self.device))
            (loss if n == 1 else loss / n).backward()
            losses.append(loss.detach())
        if self.manifest.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(work.parameters(), self.manifest.grad_clip)
        synchronize(device)
        t2 = time.perf_counter()
        if work is not self.model:
            self._gradients_to_master()
        t3 = time.perf_counter()
        self.last_phases = {"copy_in": t1 - t0, "forward_backward": t2 - t1, "copy_out": t3 - t2}
        return float(losses[0]) if n == 1 else float(torch.stack(losses).mean())

    def _gradients_to_master(self) -> None:
        """The working copy's gradient into the master's ``.grad``. On cuda through page-locked host buffers
        allocated once and reused every step, all copies queued before one wait: copying into fresh pageable
        tensors cost 2.9 s a step for the 1.2B preset on an H100 host (bench/results/gpu.json). Reusing the
        buffers is safe because the strategy reads ``.grad`` within the step and the next step's
        ``zero_grad`` drops the master's reference before they are written again."""
        pairs = list(zip(self.work.parameters(), self.model.parameters(), strict=True))
        if self.device.type != "cuda":
            for w, p in pairs:
                p.grad = None if w.grad is None else w.grad.detach().to("cpu")
            return
        if self._pinned is None:
            self._pinned = [torch.empty(p.shape, dtype=p.dtype).pin_memory() for _, p in pairs]
        for (w, p), buf in zip(pairs, self._pinned, strict=True):
            if w.grad is None:
                p.grad = None
                continue
            buf.copy_(w.grad.detach(), non_blocking=True)
            p.grad = buf
        synchronize("cuda")

    def decode(self, data: bytes, sender: str, step: int) -> Payload:
        """Validate peer bytes bound to the sender and step; raises PayloadError."""
        _, payload = decode(data, self.spec, run_id=self.run_id, sender=sender, step=step)
        return payload

    def apply(self, step: int, payloads: Mapping[str, Payload]) -> bytes:
        """Apply exactly these payloads (sorted by peer id inside the strategy); returns the new hash. A list
        that left our payload out is told to the strategy first, so its error feedback keeps what we sent."""
        if self.peer_id not in payloads:
            self.strategy.withheld(step)
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


__all__ = ["Computed", "LocalSettings", "LocalSetupError", "PayloadError", "Trainer"]
