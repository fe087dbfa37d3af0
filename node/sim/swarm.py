"""N peers in one process exchanging encoded payload bytes in memory.

The codec is on the path (every payload is encoded to bytes and decoded with full validation) so tests and
benchmarks exercise what a real swarm sends, without a network. Each peer owns its model, strategy and data
stream; all of them apply the same decoded payloads, exactly as networked peers apply an inclusion list.

Degraded and malicious peers: ``faults`` (peer index -> :class:`FaultSpec`) makes chosen peers send what the
fault injector produces; with a ``scores`` keeper the swarm plays the round leader's part: it scores every
included peer once per step (leave-one-out agreement, validation failures, equivocation, silence) and leaves
banned peers out of the included set from the NEXT step on, the same set for every replica.

Bounded inclusion (``max_included`` = K > 0): the included set is the top K of the valid payloads by the
daemon's own rule (protocol/consensus/inclusion_bound.py, the function the round machine calls), with the
waiting counts a roster would hold, and each peer is counted as fetching only the payloads of the fetch
window (K plus the round config's margin) instead of all N. Peers left out are told (``withheld``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from distro_node.compression.errors import PayloadError
from distro_node.compression.payload import Header, Payload, PayloadSpec
from distro_node.compression.wire import decode, encode
from distro_node.node.faults import FaultInjector, FaultSpec
from distro_node.node.hashing import model_hash
from distro_node.node.sim.scoring import round_observations
from distro_node.optimizer.base import Strategy
from distro_node.protocol.consensus.config import DEFAULT_INCLUSION_FETCH_MARGIN
from distro_node.protocol.consensus.inclusion_bound import fetch_window, next_waiting, select_included
from distro_node.protocol.scores import ScoreKeeper

Batch = tuple[torch.Tensor, torch.Tensor]
BatchFn = Callable[[int, str], Batch]
LossFn = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
# Lets tests and fault scenarios rewrite a peer's bytes on the wire: (step, peer_id, data) -> data.
WireFilter = Callable[[int, str, bytes], bytes]
# Sees the included payloads of every step (before apply), e.g. to measure the aggregate a bench cares about.
Observer = Callable[[int, Mapping[str, Payload]], None]


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
    rejected: int = 0  # messages that failed validation
    included: int = 0  # payloads applied (for this step; overlapped mode applies them one step later)
    equivocators: tuple[str, ...] = ()  # peers that sent two different payloads this step (none applied)
    banned: tuple[str, ...] = ()  # peers newly banned after this step (left out from the next step on)
    scores: dict[str, float] = field(default_factory=dict)  # leave-one-out agreement of included peers
    fetched_bytes: float = 0.0  # mean payload bytes one peer downloads (the others' payloads it fetches)
    included_peers: tuple[str, ...] = ()  # whose payloads this step's list includes


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
        faults: Mapping[int, FaultSpec] | None = None,
        scores: ScoreKeeper | None = None,
        observer: Observer | None = None,
        fault_seed: int = 0,
        max_included: int = 0,
        fetch_margin: int = DEFAULT_INCLUSION_FETCH_MARGIN,
    ) -> None:
        if peers < 1:
            raise ValueError(f"peers must be >= 1, got {peers}")
        for name, value in (("max_included", max_included), ("fetch_margin", fetch_margin)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        faults = dict(faults or {})
        for index in faults:
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < peers:
                raise ValueError(f"fault peer index must be in [0, {peers}), got {index!r}")
        self.run_id = run_id
        self.batch_fn = batch_fn
        self.loss_fn = loss_fn
        self.grad_clip = grad_clip
        self.wire_filter = wire_filter
        self.peers: list[SimPeer] = []
        for i in range(peers):
            model = model_factory()
            self.peers.append(SimPeer(f"peer-{i:03d}", model, strategy_factory(model)))
        # Seeded per peer so two faulty peers of the same kind do not send identical (colluding) payloads.
        self.injectors: dict[str, FaultInjector] = {
            self.peers[i].peer_id: FaultInjector(spec, seed=fault_seed * 1_000_003 + i)
            for i, spec in faults.items()
        }
        self.scores = scores
        self.observer = observer
        self.ban_steps: dict[str, int] = {}
        self.step_index = 0
        self.max_included = max_included
        self.fetch_margin = fetch_margin
        self.waiting: dict[str, int] = {}  # rounds since each peer was last included, as a roster keeps it
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
        sent: dict[str, list[bytes]] = {}
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
                header = Header.of(self._spec, self.run_id, s, peer.peer_id)
                injector = self.injectors.get(peer.peer_id)
                if injector is None:
                    messages = [encode(header, payload, self._spec)]
                else:
                    messages = injector.emit(s, header, payload, self._spec)
                if self.wire_filter is not None:
                    messages = [self.wire_filter(s, peer.peer_id, data) for data in messages]
                sent[peer.peer_id] = messages
            t3 = time.perf_counter()
            seconds["compute"] += t1 - t0
            seconds["prepare"] += t2 - t1
            seconds["codec"] += t3 - t2
        t0 = time.perf_counter()
        received, rejected, invalid, equivocators = self._decode_all(s, sent)
        fetched = self._fetched_bytes(s, sent, equivocators)
        received = self._bound(s, received)
        seconds["codec"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        scores, banned = self._score(s, sent, received, invalid, equivocators)
        seconds["scoring"] = time.perf_counter() - t0
        if self.observer is not None:
            self.observer(s, received)
        t0 = time.perf_counter()
        if self.overlapped:
            if self._pending is not None:
                self._apply_all(*self._pending)
            self._pending = (s, received)
        else:
            self._apply_all(s, received)
        seconds["apply"] += time.perf_counter() - t0
        self.step_index += 1
        mean_bytes = sum(len(b) for msgs in sent.values() for b in msgs) / len(self.peers)
        return StepReport(
            s,
            sum(losses) / len(losses),
            mean_bytes,
            seconds,
            rejected,
            included=len(received),
            equivocators=tuple(equivocators),
            banned=tuple(banned),
            scores=scores,
            fetched_bytes=fetched,
            included_peers=tuple(sorted(received)),
        )

    def flush(self) -> None:
        """Apply a step still held back by overlapped mode, so evaluation sees every update."""
        if self._pending is not None:
            self._apply_all(*self._pending)
            self._pending = None

    def _decode_all(
        self, step: int, sent: Mapping[str, list[bytes]]
    ) -> tuple[dict[str, Payload], int, list[str], list[str]]:
        """Decode once per payload (every peer would decode the same bytes to the same tensors), applying the
        step policy of threats.md: banned senders are left out, the same bytes twice count once, and two
        different messages for one step are equivocation (neither is applied: replicas could not agree on
        which one is "the" payload). Returns (included payloads, rejected, invalid senders, equivocators)."""
        out: dict[str, Payload] = {}
        rejected = 0
        invalid: list[str] = []
        equivocators: list[str] = []
        for peer_id in sorted(sent):
            if self.scores is not None and self.scores.is_banned(peer_id):
                continue
            distinct = list(dict.fromkeys(sent[peer_id]))
            if len(distinct) > 1:
                equivocators.append(peer_id)
                continue
            if not distinct:
                continue
            try:
                _, payload = decode(distinct[0], self._spec, run_id=self.run_id, sender=peer_id, step=step)
            except PayloadError:
                rejected += 1
                invalid.append(peer_id)
                continue
            out[peer_id] = payload
        return out, rejected, invalid, equivocators

    def _bound(self, step: int, received: dict[str, Payload]) -> dict[str, Payload]:
        """The included payloads: the top K valid ones by the daemon's rule; the waiting counts move on."""
        included = select_included(self.run_id, step, self.waiting, received, self.max_included)
        active = [p.peer_id for p in self.peers if not (self.scores and self.scores.is_banned(p.peer_id))]
        self.waiting = next_waiting(self.waiting, active, included)
        return {p: received[p] for p in included}

    def _fetched_bytes(self, step: int, sent: Mapping[str, list[bytes]], equivocators: list[str]) -> float:
        """Mean bytes a peer downloads: the others' payloads in the fetch window (all of them, unbounded)."""
        candidates = [
            p for p, msgs in sent.items()
            if msgs and p not in equivocators and not (self.scores and self.scores.is_banned(p))
        ]
        window = fetch_window(self.run_id, step, self.waiting, candidates, self.max_included,
                              self.fetch_margin)
        sizes = {p: len(sent[p][0]) for p in window}
        total = sum(sizes.values())
        return sum(total - sizes.get(peer.peer_id, 0) for peer in self.peers) / len(self.peers)

    def _score(
        self,
        step: int,
        sent: Mapping[str, list[bytes]],
        received: Mapping[str, Payload],
        invalid: list[str],
        equivocators: list[str],
    ) -> tuple[dict[str, float], list[str]]:
        """The round leader's bookkeeping, done once per step for all replicas; bans take effect next step."""
        if self.scores is None:
            return {}, []
        keeper = self.scores
        scores, norms = round_observations(self._spec.tensors, received)
        banned = keeper.observe_round(step, scores, norms)
        for peer_id in invalid:
            banned += [peer_id] if keeper.penalize_invalid(step, peer_id) else []
        for peer_id in equivocators:
            banned += [peer_id] if keeper.penalize_equivocation(step, peer_id) else []
        # A step where nobody sends (DiLoCo's inner steps) is no round, so nobody missed it.
        round_held = any(sent.values())
        for peer in self.peers:
            silent = round_held and not sent.get(peer.peer_id)
            if silent and not keeper.is_banned(peer.peer_id):
                banned += [peer.peer_id] if keeper.penalize_missed(step, peer.peer_id) else []
        for peer_id in banned:
            self.ban_steps.setdefault(peer_id, step)
        return scores, sorted(banned)

    def _apply_all(self, step: int, payloads: Mapping[str, Payload]) -> None:
        # Decoded payloads are CPU tensors; on an accelerator every replica would copy each of them again.
        device = next(self.peers[0].model.parameters()).device
        payloads = {peer_id: p.to(device) for peer_id, p in payloads.items()}
        for peer in self.peers:
            if peer.peer_id not in payloads:  # left out: it keeps what was not applied (optimizer/base.py)
                peer.strategy.withheld(step)
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
