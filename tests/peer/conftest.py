"""Fixtures for multi-process peer tests: every process started here is killed and reaped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from peer_procs import Procs


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    p = Procs(tmp_path)
    try:
        yield p
    finally:
        p.reap_all()
