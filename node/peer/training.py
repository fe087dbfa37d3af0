"""The training loop: one step at a time, in sequential or overlapped order, until told to stop.

Per step s (sequential order): compute and encode our payload, store it, announce it (payload hash, size,
and the hash of the weights it was computed on), then wait until the round machine hands out
``ApplyInclusionList`` for s (payloads are fetched and validated as the machine asks), and apply exactly
the listed payloads. The machine decides; this module only carries out its decisions.

Overlapped order (the run's DisTrO settings say ``overlapped: true``; every peer reads it from the manifest,
so all agree): right after announcing step s, the compute of step s + 1 (pre_forward, forward/backward,
post_backward, prepare) starts in the worker thread while the round of s (gossip, fetches, agreement) goes on
in trio; apply(s, decided payloads of s) waits for that compute, then step s + 1 is announced at once. That is
``optimizer/base.py``'s overlapped order (apply(s - 1, ...) after prepare(s)), so a step costs about
max(compute, communication) instead of their sum. Weights change only in ``apply``, which every replica calls
with the same lists in the same order, so replicas stay bit-identical whatever each one computed ahead.
The look-ahead is skipped (one step runs in sequential order) where a step boundary must hold no prepared
next step: before a periodic checkpoint, at the last step, once a stop is requested.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import trio
from distro_node.protocol.consensus import RoundMachine
from distro_node.protocol.membership import SyncState

from .announcer import Announcer
from .changes import ChangeSignal
from .checkpointing import Checkpointer
from .data_feed import DataFeed
from .driver import Decisions
from .leaving import StopRequest
from .lookahead import Ahead, LookAhead
from .output import Output
from .payloads import DecodedPayloads
from .resync import Resyncer
from .scoring import RoundScorer
from .snapshots import SnapshotDesk
from .step_report import Abandoned, Applied, AppliedStep, Resync, StepReport, StepReporter
from .trainer import Trainer

MAX_EXTRA_ROUNDS = 2  # rounds a leaving peer stays to lead (see TrainingLoop._should_stay_for)


@dataclass(frozen=True)
class _Computed:
    """Our side of a step before the round: what we announced, and the look-ahead started meanwhile."""

    loss: float | None
    own_hash: bytes | None
    payload_bytes: int
    ahead: Ahead | None


class StepRunner:
    """Runs one step: compute (or take the look-ahead), announce, wait for the decision, apply, score."""

    def __init__(
        self,
        *,
        machine: RoundMachine,
        decisions: Decisions,
        trainer: Trainer,
        announcer: Announcer,
        lookahead: LookAhead,
        scorer: RoundScorer,
        reporter: StepReporter,
        decoded: DecodedPayloads,
        stop: StopRequest,
        checkpointer: Checkpointer,
        changes: ChangeSignal,
        out: Output,
        steps: int | None,
        compute_limit: trio.CapacityLimiter,
        feed: DataFeed | None = None,
    ) -> None:
        self._machine = machine
        self._feed = feed  # fetched data: wait until the step's shards are held verified
        self._decisions = decisions
        self._trainer = trainer
        self._announcer = announcer
        self._lookahead = lookahead
        self._scorer = scorer
        self._reporter = reporter
        self._decoded = decoded
        self._stop = stop
        self._checkpointer = checkpointer
        self._changes = changes
        self._out = out
        self._steps = steps  # None: no step limit
        self._compute_limit = compute_limit

    async def step(self, s: int) -> StepReport:
        started = trio.current_time()
        phases: dict[str, float] = {}  # seconds by phase, for the step event and the metrics
        ours = await self._compute_and_announce(s, phases)
        announced = trio.current_time()
        unapplied = await self._wait_decided(s, ours.ahead)
        if unapplied is not None:
            return unapplied
        action = self._decisions.applies.pop(s)
        decided_at = trio.current_time()
        payloads = self._decoded.listed(s, action.inclusion_list.entries)
        t0 = time.perf_counter()
        new_hash = await trio.to_thread.run_sync(self._trainer.apply, s, payloads,
                                                 limiter=self._compute_limit)
        phases["apply"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        scored = await self._scorer.score(s, payloads, action.inclusion_list.evidence)
        phases["score"] = time.perf_counter() - t0
        phases["round"] = decided_at - announced
        self._lookahead.keep(ours.ahead)
        self._decoded.forget_before(s)
        return self._reporter.publish(AppliedStep(
            step=s, loss=ours.loss, decided=action.inclusion_list,
            roster=len(self._machine.roster.eligible()), payload_bytes=ours.payload_bytes,
            overlapped=self._trainer.overlapped, started=started, announced=announced, decided_at=decided_at,
            phases=phases, weights_hash=new_hash, scored=scored, own_hash=ours.own_hash))

    async def _compute_and_announce(self, s: int, phases: dict[str, float]) -> _Computed:
        """Our payload of ``s``, unless the swarm already decided ``s`` without us (we are catching up)."""
        ready = self._lookahead.take(s)
        if self._machine.next_step > s:
            return _Computed(None, None, 0, None)
        if ready is None and self._feed is not None:
            t0 = time.perf_counter()
            await self._feed.ready(s)
            phases["data"] = time.perf_counter() - t0
        done = ready if ready is not None else await trio.to_thread.run_sync(
            self._trainer.compute, s, limiter=self._compute_limit)
        phases.update(done.seconds)
        own_hash = self._trainer.weights_hash
        ahead = None
        if self._trainer.overlapped and self._may_run_ahead(s + 1):
            # Started before the announcement so that everything the round waits on (including the
            # benchmark's comm delay) runs while the next gradient is computed.
            ahead = self._lookahead.start(s + 1)
        payload_bytes = await self._announcer.announce(s, done, phases)
        return _Computed(done.loss, own_hash, payload_bytes, ahead)

    async def _wait_decided(self, s: int, ahead: Ahead | None) -> Resync | Abandoned | None:
        """Until the machine decided ``s`` (None), asked for a resync, or a stop ran out of time."""
        stop = self._stop
        try:
            while s not in self._decisions.applies:
                if self._decisions.resync is not None:
                    return Resync(s)
                if stop.requested:
                    remaining = stop.remaining()
                    if remaining <= 0:
                        self._out.emit("abandoned", f"left step {s} undecided", step=s)
                        return Abandoned(s)
                    with trio.move_on_after(remaining):
                        await self._changes.wait()
                else:
                    await self._changes.wait()
        finally:
            if ahead is not None:
                # Nothing else may touch the model while the worker thread computes on it (resync loads
                # weights, apply updates them); a compute is bounded, so this wait is too.
                with trio.CancelScope(shield=True):
                    await ahead.done.wait()
        return None

    def _may_run_ahead(self, step: int) -> bool:
        """Whether to compute ``step`` during the round before it. Not past the last step, not once we are
        leaving (the work would be thrown away), and not for a step right after a checkpoint boundary: a
        checkpoint must hold the optimizer state of a boundary, not a prepared but never sent step."""
        if self._steps is not None and step >= self._steps:
            return False
        if self._stop.requested or self._decisions.resync is not None:
            return False
        return not self._checkpointer.is_boundary(step)


class BoundaryWitness(Protocol):
    """Signs the round state at step boundaries (node/peer/trust_chain.py ``ChainKeeper``)."""

    def at_boundary(self, state: SyncState) -> None: ...


class TrainingLoop:
    """Steps until the step limit or a stop, with resyncs, snapshot cuts and periodic checkpoints between."""

    def __init__(
        self,
        *,
        self_id: str,
        machine: RoundMachine,
        runner: StepRunner,
        resyncer: Resyncer,
        lookahead: LookAhead,
        snapshots: SnapshotDesk,
        checkpointer: Checkpointer,
        stop: StopRequest,
        steps: int | None,
        start_step: int,
        chain: BoundaryWitness | None = None,
    ) -> None:
        self._self_id = self_id
        self._machine = machine
        self._runner = runner
        self._resyncer = resyncer
        self._lookahead = lookahead
        self._snapshots = snapshots
        self._checkpointer = checkpointer
        self._stop = stop
        self._steps = steps
        self.applied = start_step  # the step our weights are at (next to apply)
        self._chain = chain  # a permissioned run's chain keeper: attests the round state at boundaries

    async def run(self) -> None:
        extra_rounds = 0
        while True:
            state = await self._resyncer.run()
            if state is not None:
                self._lookahead.keep(None)  # computed on the weights we just replaced
                self.applied = state.next_step
            s = self.applied
            if self._steps is not None and s >= self._steps:
                break
            if self._stop.requested:
                if not self._should_stay_for(s) or extra_rounds >= MAX_EXTRA_ROUNDS:
                    break
                extra_rounds += 1
            if self._chain is not None and self._machine.next_apply_step == s:
                self._chain.at_boundary(self._machine.export_state())
            await self._snapshots.cut(s)
            report = await self._runner.step(s)
            if isinstance(report, Abandoned):
                break  # stop requested and the round did not close in time
            if isinstance(report, Applied):
                self.applied = s + 1
                if self._checkpointer.is_boundary(self.applied):
                    await self._checkpointer.save(self.applied, "periodic")

    def _should_stay_for(self, step: int) -> bool:
        """A leaver that would lead the next round stays for it: an absent epoch-0 leader costs every other
        peer a leader timeout, while staying costs us one round (bounded by the leave budget)."""
        if self._stop.remaining() <= 0:
            return False
        order = self._machine.leader_order(step)
        return bool(order) and order is not None and order[0] == self._self_id
