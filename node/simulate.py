"""N peers in one process exchanging encoded payload bytes in memory.

The codec is on the path (every payload is encoded to bytes and decoded with full validation) so tests and
benchmarks exercise what a real swarm sends, without a network. Each peer owns its model, strategy and data
stream; all of them apply the same decoded payloads, exactly as networked peers apply an inclusion list.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from distro_node.compression.payload import Header, Payload, PayloadSpec
from distro_node.compression.wire import decode, encode
from distro_node.optimizer.base import Strategy

from .hashing import model_hash

Batch = tuple[torch.Tensor, torch.Tensor]
BatchFn = Callable[[int, str], Batch]
LossFn = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
# Lets tests and fault scenarios rewrite a peer's bytes on the wire: (step, peer_id, data) -> data.
WireFilter = Callable[[int, str, bytes], bytes]


@dataclass
class SimPeer:
    peer_id: str
    model: torch.nn.Module
    strategy: Strategy


@dataclass
class StepReport:
    """What one simulated step did, averaged over peers where it says so."""

    step: int
    loss: float  # mean train loss over peers
    payload_bytes: float  # mean encoded bytes sent per peer (0 on steps where nothing is sent)
    seconds: dict[str, float] = field(default_factory=dict)  # wall time by phase, summed over peers
    rejected: int = 0


class SimulatedSwarm:
    """Drives N peers through ``Strategy``'s step order (sequential or overlapped) with the wire codec."""

    def __init__(
        self,
        *,
        peers: int,
        model_factory: Callable[[], torch.nn.Module],
        strategy_factory: Callable[[torch.nn.Module], Strategy],
        batch_fn: BatchFn,
        loss_fn: LossFn,
        run_id: bytes,
        grad_clip: float | None = 1.0,
        wire_filter: WireFilter | None = None,
    ) -> None:
        if peers < 1:
            raise ValueError(f"peers must be >= 1, got {peers}")
        self.run_id = run_id
        self.batch_fn = batch_fn
        self.loss_fn = loss_fn
        self.grad_clip = grad_clip
        self.wire_filter = wire_filter
        self.peers: list[SimPeer] = []
        for i in range(peers):
            model = model_factory()
            self.peers.append(SimPeer(f"peer-{i:03d}", model, strategy_factory(model)))
        self.step_index = 0
        self._pending: tuple[int, dict[str, Payload]] | None = None
        self._spec: PayloadSpec = self.peers[0].strategy.spec()

    @property
    def overlapped(self) -> bool:
        return self.peers[0].strategy.overlapped

    def step(self) -> StepReport:
        """One training step on every peer, then one exchange, then ``apply`` on every peer."""
        s = self.step_index
        seconds = {"compute": 0.0, "prepare": 0.0, "codec": 0.0, "apply": 0.0}
        losses: list[float] = []
        sent: dict[str, bytes] = {}
        for peer in self.peers:
            t0 = time.perf_counter()
            peer.strategy.pre_forward(s)
            peer.model.zero_grad(set_to_none=True)
            inputs, targets = self.batch_fn(s, peer.peer_id)
            loss = self.loss_fn(peer.model, inputs, targets)
            loss.backward()
            if self.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(peer.model.parameters(), self.grad_clip)
            peer.strategy.post_backward(s)
            losses.append(float(loss.detach()))
            t1 = time.perf_counter()
            payload = peer.strategy.prepare(s)
            t2 = time.perf_counter()
            if payload is not None:
                header = Header(
                    run_id=self.run_id,
                    step=s,
                    peer_id=peer.peer_id,
                    strategy=self._spec.strategy,
                    layout_digest=self._spec.layout_digest,
                    settings_digest=self._spec.settings_digest(),
                )
                data = encode(header, payload, self._spec)
                if self.wire_filter is not None:
                    data = self.wire_filter(s, peer.peer_id, data)
                sent[peer.peer_id] = data
            t3 = time.perf_counter()
            seconds["compute"] += t1 - t0
            seconds["prepare"] += t2 - t1
            seconds["codec"] += t3 - t2
        t0 = time.perf_counter()
        received, rejected = self._decode_all(s, sent)
        seconds["codec"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        if self.overlapped:
            if self._pending is not None:
                self._apply_all(*self._pending)
            self._pending = (s, received)
        else:
            self._apply_all(s, received)
        seconds["apply"] += time.perf_counter() - t0
        self.step_index += 1
        mean_bytes = sum(len(b) for b in sent.values()) / len(self.peers)
        return StepReport(s, sum(losses) / len(losses), mean_bytes, seconds, rejected)

    def flush(self) -> None:
        """Apply a step still held back by overlapped mode, so evaluation sees every update."""
        if self._pending is not None:
            self._apply_all(*self._pending)
            self._pending = None

    def _decode_all(self, step: int, sent: Mapping[str, bytes]) -> tuple[dict[str, Payload], int]:
        """Decode once per payload: every peer would decode the same bytes to the same tensors."""
        from distro_node.compression.errors import PayloadError

        out: dict[str, Payload] = {}
        rejected = 0
        for peer_id, data in sent.items():
            try:
                _, payload = decode(data, self._spec, run_id=self.run_id, sender=peer_id, step=step)
            except PayloadError:
                rejected += 1
                continue
            out[peer_id] = payload
        return out, rejected

    def _apply_all(self, step: int, payloads: Mapping[str, Payload]) -> None:
        for peer in self.peers:
            peer.strategy.apply(step, payloads)

    def hashes(self) -> list[str]:
        return [model_hash(p.model) for p in self.peers]

    @torch.no_grad()
    def eval_loss(self, batches: list[Batch]) -> float:
        """Mean loss of peer 0's model (all honest replicas are identical) on fixed held-out batches."""
        model = self.peers[0].model
        was_training = model.training
        model.eval()
        total = sum(float(self.loss_fn(model, x, y)) for x, y in batches)
        model.train(was_training)
        return total / max(len(batches), 1)
