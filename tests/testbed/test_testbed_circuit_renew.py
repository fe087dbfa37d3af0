"""Daemons whose relays cut circuits after 8 s (issue 15: "a circuit cut at its cap is re-established
without losing a round"): the circuit between two private peers is renewed again and again before the cut,
and meanwhile every peer is included in every step, with one weights hash per step.

Two public peers and two behind routers that answer unsolicited connections with a reset (no hole punch, so
the private peers stay linked through a relay). The relay cap comes from the daemons' config
(``network.relay_circuit_seconds``, here through its environment variable). Needs root, ip, tc and nft
(skipped otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest
from distro_node.node.join_process import PeerProc, PeerWaitError
from distro_node.node.testbed.debian import install_missing
from distro_node.node.testbed.nat import Nat
from distro_node.node.testbed.netns import profile_links
from distro_node.node.testbed.swarm import Testbed
from test_testbed_faults import RUN

_NO_NFT = install_missing(("nft",), "nftables")
pytestmark = [pytest.mark.root, pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(_NO_NFT is not None, reason=str(_NO_NFT))]

PRIVATE = (2, 3)
CIRCUIT_SECONDS = 8  # renewed 4 s after it opens (half of it: the default margin is longer)
RENEWALS = 3
CHECKED_STEPS = 4
TICKS = 60  # events (about a step each) to wait for the renewals


def _renewals(p: PeerProc) -> int:
    return max((e["renewed"] for e in p.events if e.get("event") == "circuits"), default=0)


def test_circuits_are_renewed_before_the_relay_cuts_them_without_losing_a_round(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISTRO_NODE_NETWORK__RELAY_CIRCUIT_SECONDS", str(CIRCUIT_SECONDS))
    with Testbed(profile_links("home", 4), tmp_path, RUN, nats={i: Nat("reset") for i in PRIVATE}) as bed:
        peers = bed.start()
        for i in PRIVATE:
            peers[i].wait_for(lambda e: e.get("event") == "relays" and e["relays"], 150, "a reservation")
        for p in peers:
            p.poll_events()
        first = max(max(p.steps(), default=0) for p in peers) + 1
        renewed = sum(_renewals(peers[i]) for i in PRIVATE)
        # Whichever private peer dialed the other renews the circuit; wait for a few renewals past here,
        # an event of peer 2 at a time (bounded).
        for _ in range(TICKS):
            for i in PRIVATE:
                peers[i].poll_events()
            if sum(_renewals(peers[i]) for i in PRIVATE) >= renewed + RENEWALS:
                break
            seen = peers[PRIVATE[0]].events[-1]["t"]
            try:
                peers[PRIVATE[0]].wait_for(lambda e, seen=seen: e.get("t", 0) > seen, 5, "an event")
            except PeerWaitError:
                pass
        else:
            raise AssertionError(f"fewer than {RENEWALS} circuit renewals within {TICKS} events")
        for p in peers:
            p.poll_events()
        last = max(max(p.steps()) for p in peers) + 1
        last = max(last, first + CHECKED_STEPS)
        for p in peers:
            p.wait_step(last, 120)
        for s in range(first, last + 1):
            rows = [p.steps()[s] for p in peers]
            assert {r["included"] for r in rows} == {bed.n}, f"step {s}: {[r['included'] for r in rows]}"
            assert len({r["weights_hash"] for r in rows}) == 1, f"step {s}: weights differ"
