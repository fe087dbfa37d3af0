"""CI smoke test of the namespace testbed: 3 daemons behind shaped 100/10 Mbit links train 10 rounds and
end bit-identical (issue 7). Skipped without root or without ip/tc (tests/testbed/conftest.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from distro_node.node.testbed.links import profile_links
from distro_node.node.testbed.swarm import Testbed

pytestmark = [pytest.mark.root, pytest.mark.network, pytest.mark.timeout(110)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "5"]


def test_three_shaped_peers_train_ten_rounds_identically(tmp_path: Path) -> None:
    steps = 10
    with Testbed(profile_links("home", 3), tmp_path, RUN, ["--steps", str(steps)]) as bed:
        for i in range(bed.n):  # the links really are shaped as the profile says
            assert "rate 10Mbit" in bed.net.qdiscs(i)["upload"]
            assert "rate 100Mbit" in bed.net.qdiscs(i)["download"]
        peers = bed.start()
        assert bed.join_command is not None and "/ip4/10.77.0.1/tcp/" in bed.join_command
        for p in peers:
            p.wait_for(lambda e: e.get("event") == "left", 90, "leave after the last step")
        for p in peers:
            assert p.wait_exit(15) == 0
        hashes = {p.name: p.steps()[steps - 1]["weights_hash"] for p in peers}
        for p in peers:
            assert sorted(p.steps()) == list(range(steps)), f"{p.name} applied {sorted(p.steps())}"
            assert all(p.steps()[s]["included"] >= 2 for s in range(steps))
        assert len(set(hashes.values())) == 1, f"final weights differ: {hashes}"
        prefix = bed.net.prefix
    assert not [line for line in _netns_list() if line.startswith(prefix + "-")], "namespaces left behind"


def _netns_list() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10, check=True)
    return out.stdout.splitlines()
