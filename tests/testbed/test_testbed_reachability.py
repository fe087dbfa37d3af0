"""Acceptance: the dial-back reachability probe never calls a NAT'd peer public, for every NAT kind of the
testbed (node/testbed/nat.py), and does call a port-forwarded one public. Real hosts in namespaces, two
probers in a public namespace (node/testbed/dialback_roles.py). Needs root, ip, tc and nft (skipped
otherwise)."""

from __future__ import annotations

import subprocess

import pytest
from distro_node.node.testbed.debian import install_missing
from distro_node.node.testbed.dialback_roles import answer, start_asker, start_probers
from distro_node.node.testbed.links import HOME
from distro_node.node.testbed.nat import Nat
from distro_node.node.testbed.netns import Network

_NO_NFT = install_missing(("nft",), "nftables")
pytestmark = [pytest.mark.root, pytest.mark.skipif(_NO_NFT is not None, reason=str(_NO_NFT))]

PORT = 4300  # inside the test's own namespaces: nothing else listens there
KINDS = {1: Nat("drop"), 2: Nat("reset"), 3: Nat("random"), 4: Nat("forward", PORT)}


def test_the_probe_calls_every_natd_peer_private_and_the_forwarded_one_public(
        procs: list[subprocess.Popen[str]]) -> None:
    with Network([HOME] * 5, nats=KINDS) as net:
        probers = start_probers(net, 0, procs)
        forwarded = f"/ip4/{net.address(4)}/tcp/{PORT}"
        askers = {i: start_asker(net, i, PORT, probers, procs, *(["--announce", forwarded] if i == 4 else []))
                  for i in KINDS}
        answers = {KINDS[i].kind: answer(p) for i, p in askers.items()}
    for kind in ("drop", "reset", "random"):
        assert answers[kind]["verdict"] == "private", (kind, answers[kind])
        assert answers[kind]["confirmed"] == [], (kind, answers[kind])
    assert answers["forward"]["verdict"] == "public", answers["forward"]
    assert answers["forward"]["confirmed"] == [forwarded]
    assert any(a.startswith(forwarded) for a in answers["forward"]["advertised"])  # type: ignore[attr-defined]
