"""Namespace testbed tests: skipped unless this process can build network namespaces (root, ip, tc)."""

from __future__ import annotations

import pytest
from distro_node.node.testbed.netns import available


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    why = available()
    if why is None:
        return
    for item in items:
        if item.get_closest_marker("root") is not None:
            item.add_marker(pytest.mark.skip(reason=why))
