"""A discrete-event simulation of N round state machines talking through a fake network.

Deterministic for a given seed: one event heap ordered by (time, sequence), one ``random.Random``. The
network models what the real transport does: announcements, heartbeats and goodbyes are broadcast once
(each copy may be delayed or dropped); proposals, votes and statuses are flooded like gossipsub (every
replica forwards such a message the first time it sees it, each copy subject to loss); payloads are pulled
from any live, reachable holder. Partitions drop every message crossing the cut. Replicas "train" by
hashing: applying a list sets weights = sha256(weights, list digest), so any replica that applies a
different list ends with a different weights hash.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from distro_node.protocol.consensus.actions import (
    Action,
    ApplyInclusionList,
    FetchPayload,
    Publish,
    ResyncNeeded,
)
from distro_node.protocol.consensus.config import RoundConfig
from distro_node.protocol.consensus.machine import RoundMachine
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.messages import Announcement, Certificate, Goodbye, InclusionList, Status, Vote

RUN_ID = hashlib.sha256(b"distro-node test run").digest()
GENESIS_WEIGHTS = hashlib.sha256(b"genesis weights").digest()
# The machine trusts the gossip door (protocol/codec.py) to have checked every authorship signature, so its
# tests need only well-formed ones (real signatures: tests/protocol/test_authorship.py).
SIG = bytes(64)


def unsigned(statement: bytes) -> bytes:
    """The machine's vote signer in these tests: well-formed, never checked (the door is not modelled)."""
    return SIG


def test_config(**overrides: Any) -> RoundConfig:
    settings: dict[str, Any] = {
        "run_id": RUN_ID,
        "collect_timeout": 2.0,
        "leader_timeout": 1.0,
        "liveness_timeout": 3.0,
        "warmup_rounds": 2,
        "max_missed_rounds": 3,
        "reannounce_interval": 1.0,
        "fetch_retry_interval": 0.5,
        "apply_timeout": 10.0,
        "resync_cooldown": 2.0,
    }
    settings.update(overrides)
    return RoundConfig(**settings)


test_config.__test__ = False  # type: ignore[attr-defined]  # not a pytest test despite the name


def payload_hash(peer: str, step: int, variant: int = 0) -> bytes:
    return hashlib.sha256(f"{peer}/{step}/{variant}".encode()).digest()


@dataclass
class Replica:
    peer_id: str
    machine: RoundMachine
    weights: bytes = GENESIS_WEIGHTS
    alive: bool = True
    silent: bool = False  # alive (heartbeats) but never announces
    serves: bool = True  # hands out the payloads it holds
    equivocate: bool = False
    computing: bool = False
    announced_step: int = -1
    applied: dict[int, bytes] = field(default_factory=dict)
    applied_lists: dict[int, InclusionList] = field(default_factory=dict)
    decided_at: dict[int, float] = field(default_factory=dict)
    holds: set[tuple[str, bytes]] = field(default_factory=set)
    seen: set[Any] = field(default_factory=set)  # flooded messages already forwarded
    actions: list[tuple[float, Action]] = field(default_factory=list)
    resyncs: list[tuple[float, str]] = field(default_factory=list)
    # step -> peers that get our published list before we crash (the rest never do)
    crash_on_publish: dict[int, set[str]] = field(default_factory=dict)
    weights_fault_at: int | None = None  # corrupt our weights right before computing this step

    def actions_of(self, kind: type) -> list[Any]:
        return [a for _, a in self.actions if isinstance(a, kind)]


