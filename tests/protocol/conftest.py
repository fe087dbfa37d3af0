"""Shared setup for the protocol tests.

Host factories live in ``distro_node.protocol.testing`` (importable from any test or benchmark without
relative imports from a conftest); this file only makes py-libp2p's own logging quiet enough to read
failures, since 0.8.1 logs expected stream resets at WARNING.
"""

from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _quiet_libp2p_logs() -> None:
    logging.getLogger("libp2p").setLevel(logging.ERROR)
