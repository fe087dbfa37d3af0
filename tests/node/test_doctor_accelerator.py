"""What `doctor` predicts for an accelerator peer, checked on CPU: the device's and the host's memory apart
(node/doctor/memory.py), and the host's share of a step (node/doctor/host.py). The predictions were compared
with an H100 run (bench/results/gpu.json, docs/benchmarks.md "On a GPU")."""

from __future__ import annotations

import pytest
from distro_node.node.doctor.host import host_time
from distro_node.node.doctor.memory import (
    activation_bytes,
    check_accelerator_memory,
    estimate,
    split_for_accelerator,
)
from distro_node.node.doctor.report import FAIL, PASS, WARN
from distro_node.node.model import param_count
from distro_node.node.presets import preset
from distro_node.optimizer.config import DistroConfig

GB = 10**9
# Peak allocated GPU bytes of one forward+backward of the 1.2B preset at 2048 tokens in bf16 on an H100, per
# micro-batch size (bench/results/gpu.json, step_1.2b.after.micro_batch_memory).
MEASURED_1_2B = {1: 12.43 * GB, 2: 17.69 * GB, 4: 28.21 * GB, 8: 49.24 * GB}


def _split(micro: int) -> tuple[int, int]:
    cfg = preset("1.2b")
    est = estimate(cfg, "distro", DistroConfig(), batch=micro, seq=2048, peers=8, payload_bytes=1_768_228)
    device, host = split_for_accelerator(est, cfg, batch=micro, seq=2048, precision="bf16")
    return device.total, host.total


@pytest.mark.parametrize("micro", sorted(MEASURED_1_2B))
def test_device_memory_of_the_1_2b_preset_is_within_25_percent_above_the_h100_measurement(micro: int) -> None:
    device, _ = _split(micro)
    assert MEASURED_1_2B[micro] <= device <= 1.25 * MEASURED_1_2B[micro]


def test_the_host_holds_the_master_copy_gradient_and_momentum_whatever_the_micro_batch() -> None:
    n = param_count(preset("1.2b"))
    hosts = {_split(micro)[1] for micro in (1, 4)}
    assert len(hosts) == 1 and hosts.pop() >= 3 * 4 * n  # fp32 weights, gradient and DisTrO's delta


def test_fused_attention_drops_the_attention_probabilities() -> None:
    cfg = preset("1.2b")
    plain = activation_bytes(cfg, 1, 2048, 2)
    fused = activation_bytes(cfg, 1, 2048, 2, fused_attention=True)
    assert plain - fused == cfg.n_layers * 2 * cfg.n_heads * 2048 * 2048 * 2


@pytest.mark.parametrize(("device_gb", "host_gb", "status"), [(80, 128, PASS), (24, 128, FAIL),
                                                               (80, 15, FAIL), (34, 128, WARN)])
def test_both_halves_must_fit(device_gb: int, host_gb: int, status: str) -> None:
    cfg = preset("1.2b")
    est = estimate(cfg, "distro", DistroConfig(), batch=4, seq=2048, peers=8, payload_bytes=1_768_228)
    device, host = split_for_accelerator(est, cfg, batch=4, seq=2048, precision="bf16")
    check = check_accelerator_memory("1.2b", device, host, (device_gb * GB, "test"), (host_gb * GB, "test"),
                                     device="cuda", batch=4, seq=2048)
    assert check.status == status, check.summary
    assert check.details["device"]["optimizer_state_bytes"] == 0
    assert check.details["host"]["activations_bytes"] == 0


def test_host_time_scales_with_parameters_and_is_zero_when_compute_is_given() -> None:
    settings = DistroConfig()
    assert host_time(10**9, "distro", settings, peers=4, device="cpu", given=True).seconds == 0.0
    measured = host_time(10**6, "distro", settings, peers=4, device="cpu", given=False)
    assert measured.how == "measured" and measured.bus_bytes_per_second is None  # nothing crosses on cpu
    assert measured.seconds == pytest.approx(measured.per_param_seconds * 10**6)
    assert 0 < measured.per_param_seconds < 1e-5
