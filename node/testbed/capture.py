"""What a testbed peer's uplink carries, sorted by kind of frame: a tcpdump of its veth's outbound frames.

Why: tbf's counters (:meth:`Network.uplink_counters`) give a link's bytes and frames, not what they were. On a
slow uplink the pieces a peer serves are only part of it: the acknowledgements of what it downloads, piece
requests, polls and their answers, gossip and session set-up share the line, and at 8 mixed peers they took a
quarter of a 2 Mbit/s uplink's bytes (docs/benchmarks.md). Everything above TCP is encrypted, but the size of
a frame's TCP payload tells the kinds apart well enough: none is a pure acknowledgement, a full segment is
bulk (pieces), anything between is a control message (requests, polls, window updates, gossip).

Needs root and tcpdump (:func:`available` says why not). The capture keeps headers only (``SNAPLEN``).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from .netns import PEER_IF, Network
from .shell import NetnsError

SNAPLEN = 96  # Ethernet, IPv4 and TCP headers with their options; no payload is kept
BULK_PAYLOAD = 1400  # a TCP payload at least this long is a full-size segment of bulk data
# Control messages by TCP payload: under 50 bytes window updates, polls and their answers; 50-299 piece
# requests and replies' headers; 300 and more mostly gossip (a signed announcement is about 300 bytes).
CONTROL_BINS = ((0, 50), (50, 100), (100, 300), (300, BULK_PAYLOAD))
_MAX_RECORD = 262_144  # tcpdump's own snapshot ceiling: a longer record means a corrupt file
_START_WAIT = 10.0  # seconds tcpdump may take to open its file
# A pcap file's first 4 bytes: byte order, and whether its time stamps count micro- or nanoseconds.
_MAGIC = {b"\xd4\xc3\xb2\xa1": ("<", 1e6), b"\x4d\x3c\xb2\xa1": ("<", 1e9),
          b"\xa1\xb2\xc3\xd4": (">", 1e6), b"\xa1\xb2\x3c\x4d": (">", 1e9)}


class CaptureError(ValueError):
    """A capture file that is not a readable pcap of Ethernet frames."""


def available() -> str | None:
    """None when a capture can run here, else why not."""
    if os.geteuid() != 0:
        return "needs root"
    if shutil.which("tcpdump") is None:
        return "needs tcpdump (apt-get install tcpdump)"
    return None


def _kind(frame: bytes) -> tuple[str, int]:
    """('ack' | 'control' | 'bulk' | 'other', TCP payload bytes) of one captured Ethernet frame."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00":
        return "other", 0
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[9] != 6 or len(ip) < ihl + 13:
        return "other", 0
    total = struct.unpack(">H", ip[2:4])[0]
    payload = total - ihl - (ip[ihl + 12] >> 4) * 4
    if payload <= 0:
        return "ack", 0
    return ("bulk" if payload >= BULK_PAYLOAD else "control"), payload


def classify(path: Path) -> dict[str, Any]:
    """Frames and wire bytes (Ethernet frames as tbf counts them) per kind, and control messages per payload
    size (``CONTROL_BINS``). Raises :class:`CaptureError` naming what is wrong with a file that is not a
    pcap of Ethernet frames."""
    data = path.read_bytes()
    if len(data) < 24:
        raise CaptureError(f"{path}: {len(data)} bytes, shorter than a pcap header")
    magic = data[:4]
    if magic not in _MAGIC:
        raise CaptureError(f"{path}: not a pcap file (magic {magic.hex()})")
    order, tick = _MAGIC[magic]
    link = struct.unpack(order + "I", data[20:24])[0]
    if link != 1:
        raise CaptureError(f"{path}: not Ethernet frames (link type {link})")
    kinds = {k: {"frames": 0, "bytes": 0} for k in ("bulk", "control", "ack", "other")}
    bins = {f"{lo}-{hi - 1}": 0 for lo, hi in CONTROL_BINS}
    first = last = None
    at = 24
    while at < len(data):
        if at + 16 > len(data):
            raise CaptureError(f"{path}: a record header cut short at byte {at}")
        sec, frac, incl, orig = struct.unpack(order + "IIII", data[at:at + 16])
        if incl > _MAX_RECORD or at + 16 + incl > len(data):
            raise CaptureError(f"{path}: a record of {incl} bytes at byte {at} runs past the file or the cap")
        kind, payload = _kind(data[at + 16:at + 16 + incl])
        kinds[kind]["frames"] += 1
        kinds[kind]["bytes"] += orig
        if kind == "control":
            bins[next(f"{lo}-{hi - 1}" for lo, hi in CONTROL_BINS if lo <= payload < hi)] += 1
        stamp = sec + frac / tick
        first = stamp if first is None else first
        last = stamp
        at += 16 + incl
    total = sum(k["bytes"] for k in kinds.values())
    return {"seconds": round((last or 0.0) - (first or 0.0), 3),
            "frames": sum(k["frames"] for k in kinds.values()), "bytes": total, "kinds": kinds,
            "share": {k: round(v["bytes"] / total, 4) if total else 0.0 for k, v in kinds.items()},
            "control_frames_by_payload": bins}


class UplinkCapture:
    """tcpdump of peer ``peer``'s outbound frames into ``path`` while the ``with`` block runs; stopped by
    its pid when the block ends, whatever happened."""

    def __init__(self, net: Network, peer: int, path: Path) -> None:
        why = available()
        if why is not None:
            raise NetnsError(["tcpdump"], why)
        self.net, self.peer, self.path = net, peer, path
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> UplinkCapture:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Begin capturing; returns once tcpdump has its file open (:class:`NetnsError` if it cannot)."""
        self.path.unlink(missing_ok=True)
        argv = [*self.net.exec_prefix(self.peer), "tcpdump", "-i", PEER_IF, "-Q", "out", "-s", str(SNAPLEN),
                "-U", "-w", str(self.path)]
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + _START_WAIT
        while not (self.path.exists() and self.path.stat().st_size >= 24):  # bounded: the deadline below
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise NetnsError(argv, "tcpdump did not start capturing")
            time.sleep(0.05)

    def stop(self) -> None:
        """End the capture (by pid; killed if it does not stop within 10 s). Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
