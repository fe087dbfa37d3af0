"""Find or install Prometheus' own tools for the metrics tests.

Why the real tools: the Python client can render output that Prometheus then refuses (bad names, duplicate
families, wrong suffixes), and only ``promtool`` and the server itself are the judges of that. They come from
Debian's ``prometheus`` package; the install runs at most once per test session, only as root, and every
failure becomes a skip with the reason instead of an error, so the suite still runs on a developer laptop.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

import pytest

_APT_TIMEOUT = 600.0
_INSTALL_HINT = "install Debian's 'prometheus' package (apt-get install -y prometheus)"


@functools.cache
def _install_prometheus() -> str | None:
    """Install the package if its tools are missing; None on success, else why it could not be done."""
    if shutil.which("promtool") and shutil.which("prometheus"):
        return None
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return f"promtool/prometheus not found and not running as root: {_INSTALL_HINT}"
    if not shutil.which("apt-get"):
        return f"promtool/prometheus not found and apt-get is not available: {_INSTALL_HINT}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "prometheus"],
    ):
        try:
            done = subprocess.run(
                command, env=env, capture_output=True, text=True, timeout=_APT_TIMEOUT, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"{' '.join(command)} failed: {exc}"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return f"{' '.join(command)} exited with {done.returncode}: {' | '.join(tail)}"
    if not (shutil.which("promtool") and shutil.which("prometheus")):
        return "the 'prometheus' package installed but promtool/prometheus are still not on PATH"
    return None


def _require(tool: str) -> str:
    reason = _install_prometheus()
    if reason is not None:
        pytest.skip(reason)
    path = shutil.which(tool)
    if path is None:  # pragma: no cover - _install_prometheus checked both
        pytest.skip(f"{tool} not on PATH")
    return path


def require_promtool() -> str:
    """Path of ``promtool``, installing it if possible; skips the calling test otherwise."""
    return _require("promtool")


def require_prometheus() -> str:
    """Path of the ``prometheus`` server, installing it if possible; skips the calling test otherwise."""
    return _require("prometheus")
