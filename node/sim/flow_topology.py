"""Who is connected to whom in a modelled swarm (node/sim/flow_step.py's ``ExchangeSpec.neighbours``)."""

from __future__ import annotations

import hashlib


def full_mesh(n: int) -> tuple[frozenset[int], ...]:
    return tuple(frozenset(j for j in range(n) if j != i) for i in range(n))


def random_graph(n: int, degree: int, seed: int) -> tuple[frozenset[int], ...]:
    """Every peer connected to about ``degree`` others, as a capped peer exchange ends up (symmetric)."""
    if degree >= n - 1:
        return full_mesh(n)
    links: list[set[int]] = [set() for _ in range(n)]
    for i in range(n):  # a ring first, so the graph is connected
        links[i].add((i + 1) % n)
        links[(i + 1) % n].add(i)
    for i in range(n):
        candidates = sorted(range(n), key=lambda j: hashlib.sha256(f"{seed}:{i}:{j}".encode()).digest())
        for j in candidates:
            if len(links[i]) >= degree:
                break
            if j != i and len(links[j]) < degree:
                links[i].add(j)
                links[j].add(i)
    return tuple(frozenset(s) for s in links)
