"""Deterministic leader order for a step: every replica derives the same order from the same roster.

The score is sha256(run_id, step, peer_id), so leadership rotates pseudo-randomly from step to step (no peer
leads every round, and nobody can choose to) yet needs no communication. Ties (impossible in practice) fall
back to the peer id so the order is total.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

_DOMAIN = b"distro-node/leader-rank/v1\0"


def leader_score(run_id: bytes, step: int, peer_id: str) -> bytes:
    """Lower is better. Domain-separated so the score can never collide with a payload or list digest."""
    raw = peer_id.encode()
    data = _DOMAIN + run_id + step.to_bytes(8, "big") + len(raw).to_bytes(2, "big") + raw
    return hashlib.sha256(data).digest()


def leader_order(run_id: bytes, step: int, peers: Iterable[str]) -> tuple[str, ...]:
    """``peers`` from best-ranked (the leader) to worst; duplicates collapse."""
    return tuple(sorted(set(peers), key=lambda p: (leader_score(run_id, step, p), p)))
