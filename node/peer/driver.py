"""The one executor of the round machine's actions, and the holder of the machine itself.

The round machine (protocol/consensus/) is pure: events in, actions out. Everything that feeds it goes
through :meth:`RoundDriver.feed` or hands its actions to :meth:`RoundDriver.handle`, so every action kind is
carried out in one place whoever caused it: publishing goes to the ordered outbox, fetches to the fetcher
(one task each), and what the training loop must act on (a decided list, a resync, the peers a list left
out) is recorded in :class:`Decisions`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence

import trio
from distro_node.protocol.consensus import (
    Action,
    ApplyInclusionList,
    FetchPayload,
    ListConflict,
    MembershipChanged,
    PeerMissed,
    Penalize,
    Publish,
    ResyncNeeded,
    RoundMachine,
    RoundStalled,
)

from .changes import ChangeSignal
from .fetcher import Fetcher, FetchResult
from .outbox import Outbox
from .output import Output

logger = logging.getLogger(__name__)

RoundEvent = Callable[[RoundMachine, float], Sequence[Action]]


class Decisions:
    """What the machine decided that the training loop carries out, in its own time."""

    def __init__(self) -> None:
        self.applies: dict[int, ApplyInclusionList] = {}
        self.resync: ResyncNeeded | None = None
        # step -> active roster peers its decided list left out while it was their turn (under a bound K on
        # inclusion, the others only wait: protocol/consensus/inclusion_bound.py)
        self._missed: dict[int, list[str]] = {}

    def take_resync(self) -> ResyncNeeded | None:
        request, self.resync = self.resync, None
        return request

    def note_missed(self, step: int, peer: str) -> None:
        self._missed.setdefault(step, []).append(peer)

    def take_missed(self, step: int) -> list[str]:
        """The peers the decided list of ``step`` left out; older records are dropped."""
        for old in [k for k in self._missed if k < step]:
            del self._missed[old]
        return self._missed.pop(step, [])


class RoundDriver:
    def __init__(self, *, out: Output, outbox: Outbox, fetcher: Fetcher, changes: ChangeSignal,
                 nursery: trio.Nursery) -> None:
        self._out = out
        self._outbox = outbox
        self._fetcher = fetcher
        self._changes = changes
        self._nursery = nursery
        self.machine: RoundMachine | None = None  # None until start-up found our state
        self.decisions = Decisions()

    def start(self, machine: RoundMachine) -> None:
        self.machine = machine

    def roster_ids(self) -> Collection[str]:
        """The run's members as our round state lists them (none before start-up): gossip keeps them first."""
        return () if self.machine is None else self.machine.roster.peers.keys()

    def feed(self, event: RoundEvent) -> None:
        """Give the machine one event (nothing happens before it runs) and carry out what it answers."""
        m = self.machine
        if m is not None:
            self.handle(event(m, trio.current_time()))

    def handle(self, actions: Sequence[Action]) -> None:
        decisions = self.decisions
        if actions:
            logger.debug("round actions: %s", actions)
        for a in actions:
            if isinstance(a, FetchPayload):
                self._nursery.start_soon(self._fetch, a)
            elif isinstance(a, Publish):
                self._outbox.publish(a.message)
            elif isinstance(a, ApplyInclusionList):
                decisions.applies[a.step] = a
            elif isinstance(a, ResyncNeeded):
                decisions.resync = a
                self._out.emit("resync_needed", f"resync needed at step {a.step}: {a.reason}", step=a.step,
                               reason=a.reason)
            elif isinstance(a, PeerMissed):
                decisions.note_missed(a.step, a.peer_id)
            elif isinstance(a, MembershipChanged):
                self._out.emit("membership", f"peer {a.peer_id[-8:]} {a.change} at step {a.step}",
                               step=a.step, peer=a.peer_id, change=a.change)
            elif isinstance(a, Penalize | ListConflict | RoundStalled):
                self._out.emit("fault", f"{type(a).__name__}: {a}", kind=type(a).__name__, detail=str(a))
        if actions:
            self._changes.bump()

    async def _fetch(self, a: FetchPayload) -> None:
        m = self.machine
        if m is None:
            return
        result = await self._fetcher.fetch(a)
        if result is None:
            return
        report = {FetchResult.VALID: m.on_payload_validated, FetchResult.INVALID: m.on_payload_invalid,
                  FetchResult.FAILED: m.on_payload_failed, FetchResult.DENIED: m.on_payload_failed}[result]
        now = trio.current_time()
        self.handle(report(a.step, a.peer_id, a.payload_hash, now))
        if result is FetchResult.DENIED:  # its author withholds it: an epoch it leads is left at once
            self.handle(m.on_payload_denied(a.step, a.peer_id, now))

    async def run_timer(self) -> None:
        """Wake the machine for its deadlines (at least every 0.2 s)."""
        while True:
            m = self.machine
            now = trio.current_time()
            wake = m.next_wakeup() if m is not None else None
            delay = 0.2 if wake is None else min(0.2, max(0.0, wake - now))
            await trio.sleep(delay)
            self.feed(lambda machine, t: machine.on_tick(t))
