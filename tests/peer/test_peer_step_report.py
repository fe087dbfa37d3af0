"""The training loop's typed step result: the ``step`` event keeps its field names and order, and the
round decisions the loop reads are kept as the machine gave them."""

from __future__ import annotations

import json

import pytest
from distro_node.node.peer.driver import Decisions
from distro_node.node.peer.output import Output, step_text
from distro_node.node.peer.step_report import Abandoned, Applied, Resync, StepReport

# The `step` event's fields as the daemon printed them before the result was typed (tests, `swarm` and the
# benches read them by name; the order is the JSON line's).
EVENT_FIELDS = ["step", "loss", "included", "roster", "self_included", "warming", "leader", "epoch",
                "sent_bytes", "recv_bytes", "recv_relayed_bytes", "payload_bytes", "overlapped", "round_s",
                "step_s", "wait_s",
                "phases", "weights_hash", "agreement_min", "banned"]


def _applied() -> Applied:
    return Applied(step=7, loss=2.5, included=3, roster=4, self_included=True, warming=1, leader="p1",
                   epoch=0, sent_bytes=10, recv_bytes=20, recv_relayed_bytes=0, payload_bytes=5,
                   overlapped=False, round_s=0.5, step_s=1.25,
                   wait_s=0.25, phases={"compute": 0.5, "apply": 0.125}, weights_hash="ab" * 32,
                   agreement_min=None, banned=0)


def test_applied_event_has_the_daemon_fields_in_order() -> None:
    row = _applied().event_fields()
    assert list(row) == EVENT_FIELDS
    assert "step     7  loss 2.5000  peers 3/4" in step_text(row)


def test_applied_event_line_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    row = _applied().event_fields()
    Output("json").emit("step", step_text(row), **row)
    line = json.loads(capsys.readouterr().out)
    assert list(line) == ["event", "t", *EVENT_FIELDS]
    assert line["phases"] == {"compute": 0.5, "apply": 0.125}


def test_step_report_is_one_of_three_kinds() -> None:
    reports: list[StepReport] = [_applied(), Resync(8), Abandoned(9)]
    assert [type(r).__name__ for r in reports] == ["Applied", "Resync", "Abandoned"]


def test_missed_peers_are_taken_once_and_older_steps_dropped() -> None:
    d = Decisions()
    d.note_missed(3, "a")
    d.note_missed(4, "b")
    d.note_missed(4, "c")
    assert d.take_missed(4) == ["b", "c"]
    assert d.take_missed(3) == []  # dropped when step 4 was taken
    assert d.take_missed(4) == []
