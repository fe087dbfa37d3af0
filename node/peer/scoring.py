"""Scoring an applied round and putting the bans it causes into force (the policy is node/peer/bans.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import trio
from distro_node.compression.payload import Payload
from distro_node.node.sim.scoring import round_observations
from distro_node.protocol.evidence import Equivocation
from distro_node.protocol.host import P2PHost
from libp2p.peer.id import ID

from .bans import PeerBans, RoundScores
from .driver import RoundDriver
from .output import Output
from .telemetry import Telemetry
from .trainer import Trainer


class RoundScorer:
    def __init__(
        self,
        *,
        self_id: str,
        bans: PeerBans,
        trainer: Trainer,
        driver: RoundDriver,
        host: P2PHost,
        out: Output,
        telemetry: Telemetry | None,
        compute_limit: trio.CapacityLimiter,
        nursery: trio.Nursery,
    ) -> None:
        self._self_id = self_id
        self._bans = bans
        self._trainer = trainer
        self._driver = driver
        self._host = host
        self._out = out
        self._telemetry = telemetry
        self._compute_limit = compute_limit
        self._nursery = nursery

    async def score(self, s: int, payloads: Mapping[str, Payload],
                    evidence: Sequence[Equivocation] = ()) -> RoundScores:
        """Feed applied step ``s`` to the ban keeper (only inputs every honest replica shares: the payloads
        and the equivocation proofs its decided list carries) and put new bans into force from step s + 1."""
        specs = self._trainer.spec.tensors
        agreement, norms = await trio.to_thread.run_sync(round_observations, specs, payloads,
                                                         limiter=self._compute_limit)
        missed = self._driver.decisions.take_missed(s)
        scored = self._bans.observe(s, agreement, norms, missed, [proof.peer for proof in evidence])
        if scored.bans:
            banned = [b.peer for b in scored.bans]
            self._driver.feed(lambda m, now: m.on_banned(banned, s + 1, now))
        # Metrics first: a reader that sees the ban event must find it counted on /metrics too.
        if self._telemetry is not None:
            self._telemetry.round_scored(scored, self._bans.keeper.lowest_score())
        for ban in scored.bans:
            is_self = ban.peer == self._self_id
            who = "this peer" if is_self else f"peer {ban.peer[-8:]}"
            text = (f"banned {who} after step {ban.step}: {ban.reason} (score {ban.score:.2f}); excluded "
                    f"from step {ban.step + 1}")
            self._out.emit("banned", text, peer=ban.peer, step=ban.step, reason=ban.reason,
                           score=round(ban.score, 4), from_step=ban.step + 1, is_self=is_self)
            if not is_self:
                self._nursery.start_soon(self._host.block, ID.from_base58(ban.peer))
        return scored
