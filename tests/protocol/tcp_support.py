"""A connected pair of plain TCP streams on loopback, for tests of what py-libp2p's connections sit on."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import trio


@contextlib.asynccontextmanager
async def tcp_pair() -> AsyncIterator[tuple[trio.SocketStream, trio.SocketStream]]:
    """A connected pair of TCP streams on loopback, port chosen by the kernel."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    try:
        yield client, server
    finally:
        for s in (client, server, *listeners):
            await s.aclose()
