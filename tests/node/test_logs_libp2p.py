"""py-libp2p's log records go through our one handler (JSON when asked), not Python's last-resort plain
lines; its reports of failures our code already handles as exceptions are dropped unless debugging."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from distro_node.node.logs import configure_logging


@pytest.fixture
def json_stderr() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = configure_logging("info", "json", stream)
    yield stream
    logging.getLogger().removeHandler(handler)


def test_libp2p_errors_arrive_as_json_through_our_handler(json_stderr: io.StringIO) -> None:
    logging.getLogger("libp2p.network.swarm").error("something py-libp2p found wrong")
    lines = [json.loads(line) for line in json_stderr.getvalue().splitlines()]
    assert {"event": "log", "level": "error", "logger": "libp2p.network.swarm",
            "message": "something py-libp2p found wrong"}.items() <= lines[-1].items()


def test_dial_failures_we_handle_are_not_reported_twice(json_stderr: io.StringIO) -> None:
    logging.getLogger("libp2p.transport.tcp.tcp").error("Failed to open TCP stream: %s", "refused")
    logging.getLogger("libp2p.host.basic_host").error("Failed to open stream to peer X:\n lock stats")
    assert json_stderr.getvalue() == ""
