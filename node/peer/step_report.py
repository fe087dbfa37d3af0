"""What one turn of the training loop came to, as a type: applied, left for a resync, or abandoned.

:class:`Applied` carries exactly the fields of the ``step`` event (node/peer/output.py), in the event's
order: tests, ``swarm`` and the benches read them by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

import trio
from distro_node.protocol.messages import InclusionList

from .announcements import AnnouncementLog
from .bans import PeerBans, RoundScores
from .output import Output, step_text
from .payloads import ByteCounters
from .telemetry import Telemetry


@dataclass(frozen=True)
class Applied:
    step: int
    loss: float | None  # None: we applied the step without computing it (catching up)
    included: int
    roster: int
    self_included: bool
    warming: int
    leader: str
    epoch: int
    sent_bytes: int
    recv_bytes: int
    recv_relayed_bytes: int  # of recv_bytes, what came over relayed connections
    payload_bytes: int
    overlapped: bool
    round_s: float
    step_s: float
    wait_s: float
    phases: Mapping[str, float]  # rounded, as printed; the metrics take the unrounded phases
    weights_hash: str
    agreement_min: float | None
    banned: int

    def event_fields(self) -> dict[str, object]:
        """The ``step`` event's fields (a copy: the event printer may not change the report)."""
        row: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        row["phases"] = dict(self.phases)
        return row


@dataclass(frozen=True)
class Resync:
    """The round machine asked for a resync before ``step`` was decided; the loop resyncs and goes on."""

    step: int


@dataclass(frozen=True)
class Abandoned:
    """A stop was requested and ``step`` was not decided within the leave budget; the loop ends."""

    step: int


StepReport = Applied | Resync | Abandoned


@dataclass(frozen=True)
class AppliedStep:
    """The facts of one applied step, as the step runner knows them (trio times in seconds)."""

    step: int
    loss: float | None
    decided: InclusionList
    roster: int
    payload_bytes: int
    overlapped: bool
    started: float
    announced: float
    decided_at: float
    phases: Mapping[str, float]  # unrounded seconds by phase
    weights_hash: bytes
    scored: RoundScores
    own_hash: bytes | None  # the weights hash we announced for this step (None: we did not compute it)


class StepReporter:
    """Turns an applied step into its :class:`Applied` report, its metrics and its ``step`` event."""

    def __init__(self, *, self_id: str, out: Output, telemetry: Telemetry | None,
                 announcements: AnnouncementLog, counters: ByteCounters, bans: PeerBans) -> None:
        self._self_id = self_id
        self._out = out
        self._telemetry = telemetry
        self._announcements = announcements
        self._counters = counters
        self._bans = bans

    def publish(self, facts: AppliedStep) -> Applied:
        entries = facts.decided.entries
        others = (p for p, _ in entries if p != self._self_id)
        last = self._announcements.last_arrival(facts.step, others, facts.announced)
        report = Applied(
            step=facts.step, loss=facts.loss, included=len(entries), roster=facts.roster,
            self_included=any(p == self._self_id for p, _ in entries),
            warming=len(facts.decided.warming), leader=facts.decided.leader, epoch=facts.decided.epoch,
            sent_bytes=self._counters.sent, recv_bytes=self._counters.received,
            recv_relayed_bytes=self._counters.received_relayed,
            payload_bytes=facts.payload_bytes, overlapped=facts.overlapped,
            round_s=round(facts.decided_at - facts.announced, 4),
            step_s=round(trio.current_time() - facts.started, 4),
            wait_s=round(min(last, facts.decided_at) - facts.announced, 4),
            phases={k: round(v, 4) for k, v in facts.phases.items()}, weights_hash=facts.weights_hash.hex(),
            agreement_min=facts.scored.agreement_min, banned=len(self._bans.keeper.banned()),
        )
        t = self._telemetry
        if t is not None:
            t.step(report.step, report.loss, facts.phases, sent_total=report.sent_bytes,
                   received_total=report.recv_bytes, relayed_total=report.recv_relayed_bytes,
                   step_seconds=report.step_s, peers=report.roster,
                   complete=report.included >= report.roster)
            t.agreement(self._announcements.by_hash(report.step), facts.own_hash, self._self_id)
        row = report.event_fields()
        self._out.emit("step", step_text(row), **row)
        return report
