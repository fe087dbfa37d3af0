"""node/testbed/debian.py: installs from several processes take turns (the suite's workers collect the same
test modules at once, and a second apt-get would fail on dpkg's lock, skipping tests that should run)."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import pytest
from distro_node.node.testbed import debian

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")


def test_an_install_waits_for_the_lock_and_then_finds_the_tools_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian, "_LOCK", tmp_path / "apt.lock")
    monkeypatch.setattr(debian, "_LOCK_POLL_S", 0.01)
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(debian, "_apt_install", lambda tools, package: ran.append(tools))
    result: list[str | None] = []
    with (tmp_path / "apt.lock").open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process installing
        # "sh" is on PATH: once it may look, the waiting install finds the tool there and runs no apt-get.
        waiter = threading.Thread(target=lambda: result.append(debian._install.__wrapped__(("sh",), "dash")))
        waiter.start()
        waiter.join(timeout=0.5)
        assert waiter.is_alive() and result == [], "the install did not wait for the lock"
    waiter.join(timeout=10)
    assert not waiter.is_alive() and result == [None] and ran == []
