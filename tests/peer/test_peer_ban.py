"""A malicious peer in a real 4-process swarm is scored and banned by every honest peer at the same step,
while the honest replicas stay bit-identical; the ban shows on /metrics (the swarm console's ban line:
tests/node/test_cli_swarm.py).

The attacker sends its honest direction at 100x the magnitude (``join --fault scale=100``). With bf16 values
the magnitudes reach the wire (1-bit values would erase them); sign agreement cannot see it, the norm term of
the score keeper does (protocol/scores.py).
"""

from __future__ import annotations

import urllib.request

import pytest
from peer_procs import PeerProc, Procs, assert_identical

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "5", "--values", "bf16"]
BAN_WITHIN = 20


def _metric(url: str, name: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} missing from {url}")


def _banned(peer: PeerProc, who: str) -> dict[str, object]:
    return peer.wait_for(lambda e: e.get("event") == "banned" and e.get("peer") == who, 200,
                         f"ban of {who[-8:]}")


def test_scaled_peer_banned_by_every_honest_peer_and_honest_replicas_stay_identical(procs: Procs) -> None:
    steps = BAN_WITHIN + 6
    local = ["--steps", str(steps)]
    founder = procs.start([*RUN, *local, "--genesis-peers", "4"], "peer0")
    command = founder.info()["join_command"]
    honest = [founder, *(procs.start_command(command, local, f"peer{i}") for i in (1, 2))]
    attacker = procs.start_command(command, [*local, "--fault", "scale=100"], "attacker")
    attacker_id = attacker.info()["peer_id"]
    urls = [str(p.info()["metrics_url"]) for p in honest]
    founder.wait_step(1, 120)
    assert _metric(urls[0], "distro_peers_banned_total") == 0
    bans = {p.name: _banned(p, attacker_id) for p in honest}
    ban_steps = {name: e["step"] for name, e in bans.items()}
    assert len(set(ban_steps.values())) == 1, f"honest peers banned at different steps: {ban_steps}"
    ban_step = int(next(iter(ban_steps.values())))  # type: ignore[call-overload]
    assert ban_step < BAN_WITHIN, ban_step
    assert {e["reason"] for e in bans.values()} == {"low_score"}
    for p, url in zip(honest, urls, strict=True):
        assert _metric(url, "distro_peers_banned_total") == 1, p.name
        assert -1.0 <= _metric(url, "distro_round_agreement_median") <= 1.0
    for p in honest:
        p.wait_for(lambda e: e.get("event") == "left", 200, "leave after the last step")
    assert_identical(honest, range(steps))
    for p in honest:
        rows = p.steps()
        assert sorted(rows) == list(range(steps)), f"{p.name} applied {sorted(rows)}"
        assert all(rows[s]["included"] <= 3 for s in range(ban_step + 1, steps)), p.name
        # An honest peer never bans another honest peer.
        assert [e["peer"] for e in p.events if e.get("event") == "banned"] == [attacker_id]
