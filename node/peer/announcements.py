"""What the swarm's signed announcements told us, per step: who computed on which weights, and when.

Two readers: the weights-agreement metric counts the peers whose announcement of a step carried each
weights hash (each announcement is signed, so each peer counts once), and the step report splits a round's
time into waiting for the slowest peer's compute (its announcement) and the exchange after it. Bounded to
the last ``ANNOUNCE_MEMORY`` steps, one announcement per peer and step (a second one is equivocation, and
remembering it let one peer grow a step's memory with every message it sent), and ``MAX_PEERS_PER_STEP``
peers a step.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping

from distro_node.protocol.messages import Announcement

ANNOUNCE_MEMORY = 64  # steps of announcements remembered for verifying a donor's weights hash
MAX_PEERS_PER_STEP = 1024  # the largest inclusion list (protocol/message_fields.py MAX_LIST_PEERS)


class AnnouncementLog:
    def __init__(self, memory: int = ANNOUNCE_MEMORY) -> None:
        self._memory = memory
        self._by_hash: OrderedDict[int, dict[bytes, set[str]]] = OrderedDict()
        self._arrived: OrderedDict[int, dict[str, float]] = OrderedDict()

    def remember(self, ann: Announcement, now: float) -> None:
        arrived = self._arrived.get(ann.step, {})
        if ann.peer_id in arrived or len(arrived) >= MAX_PEERS_PER_STEP:
            return
        by_hash = self._by_hash.setdefault(ann.step, {})
        by_hash.setdefault(ann.weights_hash, set()).add(ann.peer_id)
        self._arrived.setdefault(ann.step, {}).setdefault(ann.peer_id, now)
        for memory in (self._by_hash, self._arrived):
            while len(memory) > self._memory:
                memory.popitem(last=False)

    def by_hash(self, step: int) -> Mapping[bytes, set[str]]:
        """Every weights hash announced for ``step``, with the peers that announced it."""
        return self._by_hash.get(step, {})

    def last_arrival(self, step: int, peers: Iterable[str], since: float) -> float:
        """When the last of ``peers``' announcements of ``step`` arrived (``since`` if all came before)."""
        seen = self._arrived.get(step, {})
        return max([since, *(seen[p] for p in peers if p in seen)])
