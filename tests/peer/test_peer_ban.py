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
from peer_procs import Procs, assert_finished_without, ban_step

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
    banned_at = ban_step(honest, attacker_id, "low_score")
    assert banned_at < BAN_WITHIN, banned_at
    for p, url in zip(honest, urls, strict=True):
        assert _metric(url, "distro_peers_banned_total") == 1, p.name
        assert -1.0 <= _metric(url, "distro_round_agreement_median") <= 1.0
    assert_finished_without(honest, attacker_id, steps, banned_at)
