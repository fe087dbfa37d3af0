"""How much memory a node needs for a preset and strategy, from the config alone (nothing is allocated).

Why per strategy: the optimizer state is where the strategies differ most. DisTrO keeps one fp32 momentum
buffer (``delta``, which also holds the error feedback) and no AdamW moments; AdamW keeps two moments;
DiLoCo keeps AdamW moments plus a global copy and an outer momentum. Received payloads are counted too: a
node holds every peer's payload of a step until it applies them, which is nothing for DisTrO and gigabytes
for a dense all-gather of a 1.2B model.

Activations are a rough estimate (what autograd saves for this Llama with the SDPA math backend); the other
terms are exact element counts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from distro_node.node.doctor.report import FAIL, PASS, WARN, Check, human_bytes
from distro_node.node.model import ModelConfig, param_count
from distro_node.optimizer.config import DilocoConfig, DistroConfig, StrategyConfig

FP32 = 4
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2}
# Above this share of the available memory the OS, the data loader and allocator fragmentation are likely
# to push the process over: warn before it is an out-of-memory kill hours into a run.
WARN_FRACTION = 0.8


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes by component; ``total`` is their sum."""

    weights: int
    gradients: int
    optimizer_state: int
    state_note: str
    activations: int
    payload_buffers: int
    transient: int

    @property
    def total(self) -> int:
        return (
            self.weights + self.gradients + self.optimizer_state + self.activations + self.payload_buffers
            + self.transient
        )

    def to_dict(self) -> dict[str, int | str]:
        return {
            "weights_bytes": self.weights,
            "gradients_bytes": self.gradients,
            "optimizer_state_bytes": self.optimizer_state,
            "optimizer_state": self.state_note,
            "activations_bytes": self.activations,
            "payload_buffers_bytes": self.payload_buffers,
            "transient_bytes": self.transient,
            "total_bytes": self.total,
        }


def optimizer_state(strategy: str, settings: StrategyConfig, n: int, weight_bytes: int) -> tuple[int, str]:
    """(bytes, what they are) of the strategy's persistent state for ``n`` parameters."""
    if strategy == "distro" and isinstance(settings, DistroConfig):
        parts, total = ["fp32 momentum delta (error feedback included), no AdamW moments"], FP32 * n
        if settings.update == "adam":
            parts.append("fp32 second moment of the aggregate")
            total += FP32 * n
        if settings.overlapped:
            parts.append("saved weights for the lookahead")
            total += weight_bytes * n
        return total, "; ".join(parts)
    if strategy == "adamw":
        return 2 * weight_bytes * n, "AdamW first and second moments"
    if strategy == "diloco" and isinstance(settings, DilocoConfig):
        note = "inner AdamW moments, global weights copy, fp32 outer momentum"
        return 3 * weight_bytes * n + FP32 * n, note
    if strategy == "cocktail":
        return 2 * FP32 * n, "fp32 error feedback and momentum"
    raise ValueError(f"no memory model for strategy {strategy!r}")


def activation_bytes(cfg: ModelConfig, batch: int, seq: int, act_bytes: int, fused_attention: bool = False
                     ) -> int:
    """Rough bytes autograd keeps for one micro-batch: per token and layer the norm inputs and outputs, q/k/v
    before and after RoPE, the attention output, and four MLP intermediates; the attention probabilities
    (the CPU math backend materialises them; CUDA's fused kernels, ``fused_attention``, do not); and the
    fp32 logits with their softmax and gradient."""
    kv = cfg.n_kv_heads * cfg.head_dim
    per_token_layer = (14 * cfg.hidden + 4 * kv + 4 * cfg.intermediate) * act_bytes
    attention = 0 if fused_attention else 2 * batch * cfg.n_heads * seq * seq * act_bytes
    tokens = batch * seq
    logits = 3 * tokens * cfg.vocab_size * FP32
    return cfg.n_layers * (tokens * per_token_layer + attention) + logits


def largest_tensor(cfg: ModelConfig) -> int:
    """Elements of the biggest parameter (embedding/head or an MLP matrix): bounds per-tensor scratch."""
    return max(cfg.vocab_size * cfg.hidden, cfg.intermediate * cfg.hidden)


