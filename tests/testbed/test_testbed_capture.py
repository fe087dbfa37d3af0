"""A peer's uplink sorted by kind of frame (node/testbed/capture.py): the classifier on hand-made pcap files
(no root), and a real capture of a bulk transfer in the testbed (root and tcpdump)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from distro_node.node.testbed.capture import CaptureError, UplinkCapture, available, classify
from distro_node.node.testbed.links import GIGABIT, HOME
from distro_node.node.testbed.netns import Network


def _tcp_frame(payload: int, proto: int = 6) -> bytes:
    """Ethernet, IPv4 and a 20-byte TCP header, claiming ``payload`` bytes after them."""
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + 20 + payload, 0, 0, 64, proto, 0, bytes(4), bytes(4))
    tcp = struct.pack(">HHIIBBHHH", 1, 2, 0, 0, 5 << 4, 0x10, 0, 0, 0)
    return bytes(12) + b"\x08\x00" + ip + tcp


def _pcap(frames: list[tuple[bytes, int]], tmp_path: Path, magic: int = 0xA1B2C3D4) -> Path:
    """A little-endian pcap of (captured bytes, wire length) records, one a second."""
    out = struct.pack("<IHHiIII", magic, 2, 4, 0, 0, 96, 1)
    for i, (data, wire) in enumerate(frames):
        out += struct.pack("<IIII", 100 + i, 0, len(data), wire) + data
    path = tmp_path / "up.pcap"
    path.write_bytes(out)
    return path


def test_frames_are_sorted_by_their_tcp_payload(tmp_path: Path) -> None:
    frames = [(_tcp_frame(0), 66), (_tcp_frame(0), 66), (_tcp_frame(1448), 1514), (_tcp_frame(37), 103),
              (_tcp_frame(300), 366), (_tcp_frame(60, proto=17), 102),
              (bytes(12) + b"\x86\xdd" + bytes(60), 74)]
    got = classify(_pcap(frames, tmp_path))
    assert got["kinds"] == {"ack": {"frames": 2, "bytes": 132}, "bulk": {"frames": 1, "bytes": 1514},
                            "control": {"frames": 2, "bytes": 469}, "other": {"frames": 2, "bytes": 176}}
    assert got["frames"] == 7 and got["bytes"] == 2291 and got["seconds"] == 6.0
    assert got["control_frames_by_payload"] == {"0-49": 1, "50-99": 0, "100-299": 0, "300-1399": 1}
    assert got["share"]["bulk"] == pytest.approx(1514 / 2291, abs=1e-4)


@pytest.mark.parametrize(("damage", "match"), [
    (lambda b: b[:10], "shorter than a pcap header"),
    (lambda b: b"\x00\x11\x22\x33" + b[4:], "not a pcap file"),
    (lambda b: b[:20] + struct.pack("<I", 101) + b[24:], "not Ethernet frames"),
    (lambda b: b[:-5], "runs past the file"),
    (lambda b: b + b"\x01\x02", "cut short"),
])
def test_a_damaged_capture_is_refused_by_what_is_wrong(tmp_path: Path, damage: Callable[[bytes], bytes],
                                                        match: str) -> None:
    path = _pcap([(_tcp_frame(0), 66)], tmp_path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CaptureError, match=match):
        classify(path)


@pytest.mark.root
@pytest.mark.timeout(60)
def test_a_bulk_transfer_leaves_as_full_segments_and_its_replies_as_acknowledgements(tmp_path: Path) -> None:
    """Peer 0 sends bulk TCP to peer 1 for a second: its uplink is mostly full segments; peer 1's carries the
    acknowledgements, one for every one or two segments."""
    why = available()
    if why is not None:
        pytest.skip(why)
    with Network([GIGABIT, HOME]) as net:
        sent, got = tmp_path / "sender.pcap", tmp_path / "receiver.pcap"
        with UplinkCapture(net, 0, sent), UplinkCapture(net, 1, got):
            net.measure([0], 1, seconds=1.0)
    sender, receiver = classify(sent), classify(got)
    assert sender["kinds"]["bulk"]["frames"] > 1000 and sender["share"]["bulk"] > 0.9
    segments, acks = sender["kinds"]["bulk"]["frames"], receiver["kinds"]["ack"]["frames"]
    assert segments / 3 <= acks <= segments
