"""A replayed old goodbye (node/peer/intake.py): the round machine ignores it (stale_goodbye), and the node
does not report it as a leave either. The replay-goodbye adversary (node/testbed/adversary_more.py) made
every honest daemon print "peer ... left at step 0" every few seconds for a peer that was training on."""

from __future__ import annotations

import hashlib
import io
import json
from typing import Any, cast

import trio
from distro_node.node.peer.intake import GossipIntake
from distro_node.node.peer.output import Output
from distro_node.protocol.consensus import RoundConfig, RoundMachine
from distro_node.protocol.membership import Roster, SyncState
from distro_node.protocol.messages import Goodbye, Heartbeat

RUN = hashlib.sha256(b"intake goodbye").digest()
PEERS = ("a", "b", "c", "d")


class Driver:
    """What the intake needs of node/peer/driver.py: the machine, and somewhere to put its actions."""

    def __init__(self, machine: RoundMachine) -> None:
        self.machine = machine

    def handle(self, actions: Any) -> None:
        pass


def test_only_a_goodbye_the_machine_takes_is_reported_as_a_leave() -> None:
    machine = RoundMachine(RoundConfig(run_id=RUN), "a", SyncState(0, Roster.genesis(PEERS)), now=0.0,
                           signer=lambda statement: bytes(64))
    lines = io.StringIO()
    intake = GossipIntake(decoder=cast(Any, None), driver=cast(Any, Driver(machine)),
                          announcements=cast(Any, None), changes=cast(Any, None), out=Output("json", lines))

    async def body() -> None:
        intake._dispatch(Heartbeat(RUN, "b", 3, bytes(32)))
        intake._dispatch(Goodbye(RUN, "b", 0))  # b was heard at step 3 since: an old goodbye, replayed
        intake._dispatch(Goodbye(RUN, "c", 0))

    trio.run(body)
    left = [json.loads(line)["peer"] for line in lines.getvalue().splitlines()
            if json.loads(line).get("event") == "goodbye"]
    assert left == ["c"] and machine.counters["stale_goodbye"] == 1
