"""The verdict on the libp2p stack's loopback ceiling (measured by ``doctor_loopback``) against the payload
budget.

Why it matters: Noise encryption and yamux framing run in Python on the node's CPU, so the stack has a
throughput limit of its own that no uplink upgrade lifts. Kept apart from the measurement so that importing
the doctor does not import libp2p unless ``--measure-bandwidth`` asks for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from distro_node.node.doctor.report import FAIL, PASS, SKIP, WARN, Check, human_bytes

MAX_BYTES = 64 * 1000 * 1000


class BandwidthError(Exception):
    """The loopback transfer did not complete (timed out, or the stack failed)."""


@dataclass(frozen=True)
class LoopbackRate:
    nbytes: int
    seconds: float

    @property
    def bits_per_second(self) -> float:
        return self.nbytes * 8 / self.seconds


def check_bandwidth(rate: LoopbackRate | BandwidthError | None, needed_bits_per_second: float) -> Check:
    """``needed`` is what one exchange must move per second of compute to stay hidden behind it."""
    if rate is None:
        return Check(
            "bandwidth", SKIP, "not measured (--measure-bandwidth times the libp2p stack on loopback)"
        )
    if isinstance(rate, BandwidthError):
        return Check(
            "bandwidth", FAIL, str(rate),
            hint="the libp2p stack cannot move data even on loopback: check the CPU load and libp2p install",
        )
    mbit = rate.bits_per_second / 1e6
    summary = (
        f"libp2p over loopback: {mbit:,.0f} Mbit/s ({human_bytes(rate.nbytes)} in {rate.seconds:.2f} s); "
        f"the payload budget needs {needed_bits_per_second / 1e6:,.2f} Mbit/s to hide behind compute"
    )
    details = {
        "bytes": rate.nbytes,
        "seconds": rate.seconds,
        "bits_per_second": rate.bits_per_second,
        "needed_bits_per_second": needed_bits_per_second,
    }
    if rate.bits_per_second < needed_bits_per_second:
        return Check(
            "bandwidth", WARN, summary,
            hint="the stack itself (Noise + yamux in Python on this CPU) is slower than the payload budget "
            "needs: send less per step (distro) or give the node more CPU",
            details=details,
        )
    return Check("bandwidth", PASS, summary, details=details)
