"""Fault actions of the testbed on full daemons: a peer whose link is cut (process alive, nothing gets
through) is waited for only until its liveness timeout; the other two keep training and stay identical, and
the cut peer applies no step the others did not (no split). Skipped without root or ip/tc."""

from __future__ import annotations

from pathlib import Path

import pytest
from distro_node.node.netns import profile_links
from distro_node.node.testbed import Testbed

pytestmark = [pytest.mark.root, pytest.mark.network, pytest.mark.slow, pytest.mark.timeout(170)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "5",
       "--liveness-timeout", "2"]


def test_cut_link_leaves_the_majority_training(tmp_path: Path) -> None:
    with Testbed(profile_links("home", 3), tmp_path, RUN) as bed:
        peers = bed.start()
        peers[0].wait_step(3, 120)
        bed.cut(2)
        cut_at = max(peers[0].steps())
        after = cut_at + 4
        for p in peers[:2]:
            p.wait_step(after, 120)
        peers[2].poll_events()
        for s in range(after + 1):
            hashes = {p.name: p.steps()[s]["weights_hash"] for p in peers if s in p.steps()}
            assert len(set(hashes.values())) == 1, f"weights differ after step {s}: {hashes}"
        assert all(peers[0].steps()[s]["included"] == 2 for s in range(after - 1, after + 1))
        assert max(peers[2].steps()) <= cut_at + 1, "the cut peer kept applying steps on its own"
