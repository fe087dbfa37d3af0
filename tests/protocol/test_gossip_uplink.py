"""A slow uplink holds the gossip it forwards (protocol/gossip_uplink.py): the judge of "slow" on the
testbed's mixed lines with its hysteresis, the ledger of held copies, and real routers on loopback: a slow
hub that is the only path still delivers (after the hold), and a slow peer among linked peers spares the
copies its peers already have while every message still reaches everyone."""

from __future__ import annotations

import pytest
import trio
from distro_node.protocol.gossip import AnnouncementChannel
from distro_node.protocol.gossip_config import GossipConfig
from distro_node.protocol.gossip_router import RunRouter
from distro_node.protocol.gossip_uplink import HeldForwards, SlowUplink
from distro_node.protocol.host import P2PHost
from distro_node.protocol.testing import WAIT, wait_until
from gossip_support import router, sent_rpcs, star
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

# Per-piece rates a peer's fetches measure on the testbed's mixed lines (bytes/s, 2 upload slots): gigabit
# holders held back by the fetcher's own downlink, 100/10 holders at half their uplink, 20/2 at half theirs.
SLOW_VIEW = [2 * r for r in (625e3, 625e3, 625e3, 625e3, 625e3 / 4, 125e3 / 8)]
HOME_VIEW = [2 * r for r in (1.5e6, 1.5e6, 625e3, 625e3, 125e3 / 8, 125e3 / 8)]
HOLD = 0.5


def _ids(count: int) -> list[ID]:
    return [ID.from_pubkey(create_new_key_pair().public_key) for _ in range(count)]


def test_a_2_mbit_uplink_among_faster_lines_is_slow_and_a_10_mbit_one_is_not() -> None:
    assert SlowUplink(0.5).update(250e3, SLOW_VIEW)
    assert not SlowUplink(0.5).update(1.25e6, HOME_VIEW)
    # As the testbed's peers read them at a quarter of the rates (gossip_uplink.py's docstring).
    assert SlowUplink(0.5).update(83e3, [252e3] * 6)
    assert not SlowUplink(0.5).update(604e3, [237e3] * 6)


def test_equal_lines_are_not_slow_even_when_ours_reads_half() -> None:
    assert not SlowUplink(0.5).update(1.25e6 / 2 + 1, [1.25e6] * 7)


def test_slow_ends_only_well_past_the_line() -> None:
    judge = SlowUplink(0.5)
    peers = [3e6] * 5
    assert judge.update(1.4e6, peers)  # under half of 3 MB/s
    assert judge.update(2.5e6, peers)  # over half, under the median: stays slow
    assert not judge.update(3.1e6, peers)
    assert not judge.update(2.5e6, peers)  # and slow again only under half
    assert not judge.update(None, peers) and not judge.update(0.1, [])  # nothing measured: unchanged


def test_off_and_bad_settings() -> None:
    assert not SlowUplink(0.0).update(1.0, [1e9])
    with pytest.raises(ValueError, match="ratio"):
        SlowUplink(0.6)
    with pytest.raises(ValueError, match="slow_uplink_ratio"):
        GossipConfig(slow_uplink_ratio=0.7)
    with pytest.raises(ValueError, match="slow_uplink_hold"):
        GossipConfig(slow_uplink_hold=0.0)
    with pytest.raises(ValueError, match="uplink_check_interval"):
        GossipConfig(uplink_check_interval=-1.0)
    with pytest.raises(ValueError, match="cap"):
        HeldForwards(cap=0)
    with pytest.raises(ValueError, match="slow_uplink_hold"):
        RunRouter(protocols=[], degree=4, degree_low=3, degree_high=8, slow_uplink_hold=-1.0)


def test_a_copy_strikes_its_sender_off_before_or_while_the_message_is_held() -> None:
    a, b, c, d = _ids(4)
    held = HeldForwards(cap=2)
    held.copy_from(b"m1", a)  # a's copy overtook our own check of the message
    assert held.hold(b"m1", {a, b, c})
    held.copy_from(b"m1", b)
    held.copy_from(b"m1", d)  # not held for d: nothing to strike
    assert not held.hold(b"m1", {d}), "a message is held once"
    assert held.release(b"m1") == {c}
    assert held.release(b"m1") == set(), "released once"


