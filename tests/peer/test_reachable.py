"""The ``reachable`` event (node/peer/reachable.py): once dial-back probes confirm an address others can
reach, the daemon prints the join command naming it; loopback-only confirmations stay quiet."""

from __future__ import annotations

import io
import json

from distro_node.node.peer.output import Output
from distro_node.node.peer.reachable import ReachableNotice
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID


def _said(*rounds: list[str]) -> list[dict[str, object]]:
    stream = io.StringIO()
    peer = ID.from_pubkey(create_new_key_pair().public_key)
    notice = ReachableNotice(Output("json", stream), peer, lambda addr: f"join --bootstrap {addr}")
    for confirmed in rounds:
        notice(confirmed)
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_confirmed_public_address_is_printed_as_the_join_command() -> None:
    [event] = _said(["/ip4/192.168.1.5/tcp/4747", "/ip4/198.51.7.1/tcp/4747"])
    assert event["event"] == "reachable"
    assert str(event["join_command"]).startswith("join --bootstrap /ip4/198.51.7.1/tcp/4747/p2p/12D3Koo")


def test_each_change_is_said_once_losing_it_too_and_loopback_stays_quiet() -> None:
    assert _said(["/ip4/127.0.0.1/tcp/4747"], []) == []
    first, lost = _said(["/ip4/198.51.7.1/tcp/4747"], ["/ip4/198.51.7.1/tcp/4747"], [])
    assert first["join_command"] and lost["join_command"] is None
