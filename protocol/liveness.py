"""The local liveness view: whom this replica hears from, how far each peer got, and who said goodbye.

Local on purpose (see protocol/membership.py): it decides only things where replicas may safely differ.
"""

from __future__ import annotations

from collections.abc import Collection

from .membership import MembershipError

GOODBYE_LOOKAHEAD = 1


class LivenessView:
    """Local, bounded memory of when each peer was last heard from, how far it got, and who said goodbye.

    At most ``max_tracked`` peers are remembered; when full, the least recently seen peer outside the
    protected set (the roster) is forgotten, so a flood of made-up peer ids cannot grow memory.
    """

    def __init__(self, max_tracked: int) -> None:
        if type(max_tracked) is not int or max_tracked < 1:
            raise MembershipError("config", "max_tracked must be a positive int")
        self._max = max_tracked
        self._last_seen: dict[str, float] = {}
        self._step: dict[str, int] = {}
        self._left_at: dict[str, int] = {}  # peer -> first step it said it will not take part in
        self._lost: set[str] = set()  # our last connection to the peer closed and nothing was heard since
        self.evicted = 0
        self.refused = 0
        self.stale_goodbyes = 0

    def __len__(self) -> int:
        return len(self._last_seen)

    def observe(self, peer_id: str, now: float, step: int | None, protected: Collection[str]) -> bool:
        """Record a sign of life (and progress, if ``step`` is given). False if the peer could not be tracked.

        A message for a step at or after the one a peer said goodbye from means it came back (rejoined);
        older ones are late deliveries and do not undo the goodbye.
        """
        if peer_id not in self._last_seen and not self._make_room(protected):
            self.refused += 1
            return False
        self._last_seen[peer_id] = max(now, self._last_seen.get(peer_id, now))
        self._lost.discard(peer_id)
        if step is not None:
            self._step[peer_id] = max(step, self._step.get(peer_id, step))
            left = self._left_at.get(peer_id)
            if left is not None and step >= left:
                del self._left_at[peer_id]
        return True

    def goodbye(self, peer_id: str, now: float, step: int, protected: Collection[str]) -> bool:
        """A goodbye from ``step`` on, unless the peer was since heard from further on: then it is an old
        goodbye replayed (a signed message stays valid forever, and py-libp2p forgets the ids it has seen
        after 120 s), and would make us stop counting a peer that is back. An honest peer is at most
        ``GOODBYE_LOOKAHEAD`` steps ahead of the step it leaves from (an overlapped peer announces the next
        step while the current one is decided). False only for such a stale goodbye."""
        seen = self._step.get(peer_id)
        if seen is not None and seen > step + GOODBYE_LOOKAHEAD:
            self.stale_goodbyes += 1
            return False
        if peer_id not in self._last_seen and not self._make_room(protected):
            self.refused += 1
            return True
        self._last_seen[peer_id] = max(now, self._last_seen.get(peer_id, now))
        self._left_at[peer_id] = step
        return True

    def lost(self, peer_id: str) -> None:
        """Our last connection to a peer closed: treat it as silent until we hear from it again.

        A crashed process's sockets are closed by its kernel, so this is the first sign of a crash, seconds
        to ``liveness_timeout`` before its silence would be. It is local evidence only, like silence: it
        changes whom we wait for, never what is decided. Only tracked peers are marked, so it costs no room.
        """
        if peer_id in self._last_seen:
            self._lost.add(peer_id)

    def has_left(self, peer_id: str) -> bool:
        return peer_id in self._left_at

    def left_peers(self) -> frozenset[str]:
        return frozenset(self._left_at)

    def is_alive(self, peer_id: str, now: float, timeout: float) -> bool:
        seen = self._last_seen.get(peer_id)
        return (seen is not None and peer_id not in self._left_at and peer_id not in self._lost
                and now - seen <= timeout)

    def last_seen(self, peer_id: str) -> float | None:
        return self._last_seen.get(peer_id)

    def highest_step(self, peer_id: str) -> int | None:
        return self._step.get(peer_id)

    def _make_room(self, protected: Collection[str]) -> bool:
        if len(self._last_seen) < self._max:
            return True
        candidates = [p for p in self._last_seen if p not in protected]
        if not candidates:
            return False
        victim = min(candidates, key=lambda p: (self._last_seen[p], p))
        self._last_seen.pop(victim, None)
        self._step.pop(victim, None)
        self._left_at.pop(victim, None)
        self._lost.discard(victim)
        self.evicted += 1
        return True
