"""Announcement topic: delivery to all subscribers, the 16 KiB publish limit, validator hook, signing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
import trio
from distro_node.protocol.errors import AnnouncementTooLargeError
from distro_node.protocol.gossip import (
    AnnouncementChannel,
    GossipMessage,
    Validator,
    open_gossip,
)
from distro_node.protocol.gossip_config import MAX_ANNOUNCEMENT_BYTES, announce_topic
from distro_node.protocol.gossip_router import CATCH_UP_MESSAGES
from distro_node.protocol.host import P2PHost, open_host
from distro_node.protocol.testing import NO_PX_LOOP, WAIT, connect_all_to, start_hosts
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID

RUN = bytes.fromhex("ab" * 32)


@asynccontextmanager
async def gossip_swarm(
    count: int, validator: Validator | None = None
) -> AsyncIterator[tuple[list[P2PHost], list[AnnouncementChannel]]]:
    """``count`` hosts in a star around host 0 (gossip must relay), all subscribed and meshed."""
    async with start_hosts(count) as hosts, AsyncExitStack() as stack:
        chans = [await stack.enter_async_context(open_gossip(h, RUN, validator=validator)) for h in hosts]
        with trio.fail_after(WAIT):
            await connect_all_to(hosts, hosts[0])
            for h, c in zip(hosts, chans, strict=True):
                others = {o.peer_id for o in hosts if o is not h} & h.connected_peers()
                await c.wait_for_subscribers(others, timeout=WAIT)
        yield hosts, chans


async def _receive_one(chan: AnnouncementChannel) -> GossipMessage:
    with trio.fail_after(WAIT):
        return await chan.receive()


def test_topic_is_per_run() -> None:
    assert announce_topic(RUN) == f"distro/{'ab' * 32}/announce"
    assert announce_topic(b"\x01") != announce_topic(b"\x02")
    with pytest.raises(ValueError):
        announce_topic(b"")


@pytest.mark.network
def test_announcement_reaches_every_subscriber() -> None:
    async def body() -> None:
        async with gossip_swarm(4) as (hosts, chans):
            await chans[2].publish(b"step 7 payload abc")
            for i, chan in enumerate(chans):
                if i == 2:
                    continue
                msg = await _receive_one(chan)
                assert msg.sender == hosts[2].peer_id
                assert msg.data == b"step 7 payload abc"

    trio.run(body)


@pytest.mark.network
def test_many_announcements_are_all_delivered() -> None:
    """Guards against py-libp2p's default 10 msg/s per-forwarder spam limit dropping our own burst."""

    async def body() -> None:
        async with gossip_swarm(3) as (_hosts, chans):
            sent = [f"msg {i}".encode() for i in range(40)]
            for data in sent:
                await chans[1].publish(data)
            for chan in (chans[0], chans[2]):
                got = {(await _receive_one(chan)).data for _ in sent}
                assert got == set(sent)

    trio.run(body)


@pytest.mark.network
def test_publish_over_4_kib_raises_and_max_size_passes() -> None:
    async def body() -> None:
        async with gossip_swarm(2) as (hosts, chans):
            with pytest.raises(AnnouncementTooLargeError) as info:
                await chans[0].publish(b"x" * (MAX_ANNOUNCEMENT_BYTES + 1))
            assert info.value.size == MAX_ANNOUNCEMENT_BYTES + 1
            exact = b"y" * MAX_ANNOUNCEMENT_BYTES
            await chans[0].publish(exact)
            msg = await _receive_one(chans[1])
            assert msg.data == exact and msg.sender == hosts[0].peer_id

    trio.run(body)


@pytest.mark.network
def test_validator_rejects_and_sees_signed_sender() -> None:
    async def body() -> None:
        seen: list[tuple[ID, bytes]] = []

        def only_good(sender: ID, data: bytes) -> bool:
            seen.append((sender, data))
            if data == b"explode":
                raise RuntimeError("validator bug must not crash the node")
            return data.startswith(b"good")

        async with gossip_swarm(3, validator=only_good) as (hosts, chans):
            await chans[1].publish(b"bad one")
            await chans[1].publish(b"explode")
            await chans[1].publish(b"good one")
            for chan in (chans[0], chans[2]):
                msg = await _receive_one(chan)
                assert msg.data == b"good one"  # the two rejected ones never arrive, and order holds
            assert (hosts[1].peer_id, b"bad one") in seen

    trio.run(body)


