"""Doctor's reachability check (node/doctor/reachability.py): with --bootstrap, a real prober on loopback
dials this machine back and the verdict is ``public`` with the confirmed address advertised first; the
verdict's three words follow what the probers saw."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import trio
from distro_node.node.doctor.reachability import NAT, PUBLIC, RELAY_ONLY, Seen, check_reachability, verdict
from distro_node.protocol.dialback import DialbackServer
from distro_node.protocol.testing import start_hosts

LOOPBACK = ("/ip4/127.0.0.1/tcp/0",)


@pytest.fixture
def prober() -> Iterator[str]:
    """A host answering dial-back probes, in a thread of its own (doctor runs its own trio loop)."""
    ready: list[str] = []
    started, stop = threading.Event(), threading.Event()

    async def serve() -> None:
        async with start_hosts(1) as (host,):
            DialbackServer(host, dial_timeout=3.0).install()
            ready.append(str(host.addrs()[0]))
            started.set()
            while not stop.is_set():  # bounded by the test's own end (stop is set in the fixture's teardown)
                await trio.to_thread.run_sync(stop.wait, 0.5)

    thread = threading.Thread(target=trio.run, args=(serve,), daemon=True)
    thread.start()
    try:
        assert started.wait(30), "the prober did not start"
        yield ready[0]
    finally:
        stop.set()
        thread.join(timeout=30)


@pytest.mark.network
def test_a_prober_that_dials_back_makes_the_verdict_public(prober: str) -> None:
    check = check_reachability(LOOPBACK, (), (prober,), upnp=True)
    details = check.details
    assert check.status == "PASS", check.summary
    assert details["verdict"] == PUBLIC
    [answer] = details["answers"]
    assert answer["observed_ip"] == "127.0.0.1" and answer["reached_ports"] == details["probed_ports"]
    assert details["advertise"][0] == f"/ip4/127.0.0.1/tcp/{details['probed_ports'][0]}"
    assert details["upnp"] == "not tried: listening on loopback only"


def test_an_unreachable_bootstrap_peer_is_a_warning_not_a_hang() -> None:
    gone = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"
    check = check_reachability(LOOPBACK, (), (gone,), upnp=False)
    assert check.status == "WARN"
    assert check.details["verdict"] is None and "unknown" in check.summary
    assert check.details["upnp"] == "off (network.upnp = false)"


@pytest.mark.parametrize(("answers", "word"), [
    ([("a", "198.51.7.1", [4747])], PUBLIC),
    ([("a", "198.51.7.1", []), ("b", "198.51.7.1", [])], NAT),
    ([("a", "198.51.7.1", []), ("b", "198.51.7.2", [])], RELAY_ONLY),  # a mapping per destination
    ([("a", "100.64.0.7", [])], RELAY_ONLY),  # carrier-grade NAT upstream
])
def test_the_verdict_in_three_words(answers: list[tuple[str, str, list[int]]], word: str) -> None:
    found = verdict(Seen(probed=True, answers=answers))
    assert found is not None and found[0] == word
    assert verdict(Seen()) is None
