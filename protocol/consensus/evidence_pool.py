"""Equivocation proofs this replica holds until a decided list carries them (protocol/evidence.py).

Why a pool beside the rounds: a proof may turn up for a step that is already decided (a late second
announcement) or be found in a proposal that is never decided; it must still reach a decided list, so it
waits here and every list this replica proposes carries the oldest waiting ones. Bounded: one proof per
peer, at most ``cap`` peers; a full pool refuses new proofs (counted), since a proof kept out now can be
found again the next time that peer equivocates.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from ..evidence import Equivocation
from ..message_fields import MAX_EVIDENCE
from .context import Counters


class EvidencePool:
    def __init__(self, cap: int = 64) -> None:
        self._cap = cap
        self._held: dict[str, Equivocation] = {}  # peer -> first proof against it, in arrival order

    def add(self, proof: Equivocation, counters: Counters) -> None:
        if proof.peer in self._held:
            return
        if len(self._held) >= self._cap:
            counters.count("evidence_cap")
            return
        self._held[proof.peer] = proof
        counters.count("evidence_held")

    def pending(self, banned: Collection[str]) -> tuple[Equivocation, ...]:
        """What our next list carries: the oldest proofs against peers not already ``banned``, in the list's
        canonical order (sorted by peer). Proofs against banned peers are dropped: bans are never lifted."""
        self.settle([peer for peer in self._held if peer in banned])
        waiting = list(self._held.values())[:MAX_EVIDENCE]
        return tuple(sorted(waiting, key=lambda p: p.peer))

    def settle(self, peers: Iterable[str]) -> None:
        """These peers were named by a decided list (or banned): their proofs have done their work. Should
        one equivocate again before its ban is in force, the new proof is merely held until then."""
        for peer in peers:
            self._held.pop(peer, None)


__all__ = ["EvidencePool"]
