"""Helpers for tests and benchmarks that need real hosts on loopback (port 0, bounded waits).

Shipped in the package rather than in tests/ so multi-process benchmarks and the node's own tests can start
hosts the same way without importing from a conftest.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import trio
from libp2p.crypto.ed25519 import create_new_key_pair

from .host import HostConfig, P2PHost, open_host
from .identity import load_or_create_identity

# Generous but bounded: py-libp2p has logged Noise authentication failures under CPU load on shared cores.
WAIT = 15.0

# Short periodic peer exchange so concurrent joins converge within a test's budget.
FAST_PX = HostConfig(px_interval=0.3, px_timeout=5.0, dial_timeout=8.0)
NO_PX_LOOP = HostConfig(px_interval=0.0, px_timeout=5.0, dial_timeout=8.0)


@asynccontextmanager
async def start_hosts(
    count: int, key_dir: Path | None = None, config: HostConfig = NO_PX_LOOP
) -> AsyncIterator[list[P2PHost]]:
    """Start ``count`` unconnected hosts; identities persisted under ``key_dir`` when given."""
    async with AsyncExitStack() as stack:
        hosts: list[P2PHost] = []
        for i in range(count):
            key = load_or_create_identity(key_dir / f"node{i}.key") if key_dir else create_new_key_pair()
            hosts.append(await stack.enter_async_context(open_host(key, config)))
        yield hosts


async def connect_all_to(hosts: list[P2PHost], seed: P2PHost) -> None:
    """Bootstrap every host from ``seed`` in turn (sequential joins; the seed itself is skipped)."""
    target = str(seed.addrs()[0])
    for h in hosts:
        if h is not seed:
            await h.bootstrap([target])


class NotWithinError(AssertionError):
    """A condition a test waited for did not hold in time (an AssertionError, so pytest reports it as one)."""


async def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT,
                     poll: float = 0.05) -> None:
    """Until ``condition()`` holds, looking every ``poll`` seconds; NotWithinError naming ``what`` after
    ``timeout``. For state that changes without an event to wait on (a router's mesh at its heartbeat)."""
    with trio.move_on_after(timeout):
        while not condition():
            await trio.sleep(poll)
    if not condition():
        raise NotWithinError(f"not within {timeout:g}s: {what}")
