"""The bytes a node sends per step, what uploading them costs, and the step time that follows.

Sizes are exact: the strategy is built on a meta-device model (shapes only, no memory), its ``spec()`` is
the one a node would send with, and ``max_encoded_nbytes`` is the wire size the receivers cap reads at. The
upload is costed as an all-gather done by the sender alone, (peers - 1) copies over its uplink: the worst
case, since peers that already fetched a payload also serve it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from distro_node.compression.envelope import max_encoded_nbytes
from distro_node.compression.sizes import payload_body_nbytes
from distro_node.node.doctor.report import FAIL, PASS, WARN, Check, human_bytes, human_seconds
from distro_node.node.model import Llama, ModelConfig, param_count
from distro_node.optimizer.config import DilocoConfig, DistroConfig, StrategyConfig
from distro_node.optimizer.registry import build_strategy

# Recommend DisTrO's overlapped mode once the exchange would add more than this share to a sequential step.
OVERLAP_WORTH = 0.25


@dataclass(frozen=True)
class PayloadBudget:
    """One peer's exchange: ``wire_bytes`` per exchange, every ``every_steps`` steps (DiLoCo: inner_steps)."""

    body_bytes: int
    wire_bytes: int
    every_steps: int
    dense_bf16_bytes: int
    peers: int
    uplink_bits_per_second: float

    @property
    def upload_bytes(self) -> int:
        """Bytes one exchange puts on this node's uplink: a copy for every other peer."""
        return self.wire_bytes * max(self.peers - 1, 0)

    def upload_seconds(self, bits_per_second: float | None = None) -> float:
        """Seconds for one exchange at ``bits_per_second`` (default: the configured uplink)."""
        rate = bits_per_second if bits_per_second is not None else self.uplink_bits_per_second
        return self.upload_bytes * 8 / rate

    @property
    def reduction(self) -> float:
        """How many times smaller than a dense bf16 gradient one step's share of the payload is."""
        return self.dense_bf16_bytes * self.every_steps / self.wire_bytes


def budget(
    cfg: ModelConfig, strategy: str, settings: StrategyConfig, *, peers: int, uplink_mbit: float
) -> PayloadBudget:
    with torch.device("meta"):
        model = Llama(cfg, seed=None)
    spec = build_strategy(strategy, model, settings).spec()
    every = settings.inner_steps if isinstance(settings, DilocoConfig) else 1
    return PayloadBudget(
        body_bytes=payload_body_nbytes(spec),
        wire_bytes=max_encoded_nbytes(spec),
        every_steps=every,
        dense_bf16_bytes=2 * param_count(cfg),
        peers=peers,
        uplink_bits_per_second=uplink_mbit * 1e6,
    )


def check_payload(b: PayloadBudget, compute_seconds: float, deadline_seconds: float) -> Check:
    """FAIL when one exchange cannot be uploaded within the round deadline (the round would close without
    this node's payload every time), WARN when it takes longer than the compute it could hide behind."""
    upload = b.upload_seconds()
    cadence = "per step" if b.every_steps == 1 else f"every {b.every_steps} steps"
    summary = (
        f"{human_bytes(b.wire_bytes)} {cadence} (dense bf16 gradient {human_bytes(b.dense_bf16_bytes)}: "
        f"{b.reduction:,.0f}x reduction); upload to {b.peers - 1} peers at "
        f"{b.uplink_bits_per_second / 1e6:g} Mbit/s: {human_seconds(upload)}"
    )
    details = {
        "body_bytes": b.body_bytes,
        "wire_bytes": b.wire_bytes,
        "every_steps": b.every_steps,
        "dense_bf16_bytes": b.dense_bf16_bytes,
        "reduction_vs_dense_bf16": b.reduction,
        "peers": b.peers,
        "uplink_bits_per_second": b.uplink_bits_per_second,
        "upload_bytes_per_exchange": b.upload_bytes,
        "upload_seconds_per_exchange": upload,
        "round_timeout_seconds": deadline_seconds,
    }
    if upload > deadline_seconds:
        return Check(
            "payload", FAIL, summary,
            hint=f"upload exceeds run.rounds.round_timeout_seconds = {deadline_seconds:g}: rounds would "
            "close without this node; use strategy distro (or a lower topk), fewer peers, more uplink, or a "
            "longer deadline",
            details=details,
        )
    if upload * b.every_steps > compute_seconds:
        return Check(
            "payload", WARN, summary,
            hint=f"uploading takes longer than the {human_seconds(compute_seconds)} of compute per step: "
            "the run is network-bound (see step_time)",
            details=details,
        )
    return Check("payload", PASS, summary, details=details)


def check_step_time(
    b: PayloadBudget,
    compute_seconds: float,
    settings: StrategyConfig,
    measured_bits_per_second: float | None,
) -> Check:
    """Projected seconds per step: compute + communication in sequential mode, their maximum when the
    exchange overlaps the next step's compute (DisTrO ``overlapped``). The link is the configured uplink,
    or the measured loopback ceiling of the libp2p stack when that is lower."""
    rate = b.uplink_bits_per_second
    limited_by = "uplink"
    if measured_bits_per_second is not None and measured_bits_per_second < rate:
        rate, limited_by = measured_bits_per_second, "the libp2p stack's loopback ceiling"
    comm = b.upload_seconds(rate) / b.every_steps
    overlapped = isinstance(settings, DistroConfig) and settings.overlapped
    sequential = compute_seconds + comm
    overlap = max(compute_seconds, comm)
    projected = overlap if overlapped else sequential
    mode = "overlapped" if overlapped else "sequential"
    summary = (
        f"~{human_seconds(projected)} per step ({mode}: compute {human_seconds(compute_seconds)}, "
        f"communication {human_seconds(comm)} limited by {limited_by}; "
        f"{'sequential' if overlapped else 'overlapped'} would be "
        f"{human_seconds(sequential if overlapped else overlap)})"
    )
    details = {
        "projected_seconds": projected,
        "mode": mode,
        "compute_seconds": compute_seconds,
        "communication_seconds": comm,
        "sequential_seconds": sequential,
        "overlapped_seconds": overlap,
        "link_bits_per_second": rate,
        "limited_by": limited_by,
    }
    if comm > compute_seconds:
        return Check(
            "step_time", WARN, summary,
            hint=f"network-bound: {comm / projected:.0%} of each step waits on the upload; raise "
            "run.grad_accum (more compute per exchange), send less (distro, lower topk), or get more uplink",
            details=details,
        )
    if not overlapped and isinstance(settings, DistroConfig) and comm > OVERLAP_WORTH * compute_seconds:
        return Check(
            "step_time", WARN, summary,
            hint="set run.strategy_settings.overlapped = true to hide the exchange behind the next step",
            details=details,
        )
    return Check("step_time", PASS, summary, details=details)
