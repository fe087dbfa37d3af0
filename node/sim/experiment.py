"""One strategy trained by a simulated swarm on a preset model and a data source.

The demo command, the swarm tests and the convergence benchmark all build runs here, so they measure the
same thing: the same model init, the same per-peer batches, the same codec on the path.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from distro_node.node.data.embedded import markov_source
from distro_node.node.data.sampling import eval_batches, sample_batch
from distro_node.node.data.source import TokenSource
from distro_node.node.device import (
    AUTO_ORDER,
    PRECISIONS,
    DeviceUnavailableError,
    autocast,
    select_device,
    select_precision,
)
from distro_node.node.faults import FaultSpec
from distro_node.node.model import Llama, ModelConfig, next_token_loss, param_count
from distro_node.node.presets import preset, with_vocab
from distro_node.node.sim.swarm import Observer, SimulatedSwarm, StepReport, WireFilter
from distro_node.optimizer.registry import build_strategy
from distro_node.protocol.scores import ScoreKeeper, ScorePolicy


class ExperimentConfigError(ValueError):
    """A bad experiment setting; ``field`` names it."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field


@dataclass(frozen=True)
class ExperimentConfig:
    preset: str = "tiny"
    strategy: str = "distro"
    settings: Mapping[str, Any] = field(default_factory=dict)  # strategy settings, see optimizer/config.py
    peers: int = 4
    steps: int = 100
    batch_size: int = 8
    seq_len: int | None = None  # None: the preset's
    seed: int = 0  # model init and run id
    data_seed: int = 0
    eval_batches: int = 8
    eval_every: int = 0  # 0: only at the end
    grad_clip: float = 1.0
    # Peer index -> fault (node/faults.py). Put faulty peers at high indices: evaluation uses peer 0's model.
    faults: Mapping[int, FaultSpec] = field(default_factory=dict)
    # Score peers and leave banned ones out of the included set (the round leader's job in a real swarm).
    exclusion: bool = True
    score_policy: ScorePolicy = field(default_factory=ScorePolicy)
    # Where every simulated peer's model and strategy live (cpu | cuda | mps) and the forward's precision
    # (auto: bf16 autocast on cuda, fp32 elsewhere, as for a daemon). One process holds every replica on one
    # device, so they stay bit-identical there; like a daemon's, these are local and not part of the run id.
    device: str = "cpu"
    precision: str = "auto"
    # At most this many payloads per step (the manifest's rounds.max_included); 0: all. Not part of the run
    # id, so a bounded run and its unbounded twin train on the same tokens.
    max_included: int = 0

    def __post_init__(self) -> None:
        for name in ("peers", "steps", "batch_size", "eval_batches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ExperimentConfigError(name, f"must be a positive integer, got {value!r}")
        if self.eval_every < 0:
            raise ExperimentConfigError("eval_every", f"must be >= 0, got {self.eval_every}")
        if not self.grad_clip > 0:
            raise ExperimentConfigError("grad_clip", f"must be > 0, got {self.grad_clip}")
        for index, fault in self.faults.items():
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.peers:
                raise ExperimentConfigError(
                    "faults", f"peer index must be in [0, {self.peers}), got {index!r}"
                )
            if not isinstance(fault, FaultSpec):
                raise ExperimentConfigError("faults", f"peer {index}: expected a FaultSpec, got {fault!r}")
        if not isinstance(self.exclusion, bool):
            raise ExperimentConfigError("exclusion", f"must be a bool, got {self.exclusion!r}")
        if isinstance(self.max_included, bool) or not isinstance(self.max_included, int) or not (
            0 <= self.max_included
        ):
            raise ExperimentConfigError("max_included", f"must be an int >= 0, got {self.max_included!r}")
        if self.device not in AUTO_ORDER:
            raise ExperimentConfigError(
                "device", f"must be one of {', '.join(AUTO_ORDER)}, got {self.device!r}")
        if self.precision not in PRECISIONS:
            raise ExperimentConfigError(
                "precision", f"must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")

    def run_id(self) -> bytes:
        """Hash of the run's settings. Faults and the exclusion policy are left out so an attacked run and its
        honest twin draw the same batches for the same peer ids (a paired comparison)."""
        doc = asdict(self)
        doc["settings"] = dict(self.settings)
        for name in ("faults", "exclusion", "score_policy", "device", "precision", "max_included"):
            doc.pop(name)
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).digest()


