"""Small helpers shared by the benchmark scripts in this folder.

Every result file carries the machine, versions, commit and command line it was produced with, because a
number without its context cannot be compared with a later run or with another machine's. The
payload builders live here so both benches cost and fuzz the very spec the DisTrO optimizer would send.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from distro_node.compression.payload import Header, Payload, PayloadSpec, SparseTensor

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"

# A plausible header: a 32-byte run id and a 52-character Ed25519 libp2p peer id, so the measured envelope
# overhead is what a real node pays, not the minimum a one-letter peer id would give.
RUN_ID = bytes(range(32))
PEER_ID = "12D3KooW" + "A" * 44
STEP = 25_000


class BenchError(RuntimeError):
    """A configuration did not complete: a peer failed, timed out, printed no result or an inconsistent one.

    One class for every bench, defined in the module they all import, so that a script's ``except
    BenchError`` catches what its helper modules raise.
    """


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def machine_info() -> dict[str, Any]:
    """Where and how a result was produced: enough to tell whether two result files are comparable."""
    import msgpack  # local: only the version is needed

    try:
        usable_cpus: int | None = len(os.sched_getaffinity(0))
    except AttributeError:  # not every platform has affinity masks
        usable_cpus = None
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "timestamp_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "msgpack": ".".join(str(p) for p in msgpack.version),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus,
        "torch_threads": torch.get_num_threads(),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "loadavg_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        # New network namespaces (the testbed's) inherit it: with bbr the testbed's 50 ms queues dropped
        # thousands of frames on home uplinks a run where cubic dropped none (docs/benchmarks.md).
        "tcp_congestion_control": _read_text("/proc/sys/net/ipv4/tcp_congestion_control"),
    }


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def write_json(path: Path, results: Mapping[str, Any]) -> Path:
    """Write ``results`` plus a ``machine`` section, through a temp file so that an interrupted run leaves
    no half-written result behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {**results, "machine": machine_info()}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


def rss_mb() -> float:
    """Resident set size of this process in MB (VmRSS), the figure threats.md caps; NaN off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return math.nan


def percentile(sorted_values: Sequence[float] | np.ndarray, q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (no interpolation: a real observed value)."""
    if len(sorted_values) == 0:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def distro_spec(
    model: torch.nn.Module | Iterable[tuple[str, torch.nn.Parameter]], **settings: Any
) -> PayloadSpec:
    """The PayloadSpec the DisTrO optimizer builds for ``model`` with ``settings`` over its defaults.

    Goes through the optimizer itself rather than re-deriving chunking and k clamping here, so the benches
    measure exactly what a node sends. A model on the meta device costs no memory: the optimizer's state is
    then allocated on meta too. Raises ValueError for settings the codecs cannot carry (e.g. ``enum`` at
    k=8 of 4096).
    """
    from distro_node.optimizer.config import DistroConfig
    from distro_node.optimizer.distro import DisTrO

    return DisTrO(model, DistroConfig(**settings)).spec()


def meta_model(preset_name: str) -> torch.nn.Module:
    """A preset's model on the meta device: parameter names and shapes without allocating weights."""
    from distro_node.node.model import Llama
    from distro_node.node.presets import preset

    with torch.device("meta"):
        return Llama(preset(preset_name), seed=None)


def header_for(spec: PayloadSpec, *, step: int = STEP, peer_id: str = PEER_ID) -> Header:
    return Header.of(spec, RUN_ID, step, peer_id)


def random_payload(spec: PayloadSpec, rng: np.random.Generator) -> Payload:
    """A valid random payload of ``spec``, cheap enough for a 1.2B-parameter spec.

    Indices are drawn one per stratum of ``chunk_numel // k`` positions (sorted and unique by construction)
    instead of a permutation per chunk, which would cost ``chunk_numel`` random numbers per chunk: for the
    byte count and the codec timings only the number of indices matters, not their distribution.
    """
    tensors: dict[str, SparseTensor] = {}
    for t in spec.tensors:
        values = torch.from_numpy(rng.standard_normal((t.n_chunks, t.k), dtype=np.float32))
        if t.dense:
            tensors[t.name] = SparseTensor(values=values)
            continue
        stride = t.chunk_numel // t.k
        idx = np.arange(t.k, dtype=np.int64) * stride + rng.integers(0, stride, size=(t.n_chunks, t.k))
        tensors[t.name] = SparseTensor(values=values, indices=torch.from_numpy(idx))
    return Payload(tensors=tensors)
