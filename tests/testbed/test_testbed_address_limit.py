"""One machine, many identities: a host keeps at most ``max_peers_per_address`` peer ids connected from one
IP address (protocol/address_limit.py). Real hosts in two testbed namespaces (the crowd's machine has one
address, 10.77.0.2); loopback is exempt, so this needs namespaces: skipped without root or ip/tc."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from distro_node.node.testbed.links import GIGABIT
from distro_node.node.testbed.netns import Network

pytestmark = [pytest.mark.root, pytest.mark.timeout(120)]

CROWD = [sys.executable, "-m", "distro_node.node.testbed.crowd"]


def test_a_crowd_of_identities_from_one_address_gets_only_the_limit_connected() -> None:
    with Network([GIGABIT, GIGABIT]) as net:
        victim = subprocess.Popen([*net.exec_prefix(0), *CROWD, "host", net.address(0), "2", "8"],
                                  stdout=subprocess.PIPE, text=True)
        crowd = None
        try:
            assert victim.stdout is not None
            addr = json.loads(victim.stdout.readline())["addr"]
            crowd = subprocess.Popen([*net.exec_prefix(1), *CROWD, "crowd", addr, "6", "11"],
                                     stdout=subprocess.PIPE, text=True)
            result = json.loads(victim.stdout.readline())
            assert crowd.stdout is not None
            dialed = json.loads(crowd.stdout.readline())["dialed"]
        finally:
            for proc in (victim, crowd):
                if proc is not None:
                    proc.kill()
                    proc.wait(10)
    assert result["connected"] == 2, result  # six identities tried, again and again; two are held
    assert result["refused"] >= 4 and dialed >= 6, (result, dialed)