@dataclass
class ExperimentResult:
    config: ExperimentConfig
    model_params: int
    history: list[dict[str, float]]  # per step: step, loss, payload_bytes (+ eval_loss where evaluated)
    final_eval_loss: float
    loss_floor: float | None  # the data's floor for this window length (None for real data)
    payload_bytes_per_step: float  # mean bytes one peer sends per step, averaged over all steps
    dense_bf16_bytes: int  # one dense bf16 gradient of the model
    replicas_identical: bool
    seconds: float
    phase_seconds: dict[str, float]
    ban_steps: dict[str, int] = field(default_factory=dict)  # peer id -> step after which it was left out
    rejected: int = 0  # messages that failed validation over the run
    fetched_bytes_per_step: float = 0.0  # mean payload bytes one peer downloads per step
    # The most steps between two lists including the same peer (counting from before the first step and to
    # after the last): 1 when every list includes everyone.
    max_inclusion_gap: int = 0

    @property
    def reduction(self) -> float:
        """How many times less a peer sends per step than a dense bf16 gradient."""
        return self.dense_bf16_bytes / self.payload_bytes_per_step if self.payload_bytes_per_step else 0.0

    def to_dict(self) -> dict[str, Any]:
        cfg = asdict(self.config)
        cfg["settings"] = dict(self.config.settings)
        cfg["faults"] = {str(i): str(f) for i, f in self.config.faults.items()}
        return {
            "config": cfg,
            "model_params": self.model_params,
            "final_eval_loss": self.final_eval_loss,
            "loss_floor": self.loss_floor,
            "loss_above_floor": None if self.loss_floor is None else self.final_eval_loss - self.loss_floor,
            "payload_bytes_per_step": self.payload_bytes_per_step,
            "dense_bf16_bytes": self.dense_bf16_bytes,
            "reduction_vs_dense_bf16": self.reduction,
            "replicas_identical": self.replicas_identical,
            "seconds": self.seconds,
            "phase_seconds": self.phase_seconds,
            "ban_steps": self.ban_steps,
            "rejected": self.rejected,
            "fetched_bytes_per_step": self.fetched_bytes_per_step,
            "max_inclusion_gap": self.max_inclusion_gap,
            "history": self.history,
        }


def model_config_for(cfg: ExperimentConfig, source: TokenSource | None = None) -> ModelConfig:
    """The preset's shape; with a source made by a tokenizer, its vocabulary (as a run manifest does)."""
    model_cfg = preset(cfg.preset)
    if cfg.seq_len is not None and cfg.seq_len > model_cfg.seq_len:
        raise ExperimentConfigError("seq_len", f"{cfg.seq_len} exceeds the preset's {model_cfg.seq_len}")
    if source is not None and source.tokenizer_sha256:
        model_cfg = with_vocab(model_cfg, source.vocab_size)
    return model_cfg


