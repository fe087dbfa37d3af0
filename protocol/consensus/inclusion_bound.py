"""Bounded inclusion: at most K payloads per step, chosen by a rule every replica computes alike.

Why: with every payload in every list, each peer downloads N payloads per step, so traffic grows with the
swarm. With a bound K (the run manifest's ``rounds.max_included``; 0 means no bound), a step aggregates at
most K payloads and a peer fetches only those that can be in the list, so traffic is bounded by K, not N.

The rule reads replicated state only: each roster entry's ``waiting``, the decided lists since the peer was
last included (protocol/membership.py; part of the synced roster, so of the state digest and state sync).
Priority: longest waiting first, then a rank salted by (run, step), so no peer id wins every tie. With all N
peers on time, each is included at least once every ceil(N / K) steps, and a peer left out once (late) is
first in line at the next step.

What a replica may differ on is only which candidates it validated; the order among them is the same
everywhere. A leader proposes the top K of the candidates it validated. Voters do not refuse a list for
skipping a candidate they validated themselves: their views differ (a payload may reach the leader late),
and a Byzantine leader can always claim it never got one, the power it has today without a bound. They do
refuse a list with more than K entries (``Roster.check_list``), which any replica can check alike.

Missed rounds: a peer left out because the bound was full must not count as a crash. Only the K
highest-priority active peers of the roster (:func:`due_peers`, again from replicated state) count a miss
when not included; the others just wait longer, which raises their priority. A crashed peer therefore
rises to the top within ceil(N / K) steps and is then dropped after ``max_missed_rounds`` misses.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping

_DOMAIN = b"distro-node/inclusion-rank/v1\0"


def bounded(max_included: int, candidates: int) -> bool:
    """Whether the bound leaves anyone out: 0 means unbounded, and K >= N changes nothing."""
    return 0 < max_included < candidates


def tie_rank(run_id: bytes, step: int, peer_id: str) -> bytes:
    """Lower is earlier among peers that waited equally long. Salted by the step so no peer id is first in
    every tie, domain-separated from the leader rank so the two orders are unrelated."""
    raw = peer_id.encode()
    data = _DOMAIN + run_id + step.to_bytes(8, "big") + len(raw).to_bytes(2, "big") + raw
    return hashlib.sha256(data).digest()


def priority_order(
    run_id: bytes, step: int, waiting: Mapping[str, int], peers: Iterable[str]
) -> tuple[str, ...]:
    """``peers`` best first: the longest waiting, then :func:`tie_rank`, then the id (a total order)."""
    return tuple(sorted(set(peers), key=lambda p: (-waiting.get(p, 0), tie_rank(run_id, step, p), p)))


def select_included(
    run_id: bytes, step: int, waiting: Mapping[str, int], candidates: Iterable[str], max_included: int
) -> tuple[str, ...]:
    """The candidates a list includes, sorted by peer id: all of them, or the top ``max_included``."""
    pool = set(candidates)
    if not bounded(max_included, len(pool)):
        return tuple(sorted(pool))
    return tuple(sorted(priority_order(run_id, step, waiting, pool)[:max_included]))


def due_peers(
    run_id: bytes, step: int, waiting: Mapping[str, int], eligible: Collection[str], max_included: int
) -> frozenset[str]:
    """The active peers whose turn it is: the only ones a list that leaves them out counts as missed."""
    if not bounded(max_included, len(eligible)):
        return frozenset(eligible)
    return frozenset(priority_order(run_id, step, waiting, eligible)[:max_included])


def fetch_window(
    run_id: bytes, step: int, waiting: Mapping[str, int], candidates: Iterable[str], max_included: int,
    margin: int,
) -> frozenset[str]:
    """The announced candidates worth fetching: the top ``max_included + margin``. The margin covers a
    top candidate whose payload turns out invalid or never arrives, without fetching all N."""
    pool = set(candidates)
    if not bounded(max_included, len(pool)):
        return frozenset(pool)
    return frozenset(priority_order(run_id, step, waiting, pool)[:max_included + margin])


def next_waiting(
    waiting: Mapping[str, int], peers: Iterable[str], included: Collection[str]
) -> dict[str, int]:
    """Waiting counts after a decided list: reset for the included, one more for every other peer (the
    same rule ``Roster.advance`` applies to active roster peers)."""
    return {p: 0 if p in included else waiting.get(p, 0) + 1 for p in peers}
