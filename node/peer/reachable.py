"""Starting what makes a daemon reachable and says so: the reachability watch, the UPnP port mapping, and
the ``reachable`` event with the join command that names a confirmed address.

Why here and not in node.py: the three are one story (a mapping is a candidate, a probe confirms it, the
confirmed address is advertised and printed) and node.py only needs to start it.
"""

from __future__ import annotations

from collections.abc import Callable

import trio
from distro_node.node.config.schema import NetworkConfig
from distro_node.protocol.host import P2PHost
from libp2p.peer.id import ID

from .output import Output
from .reach_addrs import beyond_loopback, join_address
from .reachability_watch import ReachabilityWatch, listen_ports
from .upnp import PortMapper, PortMapping, keep_port_mapped


def start_reachability(nursery: trio.Nursery, host: P2PHost, out: Output, network: NetworkConfig,
                       report: Callable[[str], None] | None,
                       command_for: Callable[[str], str]) -> ReachabilityWatch:
    """Start the watch (and UPnP when enabled and we listen beyond loopback); ``command_for(addr)`` is the
    join command naming ``addr`` (with ``/p2p/<id>``)."""
    watch = ReachabilityWatch(host, out, report, on_confirmed=ReachableNotice(out, host.peer_id, command_for))
    nursery.start_soon(watch.run)
    ports = listen_ports(host)
    if network.upnp and ports and beyond_loopback([str(a) for a in host.transport_addrs()]):
        def mapped(mapping: PortMapping) -> None:
            watch.add_candidate(mapping.external_port)

        nursery.start_soon(keep_port_mapped, PortMapper(ports[0]), out, mapped)
    return watch


class ReachableNotice:
    """Says when the address others can join through changes: the ``reachable`` event with the join command
    naming it, or that none is confirmed any more. Loopback-only confirmations (a local swarm) stay quiet:
    the listening event already named them."""

    def __init__(self, out: Output, peer_id: ID, command_for: Callable[[str], str]) -> None:
        self._out = out
        self._peer_id = peer_id
        self._command_for = command_for
        self.address: str | None = None

    def __call__(self, confirmed: list[str]) -> None:
        addr = join_address(confirmed)
        if addr == self.address:
            return
        self.address = addr
        if addr is None:
            self._out.emit("reachable", "reachable: no address confirmed from outside any more",
                           confirmed=confirmed, join_command=None)
            return
        command = self._command_for(f"{addr}/p2p/{self._peer_id}")
        text = f"reachable at {addr} (confirmed by dial-back probes)\n  others join with:\n    {command}"
        self._out.emit("reachable", text, confirmed=confirmed, join_command=command)
