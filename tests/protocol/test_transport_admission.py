"""A permissioned run between real hosts on loopback (protocol/admission.py): a peer is served only once it
showed a ticket the founder's key signed for its own id; a stranger, or a peer showing someone else's ticket,
gets nothing but the manifest and the ticket exchange itself."""

from __future__ import annotations

import hashlib
import time

import pytest
import trio
from distro_node.protocol.admission import TICKET_PROTOCOL, Admission
from distro_node.protocol.errors import TransportError
from distro_node.protocol.host import P2PHost, open_host
from distro_node.protocol.manifest_rpc import fetch_manifest, install_manifest_server
from distro_node.protocol.rpc import RpcStatus, call, install_rpc
from distro_node.protocol.testing import NO_PX_LOOP, WAIT
from distro_node.protocol.tickets import Ticket
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

pytestmark = pytest.mark.network

MANIFEST = b'{"a permissioned run":1}'
RUN = hashlib.sha256(MANIFEST).digest()
ECHO = TProtocol("/distro/echo-test/1.0.0")


def test_only_ticket_holders_are_served_and_strangers_get_the_manifest_only() -> None:
    keys = {name: create_new_key_pair() for name in ("founder", "holder", "stranger")}
    ids = {name: str(ID.from_pubkey(k.public_key)) for name, k in keys.items()}
    expires = int(time.time()) + 3600
    tickets = {"holder": Ticket.issue(keys["founder"].private_key, RUN, ids["holder"], expires)}
    stolen = tickets["holder"]  # what the stranger shows: it names another identity, so it admits nobody

    async def echo(remote: ID, body: bytes) -> tuple[RpcStatus, bytes]:
        return RpcStatus.OK, body

    async def body() -> None:
        async with (
            open_host(keys["founder"], NO_PX_LOOP) as founder,
            open_host(keys["holder"], NO_PX_LOOP) as holder,
            open_host(keys["stranger"], NO_PX_LOOP) as stranger,
        ):
            admissions: dict[str, Admission] = {}
            for name, host in (("founder", founder), ("holder", holder)):
                admissions[name] = Admission(run_id=RUN, self_id=ids[name], founder=ids["founder"],
                                             own_ticket=tickets.get(name), admit_wait=0.5)
                admissions[name].install(host)
            install_manifest_server(founder, MANIFEST)
            install_rpc(founder, ECHO, echo, max_request=64, timeout=WAIT)

            async def served(host: P2PHost) -> bool:
                try:
                    reply = await call(host, founder.peer_id, ECHO, b"ping", max_reply=64, timeout=WAIT)
                except TransportError:
                    return False
                return reply == b"ping"

            with trio.fail_after(WAIT):
                for host in (holder, stranger):
                    await host.dial(str(founder.addrs()[0]))
                assert not await served(holder)  # connected, but no ticket shown yet
                assert await admissions["holder"].present(holder, founder.peer_id)  # the founder: by its id
                assert admissions["founder"].admits(ids["holder"])
                assert await served(holder)
                # The stranger shows a real ticket of someone else: refused, counted, still not served.
                await call(stranger, founder.peer_id, TICKET_PROTOCOL, stolen.to_bytes(), max_reply=1024,
                           timeout=WAIT)
                gate = admissions["founder"]
                assert gate.refused == 1 and not gate.admits(ids["stranger"])
                assert not await served(stranger)
                assert await fetch_manifest(stranger, founder.peer_id, expected_run_id=RUN) == MANIFEST

    trio.run(body)
