"""Asking the home router (a UPnP Internet Gateway Device) to forward our listen port, through miniupnpc.

Why: most home machines sit behind a NAT that drops unsolicited connections, and many home routers will
forward a port on request. A mapped port makes the node dialable from anywhere without relays; the mapping
is only a *candidate*: the reachability watch (reachability_watch.py) has other peers dial it back, and only
a confirmed address is advertised (a second NAT upstream or a firewall makes a mapping useless).

miniupnpc's calls block (SSDP discovery waits ``discover_ms``, each SOAP call waits on the router), so each
runs in a worker thread under a trio deadline; a router that stops answering costs at most ``call_timeout``
per call and the thread is abandoned. The mapping is leased for ``lease_seconds`` and renewed at half of
that, so a node that dies without cleaning up leaves no mapping behind for long; a clean exit deletes it.
Nothing here is fatal: no router, or one that refuses, is said once (event ``upnp`` and a log line) and the
node goes on (relays, once they exist, carry it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import trio

from .output import Output

logger = logging.getLogger(__name__)

LEASE_SECONDS = 3600
DISCOVER_MS = 2000
CALL_TIMEOUT_S = 10.0
DESCRIPTION = "distro-node"

T = TypeVar("T")


class UpnpError(Exception):
    """No usable gateway, or the gateway refused; the message says which and why."""


class Gateway(Protocol):
    """The part of ``miniupnpc.UPnP`` we use (a fake in unit tests)."""

    discoverdelay: int
    lanaddr: str

    def discover(self) -> int: ...
    def selectigd(self) -> Any: ...
    def externalipaddress(self) -> str: ...
    def addportmapping(self, eport: int, proto: str, ihost: str, iport: int, desc: str, remote: str,
                       lease: int) -> Any: ...
    def deleteportmapping(self, eport: int, proto: str) -> Any: ...


def miniupnpc_gateway() -> Gateway:
    """A fresh miniupnpc client (imported here: only nodes that try UPnP need the module)."""
    try:
        import miniupnpc  # type: ignore[import-not-found]  # a C extension without stubs
    except ImportError as exc:
        raise UpnpError(f"the miniupnpc module is not installed ({exc})") from None
    gateway: Gateway = miniupnpc.UPnP()
    return gateway


@dataclass(frozen=True)
class PortMapping:
    """What the router agreed to: ``external_ip:external_port`` forwards to ``lan_ip:internal_port``."""

    external_ip: str
    external_port: int
    lan_ip: str
    internal_port: int

    def describe(self) -> str:
        return f"{self.external_ip}:{self.external_port} -> {self.lan_ip}:{self.internal_port}"


class PortMapper:
    """One TCP port mapping on the router: ``open`` discovers the IGD and maps, ``renew`` re-leases,
    ``close`` deletes. Every call raises UpnpError (never anything else) on failure."""

    def __init__(self, port: int, *, lease_seconds: int = LEASE_SECONDS, discover_ms: int = DISCOVER_MS,
                 call_timeout: float = CALL_TIMEOUT_S,
                 make_gateway: Callable[[], Gateway] = miniupnpc_gateway) -> None:
        if not 1 <= port <= 65535:
            raise ValueError(f"UPnP: port must be in 1..65535, got {port}")
        if lease_seconds < 1:
            raise ValueError(f"UPnP: lease_seconds must be >= 1, got {lease_seconds}")
        self.port = port
        self.lease_seconds = lease_seconds
        self._discover_ms = discover_ms
        self._timeout = call_timeout
        self._make_gateway = make_gateway
        self._gateway: Gateway | None = None
        self.mapping: PortMapping | None = None

    async def _call(self, what: str, fn: Callable[[], T], timeout: float | None = None) -> T:
        try:
            with trio.fail_after(timeout or self._timeout):
                # mypy misreads run_sync's *args (a TypeVarTuple) next to this keyword; trio >= 0.23 has it
                return await trio.to_thread.run_sync(fn, abandon_on_cancel=True)  # type: ignore[call-arg]
        except trio.TooSlowError:
            raise UpnpError(f"{what}: no answer within {timeout or self._timeout:g}s") from None
        except UpnpError:
            raise
        except Exception as exc:  # miniupnpc raises bare Exception with the router's error text
            raise UpnpError(f"{what}: {exc}") from None

    async def open(self) -> PortMapping:
        gateway = self._make_gateway()
        gateway.discoverdelay = self._discover_ms

        def find() -> None:
            try:
                found = gateway.discover()
            except Exception:  # miniupnpc raises (text "Success") instead of returning 0 when none answers
                found = 0
            if found < 1:
                raise UpnpError("no UPnP device answered on the local network")
            gateway.selectigd()  # raises when none of them is an Internet Gateway Device

        await self._call("discovering a UPnP gateway", find, self._timeout + self._discover_ms / 1000)
        external_ip = await self._call("asking the gateway for its external address",
                                       gateway.externalipaddress)
        if not external_ip or not gateway.lanaddr:
            raise UpnpError("the gateway did not say its external address or ours")
        self._gateway = gateway
        self.mapping = PortMapping(str(external_ip), self.port, gateway.lanaddr, self.port)
        await self.renew()
        return self.mapping

    async def renew(self) -> None:
        """(Re)lease the mapping; the router treats a repeat for the same client as an update."""
        gateway, mapping = self._gateway, self.mapping
        if gateway is None or mapping is None:
            raise UpnpError("no gateway: open() first")
        what = f"mapping TCP port {mapping.external_port}"
        try:
            await self._call(what, lambda: gateway.addportmapping(
                mapping.external_port, "TCP", mapping.lan_ip, mapping.internal_port, DESCRIPTION, "",
                self.lease_seconds))
        except UpnpError as exc:
            if "OnlyPermanentLeasesSupported" not in str(exc):
                raise
            # IGDv1 routers may refuse leases: map for good; close() (or the router's reboot) removes it.
            await self._call(what, lambda: gateway.addportmapping(
                mapping.external_port, "TCP", mapping.lan_ip, mapping.internal_port, DESCRIPTION, "", 0))

    async def close(self) -> None:
        gateway, mapping = self._gateway, self.mapping
        self._gateway = self.mapping = None
        if gateway is not None and mapping is not None:
            await self._call(f"deleting the mapping of TCP port {mapping.external_port}",
                             lambda: gateway.deleteportmapping(mapping.external_port, "TCP"))


async def keep_port_mapped(mapper: PortMapper, out: Output, on_mapped: Callable[[PortMapping], None]) -> None:
    """Map, hand the mapping on, renew it at half its lease until cancelled, then delete it (bounded).

    Failures are said once each way (the first failure, and a renewal that failed after working) and never
    end the node."""
    try:
        mapping = await mapper.open()
    except UpnpError as exc:
        logger.info("UPnP: no port mapping (%s); reachable through other peers only", exc)
        out.emit("upnp", f"upnp: no port mapping ({exc}); going on without one", mapped=False,
                 reason=str(exc))
        return
    logger.info("UPnP: router maps %s", mapping.describe())
    out.emit("upnp", f"upnp: router maps {mapping.describe()} (to be confirmed by dial-back probes)",
             mapped=True, external=f"{mapping.external_ip}:{mapping.external_port}")
    on_mapped(mapping)
    failing = False
    try:
        while True:
            await trio.sleep(max(1.0, mapper.lease_seconds / 2))
            try:
                await mapper.renew()
                failing = False
            except UpnpError as exc:
                if not failing:
                    logger.warning("UPnP: renewing the mapping failed (%s); retrying", exc)
                failing = True
    finally:
        with trio.CancelScope(shield=True):
            try:
                await mapper.close()
            except UpnpError as exc:
                logger.info("UPnP: %s (the router drops it when its lease ends)", exc)