def build_swarm(
    cfg: ExperimentConfig,
    source: TokenSource | None = None,
    wire_filter: WireFilter | None = None,
    observer: Observer | None = None,
) -> tuple[SimulatedSwarm, TokenSource]:
    source = source if source is not None else markov_source(cfg.data_seed)
    model_cfg = model_config_for(cfg, source)
    source.check_vocab(model_cfg.vocab_size)
    seq_len = cfg.seq_len or model_cfg.seq_len
    run_id = cfg.run_id()
    try:
        device = torch.device(select_device(cfg.device))
        amp = autocast(device.type, select_precision(cfg.precision, device.type))
    except DeviceUnavailableError as exc:
        raise ExperimentConfigError(exc.field, exc.detail) from None

    def batch_fn(step: int, peer_id: str) -> tuple[torch.Tensor, torch.Tensor]:
        return sample_batch(
            source, run_id=run_id, step=step, peer=peer_id, batch_size=cfg.batch_size, seq_len=seq_len
        )

    def loss_fn(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with amp():
            return next_token_loss(model(inputs.to(device)), targets.to(device))

    swarm = SimulatedSwarm(
        peers=cfg.peers,
        model_factory=lambda: Llama(model_cfg, seed=cfg.seed).to(device),
        strategy_factory=lambda model: build_strategy(cfg.strategy, model, dict(cfg.settings)),
        batch_fn=batch_fn,
        loss_fn=loss_fn,
        run_id=run_id,
        grad_clip=cfg.grad_clip,
        wire_filter=wire_filter,
        faults=cfg.faults,
        scores=ScoreKeeper(cfg.score_policy) if cfg.exclusion else None,
        observer=observer,
        fault_seed=cfg.seed,
        max_included=cfg.max_included,
    )
    return swarm, source


def run_experiment(
    cfg: ExperimentConfig,
    *,
    on_step: Callable[[StepReport], None] | None = None,
    wire_filter: WireFilter | None = None,
    observer: Observer | None = None,
    source: TokenSource | None = None,
) -> ExperimentResult:
    """``source`` None: the embedded corpus of ``cfg.data_seed``."""
    start = time.perf_counter()
    swarm, source = build_swarm(cfg, source, wire_filter=wire_filter, observer=observer)
    model_cfg = model_config_for(cfg, source)
    seq_len = cfg.seq_len or model_cfg.seq_len
    held_out = list(
        eval_batches(source, batch_size=cfg.batch_size, seq_len=seq_len, max_batches=cfg.eval_batches)
    )
    history: list[dict[str, float]] = []
    phases: dict[str, float] = {}
    total_bytes = 0.0
    fetched_bytes = 0.0
    rejected = 0
    last_included = {p.peer_id: -1 for p in swarm.peers}
    max_gap = 0
    for _ in range(cfg.steps):
        report = swarm.step()
        total_bytes += report.payload_bytes
        fetched_bytes += report.fetched_bytes
        rejected += report.rejected
        for peer_id in report.included_peers:
            max_gap = max(max_gap, report.step - last_included[peer_id])
            last_included[peer_id] = report.step
        for k, v in report.seconds.items():
            phases[k] = phases.get(k, 0.0) + v
        row = {"step": report.step, "loss": report.loss, "payload_bytes": report.payload_bytes,
               "fetched_bytes": report.fetched_bytes}
        if cfg.eval_every and (report.step + 1) % cfg.eval_every == 0 and report.step + 1 < cfg.steps:
            row["eval_loss"] = swarm.eval_loss(held_out)
        history.append(row)
        if on_step is not None:
            on_step(report)
    swarm.flush()
    final = swarm.eval_loss(held_out)
    history[-1]["eval_loss"] = final
    hashes = swarm.hashes()
    max_gap = max([max_gap] + [cfg.steps - last for last in last_included.values()])
    n_params = param_count(model_cfg)
    return ExperimentResult(
        config=cfg,
        model_params=n_params,
        history=history,
        final_eval_loss=final,
        loss_floor=source.window_floor(seq_len),
        payload_bytes_per_step=total_bytes / cfg.steps,
        dense_bf16_bytes=2 * n_params,
        replicas_identical=len(set(hashes)) == 1,
        seconds=time.perf_counter() - start,
        phase_seconds=phases,
        ban_steps=dict(swarm.ban_steps),
        rejected=rejected,
        fetched_bytes_per_step=fetched_bytes / cfg.steps,
        max_inclusion_gap=max_gap,
    )
