"""Namespace testbed tests: skipped unless this process can build network namespaces (root, ip, tc)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from distro_node.node.testbed.netns import available


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    why = available()
    if why is None:
        return
    for item in items:
        if item.get_closest_marker("root") is not None:
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    """Helper processes a test starts in its namespaces; each is killed by pid and reaped at teardown."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
