"""The daemon's ban keeper (node/peer/bans.py): replicas fed the same applied rounds ban alike, absences are
counted but never ban alone, and round figures come out for the metrics."""

from __future__ import annotations

from distro_node.node.peer.bans import PeerBans

HONEST = ("a", "b", "c")


def _round(step: int) -> tuple[dict[str, float], dict[str, float]]:
    agreement = {p: 0.05 + 0.01 * ((i + step) % 3) for i, p in enumerate(HONEST)} | {"loud": 0.06}
    norms = {"a": 1.0, "b": 1.04, "c": 0.97, "loud": 100.0}
    return agreement, norms


def test_replicas_fed_the_same_rounds_ban_the_same_peer_at_the_same_step() -> None:
    replicas = [PeerBans(), PeerBans()]
    bans: list[list[tuple[str, int, str]]] = [[], []]
    for step in range(15):
        agreement, norms = _round(step)
        for r, keeper in enumerate(replicas):
            scored = keeper.observe(step, agreement, norms, missed=())
            bans[r] += [(b.peer, b.step, b.reason) for b in scored.bans]
    assert bans[0] == bans[1] == [("loud", 9, "low_score")]
    assert replicas[0].is_banned("loud") and not any(replicas[0].is_banned(p) for p in HONEST)
    assert replicas[0].keeper.to_dict() == replicas[1].keeper.to_dict()


def test_missed_rounds_are_counted_but_never_ban_alone() -> None:
    keeper = PeerBans()
    for step in range(40):
        agreement, norms = _round(step)
        del agreement["loud"], norms["loud"]
        keeper.observe(step, agreement, norms, missed=["gone", "gone"])  # duplicates count once
    record = keeper.keeper.record("gone")
    assert record.missed == 40 and not record.banned


def test_round_figures() -> None:
    agreement, norms = _round(0)
    scored = PeerBans().observe(0, agreement, norms, missed=())
    assert scored.agreement_min == min(agreement.values())
    ordered = sorted(agreement.values())
    assert scored.agreement_median == (ordered[1] + ordered[2]) / 2
    empty = PeerBans().observe(0, {}, {}, missed=())
    assert empty.agreement_min is None and empty.agreement_median is None and empty.bans == ()
