"""Find or install Prometheus' own tools for the metrics tests.

Why the real tools: the Python client can render output that Prometheus then refuses (bad names, duplicate
families, wrong suffixes), and only ``promtool`` and the server itself are the judges of that. They come from
Debian's ``prometheus`` package, installed by node/testbed/debian.py when missing (once, as root only); a
failure becomes a skip with the reason instead of an error, so the suite still runs on a developer laptop.
"""

from __future__ import annotations

import shutil

import pytest
from distro_node.node.testbed.debian import install_missing


def _install_prometheus() -> str | None:
    return install_missing(("promtool", "prometheus"), "prometheus")


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
