"""A failed resync is tried again until it works (node/peer/resync.py): a peer cut off from everyone heard
no message that would ask again, and gave up for good (issue 15). The sync itself is faked here."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import trio
from distro_node.node.peer import resync
from distro_node.node.peer.driver import Decisions
from distro_node.node.peer.output import Output
from distro_node.node.peer.resync import Resyncer, retry_delays
from distro_node.node.peer.state_sync import JoinError
from distro_node.protocol.consensus.actions import ResyncNeeded


class _Driver:
    def __init__(self) -> None:
        self.decisions = Decisions()
        self.machine = object()
        self.fed = 0

    def feed(self, event: Any) -> None:
        self.fed += 1


class _Intake:
    def __init__(self) -> None:
        self.held = 0

    def hold(self) -> None:
        self.held += 1

    def release(self) -> None:
        self.held -= 1


class _Trainer:
    weights_hash = b"\x01" * 32


class _Sync:
    trainer = _Trainer()


class _State:
    next_step = 7


def _resyncer(monkeypatch: pytest.MonkeyPatch, fails: int, stopping: list[bool]) -> tuple[Resyncer, Any]:
    calls = {"n": 0}

    async def fake_sync(ctx: object, *, genesis: bool) -> tuple[object, str]:
        calls["n"] += 1
        if calls["n"] <= fails:
            raise JoinError("no connected peers")
        return _State(), "faked"

    monkeypatch.setattr(resync, "sync_from_swarm", fake_sync)
    driver, intake, stream = _Driver(), _Intake(), io.StringIO()
    r = Resyncer(sync=_Sync(), driver=driver, intake=intake, out=Output("json", stream),  # type: ignore[arg-type]
                 stopping=lambda: stopping[0], delay=lambda n: 0.01)
    driver.decisions.resync = ResyncNeeded(3, "behind", None)
    return r, (calls, driver, intake, stream)


def test_a_failed_resync_is_retried_until_it_works(monkeypatch: pytest.MonkeyPatch) -> None:
    r, (calls, driver, intake, stream) = _resyncer(monkeypatch, fails=3, stopping=[False])
    state = trio.run(r.run)
    assert isinstance(state, _State) and calls["n"] == 4
    assert driver.fed == 1 and intake.held == 0 and not r.replacing
    events = [json.loads(line)["event"] for line in stream.getvalue().splitlines()]
    assert events == ["resync_failed", "resync_retry"] * 3 + ["resynced"]


def test_a_stopping_node_stops_retrying(monkeypatch: pytest.MonkeyPatch) -> None:
    r, (calls, driver, _intake, _stream) = _resyncer(monkeypatch, fails=100, stopping=[True])
    assert trio.run(r.run) is None
    assert calls["n"] == 1 and driver.fed == 0


def test_retry_delays_double_up_to_the_cap() -> None:
    delay = retry_delays(2.0, 30.0)
    assert [delay(n) for n in range(6)] == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert delay(10_000) == 30.0
