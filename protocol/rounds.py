"""The round state machine: decides, step after step, which payloads every honest replica aggregates.

Pure and deterministic: no clock, no randomness, no I/O. The driver passes ``now`` (any monotonic clock, in
seconds) into every call and carries out the returned actions (:mod:`.round_actions`). Time only moves
forward here: an earlier ``now`` than one already seen is treated as the latest one.

Rules (the reasons are in the docstrings of the functions that implement them):

* Round clock: a step's round starts at the first announcement or proposal seen for it, but not before the
  previous step was decided (``RoundState.anchor``). Announcements are collected until ``collect_timeout``.
* Leaders: the active roster ranked by sha256(run_id, step, peer) (:mod:`.leader_rank`). Epoch 0 belongs to
  the best-ranked peer, which proposes as soon as every live active peer's payload is validated, else at the
  collect deadline. If nothing is decided one ``leader_timeout`` after the deadline, epoch 1 starts and the
  next-ranked peer leads, and so on, cycling through the roster while the step stays undecided; epoch k
  lasts min(k, 4) leader timeouts (``round_state.epoch_length``), so a swarm whose gossip delays have grown
  still decides. An epoch whose leader said goodbye or has been silent for ``liveness_timeout`` (while most
  of the roster is heard from) is left at once (:meth:`RoundMachine._skip_absent_leaders`; epoch 0 once its
  leader would have proposed).
* Deciding (why votes): a list is decided once a strict majority of the active roster voted for it in one
  epoch. A rule based only on timeouts and ranks ("take the best list whose leader's turn has come") lets a
  partition's minority decide a list of its own whenever its fallback leader fetched a majority of payloads
  before the cut; the simulator in tests/protocol found exactly that split brain. So each step runs one
  single-decree Paxos instance: entering epoch e >= 1 a voter sends a ``Status`` (a promise not to vote in
  earlier epochs, plus its latest vote); the epoch's leader re-proposes the most recently voted list among
  a majority of statuses, or builds its own if none was voted; voters vote for the current epoch's
  proposal. Two majorities of the same roster always share a voter, so two different lists can never both
  be decided, whatever the delays, drops or partitions; timeouts only decide how fast progress is. A peer
  that hears of a later epoch from the roster jumps to it (``RoundState.catch_up``), which re-aligns
  replicas whose rounds started at different times.
* Quorum (partitions): besides the vote quorum, a list must include a strict majority of the active roster's
  payloads; a minority side decides nothing, stalls, republishes its announcement, and resyncs once it sees
  the majority ahead.
* Step policy: announcements for decided steps (stale) or more than ``max_future_steps`` ahead (future) are
  ignored and counted; a second, different announcement for the same (peer, step) is equivocation: the peer
  is penalised and excluded from that step (none of its payloads is included by an honest leader; a list
  from a leader who saw only one of them still includes at most one).
* Applying: a decided list is applied (in step order) once all its payloads are fetched and validated; then
  our own announced weights hash is compared to the majority of the included peers' hashes.
* Laggards: a replica that decided a step still answers statuses for it (its status carries its vote, and
  it re-proposes the decided list when it leads the asked epoch), so a peer that missed votes catches up.
* Bans (:meth:`RoundMachine.on_banned`): the driver scores peers from what every honest replica shares
  (decided lists and their payloads) and reports a ban with the first step it applies to. From that step on
  the machine does not wait for, fetch (before a decision) or propose the banned peer, included or warming,
  and refuses an epoch-0 proposal that lists it. Later epochs are not refused: their leader may be bound to
  re-propose a list others already voted for, and refusing that forever would stall the step. A banned
  peer stays in the roster until it has missed ``max_missed_rounds`` lists, like a crashed one.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from .leader_rank import leader_order
from .membership import LivenessView, Roster, RosterRules, SyncState
from .messages import Announcement, Goodbye, Heartbeat, InclusionList, Status, Vote, check_peer_id
from .round_actions import (
    Action,
    ApplyInclusionList,
    FetchPayload,
    ListConflict,
    MembershipChanged,
    PeerMissed,
    Penalize,
    PublishInclusionList,
    PublishStatus,
    PublishVote,
    Reannounce,
    ResyncNeeded,
    RoundStalled,
)
from .round_config import RoundConfig
from .round_state import RoundState, build_list, designated_leader, strict_majority

# Fixed counter names, so they can become metric labels.
COUNTERS: tuple[str, ...] = (
    "wrong_run",
    "stale_step",
    "future_step",
    "duplicate_announcement",
    "equivocation",
    "announcement_cap",
    "oversize_payload",
    "untracked_peer",
    "invalid_list",
    "list_cap",
    "duplicate_list",
    "list_equivocation",
    "vote_equivocation",
    "list_conflict",
    "below_quorum_list",
    "vote_cap",
    "unexpected_payload_event",
    "lists_published",
    "votes_cast",
    "rounds_decided",
    "rounds_applied",
    "rounds_stalled",
    "resyncs_requested",
    "banned_in_list",
)


class RoundInputError(ValueError):
    """The local caller (not a peer) passed something inconsistent, e.g. an own announcement for another
    peer id or two different own announcements for one step: a bug in the driver, so it raises.
    """


class RoundMachine:
    """One replica's view of the run's rounds. Drive it with the ``on_*`` methods; see the module docstring.

    Memory is bounded: rounds exist only from ``history_steps`` before the undecided step to
    ``max_future_steps`` after it, each with capped announcements, proposals and votes; peers are tracked
    up to ``max_tracked_peers``.
    """

    MAX_EPOCH_JUMP = 1000

    def __init__(self, config: RoundConfig, self_id: str, state: SyncState, now: float) -> None:
        check_peer_id("self_id", self_id)
        self.config = config
        self.self_id = self_id
        self._rules = RosterRules(
            warmup_rounds=config.warmup_rounds,
            max_missed_rounds=config.max_missed_rounds,
            max_peers=config.max_roster_peers,
            max_joiners_per_round=config.max_joiners_per_round,
        )
        self._now = float(now)
        self._leaving = False
        self._liveness = LivenessView(config.max_tracked_peers)
        self._counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self._last_resync: dict[str, float] = {}
        self._rounds: dict[int, RoundState] = {}
        self._rosters: dict[int, Roster] = {}
        self._banned: dict[str, int] = {}  # peer -> first step its ban applies to (bans are never lifted)
        self._refused: set[tuple[int, bytes]] = set()  # (step, digest) of lists refused for a banned peer
        self._frontier = 0
        self._applied_upto = 0
        self._reset(state)

    # ----------------------------------------------------------------- queries

    @property
    def next_step(self) -> int:
        """The first step without a decided list (the step the driver should be working on)."""
        return self._frontier

    @property
    def next_apply_step(self) -> int:
        """The first decided step not yet handed out with :class:`ApplyInclusionList`."""
        return self._applied_upto

    @property
    def roster(self) -> Roster:
        """The roster governing :attr:`next_step`."""
        return self._rosters[self._frontier]

    @property
    def counters(self) -> Mapping[str, int]:
        return MappingProxyType(self._counters)

    @property
    def liveness(self) -> LivenessView:
        return self._liveness

    def banned_at(self, step: int) -> frozenset[str]:
        """Peers whose ban applies to ``step``."""
        return frozenset(p for p, first in self._banned.items() if first <= step)

    def decided_list(self, step: int) -> InclusionList | None:
        rnd = self._rounds.get(step)
        return rnd.decided if rnd is not None else None

    def leader_order(self, step: int) -> tuple[str, ...] | None:
        """Leaders of ``step`` best first (epoch e belongs to entry e mod len), if its roster is known."""
        roster = self._rosters.get(step)
        return None if roster is None else leader_order(self.config.run_id, step, roster.eligible())

    def export_state(self) -> SyncState:
        """What a resyncing peer or joiner adopts from us, next to our weights.

        It describes the first step we have not applied (not the first undecided one), because that is the
        step our weights are at; decided but unapplied steps are simply decided again by the receiver's
        rounds or fetched as history.
        """
        return SyncState(next_step=self._applied_upto, roster=self._rosters[self._applied_upto])

    def make_heartbeat(self, weights_hash: bytes) -> Heartbeat:
        return Heartbeat(run_id=self.config.run_id, peer_id=self.self_id, step=self._frontier,
                         weights_hash=weights_hash)

    def make_goodbye(self) -> Goodbye:
        """Our goodbye; from now on we neither vote nor lead, so others may stop counting us."""
        self._leaving = True
        return Goodbye(run_id=self.config.run_id, peer_id=self.self_id, step=self._frontier)

    def next_wakeup(self) -> float | None:
        """Latest time by which :meth:`on_tick` should be called if nothing else arrives (None: no timer)."""
        cfg = self.config
        times: list[float] = []
        rnd = self._rounds.get(self._frontier)
        epoch = None if rnd is None else rnd.epoch(self._now, cfg.collect_timeout, cfg.leader_timeout)
        if rnd is not None and rnd.anchor is not None and rnd.decided is None and epoch is not None:
            deadline = rnd.anchor + cfg.collect_timeout
            times.append(deadline)
            nxt = rnd.next_epoch_at(epoch, cfg.collect_timeout, cfg.leader_timeout)
            if nxt is not None:
                times.append(nxt)
            if rnd.last_reannounce is not None:
                times.append(rnd.last_reannounce + cfg.reannounce_interval)
            order = self.leader_order(rnd.step)
            leader = designated_leader(order, epoch) if order else self.self_id
            seen = None if leader == self.self_id else self._liveness.last_seen(leader)
            if seen is not None:  # when this epoch's leader would count as dead (see _skip_absent_leaders)
                times.append(seen + cfg.liveness_timeout)
        for r in self._rounds.values():
            times += [at + cfg.fetch_retry_interval for at in r.fetch_requested_at.values()]
            if r.decided_at is not None and not r.applied:
                times.append(r.decided_at + cfg.apply_timeout)
        future = [t for t in times if t > self._now]
        return min(future) if future else None

    # ----------------------------------------------------------------- inputs: payloads

    def on_local_announcement(self, ann: Announcement, now: float) -> list[Action]:
        """Our own payload for ``ann.step`` exists (so it is validated); the transport announces it too."""
        self._tick(now)
        if ann.run_id != self.config.run_id or ann.peer_id != self.self_id:
            raise RoundInputError("own announcement must carry our run id and peer id")
        out: list[Action] = []
        rnd = self._round_for(ann.step)
        if rnd is None:
            return out
        if rnd.own is not None and rnd.own != ann:
            raise RoundInputError(f"a different own announcement for step {ann.step} already exists")
        rnd.own = ann
        rnd.announcements[self.self_id] = ann
        rnd.validated.add((self.self_id, ann.payload_hash))
        rnd.see(self._now)
        self._advance(out)
        return out

    def on_announcement(self, ann: Announcement, now: float) -> list[Action]:
        """A peer's (authenticated) announcement arrived over gossip."""
        self._tick(now)
        out: list[Action] = []
        if ann.run_id != self.config.run_id:
            self._count("wrong_run")
            return out
        if ann.peer_id == self.self_id:
            self._count("duplicate_announcement")  # our own message echoed back
            return out
        if not self._observe(ann.peer_id, ann.step):
            return out
        if ann.payload_size > self.config.max_payload_bytes:
            self._count("oversize_payload")
            out.append(Penalize(ann.peer_id, ann.step, "oversize"))
            return out
        rnd = self._rounds.get(ann.step)
        if rnd is not None and rnd.step < self._frontier:
            # Too late to count, but a second, different payload is still evidence of equivocation.
            self._count("stale_step")
            self._note_equivocation(rnd, ann, out)
            return out
        rnd = self._round_for(ann.step)
        if rnd is None:
            self._advance(out)  # a far-ahead peer may mean we are behind
            return out
        if ann.peer_id in rnd.announcements:
            self._note_equivocation(rnd, ann, out)
            return out
        if len(rnd.announcements) >= self.config.max_announcements_per_step:
            self._count("announcement_cap")
            return out
        rnd.announcements[ann.peer_id] = ann
        if ann.peer_id in self._governing_roster(ann.step):
            rnd.see(self._now)
        self._advance(out)
        return out

    def on_payload_validated(self, step: int, peer_id: str, payload_hash: bytes, now: float) -> list[Action]:
        """The transport fetched the bytes, checked the hash and the payload passed validation."""
        self._tick(now)
        out: list[Action] = []
        key = (peer_id, payload_hash)
        rnd = self._known_payload_round(step, key)
        if rnd is None:
            return out
        rnd.validated.add(key)
        rnd.fetch_requested_at.pop(key, None)
        self._advance(out)
        return out

    def on_payload_invalid(self, step: int, peer_id: str, payload_hash: bytes, now: float) -> list[Action]:
        """The bytes matched the announced hash but failed validation: the announcing peer is at fault."""
        self._tick(now)
        out: list[Action] = []
        key = (peer_id, payload_hash)
        rnd = self._known_payload_round(step, key)
        if rnd is None:
            return out
        rnd.invalid.add(key)
        rnd.validated.discard(key)
        rnd.fetch_requested_at.pop(key, None)
        out.append(Penalize(peer_id, step, "invalid_payload"))
        self._advance(out)
        return out

    def _known_payload_round(self, step: int, key: tuple[str, bytes]) -> RoundState | None:
        """The round a transport payload event belongs to, or None (counted) if we never asked for it."""
        rnd = self._rounds.get(step)
        if rnd is None or not rnd.payload_known(key):
            self._count("unexpected_payload_event")
            return None
        return rnd

    def on_payload_failed(self, step: int, peer_id: str, payload_hash: bytes, now: float) -> list[Action]:
        """No holder delivered the bytes (timeout, hash mismatch): retry after ``fetch_retry_interval``."""
        self._tick(now)
        out: list[Action] = []
        rnd = self._rounds.get(step)
        if rnd is None or (peer_id, payload_hash) not in rnd.fetch_requested_at:
            self._count("unexpected_payload_event")
            return out
        self._advance(out)
        return out

    # ----------------------------------------------------------------- inputs: agreement

    def on_inclusion_list(self, lst: InclusionList, now: float) -> list[Action]:
        """A leader's (authenticated) proposal arrived."""
        self._tick(now)
        out: list[Action] = []
        if lst.run_id != self.config.run_id:
            self._count("wrong_run")
            return out
        self._observe(lst.leader, None)
        digest = lst.digest()
        old = self._rounds.get(lst.step)
        if old is not None and old.decided is not None:
            self._on_decided_proposal(old, lst, digest, out)
            return out
        rnd = self._round_for(lst.step)
        if rnd is None:
            return out
        key = (lst.epoch, lst.leader)
        known = rnd.proposals.get(key)
        if known is not None:
            if known == digest:
                self._count("duplicate_list")
            else:
                # One leader, one epoch, two lists: keep the first (others may have voted for it), punish.
                self._count("list_equivocation")
                out.append(Penalize(lst.leader, lst.step, "list_equivocation"))
            return out
        if not self._make_room_for_proposal(rnd, lst.epoch):
            self._count("list_cap")
            return out
        rnd.proposals[key] = digest
        rnd.contents.setdefault(digest, lst)
        if self._governing_roster(lst.step).is_eligible(lst.leader):
            rnd.see(self._now)
            self._catch_up(rnd, lst.epoch)
        self._advance(out)
        return out

    def on_vote(self, vote: Vote, now: float) -> list[Action]:
        """A peer's (authenticated) vote arrived."""
        self._tick(now)
        out: list[Action] = []
        if vote.run_id != self.config.run_id:
            self._count("wrong_run")
            return out
        if vote.voter == self.self_id or not self._observe(vote.voter, None):
            return out
        old = self._rounds.get(vote.step)
        rnd = old if old is not None and old.decided is not None else self._round_for(vote.step)
        if rnd is None:
            return out
        if vote.voter not in rnd.votes and len(rnd.votes) >= self.config.max_announcements_per_step:
            self._count("vote_cap")
            return out
        if not rnd.note_vote(vote.voter, (vote.epoch, vote.digest)):
            self._count("vote_equivocation")
            out.append(Penalize(vote.voter, vote.step, "vote_equivocation"))
        if rnd.decided is not None:
            self._check_decided_votes(rnd, out)
            return out
        self._advance(out)
        return out

    def on_status(self, status: Status, now: float) -> list[Action]:
        """A peer entered a new epoch of a step and reported its latest vote."""
        self._tick(now)
        out: list[Action] = []
        if status.run_id != self.config.run_id:
            self._count("wrong_run")
            return out
        if status.peer_id == self.self_id or not self._observe(status.peer_id, None):
            return out
        old = self._rounds.get(status.step)
        if old is not None and old.decided is not None:
            self._answer_laggard(old, status, out)
            return out
        rnd = self._round_for(status.step)
        if rnd is None:
            return out
        if status.peer_id not in rnd.statuses and len(rnd.statuses) >= self.config.max_announcements_per_step:
            self._count("vote_cap")
            return out
        rnd.statuses[status.peer_id] = max(status.epoch, rnd.statuses.get(status.peer_id, 0))
        if self._governing_roster(status.step).is_eligible(status.peer_id):
            self._catch_up(rnd, status.epoch)
        if status.voted_digest is not None and (
            status.peer_id in rnd.votes or len(rnd.votes) < self.config.max_announcements_per_step
        ):
            rnd.note_vote(status.peer_id, (status.voted_epoch, status.voted_digest))
        self._advance(out)
        return out

    # ----------------------------------------------------------------- inputs: membership and time

    def on_banned(self, peers: Iterable[str], step: int, now: float) -> list[Action]:
        """The driver's score keeper banned ``peers`` from ``step`` on (see the module docstring).

        A peer banned twice keeps its earliest step. Only bans already in force when a list is built or voted
        on change anything: an earlier, already decided step is never revisited.
        """
        self._tick(now)
        if type(step) is not int or step < 0:
            raise RoundInputError(f"ban step must be a non-negative int, got {step!r}")
        for peer in peers:
            check_peer_id("banned peer", peer)
            self._banned[peer] = min(step, self._banned.get(peer, step))
        out: list[Action] = []
        self._advance(out)
        return out

    def on_heartbeat(self, hb: Heartbeat, now: float) -> list[Action]:
        self._tick(now)
        out: list[Action] = []
        if hb.run_id != self.config.run_id:
            self._count("wrong_run")
            return out
        if hb.peer_id != self.self_id:
            self._observe(hb.peer_id, hb.step)
        self._advance(out)
        return out

    def on_goodbye(self, gb: Goodbye, now: float) -> list[Action]:
        """A peer leaves: stop waiting for it now; the next leader lists it as departed."""
        self._tick(now)
        out: list[Action] = []
        if gb.run_id != self.config.run_id:
            self._count("wrong_run")
            return out
        if gb.peer_id != self.self_id:
            self._liveness.goodbye(gb.peer_id, self._now, gb.step, self._protected())
        self._advance(out)
        return out

    def on_disconnected(self, peer_id: str, now: float) -> list[Action]:
        """Our last connection to ``peer_id`` closed: stop waiting for it until it is heard from again.

        Why: a killed peer otherwise held its round for ``liveness_timeout`` (30 s by default). Safety is as
        with silence (see :meth:`_skip_absent_leaders`): it only moves when we propose and which epochs we
        skip. A peer that is still alive, and only lost its link to us, is waited for again at its next
        message; at worst it misses one list.
        """
        self._tick(now)
        out: list[Action] = []
        if peer_id != self.self_id:
            self._liveness.lost(peer_id)
        self._advance(out)
        return out

    def on_tick(self, now: float) -> list[Action]:
        """Time passed: deadlines, epochs, retries. Call at :meth:`next_wakeup` or periodically."""
        self._tick(now)
        out: list[Action] = []
        self._advance(out)
        return out

    def restore(self, state: SyncState, now: float) -> list[Action]:
        """Adopt a donor's state after a state sync (the driver loaded the matching weights)."""
        self._tick(now)
        self._reset(state)
        out: list[Action] = []
        self._advance(out)
        return out

    # ----------------------------------------------------------------- internals: plumbing

    def _reset(self, state: SyncState) -> None:
        # Undecided rounds at or after the new start keep what they collected and, crucially, our votes and
        # proposals: voting twice in one epoch or proposing two lists would break agreement.
        last = state.next_step + self.config.max_future_steps
        self._rounds = {
            s: r for s, r in self._rounds.items() if state.next_step <= s <= last and r.decided is None
        }
        self._rosters = {state.next_step: state.roster}
        self._frontier = self._applied_upto = state.next_step
        for peer in state.roster.peers:
            self._liveness.observe(peer, self._now, None, self._protected())
        # Start the round clock now: if the step was already decided elsewhere, nobody will announce it
        # again, and only our statuses can make the deciders send their votes and the list.
        rnd = self._round_for(self._frontier)
        if rnd is not None:
            rnd.frontier_since = self._now
            rnd.see(self._now)

    def _tick(self, now: float) -> None:
        if now > self._now:
            self._now = float(now)

    def _count(self, name: str) -> None:
        self._counters[name] += 1

    def _protected(self) -> frozenset[str]:
        roster = self._rosters.get(self._frontier)
        peers = set(roster.peers) if roster is not None else set()
        peers.add(self.self_id)
        return frozenset(peers)

    def _observe(self, peer_id: str, step: int | None) -> bool:
        if self._liveness.observe(peer_id, self._now, step, self._protected()):
            return True
        self._count("untracked_peer")
        return False

    def _governing_roster(self, step: int) -> Roster:
        """The roster of ``step`` if known, else the newest one: good enough for whom to fetch or wait for."""
        return self._rosters.get(step) or self._rosters[max(self._rosters)]

    def _is_voter(self, roster: Roster) -> bool:
        return roster.is_eligible(self.self_id) and not self._leaving

    def _round_for(self, step: int) -> RoundState | None:
        """The round of an undecided step inside the window, created on demand; None (counted) otherwise."""
        if step < self._frontier:
            self._count("stale_step")
            return None
        if step > self._frontier + self.config.max_future_steps:
            self._count("future_step")
            return None
        rnd = self._rounds.get(step)
        if rnd is None:
            rnd = RoundState(step=step)
            if step == self._frontier:
                rnd.frontier_since = self._now
            self._rounds[step] = rnd
        return rnd

    def _make_room_for_proposal(self, rnd: RoundState, epoch: int) -> bool:
        """Keep the most recent epochs' proposals only: older ones can no longer gather votes."""
        if len(rnd.proposals) < self.config.max_lists_per_step:
            return True
        oldest = min(rnd.proposals)
        if oldest[0] >= epoch:
            return False
        digest = rnd.proposals.pop(oldest)
        rnd.checked.discard(oldest)
        mine = rnd.my_vote is not None and rnd.my_vote[1] == digest
        if not mine and digest not in rnd.proposals.values():
            rnd.contents.pop(digest, None)
        return True

    def _catch_up(self, rnd: RoundState, epoch: int) -> None:
        # Bounded jump: a lying peer can waste epochs (leaders' turns), never make us skip past the limit.
        cfg = self.config
        current = rnd.epoch(self._now, cfg.collect_timeout, cfg.leader_timeout) or 0
        target = min(epoch, current + self.MAX_EPOCH_JUMP)
        rnd.catch_up(target, self._now, cfg.collect_timeout, cfg.leader_timeout)

    def _without_banned(self, rnd: RoundState) -> RoundState:
        """The round as a list builder should see it: banned peers' announcements left out, so they are
        neither candidates nor warming and do not sway the majority weights hash."""
        banned = self.banned_at(rnd.step)
        if banned.isdisjoint(rnd.announcements):
            return rnd
        kept = {p: a for p, a in rnd.announcements.items() if p not in banned}
        return dataclasses.replace(rnd, announcements=kept)

    def _note_equivocation(self, rnd: RoundState, ann: Announcement, out: list[Action]) -> None:
        first = rnd.announcements.get(ann.peer_id)
        if first is None or first == ann:
            self._count("duplicate_announcement")
            return
        self._count("equivocation")
        if ann.peer_id not in rnd.equivocators:
            rnd.equivocators.add(ann.peer_id)
            out.append(Penalize(ann.peer_id, rnd.step, "equivocation"))

    # ----------------------------------------------------------------- internals: agreement

    def _advance(self, out: list[Action]) -> None:
        """Run every rule that may fire now, until nothing changes."""
        while self._frontier - self._applied_upto < self.config.history_steps:
            rnd = self._rounds.get(self._frontier)
            if rnd is None or rnd.anchor is None:
                break
            roster = self._rosters[self._frontier]
            order = leader_order(self.config.run_id, rnd.step, roster.eligible())
            epoch = rnd.epoch(self._now, self.config.collect_timeout, self.config.leader_timeout)
            if epoch is None:
                break
            epoch = self._skip_absent_leaders(rnd, roster, order, epoch)
            self._check_proposals(rnd, roster, order, out)
            self._enter_epoch(rnd, roster, epoch, out)
            self._vote(rnd, roster, out)
            if self._try_decide(rnd, roster, out):
                continue
            if self._maybe_propose(rnd, roster, order, epoch, out):
                continue
            self._check_stall(rnd, order, epoch, out)
            break
        self._fetch(out)
        self._apply(out)
        self._check_behind(out)
        self._prune()

    def _check_proposals(
        self, rnd: RoundState, roster: Roster, order: tuple[str, ...], out: list[Action]
    ) -> None:
        """Drop proposals from anyone but the epoch's designated leader, or that break the roster rules."""
        for key in [k for k in rnd.proposals if k not in rnd.checked]:
            epoch, leader = key
            lst = rnd.contents[rnd.proposals[key]]
            reason = roster.check_list(dataclasses.replace(lst, leader=leader), self._rules)
            if reason is None and designated_leader(order, epoch) != leader:
                reason = "not the designated leader of the epoch"
            rnd.checked.add(key)
            if reason is not None:
                digest = rnd.proposals.pop(key)
                rnd.checked.discard(key)
                if digest not in rnd.proposals.values():
                    rnd.contents.pop(digest, None)
                self._count("invalid_list")
                out.append(Penalize(leader, rnd.step, "invalid_list"))

    def _leader_absent(self, peer: str, trust_silence: bool) -> bool:
        """A leader that cannot lead: it said goodbye (signed by itself) or, if ``trust_silence``, has been
        silent (no heartbeat, no message) for ``liveness_timeout``. Never ourselves."""
        if peer == self.self_id:
            return False
        if self._liveness.has_left(peer):
            return True
        return trust_silence and not self._liveness.is_alive(peer, self._now, self.config.liveness_timeout)

    def _silence_is_evidence(self, order: tuple[str, ...]) -> bool:
        """Silence says the leader is gone only while a strict majority of the roster is heard from.

        When most peers look silent at once, the likelier story is that we are the slow one (our process
        starved of CPU, its inbox not yet read, or cut off on a minority side). Skipping then would send a
        status for an epoch we lead, drag every peer there, and repeat each time we fall behind again.
        """
        heard = sum(
            1 for p in order
            if p == self.self_id or self._liveness.is_alive(p, self._now, self.config.liveness_timeout)
        )
        return 2 * heard > len(order)

    def _collection_over(self, rnd: RoundState, roster: Roster) -> bool:
        """When an epoch-0 leader would propose: every live active peer is in, or the collect deadline."""
        anchor = rnd.anchor
        if anchor is not None and self._now >= anchor + self.config.collect_timeout:
            return True
        return self._collection_complete(rnd, roster)

    def _skip_absent_leaders(
        self, rnd: RoundState, roster: Roster, order: tuple[str, ...], epoch: int
    ) -> int:
        """Enter the next epoch at once when the current epoch's leader is absent; returns the epoch.

        Without this, a step whose epoch-0 leader left or crashed waited out the collect deadline plus a
        leader timeout, and each further absent leader one more leader timeout. Safety does not depend on
        when an epoch is entered: entering one is only a promise not to vote in earlier epochs, every epoch
        still has exactly one designated leader (a function of the replicated roster), and a list is still
        decided only by a strict majority of votes in one epoch, whose leader of an epoch >= 1 re-proposes
        the newest ballot among a majority of statuses. So acting on local evidence (a goodbye we received,
        silence we observed) can cost at most an epoch, never agreement. Replicas that lack the evidence
        follow through the statuses of those that skipped (:meth:`_catch_up`). Silence only counts while most
        of the roster is heard from (:meth:`_silence_is_evidence`); a goodbye always does.

        Epoch 0 is left no earlier than its leader would have proposed (collection complete or the collect
        deadline), so the next leader builds its list from the same payloads. If every leader is absent
        (possible only for a non-voter), nothing is skipped: the epochs would just spin.
        """
        trust_silence = self._silence_is_evidence(order)
        if all(self._leader_absent(p, trust_silence) for p in order):
            return epoch
        target = epoch
        while self._leader_absent(designated_leader(order, target), trust_silence):
            if target == 0 and not self._collection_over(rnd, roster):
                break
            target += 1
        if target == epoch:
            return epoch
        self._catch_up(rnd, target)
        current = rnd.epoch(self._now, self.config.collect_timeout, self.config.leader_timeout)
        return epoch if current is None else current

    def _enter_epoch(self, rnd: RoundState, roster: Roster, epoch: int, out: list[Action]) -> None:
        """Entering epoch e >= 1 promises never to vote below e and reports our latest vote.

        Non-voters (warming newcomers) send statuses too, without a vote: a status is also how a peer that
        missed a decision asks the deciders for their votes and the list (see :meth:`_answer_laggard`).
        """
        if self._leaving or epoch <= rnd.promised:
            return
        rnd.promised = epoch
        if epoch == 0:
            return
        voted_epoch, voted_digest = rnd.my_vote if rnd.my_vote is not None else (-1, None)
        rnd.statuses[self.self_id] = epoch
        out.append(PublishStatus(Status(self.config.run_id, rnd.step, epoch, self.self_id, voted_epoch,
                                        voted_digest)))

    def _vote(self, rnd: RoundState, roster: Roster, out: list[Action]) -> None:
        """Vote for the newest valid proposal of an epoch we have not promised away nor voted in yet."""
        if not self._is_voter(roster):
            return
        left = self._liveness.left_peers()
        best: tuple[int, bytes] | None = None
        banned = self.banned_at(rnd.step)
        for (epoch, _leader), digest in rnd.proposals.items():
            if epoch < rnd.promised or (rnd.my_vote is not None and epoch <= rnd.my_vote[0]):
                continue
            if best is not None and epoch <= best[0]:
                continue
            lst = rnd.contents[digest]
            if epoch == 0 and banned and not banned.isdisjoint((*lst.peers, *lst.warming)):
                if (rnd.step, digest) not in self._refused:
                    self._refused.add((rnd.step, digest))
                    self._count("banned_in_list")
                continue
            if not roster.has_quorum(rnd.contents[digest], left):
                if digest not in rnd.below_quorum:
                    rnd.below_quorum.add(digest)
                    self._count("below_quorum_list")
                continue
            best = (epoch, digest)
        if best is None:
            return
        rnd.promised = best[0]
        rnd.my_vote = best
        rnd.note_vote(self.self_id, best)
        self._count("votes_cast")
        out.append(PublishVote(Vote(self.config.run_id, rnd.step, best[0], self.self_id, best[1])))

    def _try_decide(self, rnd: RoundState, roster: Roster, out: list[Action]) -> bool:
        """Decide a list once a strict majority of the active roster voted for it in the same epoch.

        Peers whose goodbye we saw no longer count: they vote no more, so any two majorities of the peers
        still voting share a voter. (A goodbye is signed by the peer leaving.)
        """
        eligible = set(roster.eligible())
        tally = Counter(ballot for peer, ballot in rnd.votes.items() if peer in eligible)
        quorum = roster.quorum_size(self._liveness.left_peers())
        for (epoch, digest), count in sorted(tally.items()):
            if count >= quorum and digest in rnd.contents:
                self._decide(rnd, roster, epoch, digest, out)
                return True
        return False

    def _decide(self, rnd: RoundState, roster: Roster, epoch: int, digest: bytes, out: list[Action]) -> None:
        lst = rnd.contents[digest]
        rnd.decided, rnd.decided_digest, rnd.decided_epoch, rnd.decided_at = lst, digest, epoch, self._now
        self._count("rounds_decided")
        new_roster, changes, missed = roster.advance(lst, self._rules)
        self._rosters[rnd.step + 1] = new_roster
        out.extend(PeerMissed(rnd.step, p) for p in missed)
        out.extend(MembershipChanged(rnd.step, p, change) for p, change in changes)
        self._frontier = rnd.step + 1
        nxt = self._rounds.get(self._frontier)
        if nxt is not None:
            nxt.frontier_since = self._now

    def _expected_peers(self, rnd: RoundState, roster: Roster) -> list[str]:
        """Whom a leader waits for before the deadline: live active peers, not silent or departed ones."""
        banned = self.banned_at(rnd.step)
        return [
            p for p in roster.eligible()
            if p not in rnd.equivocators and p not in banned
            and (p == self.self_id or self._liveness.is_alive(p, self._now, self.config.liveness_timeout))
        ]

    def _collection_complete(self, rnd: RoundState, roster: Roster) -> bool:
        for peer in self._expected_peers(rnd, roster):
            ann = rnd.announcements.get(peer)
            if ann is None:
                return False
            key = (peer, ann.payload_hash)
            if key not in rnd.validated and key not in rnd.invalid:
                return False
        return True

    def _maybe_propose(
        self, rnd: RoundState, roster: Roster, order: tuple[str, ...], epoch: int, out: list[Action]
    ) -> bool:
        """Propose if we lead this epoch: at most one list per epoch, ever.

        Epoch 0 needs no statuses (nobody can have voted before it). Later epochs must re-propose the most
        recently voted list among a strict majority of statuses: if some list was decided in an earlier
        epoch, a majority voted for it and at least one of them is in any majority we hear from.
        """
        if not self._is_voter(roster) or rnd.proposed_epoch >= epoch:
            return False
        if designated_leader(order, epoch) != self.self_id:
            return False
        anchor = rnd.anchor
        if anchor is None:
            return False
        cfg = self.config
        left = self._liveness.left_peers()
        lst: InclusionList | None
        if epoch == 0:
            if self._now < anchor + cfg.collect_timeout and not self._collection_complete(rnd, roster):
                return False
            lst = build_list(self._without_banned(rnd), roster, cfg.run_id, 0, self.self_id, left,
                             cfg.max_joiners_per_round, cfg.max_roster_peers)
        else:
            eligible = set(roster.eligible())
            reporters = [p for p, e in rnd.statuses.items() if e == epoch and p in eligible]
            if len(reporters) < roster.quorum_size(left):
                return False
            ballots = [rnd.votes[p] for p in reporters if p in rnd.votes and rnd.votes[p][0] < epoch]
            if ballots:
                content = rnd.contents.get(max(ballots)[1])
                if content is None:
                    return False  # we never received that list; the next epoch's leader may have it
                lst = dataclasses.replace(content, epoch=epoch, leader=self.self_id)
            elif not self._collection_over(rnd, roster):
                return False  # took over early from an absent leader: build from what epoch 0 would have
            else:
                lst = build_list(self._without_banned(rnd), roster, cfg.run_id, epoch, self.self_id, left,
                                 cfg.max_joiners_per_round, cfg.max_roster_peers)
        if lst is None:
            return False
        digest = lst.digest()
        rnd.proposed_epoch = epoch
        rnd.proposals[(epoch, self.self_id)] = digest
        rnd.checked.add((epoch, self.self_id))
        rnd.contents.setdefault(digest, lst)
        self._count("lists_published")
        out.append(PublishInclusionList(lst))
        return True

    def _check_stall(self, rnd: RoundState, order: tuple[str, ...], epoch: int, out: list[Action]) -> None:
        """Every leader had an epoch and nothing was decided: say so once, and keep re-announcing."""
        if epoch < len(order):
            return
        if not rnd.stalled:
            rnd.stalled = True
            self._count("rounds_stalled")
            out.append(RoundStalled(rnd.step))
        if rnd.own is not None and (
            rnd.last_reannounce is None or self._now - rnd.last_reannounce >= self.config.reannounce_interval
        ):
            rnd.last_reannounce = self._now
            out.append(Reannounce(rnd.own))

    # ----------------------------------------------------------------- internals: decided steps

    def _on_decided_proposal(
        self, rnd: RoundState, lst: InclusionList, digest: bytes, out: list[Action]
    ) -> None:
        """A proposal for a decided step: vote again for our list (helps laggards), report a different one."""
        roster = self._rosters.get(rnd.step)
        if roster is None or rnd.decided_digest is None or rnd.decided_epoch is None:
            self._count("stale_step")
            return
        order = leader_order(self.config.run_id, rnd.step, roster.eligible())
        if designated_leader(order, lst.epoch) != lst.leader:
            self._count("invalid_list")
            return
        if digest == rnd.decided_digest:
            if self._is_voter(roster) and (rnd.my_vote is None or lst.epoch > rnd.my_vote[0]):
                rnd.my_vote = (lst.epoch, digest)
                rnd.note_vote(self.self_id, rnd.my_vote)
                self._count("votes_cast")
                out.append(PublishVote(Vote(self.config.run_id, rnd.step, lst.epoch, self.self_id, digest)))
            else:
                self._count("duplicate_list")
        elif lst.epoch > rnd.decided_epoch:
            self._report_conflict(rnd, digest, lst.leader, "later_proposal", out)
        else:
            self._count("stale_step")  # an older epoch's proposal that lost

    def _check_decided_votes(self, rnd: RoundState, out: list[Action]) -> None:
        roster = self._rosters.get(rnd.step)
        if roster is None:
            return
        eligible = set(roster.eligible())
        tally = Counter(b for p, b in rnd.votes.items() if p in eligible)
        quorum = roster.quorum_size(self._liveness.left_peers())
        for (_epoch, digest), count in tally.items():
            if count >= quorum and digest != rnd.decided_digest:
                voter = next(p for p, b in rnd.votes.items() if b[1] == digest)
                self._report_conflict(rnd, digest, voter, "vote_majority", out)
                return

    def _report_conflict(
        self, rnd: RoundState, digest: bytes, source: str, kind: str, out: list[Action]
    ) -> None:
        self._count("list_conflict")
        if rnd.decided_digest is None or rnd.conflict_reported:
            return
        rnd.conflict_reported = True
        out.append(ListConflict(rnd.step, rnd.decided_digest, digest, source, kind))
        self._resync(rnd.step, "conflict", None, out)

    def _answer_laggard(self, rnd: RoundState, status: Status, out: list[Action]) -> None:
        """Someone is still trying to decide a step we decided: tell it our vote, and if we lead the epoch
        it is in, propose the decided list again (it is the only list that can be decided anyway).

        Answers are rate limited per step (newer epochs only, at most one per half leader timeout), so
        statuses from any peer, voter or not, cost a bounded amount of gossip.
        """
        roster = self._rosters.get(rnd.step)
        if roster is None or rnd.decided is None or status.epoch <= rnd.answered_epoch:
            return
        if not self._is_voter(roster):
            return
        if rnd.answered_at is not None and self._now - rnd.answered_at < self.config.leader_timeout / 2:
            return
        rnd.answered_epoch = status.epoch
        rnd.answered_at = self._now
        if rnd.my_vote is not None:
            epoch = max(status.epoch, rnd.my_vote[0] + 1)
            out.append(PublishStatus(Status(self.config.run_id, rnd.step, epoch, self.self_id, *rnd.my_vote)))
        order = leader_order(self.config.run_id, rnd.step, roster.eligible())
        if designated_leader(order, status.epoch) == self.self_id and rnd.proposed_epoch < status.epoch:
            rnd.proposed_epoch = status.epoch
            out.append(PublishInclusionList(dataclasses.replace(rnd.decided, epoch=status.epoch,
                                                                leader=self.self_id)))

    # ----------------------------------------------------------------- internals: payloads and progress

    def _fetch(self, out: list[Action]) -> None:
        """Ask for every payload we may need and do not hold: announced ones of active peers (eagerly, the
        leader needs them and so will we) and every entry of a decided list (possibly never announced to us).
        """
        for step in sorted(self._rounds):
            rnd = self._rounds[step]
            if rnd.applied:
                continue
            wanted: list[tuple[str, bytes, int | None, str | None]] = []
            if rnd.decided is not None:
                for peer, payload_hash in rnd.decided.entries:
                    ann = rnd.announcements.get(peer)
                    size = ann.payload_size if ann is not None and ann.payload_hash == payload_hash else None
                    wanted.append((peer, payload_hash, size, rnd.decided.leader))
            else:
                roster = self._governing_roster(step)
                banned = self.banned_at(step)
                for peer, ann in rnd.announcements.items():
                    if roster.is_eligible(peer) and peer not in rnd.equivocators and peer not in banned:
                        wanted.append((peer, ann.payload_hash, ann.payload_size, None))
            for peer, payload_hash, size, leader in wanted:
                key = (peer, payload_hash)
                if key in rnd.validated or key in rnd.invalid:
                    continue
                asked = rnd.fetch_requested_at.get(key)
                if asked is not None and self._now - asked < self.config.fetch_retry_interval:
                    continue
                rnd.fetch_requested_at[key] = self._now
                holders = (peer, leader)
                sources = tuple(dict.fromkeys(s for s in holders if s is not None and s != self.self_id))
                out.append(FetchPayload(step, peer, payload_hash, size, sources))

    def _apply(self, out: list[Action]) -> None:
        while self._applied_upto < self._frontier:
            rnd = self._rounds.get(self._applied_upto)
            if rnd is None or rnd.decided is None:
                return  # cannot happen: decided rounds are kept until applied
            lst = rnd.decided
            if any(e in rnd.invalid for e in lst.entries):
                self._unapplicable(rnd, lst.leader, out)
                return
            if not all(e in rnd.validated for e in lst.entries):
                if rnd.decided_at is not None and self._now - rnd.decided_at >= self.config.apply_timeout:
                    self._unapplicable(rnd, None, out)
                return
            majority = strict_majority(
                (rnd.announcements[p].weights_hash for p, h in lst.entries
                 if p in rnd.announcements and rnd.announcements[p].payload_hash == h),
                len(lst.entries),
            )
            rnd.applied = True
            self._applied_upto += 1
            self._count("rounds_applied")
            out.append(ApplyInclusionList(rnd.step, lst, majority))
            if rnd.own is not None and majority is not None and rnd.own.weights_hash != majority:
                self._resync(rnd.step, "weights_diverged", majority, out)

    def _unapplicable(self, rnd: RoundState, leader: str | None, out: list[Action]) -> None:
        if rnd.unapplicable_reported:
            return
        rnd.unapplicable_reported = True
        if leader is not None:
            # Validation is deterministic, so an honest leader would have rejected that payload too.
            out.append(Penalize(leader, rnd.step, "invalid_list"))
        self._resync(rnd.step, "unapplicable", None, out)

    def _resync(self, step: int, reason: str, weights_hash: bytes | None, out: list[Action]) -> None:
        last = self._last_resync.get(reason)
        if last is not None and self._now - last < self.config.resync_cooldown:
            return
        self._last_resync[reason] = self._now
        self._count("resyncs_requested")
        out.append(ResyncNeeded(step, reason, weights_hash))

    def _check_behind(self, out: list[Action]) -> None:
        """A strict majority of the active roster working on steps well past ours: we cannot catch up by
        rounds (those steps are out of our window), only by state sync.
        """
        roster = self._rosters[self._frontier]
        eligible = roster.eligible()
        target = self._frontier + self.config.behind_steps
        ahead = 0
        for peer in eligible:
            step = self._liveness.highest_step(peer)
            if peer != self.self_id and step is not None and step >= target:
                ahead += 1
        if 2 * ahead > len(eligible):
            self._resync(self._frontier, "behind", None, out)

    def _prune(self) -> None:
        low = self._applied_upto - self.config.history_steps
        for step in [s for s in self._rounds if s < low]:
            del self._rounds[step]
        for step in [s for s in self._rosters if s < low and s != self._frontier]:
            del self._rosters[step]
        self._refused = {key for key in self._refused if key[0] >= low}
