"""The knobs of circuit relaying (protocol/relay_service.py, protocol/relay_client.py), in one place.

Why caps at all: a relay spends its own upload on two strangers' traffic. py-libp2p 0.8.1's defaults let a
circuit run for an hour or a GiB; ours are smaller so one busy pair cannot take a volunteer's uplink, and a
client re-establishes a circuit before its cap cuts it (``renew_before_*``), so a cut never costs a round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .circuit_renewal import Margins

if TYPE_CHECKING:  # libp2p is slow to import; node/config reads the defaults here without it
    from libp2p.relay.circuit_v2.resources import RelayLimits

MIB = 1024 * 1024


@dataclass(frozen=True)
class RelayServiceConfig:
    """What a confirmed-public peer offers as a relay (the hop side)."""

    reservations: int = 32  # about the number of private peers a relay carries
    circuits_per_reservation: int = 4  # open circuits towards one reserved peer
    circuit_bytes: int = 256 * MIB  # both directions together, then the circuit is cut
    circuit_seconds: int = 600  # then the circuit is cut
    reservation_seconds: int = 3600  # a reservation lapses unless renewed

    def __post_init__(self) -> None:
        for name in ("reservations", "circuits_per_reservation", "circuit_bytes", "circuit_seconds",
                     "reservation_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"RelayServiceConfig.{name} must be an integer >= 1, got {value!r}")

    def limits(self) -> RelayLimits:
        from libp2p.relay.circuit_v2.resources import RelayLimits

        return RelayLimits(duration=self.circuit_seconds, data=self.circuit_bytes,
                           max_circuit_conns=self.circuits_per_reservation,
                           max_reservations=self.reservations, reservation_ttl=self.reservation_seconds)


@dataclass(frozen=True)
class RelayClientConfig:
    """How a private peer uses relays (the reserving and dialing side)."""

    relays: int = 2  # reservations held at once, on distinct public peers, so one leaving is survivable
    check_seconds: float = 5.0  # how often lost reservations are replaced
    # A circuit we dialed is replaced by a fresh one this long (or this many bytes) before its relay's time
    # (byte) cap cuts it, at most half way through its life (protocol/circuit_renewal.py).
    renew_before_seconds: float = 30.0
    renew_before_bytes: int = 16 * MIB

    def __post_init__(self) -> None:
        if self.relays < 1:
            raise ValueError(f"RelayClientConfig.relays must be >= 1, got {self.relays}")
        if isinstance(self.renew_before_bytes, bool) or self.renew_before_bytes < 1:
            raise ValueError(
                f"RelayClientConfig.renew_before_bytes must be >= 1, got {self.renew_before_bytes}")
        for name in ("check_seconds", "renew_before_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"RelayClientConfig.{name} must be > 0, got {getattr(self, name)}")

    def margins(self) -> Margins:
        return Margins(self.renew_before_seconds, self.renew_before_bytes)
