"""A NAT'd peer whose every link goes down and comes back trains again without a restart (issue 15: such a
peer was dropped, its resync failed with "no connected peers" and it hung until SIGTERM).

Peer 2 sits behind a dropping home NAT, so nobody can dial it: only its own redials can bring it back. While
cut off it must say so (the ``isolated`` event), keep its known peers and keep dialing them; once the link
is back it reconnects, resyncs or catches up, and applies the same weights as the others. Needs root, ip,
tc and nft (skipped otherwise)."""

from __future__ import annotations

from pathlib import Path

import pytest
from distro_node.node.testbed.debian import install_missing
from distro_node.node.testbed.links import profile_links
from distro_node.node.testbed.nat import Nat
from distro_node.node.testbed.swarm import Testbed
from test_testbed_faults import RUN, _assert_training_together

_NO_NFT = install_missing(("nft",), "nftables")
pytestmark = [pytest.mark.root, pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(_NO_NFT is not None, reason=str(_NO_NFT))]


def _event(name: str) -> object:
    return lambda e: e.get("event") == name


def test_natted_peer_cut_off_everywhere_redials_resyncs_and_trains_again(tmp_path: Path) -> None:
    with Testbed(profile_links("home", 3), tmp_path, RUN, nats={2: Nat("drop")}) as bed:
        peers = bed.start()
        peers[2].wait_step(3, 150)
        cut_t = peers[2].poll_events()[-1]["t"]
        bed.cut(2)
        peers[2].wait_for(lambda e: e.get("event") == "isolated" and e["t"] > cut_t, 90,
                          "isolated event")  # every connection of it has gone
        cut_at = max(peers[0].poll_events() and peers[0].steps())
        for p in peers[:2]:  # far enough ahead that rounds alone cannot catch the cut peer up
            p.wait_step(cut_at + 6, 120)
        bed.restore(2)
        peers[2].wait_for(_event("reconnected"), 90, "reconnected event")
        peers[0].poll_events()
        _assert_training_together(peers, max(peers[0].steps()) + 1)
