"""Bans: peers the driver's score keeper gave up on, each from a step on, never lifted.

The driver scores peers from what every honest replica shares (decided lists and their payloads), so every
honest replica reports the same ban with the same first step. From that step on the machine does not wait
for, fetch (before a decision) or propose a banned peer, included or warming, and refuses an epoch-0
proposal that lists it. Later epochs are not refused: their leader may be bound to re-propose a list others
already voted for, and refusing that forever would stall the step. A banned peer stays in the roster until
it has missed ``max_missed_rounds`` lists, like a crashed one.

Only bans already in force when a list is built or voted on change anything: an earlier, already decided
step is never revisited.
"""

from __future__ import annotations

import dataclasses

from ..messages import InclusionList
from .context import Counters
from .round_state import RoundState


class Bans:
    def __init__(self) -> None:
        self._first: dict[str, int] = {}  # peer -> first step its ban applies to
        self._refused: set[tuple[int, bytes]] = set()  # (step, digest) of lists refused, counted once

    def add(self, peer: str, step: int) -> None:
        """A peer banned twice keeps its earliest step."""
        self._first[peer] = min(step, self._first.get(peer, step))

    def at(self, step: int) -> frozenset[str]:
        """Peers whose ban applies to ``step``."""
        return frozenset(p for p, first in self._first.items() if first <= step)

    def without_banned(self, rnd: RoundState) -> RoundState:
        """The round as a list builder should see it: banned peers' announcements left out, so they are
        neither candidates nor warming and do not sway the majority weights hash."""
        banned = self.at(rnd.step)
        if banned.isdisjoint(rnd.announcements):
            return rnd
        kept = {p: a for p, a in rnd.announcements.items() if p not in banned}
        return dataclasses.replace(rnd, announcements=kept)

    def refuses(self, step: int, epoch: int, digest: bytes, lst: InclusionList, counters: Counters) -> bool:
        """Whether we refuse to vote for ``lst``: only in epoch 0 (see the module docstring for why)."""
        if epoch != 0:
            return False
        banned = self.at(step)
        if not banned or banned.isdisjoint((*lst.peers, *lst.warming)):
            return False
        if (step, digest) not in self._refused:
            self._refused.add((step, digest))
            counters.count("banned_in_list")
        return True

    def prune(self, low: int) -> None:
        self._refused = {key for key in self._refused if key[0] >= low}
