"""The testbed's links deliver their profile's rates (measured with bulk TCP), and its fault actions
really cut and partition traffic, then heal it. Skipped without root or ip/tc."""

from __future__ import annotations

import subprocess

import pytest
from distro_node.node.testbed.links import GIGABIT, HOME, profile_links
from distro_node.node.testbed.netns import NetnsError, Network, congestion_controls

pytestmark = [pytest.mark.root, pytest.mark.timeout(120)]


def _reachable(net: Network, src: int, dst: int) -> bool:
    """A TCP connect attempt from src to dst (the probe's receiver), bounded by a short timeout."""
    try:
        net.measure([src], dst, seconds=0.2, connect_timeout=2.0)
    except NetnsError:
        return False
    return True


def test_home_link_rates_and_teardown() -> None:
    # Peer 0 is a gigabit seed, so it never limits what peer 1's home link is measured at.
    with Network([GIGABIT, HOME]) as net:
        up = net.measure([1], 0, seconds=2.0)["mbit"]
        down = net.measure([0], 1, seconds=2.0)["mbit"]
        prefix = net.prefix
    # TCP goodput is ~95.7% of the link rate (1448 of every 1514 bytes on the wire are payload).
    assert 8.5 <= up <= 10.2, up
    assert 85.0 <= down <= 102.0, down
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert prefix + "-" not in listed


def test_cut_and_partition_block_traffic_until_healed() -> None:
    with Network(profile_links("gigabit", 4)) as net:
        assert _reachable(net, 0, 1)
        net.cut(1)
        assert not _reachable(net, 0, 1)
        net.restore(1)
        assert _reachable(net, 0, 1)
        net.partition([2, 3])
        assert not _reachable(net, 0, 2) and not _reachable(net, 3, 1)
        assert _reachable(net, 0, 1) and _reachable(net, 2, 3)
        net.heal()
        assert _reachable(net, 0, 3) and _reachable(net, 2, 1)


def test_peers_send_with_the_congestion_control_asked_for() -> None:
    """The testbed's namespaces inherit the host's congestion control unless one is named (a host on bbr
    had the testbed's shallow queues drop 10-16 times the frames cubic did, docs/benchmarks.md)."""
    if "cubic" not in congestion_controls():
        pytest.skip("this kernel offers no cubic")
    with Network([HOME, HOME], tcp_congestion="cubic") as net:
        for i in range(2):
            got = subprocess.run([*net.exec_prefix(i), "sysctl", "-n", "net.ipv4.tcp_congestion_control"],
                                 capture_output=True, text=True, check=True, timeout=30).stdout.strip()
            assert got == "cubic"
    with pytest.raises(ValueError, match="tcp_congestion"):
        Network([HOME], tcp_congestion="no-such-control")


def test_a_dilated_network_shapes_every_queue_for_its_time_scale() -> None:
    with Network([HOME, HOME], time_scale=4.0) as net:
        for i in range(2):
            shaped = net.qdiscs(i)
            assert "lat 200ms" in shaped["upload"] and "lat 200ms" in shaped["download"], shaped
    with pytest.raises(ValueError, match="time_scale"):
        Network([HOME], time_scale=0.5)