def test_held_messages_and_early_copies_are_bounded() -> None:
    a, b = _ids(2)
    held = HeldForwards(cap=2)
    assert held.hold(b"m1", {a}) and held.hold(b"m2", {a})
    assert not held.hold(b"m3", {a}), "beyond the cap a message is forwarded at once"
    assert len(held) == 2
    for i in range(5):
        held.copy_from(b"early %d" % i, b)  # only the last 2 ids are remembered
    assert held.hold(b"early 4", {b}) is False  # still full: m1 and m2 are held
    held.release(b"m1")
    assert held.hold(b"early 0", {b}) and held.release(b"early 0") == {b}, "an early copy forgotten"
    assert held.hold(b"early 4", {b}) and held.release(b"early 4") == set()


def _all_members(hosts: list[P2PHost], chans: list[AnnouncementChannel]) -> None:
    ids = {str(h.peer_id) for h in hosts}
    for chan in chans:
        chan.prefer_members(lambda: ids)


@pytest.mark.network
def test_a_slow_hub_that_is_the_only_path_forwards_when_the_hold_ends() -> None:
    async def body() -> None:
        async with star(4, GossipConfig(slow_uplink_hold=HOLD)) as (hosts, chans):
            _all_members(hosts, chans)
            hub = router(chans[0])
            hub.slow_uplink = True
            started = trio.current_time()
            await chans[1].publish(b"from spoke 1")
            for chan in chans[2:]:
                with trio.fail_after(WAIT):
                    assert (await chan.receive()).data == b"from spoke 1"
            assert trio.current_time() - started >= HOLD, "the spokes got it before the hold ended"
            assert hub.forwards_held == 2 and hub.forwards_late == 2, "the other spokes could not have it"

    trio.run(body)


@pytest.mark.network
def test_a_slow_peer_among_linked_peers_spares_copies_and_every_message_reaches_everyone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rpcs = sent_rpcs(monkeypatch)
    messages = [(spoke, b"spoke %d message %d" % (spoke, i)) for spoke in range(1, 5) for i in range(3)]

    async def body() -> None:
        async with star(5, GossipConfig(slow_uplink_hold=HOLD), spokes_linked=True) as (hosts, chans):
            _all_members(hosts, chans)
            for chan in chans:
                await wait_until(lambda chan=chan: len(router(chan).mesh.get(chan.topic, ())) == 4,
                                 "every peer meshes with the other four")
            hub = router(chans[0])
            hub.slow_uplink = True
            for spoke, data in messages:
                await chans[spoke].publish(data)
            for index, chan in enumerate(chans):
                want = sorted(data for spoke, data in messages if spoke != index)
                got = []
                for _ in want:
                    with trio.fail_after(WAIT):
                        got.append((await chan.receive()).data)
                assert sorted(got) == want
            # Every held copy's hold has ended once the last message's has.
            await wait_until(lambda: len(hub._held) == 0, "the hub's holds end")
            forwarded = [msg for sender, _, rpc in rpcs if sender is hub for msg in rpc.publish]
            assert hub.forwards_held >= 3 * len(messages) - 3, "three mesh peers a message were held"
            assert len(forwarded) == hub.forwards_late <= hub.forwards_held // 4

    trio.run(body)


@pytest.mark.network
def test_the_channel_judges_its_uplink_from_the_rates_it_is_given() -> None:
    rates = {"own": 1e3}

    async def body() -> None:
        async with star(2, GossipConfig(uplink_check_interval=0.05)) as (_, chans):
            hub = router(chans[0])
            async with trio.open_nursery() as nursery:
                nursery.start_soon(chans[0].follow_uplink, lambda: rates["own"], lambda: [1e6] * 4)
                await wait_until(lambda: hub.slow_uplink, "a 1 KB/s uplink among 1 MB/s ones is slow")
                rates["own"] = 2e6
                await wait_until(lambda: not hub.slow_uplink, "and fast again above the median")
                nursery.cancel_scope.cancel()

    trio.run(body)
