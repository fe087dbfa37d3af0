"""Seconds of host work in every step: the part of a step no GPU takes off the CPU.

Why it is its own estimate: the replicated update runs on a CPU master copy (node/peer/trainer.py), so on
any device the strategy's prepare (DCT, top-k, error feedback), the apply of every included payload and the
weights hash run on the host, and on an accelerator the weights and the gradient also cross the bus once
each. For the 1.2B preset on an H100's 16-core host that was 13.0 s of a 13.7 s step, against 0.73 s of GPU
work (bench/results/gpu.json): a projection from the forward and backward alone was 15x too short.

Measured like the matmul rate: the configured strategy's own prepare, codec and apply, and the weights hash,
timed on a probe layer of two million parameters with this host's torch threads, scaled by the model's
parameter count; the bus by one timed round trip of 64 MiB.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from distro_node.compression.payload import Header
from distro_node.compression.wire import decode, encode
from distro_node.node.device import synchronize
from distro_node.node.hashing import model_hash
from distro_node.optimizer.config import StrategyConfig
from distro_node.optimizer.registry import build_strategy

_PROBE_SHAPE = (2048, 1024)  # 512 DCT chunks of 64 x 64 at the default chunk size: past the CPU's caches
_BUS_BYTES = 64 * 1024**2
_PROBE_RUN = b"\0" * 32


@dataclass(frozen=True)
class HostTime:
    """``seconds`` of host work per step, with the rates it was scaled from (``how``: measured | given)."""

    seconds: float
    how: str
    per_param_seconds: float = 0.0
    bus_bytes_per_second: float | None = None


def _probe_seconds(strategy: str, settings: StrategyConfig, peers: int) -> float:
    """Best of three probe steps (after one to warm up): pre_forward, post_backward, prepare, encode, decode,
    apply of ``peers`` payloads and the weights hash, on a probe layer whose gradient is random."""
    layer = torch.nn.Linear(_PROBE_SHAPE[1], _PROBE_SHAPE[0], bias=False)
    strat = build_strategy(strategy, layer, settings)
    spec = strat.spec()
    gen = torch.Generator().manual_seed(0)
    best = float("inf")
    for step in range(4):
        layer.weight.grad = torch.randn(layer.weight.shape, generator=gen)
        start = time.perf_counter()
        strat.pre_forward(step)
        strat.post_backward(step)
        payload = strat.prepare(step)
        if payload is not None:
            header = Header.of(spec, _PROBE_RUN, step, "probe")
            _, payload = decode(encode(header, payload, spec), spec, run_id=_PROBE_RUN, sender="probe",
                                step=step)
            strat.apply(step, {f"peer-{i:04d}": payload for i in range(peers)})
        model_hash(layer)
        if step:  # the first round warms caches and allocators
            best = min(best, time.perf_counter() - start)
    return best


def bus_rate(device: str) -> float | None:
    """Bytes a second of one host -> device -> host round trip (None on cpu: nothing crosses)."""
    if device == "cpu":
        return None
    host = torch.empty(_BUS_BYTES // 4)
    on_device = host.to(device)
    synchronize(device)
    start = time.perf_counter()
    on_device.copy_(host)
    host.copy_(on_device)
    synchronize(device)
    return 2 * _BUS_BYTES / (time.perf_counter() - start)


def host_time(params: int, strategy: str, settings: StrategyConfig, *, peers: int, device: str,
              given: bool) -> HostTime:
    """Host seconds per step for ``params`` parameters and ``peers`` payloads applied; 0 when the compute
    time was given by the user (``--compute-seconds`` stands for the whole step's compute)."""
    if given:
        return HostTime(0.0, "given")
    per_param = _probe_seconds(strategy, settings, peers) / (_PROBE_SHAPE[0] * _PROBE_SHAPE[1])
    bus = bus_rate(device)
    copies = 0.0 if bus is None else 2 * 4 * params / bus  # fp32 weights in, fp32 gradient out
    return HostTime(per_param * params + copies, "measured", per_param, bus)
