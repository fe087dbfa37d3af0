"""Which compute devices this machine has, which one ``device = "auto"`` picks, and how much memory it offers.

Why memory is read the way it is: on Linux ``MemAvailable`` (not ``MemFree``) is what a new process can
allocate without swapping, and inside a container the cgroup limit can be far below it; on CUDA the free
memory of the card is what counts, not the host's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
from distro_node.node.device import probe_devices, resolve_device
from distro_node.node.doctor.report import FAIL, PASS, WARN, Check


@dataclass(frozen=True)
class DeviceInfo:
    """``available`` maps each backend to whether torch can use it here; ``chosen`` is what the node runs on
    (None when the configured device is missing)."""

    configured: str
    available: dict[str, bool]
    chosen: str | None
    name: str


def device_info(configured: str) -> DeviceInfo:
    available = probe_devices()
    chosen = resolve_device(configured, available)
    if chosen == "cuda":
        name = torch.cuda.get_device_name(0)
    elif chosen == "cpu":
        name = f"{os.cpu_count()} CPU cores, torch using {torch.get_num_threads()} threads"
    else:
        name = chosen or "none"
    return DeviceInfo(configured, available, chosen, name)


def check_device(info: DeviceInfo) -> Check:
    present = ", ".join(d for d, ok in info.available.items() if ok)
    details = {"configured": info.configured, "available": info.available, "chosen": info.chosen}
    if info.chosen is None:
        return Check(
            "device", FAIL, f"device = {info.configured!r} but this machine has only: {present}",
            hint=f'set device = "auto" (or one of: {present}) in the config, or install a torch build '
            f"with {info.configured} support",
            details=details,
        )
    how = f"auto -> {info.chosen}" if info.configured == "auto" else info.chosen
    summary = f"{how} ({info.name}); available: {present}"
    if info.chosen == "cpu" and (info.available["cuda"] or info.available["mps"]):
        return Check(
            "device", WARN, summary,
            hint='an accelerator is present but unused: set device = "auto"', details=details,
        )
    return Check("device", PASS, summary, details=details)


def _meminfo_available(path: Path = Path("/proc/meminfo")) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes left under a cgroup v2 memory limit, None when unlimited or not in a cgroup v2."""
    try:
        limit = (root / "memory.max").read_text().strip()
        used = int((root / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    if limit == "max":
        return None
    try:
        return max(int(limit) - used, 0)
    except ValueError:
        return None


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def available_memory(device: str) -> tuple[int | None, str]:
    """(bytes a new training process could use on ``device``, where the number comes from)."""
    if device == "cuda":
        free, _total = torch.cuda.mem_get_info()
        return int(free), "free memory of CUDA device 0"
    host = _meminfo_available()
    source = "MemAvailable in /proc/meminfo"
    if host is None:
        host, source = _physical_memory(), "physical memory"
    room = _cgroup_room()
    if room is not None and (host is None or room < host):
        host, source = room, "room under the cgroup memory limit"
    if device == "mps":
        source += " (unified memory shared with the GPU)"
    return host, source
