"""One machine bringing a crowd of identities, for the per-address limit (protocol/address_limit.py).

Run inside testbed namespaces with ``ip netns exec`` (node/testbed/netns.py):

    python -m distro_node.node.testbed.crowd host 10.77.0.1 LIMIT SECONDS   # {"addr": A}, then the result
    python -m distro_node.node.testbed.crowd crowd ADDR COUNT SECONDS       # COUNT identities dial ADDR

``host`` runs one of our hosts with ``max_peers_per_address=LIMIT`` for SECONDS and prints
``{"connected": N, "refused": R}``; ``crowd`` keeps COUNT hosts, one identity each, dialing ADDR for SECONDS
(again whenever their connection is closed) and prints ``{"dialed": N}``.
"""

from __future__ import annotations

import json
import sys
from contextlib import AsyncExitStack

import trio
from distro_node.protocol.errors import TransportError
from distro_node.protocol.host import P2PHost, open_host
from distro_node.protocol.host_config import HostConfig
from libp2p.crypto.ed25519 import create_new_key_pair


async def host(ip: str, limit: int, seconds: float) -> None:
    cfg = HostConfig(listen_addrs=(f"/ip4/{ip}/tcp/0",), px_interval=0.0, max_peers_per_address=limit)
    async with open_host(create_new_key_pair(), cfg) as h:
        print(json.dumps({"addr": str(h.addrs()[0])}), flush=True)
        await trio.sleep(seconds)
        result = {"connected": len(h.connected_peers()), "refused": h.refused_by_address}
        print(json.dumps(result), flush=True)


async def crowd(addr: str, count: int, seconds: float) -> None:
    dialed = 0

    async def keep_dialing(one: P2PHost) -> None:
        nonlocal dialed
        while True:
            if not one.connected_peers():
                try:
                    await one.dial(addr)
                    dialed += 1
                except TransportError:
                    pass
            await trio.sleep(0.5)

    async with AsyncExitStack() as stack:
        quiet = HostConfig(px_interval=0.0)
        hosts = [await stack.enter_async_context(open_host(create_new_key_pair(), quiet))
                 for _ in range(count)]
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                for one in hosts:
                    nursery.start_soon(keep_dialing, one)
    print(json.dumps({"dialed": dialed}), flush=True)


if __name__ == "__main__":
    verb, where, number, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    trio.run(host if verb == "host" else crowd, where, number, seconds)