class Swarm:
    def __init__(
        self,
        peer_ids: Iterable[str],
        *,
        seed: int = 0,
        config: RoundConfig | None = None,
        delay: tuple[float, float] = (0.01, 0.05),
        drop: float = 0.0,
        list_drop: float = 0.0,
        compute: tuple[float, float] = (0.2, 0.4),
        tick: float = 0.05,
        heartbeat: float = 0.5,
        steps: int = 10,
    ) -> None:
        self.ids = sorted(peer_ids)
        self.rng = random.Random(seed)
        self.config = config or test_config()
        self.delay = delay
        self.drop = drop
        self.list_drop = list_drop
        self.compute = compute
        self.tick_interval = tick
        self.heartbeat_interval = heartbeat
        self.steps = steps
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.groups: dict[str, int] | None = None
        self.events = 0
        state = SyncState(next_step=0, roster=Roster.genesis(self.ids))
        self.replicas: dict[str, Replica] = {}
        for peer in self.ids:
            self._add(Replica(peer, RoundMachine(self.config, peer, state, self.now, unsigned)))

    # ------------------------------------------------------------ scheduling

    def at(self, time: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (time, next(self._seq), fn))

    def run(self, until: float, max_events: int = 400_000) -> None:
        while self._queue and self._queue[0][0] <= until:
            time, _, fn = heapq.heappop(self._queue)
            self.now = max(self.now, time)
            fn()
            self.events += 1
            if self.events > max_events:
                raise RuntimeError("simulation did not settle: event budget exhausted")
        self.now = max(self.now, until)

    def run_until_applied(self, step: int, limit: float, peers: Iterable[str] | None = None) -> None:
        """Run in small increments until every listed live replica applied ``step`` (bounded by ``limit``)."""
        targets = [self.replicas[p] for p in (peers or self.ids)]
        while self.now < limit:
            if all(step in r.applied for r in targets if r.alive):
                return
            self.run(self.now + 0.25)

    # ------------------------------------------------------------ membership and faults

    def _add(self, replica: Replica) -> None:
        self.replicas[replica.peer_id] = replica
        self.at(self.now + self.rng.uniform(0, self.tick_interval), lambda: self._tick(replica))
        self.at(self.now + self.rng.uniform(0, self.heartbeat_interval), lambda: self._heartbeat(replica))
        self.at(self.now, lambda: self._maybe_compute(replica))

    def join(self, peer: str, donor: str) -> Replica:
        """A newcomer syncs state and weights from ``donor`` and starts taking part."""
        d = self.replicas[donor]
        replica = Replica(peer, RoundMachine(self.config, peer, d.machine.export_state(), self.now, unsigned))
        replica.weights = d.weights
        self.ids = sorted([*self.ids, peer])
        self._add(replica)
        return replica

    def recover(self, peer: str, donor: str) -> None:
        """A crashed peer restarts from a donor's state and weights (its history of applied lists is kept,
        so the agreement check still covers what it applied before the crash)."""
        r, d = self.replicas[peer], self.replicas[donor]
        state = d.machine.export_state()
        r.machine = RoundMachine(self.config, peer, state, self.now, unsigned)
        r.weights = d.weights
        r.alive, r.computing, r.seen = True, False, set()
        r.announced_step = state.next_step - 1
        self._add(r)

    def crash(self, peer: str) -> None:
        self.replicas[peer].alive = False

    def leave(self, peer: str) -> None:
        r = self.replicas[peer]
        self._broadcast(r, r.machine.make_goodbye())
        r.alive = False

    def partition(self, *groups: Iterable[str]) -> None:
        self.groups = {p: i for i, g in enumerate(groups) for p in g}

    def heal(self) -> None:
        self.groups = None

    def linked(self, a: str, b: str) -> bool:
        return self.groups is None or self.groups.get(a) == self.groups.get(b)

    # ------------------------------------------------------------ network

    def _send(self, src: Replica, dst: Replica, msg: Any, drop: float) -> None:
        if not self.linked(src.peer_id, dst.peer_id) or self.rng.random() < drop:
            return
        self.at(self.now + self.rng.uniform(*self.delay), lambda: self._deliver(src, dst, msg))

    def _broadcast(self, src: Replica, msg: Any, only: Iterable[str] | None = None) -> None:
        drop = self.list_drop if isinstance(msg, InclusionList | Vote | Status | Certificate) else self.drop
        if isinstance(msg, Goodbye):
            drop = 0.0
        for peer in only if only is not None else self.ids:
            if peer != src.peer_id:
                self._send(src, self.replicas[peer], msg, drop)

    def _deliver(self, src: Replica, dst: Replica, msg: Any) -> None:
        if not dst.alive or not self.linked(src.peer_id, dst.peer_id):
            return
        flooded = isinstance(msg, InclusionList | Vote | Status | Certificate)
        first = flooded and msg not in dst.seen
        if flooded:
            dst.seen.add(msg)
        self._handle(dst, dst.machine.on_message(msg, self.now))
        if first and dst.alive:
            self._broadcast(dst, msg)  # gossip forwarding

    def _fetch(self, r: Replica, a: FetchPayload) -> None:
        key = (a.peer_id, a.payload_hash)
        holders = [
            h for h in self.replicas.values()
            if h is not r and h.alive and h.serves and key in h.holds and self.linked(h.peer_id, r.peer_id)
        ]
        if holders:
            def done() -> None:
                if r.alive:
                    r.holds.add(key)
                    actions = r.machine.on_payload_validated(a.step, a.peer_id, a.payload_hash, self.now)
                    self._handle(r, actions)
            self.at(self.now + 2 * self.rng.uniform(*self.delay), done)
        else:
            def failed() -> None:
                if r.alive:
                    self._handle(r, r.machine.on_payload_failed(a.step, a.peer_id, a.payload_hash, self.now))
            self.at(self.now + 0.3, failed)

    # ------------------------------------------------------------ replica behaviour

    def _tick(self, r: Replica) -> None:
        if not r.alive:
            return
        self._handle(r, r.machine.on_tick(self.now))
        self.at(self.now + self.tick_interval, lambda: self._tick(r))

    def _heartbeat(self, r: Replica) -> None:
        if not r.alive:
            return
        self._broadcast(r, r.machine.make_heartbeat(r.weights))
        self.at(self.now + self.heartbeat_interval, lambda: self._heartbeat(r))

    def _maybe_compute(self, r: Replica) -> None:
        """Sequential training: compute step s only once everything before s is applied."""
        m = r.machine
        step = m.next_step
        if (not r.alive or r.silent or r.computing or step >= self.steps or step <= r.announced_step
                or m.next_apply_step != step):
            return
        r.computing = True
        self.at(self.now + self.rng.uniform(*self.compute), lambda: self._announce(r, step))

    def _announce(self, r: Replica, step: int) -> None:
        r.computing = False
        if not r.alive:
            return
        if r.machine.next_step != step or r.machine.next_apply_step != step:
            self._maybe_compute(r)  # the world moved on (resync) while we computed
            return
        if r.weights_fault_at == step:
            r.weights = hashlib.sha256(b"corrupted" + r.weights).digest()
        r.announced_step = step
        ann = Announcement(RUN_ID, step, r.peer_id, payload_hash(r.peer_id, step), 1000, r.weights, SIG)
        r.holds.add((r.peer_id, ann.payload_hash))
        self._handle(r, r.machine.on_local_announcement(ann, self.now))
        if r.equivocate:
            other = Announcement(RUN_ID, step, r.peer_id, payload_hash(r.peer_id, step, 1), 1000, r.weights,
                                 SIG)
            r.holds.add((r.peer_id, other.payload_hash))
            peers = [p for p in self.ids if p != r.peer_id]
            half = set(peers[: len(peers) // 2])
            # Everyone gets both (gossip floods), in opposite orders on each half.
            for peer in peers:
                first, second = (ann, other) if peer in half else (other, ann)
                self._send(r, self.replicas[peer], first, 0.0)
                later = self.now + self.delay[1]
                self.at(later, lambda p=peer, m=second: self._send(r, self.replicas[p], m, 0.0))
        else:
            self._broadcast(r, ann)

    def _handle(self, r: Replica, actions: list[Action]) -> None:
        for a in actions:
            r.actions.append((self.now, a))
            if isinstance(a, FetchPayload):
                self._fetch(r, a)
            elif isinstance(a, Publish) and isinstance(a.message, InclusionList):
                only = r.crash_on_publish.get(a.message.step)
                r.seen.add(a.message)
                self._broadcast(r, a.message, only=only)
                if only is not None:
                    r.alive = False
                    return
            elif isinstance(a, Publish):
                if not isinstance(a.message, Announcement):  # announcements are sent once, not flooded
                    r.seen.add(a.message)
                self._broadcast(r, a.message)
            elif isinstance(a, ApplyInclusionList):
                r.applied[a.step] = a.inclusion_list.digest()
                r.applied_lists[a.step] = a.inclusion_list
                r.decided_at.setdefault(a.step, self.now)
                r.weights = hashlib.sha256(r.weights + a.inclusion_list.digest()).digest()
            elif isinstance(a, ResyncNeeded):
                self._resync(r, a.reason)
        self._maybe_compute(r)

    def _resync(self, r: Replica, reason: str) -> None:
        """State sync from the most advanced live, reachable, fully applied peer, as the node would do."""
        donors = [
            d for d in self.replicas.values()
            if d is not r and d.alive and self.linked(d.peer_id, r.peer_id)
        ]
        if not donors:
            return
        donor = max(donors, key=lambda d: (d.machine.next_apply_step, d.peer_id))
        state = donor.machine.export_state()
        r.resyncs.append((self.now, reason))
        r.weights = donor.weights
        r.holds |= donor.holds
        r.announced_step = min(r.announced_step, state.next_step - 1)
        self._handle(r, r.machine.restore(state, self.now))

    # ------------------------------------------------------------ checks

    def disagreements(self) -> list[tuple[int, dict[str, bytes]]]:
        """Steps where two replicas applied different lists (must be empty)."""
        steps = sorted({s for r in self.replicas.values() for s in r.applied})
        bad = []
        for step in steps:
            by_peer = {r.peer_id: r.applied[step] for r in self.replicas.values() if step in r.applied}
            if len(set(by_peer.values())) > 1:
                bad.append((step, by_peer))
        return bad