def estimate(
    cfg: ModelConfig,
    strategy: str,
    settings: StrategyConfig,
    *,
    batch: int,
    seq: int,
    peers: int,
    payload_bytes: int,
    dtype: str = "fp32",
) -> MemoryEstimate:
    """The node's memory for one process with weights and gradients in ``dtype`` (the node trains in fp32).
    ``payload_bytes`` is one encoded payload; ``peers`` of them (own included) are held per step."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {dtype!r}")
    wb = DTYPE_BYTES[dtype]
    n = param_count(cfg)
    state, note = optimizer_state(strategy, settings, n, wb)
    return MemoryEstimate(
        weights=wb * n,
        gradients=wb * n,
        optimizer_state=state,
        state_note=note,
        activations=activation_bytes(cfg, batch, seq, wb),
        payload_buffers=peers * payload_bytes,
        # DCT of one tensor in fp32, its top-k selection and the dense aggregate: about three copies.
        transient=3 * FP32 * largest_tensor(cfg),
    )


def split_for_accelerator(est: MemoryEstimate, cfg: ModelConfig, *, batch: int, seq: int, precision: str
                          ) -> tuple[MemoryEstimate, MemoryEstimate]:
    """(device, host) parts of an accelerator peer's fp32 estimate ``est``. The device holds the working
    copy, its gradient and the activations (in the forward's precision, attention fused); the host holds the
    CPU master copy, its gradient, the optimizer state, the payloads and the scratch (node/peer/trainer.py).
    On an H100 the device part of the 1.2B preset at 4 x 2048 tokens in bf16 is predicted 31.0 GB against
    28.2 GB measured (bench/results/gpu.json)."""
    act = activation_bytes(cfg, batch, seq, DTYPE_BYTES[precision], fused_attention=True)
    device = replace(est, optimizer_state=0, state_note="on the host", activations=act, payload_buffers=0,
                     transient=0)
    return device, replace(est, activations=0)


def check_accelerator_memory(preset_name: str, device_need: MemoryEstimate, host_need: MemoryEstimate,
                             available: tuple[int | None, str], host_available: tuple[int | None, str], *,
                             device: str, batch: int, seq: int) -> Check:
    """Both halves must fit: the device's free memory and the host's (FAIL above, WARN over
    :data:`WARN_FRACTION`)."""
    dev, host = device_need, host_need
    summary = (
        f"{device} needs ~{human_bytes(dev.total)} (working copy {human_bytes(dev.weights)} + grads "
        f"{human_bytes(dev.gradients)} + activations ~{human_bytes(dev.activations)} for {batch}x{seq} "
        f"tokens) of {_of(available)}; the host ~{human_bytes(host.total)} (CPU master, its grads, optimizer "
        f"{human_bytes(host.optimizer_state)}, payloads, scratch) of {_of(host_available)}"
    )
    details = {"preset": preset_name, "device": device_need.to_dict(), "host": host_need.to_dict(),
               "available_bytes": available[0], "available_source": available[1],
               "host_available_bytes": host_available[0], "host_available_source": host_available[1]}
    halves = ((device_need, available[0]), (host_need, host_available[0]))
    worst = max((need.total / room for need, room in halves if room), default=None)
    if worst is None:
        return Check("memory", WARN, summary, hint="pass --memory-gb to compare against the device's memory",
                     details=details)
    return _verdict(worst, summary, details)


_SHRINK = ("use a smaller preset, raise run.grad_accum or lower run.seq_len (activations), or a machine with "
           "more memory")


def _verdict(share: float, summary: str, details: dict[str, Any]) -> Check:
    """FAIL above what is available (``share`` > 1), WARN above :data:`WARN_FRACTION` of it, else PASS."""
    if share > 1.0:
        return Check("memory", FAIL, summary, hint=f"does not fit: {_SHRINK}", details=details)
    if share > WARN_FRACTION:
        return Check("memory", WARN, summary,
                     hint=f"over {WARN_FRACTION:.0%} of available memory, little headroom: {_SHRINK}",
                     details=details)
    return Check("memory", PASS, summary, details=details)


def _of(available: tuple[int | None, str]) -> str:
    room, source = available
    return "unknown" if room is None else f"{human_bytes(room)} [{source}]"


def check_memory(
    preset_name: str,
    fp32: MemoryEstimate,
    bf16: MemoryEstimate,
    available: int | None,
    source: str,
    *,
    batch: int,
    seq: int,
) -> Check:
    """FAIL when the fp32 total exceeds what is available, WARN above :data:`WARN_FRACTION` of it."""
    parts = (
        f"weights {human_bytes(fp32.weights)} + grads {human_bytes(fp32.gradients)} + optimizer "
        f"{human_bytes(fp32.optimizer_state)} + activations ~{human_bytes(fp32.activations)} "
        f"({batch}x{seq} tokens) + payloads {human_bytes(fp32.payload_buffers)} + scratch "
        f"{human_bytes(fp32.transient)}"
    )
    details = {
        "preset": preset_name,
        "fp32": fp32.to_dict(),
        "bf16": bf16.to_dict(),
        "available_bytes": available,
        "available_source": source,
    }
    need = f"needs ~{human_bytes(fp32.total)} in fp32 ({human_bytes(bf16.total)} if bf16)"
    if available is None:
        return Check(
            "memory", WARN, f"{need}; available memory unknown ({parts})",
            hint="pass --memory-gb to compare against what this machine has", details=details,
        )
    summary = f"{need} of {human_bytes(available)} available [{source}]: {parts}"
    return _verdict(fp32.total / available if available else float("inf"), summary, details)