@pytest.mark.network
def test_late_subscriber_gets_only_the_newest_messages_through_the_queue() -> None:
    """py-libp2p replays its whole message-cache window to a new subscriber, straight onto the stream; ours
    sends only the newest CATCH_UP_MESSAGES, in order, through the peer's outbound queue."""

    async def body() -> None:
        async with start_hosts(2) as hosts, AsyncExitStack() as stack:
            early = await stack.enter_async_context(open_gossip(hosts[0], RUN))
            sent = [f"before {i}".encode() for i in range(3 * CATCH_UP_MESSAGES)]
            for data in sent:
                await early.publish(data)
            late = await stack.enter_async_context(open_gossip(hosts[1], RUN))
            with trio.fail_after(WAIT):
                await connect_all_to(hosts, hosts[0])
                await late.wait_for_subscribers({hosts[0].peer_id}, timeout=WAIT)
                await early.wait_for_subscribers({hosts[1].peer_id}, timeout=WAIT)
            await early.publish(b"after")  # a marker: everything replayed was queued before it
            got = []
            while not got or got[-1] != b"after":
                got.append((await _receive_one(late)).data)
            assert got == [*sent[-CATCH_UP_MESSAGES:], b"after"]

    trio.run(body)


@pytest.mark.network
def test_peer_restarted_with_its_identity_is_heard_at_once() -> None:
    """Message ids are sender + sequence number; a restart must not reuse the previous process's numbers,
    or every peer drops the new messages as already seen (what kept restarted volunteers unheard)."""

    async def body() -> None:
        key = create_new_key_pair()
        async with start_hosts(1) as (hub,), open_gossip(hub, RUN) as hub_chan:
            for life, count in ((0, 30), (1, 1)):
                async with open_host(key, NO_PX_LOOP) as host, open_gossip(host, RUN) as chan:
                    with trio.fail_after(WAIT):
                        await host.dial(str(hub.addrs()[0]))
                        await chan.wait_for_subscribers({hub.peer_id}, timeout=WAIT)
                        await hub_chan.wait_for_subscribers({host.peer_id}, timeout=WAIT)
                    for i in range(count):
                        await chan.publish(f"life {life} message {i}".encode())
                    last = f"life {life} message {count - 1}".encode()
                    with trio.fail_after(WAIT):
                        while (await hub_chan.receive()).data != last:
                            pass

    trio.run(body)


@pytest.mark.network
def test_a_peer_whose_gossip_started_after_it_was_dialed_is_linked_both_ways() -> None:
    """A peer restarted with its identity and listen port is re-dialed by the others as soon as it listens,
    before its gossip is attached. py-libp2p then fails to open its pubsub stream (the remote answers 'na')
    and never tries again on that connection, so the restarted peer heard nothing from that peer for good
    (tests/peer/test_peer_rejoin.py stalled that way). Once the late peer subscribes, the link is repaired."""

    async def body() -> None:
        async with start_hosts(2) as (early, late), AsyncExitStack() as stack:
            early_chan = await stack.enter_async_context(open_gossip(early, RUN))
            with trio.fail_after(WAIT):
                await early.connect(late.peer_id, late.addrs())
                while early.peer_id not in late.connected_peers():
                    await trio.sleep(0.01)  # bounded by fail_after: the dial is in flight
                # What early's pubsub did when the connection came up: refused, and not retried.
                assert not await early_chan._pubsub.ensure_peer_stream(late.peer_id, timeout=1.0)
            late_chan = await stack.enter_async_context(open_gossip(late, RUN))
            with trio.fail_after(WAIT):
                await late_chan.wait_for_subscribers({early.peer_id}, timeout=WAIT)
                await early_chan.wait_for_subscribers({late.peer_id}, timeout=WAIT)
            with trio.fail_after(WAIT):
                while True:  # each side publishes until the other hears it (a fresh mesh may drop one)
                    await early_chan.publish(b"to the late peer")
                    with trio.move_on_after(0.5):
                        msg = await late_chan.receive()
                        assert msg.data == b"to the late peer"
                        break
            with trio.fail_after(WAIT):
                while True:
                    await late_chan.publish(b"to the early peer")
                    with trio.move_on_after(0.5):
                        msg = await early_chan.receive()
                        assert msg.data == b"to the early peer"
                        break

    trio.run(body)


@pytest.mark.network
def test_the_prefilter_drops_a_forwarders_messages_before_the_validator_sees_them() -> None:
    async def body() -> None:
        seen: list[bytes] = []

        def note(sender: ID, data: bytes) -> bool:
            seen.append(data)
            return True

        async with start_hosts(3) as hosts, AsyncExitStack() as stack:
            hub, blocked, other = hosts
            cut = blocked.peer_id
            chans = [await stack.enter_async_context(open_gossip(
                h, RUN, validator=note if h is hub else None,
                prefilter=(lambda fwd, origin: fwd != cut) if h is hub else None)) for h in hosts]
            with trio.fail_after(WAIT):
                await connect_all_to([hub, blocked, other], hub)
                await chans[0].wait_for_subscribers({blocked.peer_id, other.peer_id}, timeout=WAIT)
                for c in chans[1:]:
                    await c.wait_for_subscribers({hub.peer_id}, timeout=WAIT)
            await chans[1].publish(b"from the cut-off peer")
            await chans[2].publish(b"from the other")
            msg = await _receive_one(chans[0])
            assert msg.data == b"from the other" and seen == [b"from the other"]

    trio.run(body)
