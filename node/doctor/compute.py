"""Seconds of compute per training step on this machine: measured when that is cheap, estimated otherwise.

Why both: timing a real forward and backward pass is the honest number, but for the 1.2B preset on a CPU it
would allocate ~15 GB and take minutes, which a pre-flight check must not do. Then the step's FLOPs
(6 x parameters x tokens, plus attention) are divided by this device's measured matmul rate at an assumed
efficiency, and the report says it is an estimate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from distro_node.node.device import autocast, synchronize
from distro_node.node.doctor.host import HostTime
from distro_node.node.doctor.report import PASS, WARN, Check, human_seconds
from distro_node.node.model import Llama, ModelConfig, next_token_loss, param_count

# Share of the peak matmul rate a whole training step reaches (norms, softmax, RoPE and the optimizer are
# memory-bound). An assumption, stated in the report next to every estimate.
EFFICIENCY = 0.4
# Measure a real step only when the estimate says it is quick and (the caller's rule) it fits easily.
MEASURE_MAX_SECONDS = 2.0
MEASURE_MAX_BYTES = 2 * 1024**3
# A step this slow makes a run impractical on this device, whatever the network does.
SLOW_STEP_SECONDS = 60.0
# Square matmul side timed for the rate: small enough for a CPU, large enough to fill a GPU (a 512 matmul
# leaves an H100 mostly idle, measured 14 TFLOP/s in fp32 against ~700 in bf16 at 4096).
_MATMUL_N = {"cpu": 512, "mps": 2048, "cuda": 4096}
_MATMUL_BUDGET = 0.25
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class ComputeTime:
    """``seconds`` per optimizer step (all micro-batches); ``how`` is measured | estimated | given."""

    seconds: float
    how: str
    flops: float
    matmul_flops_per_second: float | None


def step_flops(cfg: ModelConfig, batch: int, seq: int, grad_accum: int) -> float:
    """Forward + backward FLOPs of one step: 6 per matmul parameter per token, plus the attention scores and
    the weighted sum (12 x layers x seq x hidden per token). The embedding lookup is not a matmul."""
    tokens = batch * seq * grad_accum
    matmul_params = param_count(cfg) - cfg.vocab_size * cfg.hidden
    return 6.0 * matmul_params * tokens + 12.0 * cfg.n_layers * seq * cfg.hidden * tokens


def matmul_rate(device: str, precision: str = "fp32") -> float:
    """FLOP/s of square matmuls on ``device`` in the forward's precision (bf16 autocast runs its matmuls in
    bf16), timed for about a quarter of a second."""
    n = _MATMUL_N.get(device, 512)
    a = torch.randn(n, n).to(device=device, dtype=_DTYPES[precision])
    b = torch.randn(n, n).to(device=device, dtype=_DTYPES[precision])
    torch.mm(a, b)
    synchronize(device)
    runs, start = 0, time.perf_counter()
    while True:
        torch.mm(a, b)
        runs += 1
        if runs % 4 == 0:
            synchronize(device)
            elapsed = time.perf_counter() - start
            if elapsed >= _MATMUL_BUDGET:
                return 2.0 * n**3 * runs / elapsed


def measure_step(cfg: ModelConfig, batch: int, seq: int, grad_accum: int, device: str,
                 precision: str = "fp32") -> float:
    """Best of two timed forward+backward passes of one micro-batch (after a warm-up), times grad_accum."""
    model = Llama(cfg, seed=0).to(device)  # initialised on CPU: its seeded generators are CPU generators
    gen = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=gen).to(device)
    amp = autocast(device, precision)
    best = float("inf")
    for i in range(3):
        start = time.perf_counter()
        with amp():
            loss = next_token_loss(model(tokens[:, :-1]), tokens[:, 1:])
        loss.backward()
        synchronize(device)
        if i:
            best = min(best, time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    return best * grad_accum


def compute_time(
    cfg: ModelConfig,
    *,
    batch: int,
    seq: int,
    grad_accum: int,
    device: str,
    given: float | None,
    may_measure: bool,
    precision: str = "fp32",
) -> ComputeTime:
    """``given`` (``--compute-seconds``) wins; else a real step when the estimate is under
    :data:`MEASURE_MAX_SECONDS` and the caller found the memory for it (``may_measure``); else the FLOP
    estimate."""
    flops = step_flops(cfg, batch, seq, grad_accum)
    if given is not None:
        return ComputeTime(given, "given", flops, None)
    rate = matmul_rate(device, precision)
    estimated = flops / (rate * EFFICIENCY)
    if may_measure and estimated <= MEASURE_MAX_SECONDS:
        seconds = measure_step(cfg, batch, seq, grad_accum, device, precision)
        return ComputeTime(seconds, "measured", flops, rate)
    return ComputeTime(estimated, "estimated", flops, rate)


def check_compute(ct: ComputeTime, host: HostTime, device: str, *, batch: int, seq: int, grad_accum: int
                  ) -> Check:
    """The step's compute: the forward and backward on ``device`` plus the host's share (``host``)."""
    shape = f"{grad_accum}x{batch}x{seq} tokens" if grad_accum > 1 else f"{batch}x{seq} tokens"
    if ct.how == "measured":
        how = f"measured forward+backward on {device}"
    elif ct.how == "estimated":
        rate = ct.matmul_flops_per_second or 0.0
        how = (
            f"estimated: {ct.flops / 1e12:.2f} TFLOP at {EFFICIENCY:.0%} of {device}'s measured "
            f"{rate / 1e9:.0f} GFLOP/s matmul rate"
        )
    else:
        how = "given by --compute-seconds"
    total = ct.seconds + host.seconds
    details = {
        "seconds": ct.seconds,
        "how": ct.how,
        "flops": ct.flops,
        "matmul_flops_per_second": ct.matmul_flops_per_second,
        "efficiency_assumed": EFFICIENCY if ct.how == "estimated" else None,
        "host_seconds": host.seconds,
        "host_per_param_seconds": host.per_param_seconds,
        "bus_bytes_per_second": host.bus_bytes_per_second,
        "total_seconds": total,
    }
    summary = f"{human_seconds(ct.seconds)} per step of {shape} ({how})"
    if host.how == "measured":
        copies = ", copies" if host.bus_bytes_per_second else ""
        summary = (f"{human_seconds(total)} per step: {summary}, and {human_seconds(host.seconds)} on the "
                   f"host (prepare, apply, weights hash{copies}: measured rate x parameters)")
    if total > SLOW_STEP_SECONDS:
        return Check(
            "compute", WARN, summary,
            hint="very slow on this device: use a GPU, or a smaller preset for this machine", details=details,
        )
    return Check("compute", PASS, summary, details=details)
