"""Made-up identities: beside an adversary's daemon (node/testbed/adversary.py), or a crowd on their own.

Each Sybil is a real host with a fresh key: it dials the adversary's bootstrap peer, takes part in peer
exchange (so honest peers hand it on and it dials whoever joins) and, as asked, serves state descriptions
(the ``lying-donor`` kind) or floods: it joins the run's gossip topic and publishes signed heartbeats, asks
every peer it reaches for a snapshot description and for its peers. It never trains. Once a second it prints
what it got as a JSON line ``{"event": "sybil", ...}`` on stdout, beside the daemon's own events, so a test
can check that a permissioned run gave it nothing. On their own (no daemon, so the crowd's process is not a
roster member whose slowness the swarm would pay for):

    python -m distro_node.node.testbed.sybils BOOTSTRAP_ADDR RUN_ID_HEX [COUNT]   # COUNT flooding Sybils
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import trio
from distro_node.protocol.errors import TransportError
from distro_node.protocol.gossip import AnnouncementChannel, open_gossip
from distro_node.protocol.host import P2PHost, open_host
from distro_node.protocol.host_config import HostConfig
from distro_node.protocol.messages import Heartbeat
from distro_node.protocol.sync import Snapshot, StateServer, fetch_meta
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.keys import KeyPair
from libp2p.peer.id import ID

from .raw_gossip import send_signed

_PX = HostConfig(px_interval=0.5)
FLOOD_PER_S = 20  # heartbeats a second from each Sybil
SYBILS = 10

StateProvider = Callable[[ID, bool], Awaitable[Snapshot | None]]


@dataclass
class SybilReport:
    sybil: str
    connected: int = 0
    heartbeats_sent: int = 0
    state_served: int = 0  # snapshot descriptions honest peers gave it
    state_refused: int = 0
    peers_learned: int = 0  # peers honest peers' exchange named to it


async def run_sybil(key: KeyPair, run_id: bytes, bootstrap: str, *, provide: StateProvider | None = None,
                    flood: bool = False) -> None:
    async with open_host(key, _PX) as host:
        if provide is not None:
            StateServer(host, run_id, provide).install()
        with trio.move_on_after(30):
            await host.dial(bootstrap)
        if not flood:
            await trio.sleep_forever()
        report = SybilReport(str(host.peer_id))
        async with open_gossip(host, run_id) as gossip, trio.open_nursery() as nursery:
            nursery.start_soon(_heartbeats, gossip, host, run_id, report)
            nursery.start_soon(_probe_forever, host, run_id, report)
            while True:
                await trio.sleep(1.0)
                print(json.dumps({"event": "sybil", **asdict(report)}), flush=True)


async def _probe_forever(host: P2PHost, run_id: bytes, report: SybilReport) -> None:
    while True:
        await _probe(host, run_id, report)
        await trio.sleep(1.0)


async def _heartbeats(gossip: AnnouncementChannel, host: P2PHost, run_id: bytes, report: SybilReport) -> None:
    """FLOOD_PER_S signed heartbeats a second, half a second's worth per RPC, straight into every
    subscriber's queue (node/testbed/raw_gossip.py: cheap for the crowd, the full rate for its victims)."""
    batch = max(1, FLOOD_PER_S // 2)
    next_at = trio.current_time()
    while True:
        beats = [Heartbeat(run_id, str(host.peer_id), 0, os.urandom(32)) for _ in range(batch)]
        if send_signed(gossip, beats):
            report.heartbeats_sent += batch
        next_at += batch / FLOOD_PER_S
        await trio.sleep_until(max(next_at, trio.current_time()))


async def _probe(host: P2PHost, run_id: bytes, report: SybilReport) -> None:
    """Ask every connected peer, all at once, for a snapshot description and for its peers."""
    peers = list(host.connected_peers())
    report.connected = len(peers)
    async with trio.open_nursery() as nursery:
        for peer in peers:
            nursery.start_soon(_ask, host, peer, run_id, report)


async def _ask(host: P2PHost, peer: ID, run_id: bytes, report: SybilReport) -> None:
    served = False
    with trio.move_on_after(8):
        try:
            await fetch_meta(host, peer, run_id, genesis=False, timeout=8.0, max_state_bytes=1 << 30)
            served = True
        except TransportError:
            pass
    report.state_served += served
    report.state_refused += not served
    with trio.move_on_after(8):
        try:
            report.peers_learned += len(await host.exchange_peers(peer))
        except TransportError:
            pass


def bootstrap_arg() -> str:
    """The adversary daemon's ``--bootstrap`` (where its Sybils dial in)."""
    return sys.argv[sys.argv.index("--bootstrap") + 1]


def beside_daemon(tasks: Callable[[dict[str, Any]], list[Callable[[], Awaitable[None]]]]) -> None:
    """Run ``tasks`` beside the daemon once it is in its run: they are built from the heartbeat loop's
    arguments (the run id and our id are known only then), and die with it."""
    from distro_node.node.peer import node as peer_node  # here: a crowd on its own needs no torch

    honest_loop: Callable[..., Awaitable[None]] = peer_node.send_heartbeats

    async def with_tasks(**kwargs: Any) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(honest_loop, **kwargs))
            for task in tasks(kwargs):
                nursery.start_soon(task)

    setattr(peer_node, "send_heartbeats", with_tasks)  # noqa: B010 (a patch, on purpose)


async def flood_crowd(bootstrap: str, run_id: bytes, count: int) -> None:
    """``count`` flooding Sybils, for as long as the process runs."""
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(partial(run_sybil, create_new_key_pair(), run_id, bootstrap, flood=True))


__all__ = ["SYBILS", "SybilReport", "beside_daemon", "bootstrap_arg", "flood_crowd", "run_sybil"]


if __name__ == "__main__":  # python -m distro_node.node.testbed.sybils BOOTSTRAP_ADDR RUN_ID_HEX [COUNT]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else SYBILS
    trio.run(flood_crowd, sys.argv[1], bytes.fromhex(sys.argv[2]), count)
