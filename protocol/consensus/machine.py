"""The round machine: one entry point per kind of input, the rules run in a fixed order after each.

Every input moves the clock first (an earlier ``now`` than one already seen counts as the latest one), then
records what it says, then runs every rule that may fire until nothing changes (``RoundMachine._advance``).
Peer messages share one entry point (:meth:`RoundMachine.on_message`), so the checks every message needs run
in one place (:func:`.admission.admit`) and cannot be forgotten for one kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..ballots import Certificate, Status, Vote
from ..liveness import LivenessView
from ..membership import Roster, RosterRules, SyncState
from ..message_fields import Signer
from ..messages import Announcement, Goodbye, Heartbeat, InclusionList, Message, check_peer_id
from . import admission, agreement, epochs, laggards, progress
from .actions import Action, Penalize
from .bans import Bans
from .config import RoundConfig
from .context import Counters, Local
from .leader_rank import leader_order
from .round_state import designated_leader
from .window import StepWindow


class RoundInputError(ValueError):
    """The local caller (not a peer) passed something inconsistent, e.g. an own announcement for another
    peer id or two different own announcements for one step: a bug in the driver, so it raises.
    """


class RoundMachine:
    """One replica's view of the run's rounds (see the package docstring for the rules).

    Memory is bounded: rounds exist only from ``history_steps`` before the undecided step to
    ``max_future_steps`` after it, each with capped announcements, proposals and votes; peers are tracked
    up to ``max_tracked_peers``.
    """

    def __init__(
        self, config: RoundConfig, self_id: str, state: SyncState, now: float, signer: Signer
    ) -> None:
        check_peer_id("self_id", self_id)
        self.config = config
        self.self_id = self_id
        self._sign = signer
        self._rules = RosterRules(
            warmup_rounds=config.warmup_rounds,
            max_missed_rounds=config.max_missed_rounds,
            max_peers=config.max_roster_peers,
            max_joiners_per_round=config.max_joiners_per_round,
            max_included=config.max_included,
        )
        self._now = float(now)
        self._leaving = False
        self._liveness = LivenessView(config.max_tracked_peers)
        self._counters = Counters()
        self._resyncs = progress.Resyncs()
        self._bans = Bans()
        self._window = StepWindow(state)
        self._reset(state)

    # ----------------------------------------------------------------- queries

    @property
    def next_step(self) -> int:
        """The first step without a decided list (the step the driver should be working on)."""
        return self._window.frontier

    @property
    def next_apply_step(self) -> int:
        """The first decided step not yet handed out with :class:`.actions.ApplyInclusionList`."""
        return self._window.applied_upto

    @property
    def roster(self) -> Roster:
        """The roster governing :attr:`next_step`."""
        return self._window.rosters[self._window.frontier]

    @property
    def counters(self) -> Mapping[str, int]:
        return self._counters.view

    @property
    def liveness(self) -> LivenessView:
        return self._liveness

    def banned_at(self, step: int) -> frozenset[str]:
        """Peers whose ban applies to ``step``."""
        return self._bans.at(step)

    def decided_list(self, step: int) -> InclusionList | None:
        rnd = self._window.rounds.get(step)
        return rnd.decided if rnd is not None else None

    def leader_order(self, step: int) -> tuple[str, ...] | None:
        """Leaders of ``step`` best first (epoch e belongs to entry e mod len), if its roster is known."""
        roster = self._window.rosters.get(step)
        return None if roster is None else leader_order(self.config.run_id, step, roster.eligible())

    def export_state(self) -> SyncState:
        """What a resyncing peer or joiner adopts from us, next to our weights.

        It describes the first step we have not applied (not the first undecided one), because that is the
        step our weights are at; decided but unapplied steps are simply decided again by the receiver's
        rounds or fetched as history.
        """
        w = self._window
        return SyncState(next_step=w.applied_upto, roster=w.rosters[w.applied_upto])

    def make_heartbeat(self, weights_hash: bytes) -> Heartbeat:
        return Heartbeat(run_id=self.config.run_id, peer_id=self.self_id, step=self._window.frontier,
                         weights_hash=weights_hash)

    def make_goodbye(self) -> Goodbye:
        """Our goodbye; from now on we neither vote nor lead, so others may stop counting us."""
        self._leaving = True
        return Goodbye(run_id=self.config.run_id, peer_id=self.self_id, step=self._window.frontier)

    def next_wakeup(self) -> float | None:
        """Latest time by which :meth:`on_tick` should be called if nothing else arrives (None: no timer)."""
        cfg, w = self.config, self._window
        times: list[float] = []
        rnd = w.rounds.get(w.frontier)
        epoch = None if rnd is None else rnd.epoch(self._now, cfg.collect_timeout, cfg.leader_timeout)
        if rnd is not None and rnd.anchor is not None and rnd.decided is None and epoch is not None:
            times.append(rnd.anchor + cfg.collect_timeout)
            nxt = rnd.next_epoch_at(epoch, cfg.collect_timeout, cfg.leader_timeout)
            if nxt is not None:
                times.append(nxt)
            if rnd.last_reannounce is not None:
                times.append(rnd.last_reannounce + cfg.reannounce_interval)
            order = self.leader_order(rnd.step)
            leader = designated_leader(order, epoch) if order else self.self_id
            seen = None if leader == self.self_id else self._liveness.last_seen(leader)
            if seen is not None:  # when this epoch's leader would count as absent (skip_absent_leaders)
                times.append(seen + cfg.liveness_timeout)
        for r in w.rounds.values():
            times += [at + cfg.fetch_retry_interval for at in r.fetch_requested_at.values()]
            if r.decided_at is not None and not r.applied:
                times.append(r.decided_at + cfg.apply_timeout)
        future = [t for t in times if t > self._now]
        return min(future) if future else None

    # ----------------------------------------------------------------- inputs: peer messages

    def on_message(self, msg: Message, now: float) -> list[Action]:
        """A peer's authenticated message (its author is the peer that signed it) arrived over gossip."""
        me = self._tick(now)
        if not admission.admit(msg, me, self._window):
            return []
        out: list[Action] = []
        if self._receive(msg, me, out):
            self._advance(me, out)
        return out

    def _receive(self, msg: Message, me: Local, out: list[Action]) -> bool:
        """Record an admitted message where its rule reads it; True if the rules should run now.

        Only a message that added to what a round collects runs them at once. One that was refused, was a
        duplicate, was evidence against its sender or concerned a decided step leaves them to the next input
        or tick, as the six per-type handlers before ``on_message`` did.
        """
        w = self._window
        if isinstance(msg, Announcement):
            return admission.add_announcement(msg, me, w, out)
        if isinstance(msg, InclusionList):
            done = w.decided_round(msg.step)
            if done is None:
                return admission.add_proposal(msg, me, w, out)
            laggards.on_decided_proposal(done, msg, me)
            return False
        if isinstance(msg, Vote):
            rnd = w.decided_round(msg.step) or admission.round_for(msg.step, me, w)
            if rnd is None or not admission.add_vote(msg, rnd, me, out):
                return False
            if rnd.decided is None:
                return True
            laggards.check_decided_votes(rnd, w.rosters.get(msg.step), me, out)
            return False
        if isinstance(msg, Certificate):
            return laggards.on_certificate(msg, me, w, out)
        if isinstance(msg, Status):
            done = w.decided_round(msg.step)
            if done is None:
                return admission.add_status(msg, me, w)
            laggards.answer_laggard(done, w.rosters.get(msg.step), msg, me, out)
            return False
        return True  # a heartbeat or goodbye: admission recorded all it says

    # ----------------------------------------------------------------- inputs: local

    def on_local_announcement(self, ann: Announcement, now: float) -> list[Action]:
        """Our own payload for ``ann.step`` exists (so it is validated); the transport announces it too."""
        me = self._tick(now)
        if ann.run_id != self.config.run_id or ann.peer_id != self.self_id:
            raise RoundInputError("own announcement must carry our run id and peer id")
        out: list[Action] = []
        rnd = admission.round_for(ann.step, me, self._window)
        if rnd is None:
            return out
        if rnd.own is not None and rnd.own.payload_hash != ann.payload_hash:
            # The driver never signs two payloads for a step (node/peer/announced_mark.py): a bug.
            raise RoundInputError(f"a different own payload for step {ann.step} already exists")
        if rnd.own is not None:
            return out  # the same payload again (recomputed after a restore): nothing new
        rnd.own = ann
        rnd.announcements[self.self_id] = ann
        rnd.validated.add((self.self_id, ann.payload_hash))
        rnd.see(me.now)
        self._advance(me, out)
        return out

    def on_payload_validated(self, step: int, peer_id: str, payload_hash: bytes, now: float) -> list[Action]:
        """The transport fetched the bytes, checked the hash and the payload passed validation."""
        me = self._tick(now)
        out: list[Action] = []
        key = (peer_id, payload_hash)
        rnd = admission.payload_round(step, key, me, self._window)
        if rnd is None:
            return out
        rnd.validated.add(key)
        rnd.fetch_requested_at.pop(key, None)
        self._advance(me, out)
        return out

    def on_payload_invalid(self, step: int, peer_id: str, payload_hash: bytes, now: float) -> list[Action]:
        """The bytes matched the announced hash but failed validation: the announcing peer is at fault."""
        me = self._tick(now)
        out: list[Action] = []
        key = (peer_id, payload_hash)
        rnd = admission.payload_round(step, key, me, self._window)
        if rnd is None:
            return out
        rnd.invalid.add(key)
        rnd.validated.discard(key)
        rnd.fetch_requested_at.pop(key, None)
        out.append(Penalize(peer_id, step, "invalid_payload"))
        self._advance(me, out)
        return out

    def on_payload_failed(self, step: int, peer_id: str, payload_hash: bytes, now: float) -> list[Action]:
        """No holder delivered the bytes (timeout, hash mismatch): retry after ``fetch_retry_interval``."""
        me = self._tick(now)
        out: list[Action] = []
        if admission.retried_payload_round(step, (peer_id, payload_hash), me, self._window) is None:
            return out
        self._advance(me, out)
        return out

    def on_banned(self, peers: Iterable[str], step: int, now: float) -> list[Action]:
        """The driver's score keeper banned ``peers`` from ``step`` on (the rules are in :mod:`.bans`)."""
        me = self._tick(now)
        if type(step) is not int or step < 0:
            raise RoundInputError(f"ban step must be a non-negative int, got {step!r}")
        for peer in peers:
            self._bans.add(check_peer_id("banned peer", peer), step)
            self._window.evidence.settle([peer])
        out: list[Action] = []
        self._advance(me, out)
        return out

    def on_payload_denied(self, step: int, author: str, now: float) -> list[Action]:
        """``author`` answered that it does not hold the payload it signed for ``step``. An honest author
        keeps its own until the step is decided, so this is our evidence that it withholds it: an epoch it
        leads is left at once (:func:`.epochs.skip_absent_leaders`), so a withholding leader costs the time to
        ask it, not a leader timeout. Local evidence, like silence: it moves only which epochs we skip, never
        what is decided. Nobody else can check it, so nobody is penalised for it."""
        me = self._tick(now)
        out: list[Action] = []
        rnd = self._window.rounds.get(step)
        roster = self._window.rosters.get(step)
        if rnd is not None and rnd.decided is None and roster is not None and author in roster.peers:
            rnd.denied.add(author)
        self._advance(me, out)
        return out

    def on_forged_proposal(self, step: int, epoch: int, leader: str, now: float) -> list[Action]:
        """``leader`` published a list for ``step`` whose entries their authors did not sign; the gossip door
        refused it (protocol/codec.py), so it never arrives here as a message. Its epoch can decide nothing,
        so it is left at once like an absent leader's (:func:`.epochs.skip_absent_leaders`): a forging
        leader costs the time to notice, not a leader timeout. The leader is penalised."""
        me = self._tick(now)
        out: list[Action] = []
        rnd = self._window.rounds.get(step)
        if rnd is not None and rnd.decided is None and len(rnd.forged) < self.config.max_lists_per_step:
            if (epoch, leader) not in rnd.forged:
                rnd.forged.add((epoch, leader))
                out.append(Penalize(leader, step, "forged_list"))
        self._advance(me, out)
        return out

    def on_disconnected(self, peer_id: str, now: float) -> list[Action]:
        """Our last connection to ``peer_id`` closed: stop waiting for it until it is heard from again.

        Why: a killed peer otherwise held its round for ``liveness_timeout`` (30 s by default). Safety is as
        with silence (see :func:`.epochs.skip_absent_leaders`): it only moves when we propose and which
        epochs we skip. A peer that is still alive, and only lost its link to us, is waited for again at its
        next message; at worst it misses one list.
        """
        me = self._tick(now)
        out: list[Action] = []
        if peer_id != self.self_id:
            self._liveness.lost(peer_id)
        self._advance(me, out)
        return out

    def on_tick(self, now: float) -> list[Action]:
        """Time passed: deadlines, epochs, retries. Call at :meth:`next_wakeup` or periodically."""
        me = self._tick(now)
        out: list[Action] = []
        self._advance(me, out)
        return out

    def restore(self, state: SyncState, now: float) -> list[Action]:
        """Adopt a donor's state after a state sync (the driver loaded the matching weights)."""
        me = self._tick(now)
        self._reset(state)
        out: list[Action] = []
        self._advance(me, out)
        return out

    # ----------------------------------------------------------------- internals

    def _tick(self, now: float) -> Local:
        """Move the clock (never backwards) and return this input's view of us."""
        if now > self._now:
            self._now = float(now)
        return Local(self.config, self._rules, self.self_id, self._now, self._leaving, self._liveness,
                     self._counters, self._sign)

    def _reset(self, state: SyncState) -> None:
        w = self._window
        w.restart(state, self.config.max_future_steps)
        for peer in state.roster.peers:
            self._liveness.observe(peer, self._now, None, w.protected(self.self_id))
        # Start the round clock now: if the step was already decided elsewhere, nobody will announce it
        # again, and only our statuses can make the deciders send their votes and the list.
        rnd = w.open_round(w.frontier, self._now)
        rnd.frontier_since = self._now
        rnd.see(self._now)

    def _advance(self, me: Local, out: list[Action]) -> None:
        """Run every rule that may fire now, until nothing changes."""
        cfg, w, bans = self.config, self._window, self._bans
        while w.frontier - w.applied_upto < cfg.history_steps:
            rnd = w.rounds.get(w.frontier)
            if rnd is None or rnd.anchor is None:
                break
            roster = w.rosters[w.frontier]
            order = leader_order(cfg.run_id, rnd.step, roster.eligible())
            epoch = rnd.epoch(me.now, cfg.collect_timeout, cfg.leader_timeout)
            if epoch is None:
                break
            epoch = epochs.skip_absent_leaders(rnd, roster, order, epoch, bans.at(rnd.step), me)
            agreement.check_proposals(rnd, roster, order, me, out)
            epochs.enter_epoch(rnd, epoch, me, out)
            agreement.prevote(rnd, roster, bans, me, out)
            agreement.precommit(rnd, roster, bans, me, out)
            if agreement.try_decide(rnd, roster, w, me, out):
                continue
            evidence = w.evidence.pending(bans.at(rnd.step))
            if agreement.maybe_propose(rnd, roster, order, epoch, bans, me, out, evidence):
                continue
            epochs.check_stall(rnd, order, epoch, me, out)
            break
        progress.fetch(w, bans, me, out)
        progress.apply(w, self._resyncs, me, out)
        progress.check_behind(w, self._resyncs, me, out)
        bans.prune(w.prune(cfg.history_steps))
