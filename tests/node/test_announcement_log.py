"""The announcement log keeps one announcement per peer and step, so one peer's flood cannot grow it."""

from __future__ import annotations

import hashlib

from distro_node.node.peer.announcements import MAX_PEERS_PER_STEP, AnnouncementLog
from distro_node.protocol.messages import Announcement

RUN = hashlib.sha256(b"run").digest()


def ann(peer: str, step: int, weights: int) -> Announcement:
    return Announcement(RUN, step, peer, hashlib.sha256(f"{peer}{step}".encode()).digest(), 10,
                        hashlib.sha256(str(weights).encode()).digest(), bytes(64))


def test_a_flood_from_one_peer_is_remembered_once_per_step() -> None:
    log = AnnouncementLog()
    for i in range(500):
        log.remember(ann("flooder", 3, weights=i), now=float(i))
    assert [len(peers) for peers in log.by_hash(3).values()] == [1]
    assert log.last_arrival(3, ["flooder"], since=-1.0) == 0.0  # the first one counts


def test_peers_per_step_are_capped() -> None:
    log = AnnouncementLog()
    for i in range(MAX_PEERS_PER_STEP + 50):
        log.remember(ann(f"p{i:05d}", 1, weights=0), now=0.0)
    assert sum(len(p) for p in log.by_hash(1).values()) == MAX_PEERS_PER_STEP
