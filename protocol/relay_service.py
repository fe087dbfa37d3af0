"""Circuit relay v2 on our host: the stop side on every peer, the hop side on confirmed-public ones.

py-libp2p 0.8.1 implements the protocol (``libp2p/relay/circuit_v2/``); what this module adds:
- its handlers go through :meth:`P2PHost.set_handler`, so a banned peer, a stranger refused by a permissioned
  run and (for the hop) a peer whose identify shows no protocol of ours get a reset like on every other
  protocol, before any reservation is looked at;
- a reservation is only for the peer asking: the library takes the peer id from the request when present,
  so anyone could have reserved slots in another peer's name;
- the caps of :class:`RelayServiceConfig` (the library's per-circuit bandwidth caps are never applied; its
  byte and time caps are, and we set them);
- each circuit's end closes that circuit's two streams and nothing else: the library files its circuits
  in a table keyed by peer id, so a second circuit of the same peer (a renewal, or a peer dialing two others
  through us) overwrote the first's entry, and the first one ending closed the second's streams;
- a circuit cut at a cap is only reset: the library wrote a STATUS message into it first, in the middle of
  the two peers' encrypted bytes;
- counts (reservations taken and refused, bytes carried, circuits cut at a cap) for metrics.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio
from libp2p.abc import INetStream
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL
from libp2p.relay.circuit_v2.protocol import STOP_PROTOCOL_ID as STOP_PROTOCOL
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.tools.anyio_service import background_trio_service

from .host import P2PHost
from .relay_config import RelayServiceConfig
from .wire import reset_quietly

__all__ = ["HOP_PROTOCOL", "STOP_PROTOCOL", "RelayCounts", "RelayService", "open_relay_service"]


@dataclass
class RelayCounts:
    reservations: int = 0
    refused: int = 0  # reservations asked in another peer's name
    relayed_bytes: int = 0  # carried for others, both directions
    cut_at_cap: int = 0  # circuit directions cut at their time or byte cap (protocol/circuit_keeper.py renews
    # circuits before that, so this stays 0 while every dialer renews in time)


# What py-libp2p 0.8.1's hop says when it cuts a running circuit at a cap (protocol.py, _relay_data).
_CAP_CUTS = frozenset({"Circuit duration limit exceeded", "Data transfer limit exceeded"})


class _MemberCircuits(CircuitV2Protocol):
    """The library's protocol, with a reservation bound to the asker and its relayed bytes counted."""

    def __init__(self, *args: Any, counts: RelayCounts, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.counts = counts
        create = self.resource_manager.create_reservation

        def counted(peer_id: ID) -> Any:
            counts.reservations += 1
            return create(peer_id)

        self.resource_manager.create_reservation = counted  # type: ignore[method-assign]
        self._active_relays = _Unfiled()

    async def _handle_reserve(self, stream: INetStream, msg: HopMessage) -> None:
        asker = stream.muxed_conn.peer_id
        if msg.HasField("peer") and msg.peer.id and msg.peer.id != asker.to_bytes():
            self.counts.refused += 1
            await self._send_status(stream, StatusCode.PERMISSION_DENIED, "a peer reserves only for itself")
            return
        await super()._handle_reserve(stream, msg)

    async def _relay_data(self, src_stream: INetStream, dst_stream: INetStream, peer_id: ID,
                          deadline: float | None = None, circuit_data_limit: list[int] | None = None) -> None:
        try:
            await super()._relay_data(src_stream, dst_stream, peer_id, deadline, circuit_data_limit)
        finally:  # one direction ended: the circuit is over, the other direction's read ends with it
            with trio.CancelScope(shield=True):
                await reset_quietly(src_stream)
                await reset_quietly(dst_stream)

    async def _send_status(self, stream: Any, code: StatusCode, message: str, limit: Any = None) -> None:
        if message in _CAP_CUTS:  # mid-circuit the stream carries the two peers' Noise bytes: no status
            self.counts.cut_at_cap += 1
            return
        await super()._send_status(stream, code, message, limit)

    async def _read_stream_with_retry(self, stream: INetStream, *args: Any, **kwargs: Any) -> bytes:
        data = await super()._read_stream_with_retry(stream, *args, **kwargs)
        self.counts.relayed_bytes += len(data or b"")
        return data or b""


class _Unfiled(dict[ID, tuple[INetStream, INetStream | None]]):
    """The library's circuit table, kept empty: its cleanup by peer id closed other circuits of the peer
    (each circuit closes its own streams in ``_MemberCircuits._relay_data`` instead)."""

    def __setitem__(self, key: ID, value: tuple[INetStream, INetStream | None]) -> None:
        return None


class RelayService:
    """The relay protocol of one host; :func:`open_relay_service` runs it."""

    def __init__(self, host: P2PHost, protocol: _MemberCircuits) -> None:
        self._host = host
        self.protocol = protocol
        self.serving_hop = False

    @property
    def counts(self) -> RelayCounts:
        return self.protocol.counts

    def serve_hop(self, on: bool) -> None:
        """Relay for others (only where dial-back probes confirmed we are public), or stop relaying."""
        if on and not self.serving_hop:
            self._host.set_handler(HOP_PROTOCOL, self.protocol._handle_hop_stream, members_only=True)
        elif not on and self.serving_hop:
            self._host.remove_handler(HOP_PROTOCOL)
        self.serving_hop = on

    def reserved(self) -> int:
        """Reservations held on us now (the library's table; expired ones are dropped as it goes)."""
        return sum(not r.is_expired() for r in self.protocol.resource_manager._reservations.values())


@asynccontextmanager
async def open_relay_service(host: P2PHost, config: RelayServiceConfig | None = None,
                             hop: bool = False) -> AsyncIterator[RelayService]:
    """Accept relayed connections (stop) for the duration of the block; relay for others when ``hop``."""
    cfg = config or RelayServiceConfig()
    protocol = _MemberCircuits(host.libp2p, limits=cfg.limits(), allow_hop=False, counts=RelayCounts())
    async with background_trio_service(protocol):
        await protocol.event_started.wait()
        # The library registered the stop handler unguarded: replace it with ours.
        host.set_handler(STOP_PROTOCOL, protocol._handle_stop_stream)
        service = RelayService(host, protocol)
        service.serve_hop(hop)
        try:
            yield service
        finally:
            service.serve_hop(False)
            host.remove_handler(STOP_PROTOCOL)
