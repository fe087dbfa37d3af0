"""Which compute device and precision this process trains with: one place for ``distro-node doctor`` and the
daemon's trainer, so the device doctor reports is the device join uses.

Both are local choices of one process, never part of a run: peers on a GPU, a Mac and a CPU train the same
run. That is only sound because the replicated update runs on CPU whatever the device (see
``node/peer/trainer.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

import torch

# device = "auto" prefers the fastest backend present.
AUTO_ORDER: tuple[str, ...] = ("cuda", "mps", "cpu")
DEVICES: tuple[str, ...] = ("auto", *AUTO_ORDER)
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16")


class DeviceUnavailableError(ValueError):
    """The configured device (``field``: ``device``) or precision is not usable on this machine."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.detail = detail


def probe_devices() -> dict[str, bool]:
    """Whether torch can use each backend here."""
    mps = getattr(torch.backends, "mps", None)
    return {
        "cuda": bool(torch.cuda.is_available()),
        "mps": bool(mps is not None and mps.is_available()),
        "cpu": True,
    }


def resolve_device(configured: str, available: Mapping[str, bool]) -> str | None:
    """The backend ``configured`` means here (auto: cuda, else mps, else cpu); None when it is missing."""
    if configured == "auto":
        return next(d for d in AUTO_ORDER if available.get(d))
    return configured if available.get(configured) else None


def select_device(configured: str, available: Mapping[str, bool] | None = None) -> str:
    """Like :func:`resolve_device`, but a missing or unknown device is a :class:`DeviceUnavailableError`
    naming the ``device`` setting, raised before any training starts."""
    if configured not in DEVICES:
        raise DeviceUnavailableError("device", f"must be one of {', '.join(DEVICES)}, got {configured!r}")
    available = probe_devices() if available is None else available
    chosen = resolve_device(configured, available)
    if chosen is None:
        present = ", ".join(d for d in AUTO_ORDER if available.get(d))
        raise DeviceUnavailableError(
            "device", f"{configured!r} is not available on this machine (available: {present}); "
            f"use --device auto or one of those, or install a torch build with {configured} support")
    return chosen


def select_precision(configured: str, device: str) -> str:
    """``auto`` is bf16 autocast on CUDA (tensor cores; no loss scaling needed, unlike fp16) and fp32
    elsewhere: on CPU and MPS bf16 autocast is slower or unsupported for many kernels."""
    if configured not in PRECISIONS:
        raise DeviceUnavailableError(
            "precision", f"must be one of {', '.join(PRECISIONS)}, got {configured!r}")
    if configured == "auto":
        return "bf16" if device == "cuda" else "fp32"
    return configured


def synchronize(device: str) -> None:
    """Wait for ``device``'s queued kernels: a timer read before this measures the launch, not the work."""
    if device == "cuda":
        torch.cuda.synchronize()
    elif device == "mps":
        torch.mps.synchronize()


def autocast(device: str, precision: str) -> Callable[[], AbstractContextManager[object]]:
    """A factory of the forward pass's autocast context: bf16 autocast, or nothing at fp32. Parameters and
    gradients stay fp32 either way; only the forward's matmuls run in bf16."""
    if precision == "fp32":
        return contextlib.nullcontext
    if precision != "bf16":
        raise DeviceUnavailableError("precision", f"must be fp32 or bf16 once resolved, got {precision!r}")
    return lambda: torch.autocast(device_type=device, dtype=torch.bfloat16)
