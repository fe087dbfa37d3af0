"""The host's knobs, apart from the host so peer discovery can read them without importing the host."""

from __future__ import annotations

from dataclasses import dataclass

READ_PACE_WAIT_LIMIT = 60.0  # seconds: a paced read's wait beyond this is a mistake, not a setting


@dataclass(frozen=True)
class HostConfig:
    """Knobs for the host; defaults suit a WAN swarm, tests shorten the intervals."""

    listen_addrs: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    # Transport addresses (no /p2p/) peer exchange advertises instead of the bound ones: behind NAT or in a
    # container the bound address (0.0.0.0, a bridge IP) is not where others can reach us. Empty: bound ones.
    announce_addrs: tuple[str, ...] = ()
    dial_timeout: float = 10.0
    # Periodic peer exchange keeps the swarm converging when several nodes join through one bootstrap at
    # the same moment (each may ask before the others are known). 0 disables the loop.
    px_interval: float = 30.0
    px_fanout: int = 3
    px_timeout: float = 10.0
    max_peers: int = 64
    dial_concurrency: int = 8
    # Distinct peer ids connected from one IP address (loopback exempt): protocol/address_limit.py. 0, no
    # limit, for hosts of tests and tools; the node passes network.max_peers_per_address.
    max_peers_per_address: int = 0
    # At most how long the rest of a long Noise message may sit unread in the kernel, on a connection that
    # delivers slowly, so that its segments are acknowledged together (protocol/noise_reads.py); 0: read at
    # once. Process-wide: the last host opened sets it.
    read_pace_max_wait: float = 0.05

    def __post_init__(self) -> None:
        if not self.listen_addrs:
            raise ValueError("HostConfig.listen_addrs must not be empty")
        for name in ("dial_timeout", "px_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"HostConfig.{name} must be > 0")
        if self.px_interval < 0:
            raise ValueError("HostConfig.px_interval must be >= 0")
        if not 0 <= self.read_pace_max_wait < READ_PACE_WAIT_LIMIT:
            raise ValueError(f"HostConfig.read_pace_max_wait must be in [0, {READ_PACE_WAIT_LIMIT:g}) "
                             "seconds")
        if self.max_peers_per_address < 0:
            raise ValueError("HostConfig.max_peers_per_address must be >= 0")
        for name in ("px_fanout", "max_peers", "dial_concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"HostConfig.{name} must be >= 1")
