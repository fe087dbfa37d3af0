"""Strangers whose gossip we mostly refuse are muted (protocol/gossip_mute.py): the ledger alone, then real
hosts on loopback where a flooding stranger is cut off (blacklisted, out of the mesh, disconnected and
blocked) and a member sending the same is not."""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest
import trio
from distro_node.protocol.gossip import open_gossip
from distro_node.protocol.gossip_config import GossipConfig
from distro_node.protocol.gossip_mute import MuteConfig, RefusalLedger
from distro_node.protocol.testing import WAIT, start_hosts
from libp2p.peer.id import ID

RUN = bytes.fromhex("ef" * 32)
CFG = MuteConfig(window_s=10.0, min_refused=5, max_share=0.5, mute_s=30.0, max_tracked=3)


def test_a_stranger_refused_often_and_mostly_is_muted_once() -> None:
    ledger = RefusalLedger(CFG)
    verdicts = [ledger.record("s", False, member=False, now=1.0) for _ in range(5)]
    assert verdicts == [False, False, False, False, True]
    assert ledger.muted() == {"s"}
    assert not ledger.record("s", False, member=False, now=2.0)  # already muted: reported once


def test_members_and_mostly_accepted_forwarders_are_not_muted() -> None:
    ledger = RefusalLedger(CFG)
    assert not any(ledger.record("m", False, member=True, now=1.0) for _ in range(50))
    for _ in range(6):
        ledger.record("honest", True, member=False, now=1.0)
    assert not any(ledger.record("honest", False, member=False, now=1.0) for _ in range(6))
    assert ledger.muted() == frozenset()


def test_a_former_member_is_spared_for_the_grace_and_then_counted_as_a_stranger() -> None:
    """Dropped from the roster while partitioned, it comes back forwarding stale (refused) gossip."""
    ledger = RefusalLedger(MuteConfig(window_s=10.0, min_refused=5, mute_s=30.0, member_grace_s=100.0))
    ledger.record("back", True, member=True, now=0.0)
    assert not any(ledger.record("back", False, member=False, now=99.0) for _ in range(20))
    assert any(ledger.record("back", False, member=False, now=100.0) for _ in range(5))
    assert ledger.muted() == {"back"}


def test_counts_start_over_each_window_and_mutes_expire() -> None:
    ledger = RefusalLedger(CFG)
    for t in range(4):
        ledger.record("slow", False, member=False, now=float(t * 4))  # 4 refusals spread over 3 windows
    assert ledger.muted() == frozenset()
    for _ in range(5):
        ledger.record("s", False, member=False, now=100.0)
    assert ledger.expired(129.0) == [] and ledger.expired(130.0) == ["s"]
    assert ledger.muted() == frozenset()


def test_tracking_is_bounded() -> None:
    ledger = RefusalLedger(CFG)
    for i in range(100):
        ledger.record(f"p{i}", True, member=False, now=1.0)
    assert len(ledger._tallies) == CFG.max_tracked
    for name in ("a", "b", "c", "d"):
        for _ in range(5):
            ledger.record(name, False, member=False, now=1.0)
    assert ledger.muted() == {"a", "b", "c"}  # at most max_tracked muted at once


@pytest.mark.parametrize("bad", [{"window_s": 0}, {"min_refused": 0}, {"max_share": 1.0}, {"mute_s": -1},
                                 {"member_grace_s": -1}])
def test_bad_config_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        MuteConfig(**bad)  # type: ignore[arg-type]


@pytest.mark.network
def test_flooding_stranger_is_muted_and_a_member_is_not() -> None:
    async def body() -> None:
        seen: dict[ID, int] = {}

        def refuse_junk(sender: ID, data: bytes) -> bool:
            seen[sender] = seen.get(sender, 0) + 1
            return not data.startswith(b"junk")

        hub_cfg = GossipConfig(mute=MuteConfig(min_refused=20))
        async with start_hosts(3) as hosts, AsyncExitStack() as stack:
            hub, stranger, member = hosts
            chans = [await stack.enter_async_context(
                open_gossip(h, RUN, validator=refuse_junk if h is hub else None,
                            config=hub_cfg if h is hub else None)) for h in hosts]
            chans[0].prefer_members(lambda: {str(member.peer_id)})
            with trio.fail_after(WAIT):
                for h in (stranger, member):
                    await hub.connect(h.peer_id, h.addrs())
                await chans[0].wait_for_subscribers({stranger.peer_id, member.peer_id}, timeout=WAIT)
                for c in chans[1:]:
                    await c.wait_for_subscribers({hub.peer_id}, timeout=WAIT)
                for i in range(30):
                    await chans[2].publish(f"junk from a member {i}".encode())
                    await chans[1].publish(f"junk {i}".encode())
                while seen.get(member.peer_id, 0) < 30 or chans[0].mutes < 1:
                    await trio.sleep(0.05)
            assert chans[0].refusals.muted() == {str(stranger.peer_id)}
            assert stranger.peer_id in chans[0]._pubsub.blacklisted_peers
            mesh = chans[0]._pubsub.router.mesh[chans[0].topic]  # type: ignore[attr-defined]
            with trio.fail_after(WAIT):
                while stranger.peer_id in mesh or stranger.peer_id in hub.connected_peers():
                    await trio.sleep(0.05)  # pruned at the next heartbeat, cut off within a second
            assert hub.is_blocked(stranger.peer_id)
            await chans[2].publish(b"a vote")
            with trio.fail_after(WAIT):
                assert (await chans[0].receive()).data == b"a vote"

    trio.run(body)
