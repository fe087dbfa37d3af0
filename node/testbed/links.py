"""A testbed peer's access link: its rates, the named profiles of a swarm's links, and the token bucket
that shapes each direction of it (node/testbed/netns.py applies them).

Apart from the namespaces because benches and the flow model (bench/flow.py) read the profiles without
building a network.

tbf settings (see :func:`tbf_args`): ``burst`` is how many bytes may leave back to back at the veth's own
(unlimited) speed once the bucket is full: 4 ms of the rate, at least 16 KiB (11 full-size frames, so a
GSO segment train is not split frame by frame) and at most 1 MiB. It must hold one full frame (1514 B) or
nothing passes. It lets an idle link start with a short burst; over a transfer of a second it adds at most
66 ms worth of bytes (the 16 KiB floor at 2 Mbit/s), and the measured TCP rates are 96-97% of nominal on
every profile (TCP/IP framing: 1448 payload bytes per 1514), so it does not inflate them. ``latency`` sets the
queue (limit = rate x latency + burst): 50 ms, a moderately buffered home router. It does not change the
rate (a 5 ms and a 50 ms queue both gave 9.55 Mbit/s up and 92-93 Mbit/s down by TCP); it sets how long
small gossip messages may wait behind payload bulk. netem is not available here, so links have no
propagation delay: real internet paths add 10-100 ms of RTT on top.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_PEERS = 200
TBF_LATENCY_MS = 50


@dataclass(frozen=True)
class Link:
    """One peer's access link in Mbit/s (download = towards the peer, upload = from it)."""

    down_mbit: float
    up_mbit: float

    def __post_init__(self) -> None:
        for name in ("down_mbit", "up_mbit"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    def scaled(self, factor: float) -> Link:
        """Both rates times ``factor`` (a run at a fraction of the profiles' rates)."""
        return Link(self.down_mbit * factor, self.up_mbit * factor)


HOME = Link(100.0, 10.0)
GIGABIT = Link(1000.0, 1000.0)
SLOW = Link(20.0, 2.0)
# `mixed`: a volunteer swarm is uneven; the cycle starts with a well-connected seed.
MIXED_CYCLE = (GIGABIT, HOME, SLOW, HOME)
PROFILES = ("home", "gigabit", "mixed", "slow")


def profile_links(profile: str, n: int, rate_scale: float = 1.0) -> list[Link]:
    """The per-peer links of a named profile for ``n`` peers, every rate times ``rate_scale``.

    Why a scale: the time a swarm takes over its bound depends on the ratios of its links, not on their
    size, but the CPU per second its daemons need grows with the rates. On a machine with fewer cores
    than peers (8 daemons on 2 cores) the profile's own rates measure the CPU; the same swarm at a fifth
    of them measures the schedule. ``slow`` is ``home`` at 0.2."""
    if n < 1 or n > MAX_PEERS:
        raise ValueError(f"peers must be in 1..{MAX_PEERS}, got {n}")
    if not 0 < rate_scale <= 1:
        raise ValueError(f"rate_scale must be in (0, 1], got {rate_scale}")
    fixed = {"home": HOME, "gigabit": GIGABIT, "slow": SLOW}
    if profile in fixed:
        links = [fixed[profile]] * n
    elif profile == "mixed":
        links = [MIXED_CYCLE[i % len(MIXED_CYCLE)] for i in range(n)]
    else:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    if rate_scale == 1:
        return links
    return [link.scaled(rate_scale) for link in links]


def profile_name(profile: str, rate_scale: float) -> str:
    """How results name a profile run at a scale (``mixed@0.2``), so they never replace its own rates'."""
    return profile if rate_scale == 1 else f"{profile}@{rate_scale:g}"


def tbf_args(mbit: float, time_scale: float = 1.0) -> list[str]:
    """``tc qdisc`` arguments of a token bucket at ``mbit`` Mbit/s (why these values: module docstring).
    ``time_scale``: the burst's and the queue's seconds times this, so a link run at a fraction of its
    rate keeps the bytes they hold at its full rate (a dilated run, :class:`Network`)."""
    if not time_scale >= 1:
        raise ValueError(f"time_scale must be >= 1, got {time_scale}")
    rate_bytes = mbit * 1e6 / 8
    burst = int(min(max(rate_bytes * 0.004 * time_scale, 16 * 1024), 1024 * 1024))
    return ["tbf", "rate", f"{mbit:g}mbit", "burst", str(burst), "latency",
            f"{TBF_LATENCY_MS * time_scale:g}ms"]
