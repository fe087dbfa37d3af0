"""The swarm simulator with Byzantine replicas, and the gossip door that keeps their lies to their own name.

A Byzantine replica runs an ordinary round machine underneath (so it computes, announces and leads like
anyone) and adds, to random halves of the swarm, what an attacker with its key could send:

- ``vote_twice``: with each vote it casts, a vote of the same phase and epoch for another list;
- ``vote_all``: a prevote and a precommit for every proposal it receives, locks or not;
- ``equivocate_lists``: as leader, a second valid list (one payload fewer) to half the swarm;
- ``jump_epochs``: statuses for far later epochs;
- ``withhold``: announces, never serves its payload;
- ``forge``: proposals with a pol, and certificates, naming votes their voters never cast.

The door (``_deliver``) models signatures: a vote, pol or certificate is delivered only if every vote it
names was really cast by its voter, which is what the ed25519 check at the real gossip door guarantees
(protocol/claims.py). Everything else a Byzantine replica sends is delivered like any message.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from distro_node.protocol.ballots import PRECOMMIT, PREVOTE, Certificate, Status, Vote
from distro_node.protocol.consensus.actions import Action, Publish
from distro_node.protocol.messages import InclusionList
from protocol_swarm_sim import RUN_ID, SIG, Replica, Swarm

BYZANTINE_KINDS = ("vote_twice", "vote_all", "equivocate_lists", "jump_epochs", "withhold", "forge")

SignedVote = tuple[str, int, int, int, bytes]  # (voter, step, epoch, phase, digest)


class ByzantineSwarm(Swarm):
    def __init__(self, peer_ids: Any, *, byzantine: dict[str, tuple[str, ...]], **kw: Any) -> None:
        self.byzantine = byzantine
        self.cast: set[SignedVote] = set()
        super().__init__(peer_ids, **kw)
        for peer in byzantine:
            self.replicas[peer].serves = "withhold" not in byzantine[peer]

    def honest(self) -> list[Replica]:
        return [r for p, r in self.replicas.items() if p not in self.byzantine]

    def honest_disagreements(self) -> list[tuple[int, dict[str, bytes]]]:
        """Steps where two honest replicas applied different lists: the safety property (must be empty)."""
        return [
            (step, {p: d for p, d in by_peer.items() if p not in self.byzantine})
            for step, by_peer in self.disagreements()
            if len({d for p, d in by_peer.items() if p not in self.byzantine}) > 1
        ]

    # ------------------------------------------------------------ the door

    def _signed(self, msg: Any) -> bool:
        if isinstance(msg, Vote):
            return (msg.voter, msg.step, msg.epoch, msg.phase, msg.digest) in self.cast
        if isinstance(msg, InclusionList):
            return all((v, msg.step, msg.pol_epoch, PREVOTE, msg.digest()) in self.cast for v, _ in msg.pol)
        if isinstance(msg, Certificate):
            lst = msg.decided
            ballot = (lst.step, lst.epoch, PRECOMMIT, lst.digest())
            return all((v, *ballot) in self.cast for v, _ in msg.precommits)
        return True

    def _deliver(self, src: Replica, dst: Replica, msg: Any) -> None:
        if not self._signed(msg):
            return
        super()._deliver(src, dst, msg)
        if "vote_all" in self.byzantine.get(dst.peer_id, ()) and isinstance(msg, InclusionList) and dst.alive:
            for phase in (PREVOTE, PRECOMMIT):
                self._vote(dst, msg.step, msg.epoch, phase, msg.digest())

    # ------------------------------------------------------------ the attacker's extra messages

    def _handle(self, r: Replica, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, Publish) and isinstance(a.message, Vote):
                v = a.message
                self.cast.add((v.voter, v.step, v.epoch, v.phase, v.digest))
        super()._handle(r, actions)
        kinds = self.byzantine.get(r.peer_id)
        if kinds is None or not r.alive:
            return
        for a in actions:
            if not isinstance(a, Publish):
                continue
            msg = a.message
            if isinstance(msg, Vote) and "vote_twice" in kinds:
                self._vote(r, msg.step, msg.epoch, msg.phase, self._other_digest(r, msg.step, msg.digest))
            if isinstance(msg, InclusionList) and "equivocate_lists" in kinds and len(msg.entries) > 1:
                drop = self.rng.randrange(len(msg.entries))
                other = dataclasses.replace(
                    msg, entries=msg.entries[:drop] + msg.entries[drop + 1:],
                    signatures=msg.signatures[:drop] + msg.signatures[drop + 1:], pol_epoch=-1, pol=())
                self._to_half(r, other)
            if isinstance(msg, Status) and "jump_epochs" in kinds:
                self._to_half(r, Status(RUN_ID, msg.step, msg.epoch + self.rng.randrange(1, 50), r.peer_id))
            if isinstance(msg, InclusionList) and "forge" in kinds:
                lie = [(p, SIG) for p in sorted(self.ids)]
                self._to_half(r, dataclasses.replace(msg, epoch=msg.epoch + 1, pol_epoch=msg.epoch,
                                                     pol=tuple(lie)))
                self._to_half(r, Certificate(dataclasses.replace(msg, pol_epoch=-1, pol=()), tuple(lie)))

    def _vote(self, r: Replica, step: int, epoch: int, phase: int, digest: bytes) -> None:
        self.cast.add((r.peer_id, step, epoch, phase, digest))
        self._to_half(r, Vote(RUN_ID, step, epoch, phase, r.peer_id, digest, SIG))

    def _other_digest(self, r: Replica, step: int, digest: bytes) -> bytes:
        """A digest other than ``digest`` for this step: another list the replica saw, or a made-up one."""
        rnd = r.machine._window.rounds.get(step)
        for d in (rnd.contents if rnd is not None else ()):
            if d != digest:
                return d
        return bytes(a ^ b for a, b in zip(digest, b"\x01" * 32, strict=True))

    def _to_half(self, r: Replica, msg: Any) -> None:
        peers = [p for p in self.ids if p != r.peer_id]
        self.rng.shuffle(peers)
        for peer in peers[: max(1, len(peers) // 2)]:
            self._send(r, self.replicas[peer], msg, 0.0)
