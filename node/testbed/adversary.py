"""A test-only adversary: the real ``distro-node`` daemon with a few functions replaced, one kind of attack
each. Not reachable from the product (no flag or config selects it; it lives with the test and bench
machinery in node/testbed/); attack tests and benches start it as a process beside honest daemons
(tests/peer/peer_procs.py ``Procs.start_adversary``), so every message it sends is correctly signed by its
own key, as a real attacker's would be.

Kinds:
    forge-list  as leader, names a hash of its choosing for every other peer's entry and signs those
                entries itself (it cannot sign in their name): the leader-chooses-the-aggregate attack.
    equivocate  signs and announces a second, different payload for every step (and serves both).
    double-vote with every prevote and precommit it casts, signs and sends one for another list.
    jump-epochs with every status it sends, sends one for an epoch 500 later.
    gossip-flood  once it is in the roster (a stranger's flood gets it muted), sends every peer 1,000
                well-formed signed heartbeats a second (each different), beside its honest traffic,
                written straight into its pubsub queues; it signs a minute's worth ahead while it waits.
    lying-donor describes zeroed weights under a roster of itself and 4 Sybil identities it runs, which
                answer state requests alike (node/testbed/adversary_donor.py).
    withhold, conflicting-claim, replay-goodbye, meta-flood, px-rewrite: see node/testbed/adversary_more.py.

Kinds combine: ``double-vote,jump-epochs`` applies both patches.

Run: python -m distro_node.node.testbed.adversary KIND[,KIND...] join ARGS...
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio
from distro_node.node.cli.main import main
from distro_node.node.peer import node as peer_node
from distro_node.node.peer.announcer import Announcer
from distro_node.node.peer.intake import GossipDecoder
from distro_node.protocol import authorship
from distro_node.protocol.ballots import Status, Vote, vote_statement
from distro_node.protocol.consensus import agreement, epochs, round_state
from distro_node.protocol.consensus.actions import Publish
from distro_node.protocol.gossip import AnnouncementChannel
from distro_node.protocol.messages import Announcement, Heartbeat, InclusionList

from .adversary_donor import patch_lying_donor
from .adversary_more import PATCHES_MORE, member
from .raw_gossip import send, sign

KINDS = ("forge-list", "equivocate", "double-vote", "jump-epochs", "gossip-flood", "lying-donor",
         *PATCHES_MORE)
FLOOD_PER_S = 1000
FLOOD_BATCH = 10
FLOOD_POOL = 60 * FLOOD_PER_S  # messages signed ahead while waiting to be a member: a minute of flood


def _forge_lists() -> None:
    signers: list[authorship.AuthorshipSigner] = []
    original_init = authorship.AuthorshipSigner.__init__

    def keep_signer(self: authorship.AuthorshipSigner, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        signers.append(self)

    setattr(authorship.AuthorshipSigner, "__init__", keep_signer)  # noqa: B010 (a patch, on purpose)
    build: Callable[..., InclusionList | None] = round_state.build_list

    def forged(rnd: Any, roster: Any, run_id: bytes, epoch: int, leader: str,
               *args: Any) -> InclusionList | None:
        lst = build(rnd, roster, run_id, epoch, leader, *args)
        if lst is None or not signers:
            return lst
        entries, signatures = [], []
        for (peer, payload_hash), signature in zip(lst.entries, lst.signatures, strict=True):
            if peer != leader:
                payload_hash = hashlib.sha256(b"chosen by the leader" + payload_hash).digest()
                signature = signers[-1].sign(lst.step, payload_hash)
            entries.append((peer, payload_hash))
            signatures.append(signature)
        return dataclasses.replace(lst, entries=tuple(entries), signatures=tuple(signatures))

    setattr(agreement, "build_list", forged)  # noqa: B010 (a patch, on purpose)
    _send_own_messages_unchecked()


def _send_own_messages_unchecked() -> None:
    """py-libp2p runs our gossip validator on our own publishes too, and ours refuses a forged list: an
    attacker's daemon skips that check for what it sends itself."""
    original = GossipDecoder.validate

    def lenient(self: GossipDecoder, sender: Any, data: bytes) -> bool:
        return True if str(sender) == self._self_id else original(self, sender, data)

    setattr(GossipDecoder, "validate", lenient)  # noqa: B010 (a patch, on purpose)


def _equivocate() -> None:
    original = Announcer.announce

    async def twice(self: Announcer, s: int, done: Any, phases: dict[str, float]) -> int:
        size = await original(self, s, done, phases)
        if size and done.data is not None:
            other = bytes(done.data[:-1]) + bytes([done.data[-1] ^ 1])  # another payload: a flipped bit
            digest = self._store.put(s, other)
            signature = self._signer.sign(s, digest)
            self._outbox.publish(Announcement(self._run_id, s, self._self_id, digest, len(other),
                                              self._trainer.weights_hash, signature))
        return size

    setattr(Announcer, "announce", twice)  # noqa: B010 (a patch, on purpose)


def _double_vote() -> None:
    original: Callable[..., None] = agreement._cast

    def twice(rnd: Any, phase: int, ballot: tuple[int, bytes], me: Any, out: list[Any]) -> None:
        original(rnd, phase, ballot, me, out)
        epoch, digest = ballot
        other = hashlib.sha256(b"another list" + digest).digest()
        run = me.config.run_id
        signature = me.sign(vote_statement(run, rnd.step, epoch, phase, me.self_id, other))
        out.append(Publish(Vote(run, rnd.step, epoch, phase, me.self_id, other, signature)))

    setattr(agreement, "_cast", twice)  # noqa: B010 (a patch, on purpose)


def _jump_epochs() -> None:
    original: Callable[..., None] = epochs.enter_epoch

    def jump(rnd: Any, epoch: int, me: Any, out: list[Any]) -> None:
        before = len(out)
        original(rnd, epoch, me, out)
        for action in out[before:]:
            if isinstance(action, Publish) and isinstance(action.message, Status):
                far = dataclasses.replace(action.message, epoch=action.message.epoch + 500)
                out.append(Publish(far))

    setattr(epochs, "enter_epoch", jump)  # noqa: B010 (a patch, on purpose)


def _gossip_flood() -> None:
    """Signed heartbeats written straight into each peer's pubsub queue, ``FLOOD_BATCH`` per RPC
    (node/testbed/raw_gossip.py)."""
    honest_loop: Callable[..., Awaitable[None]] = peer_node.send_heartbeats
    honest_gossip: Callable[..., Any] = peer_node.open_gossip
    channels: list[AnnouncementChannel] = []

    @asynccontextmanager
    async def keep_channel(*args: Any, **kwargs: Any) -> AsyncIterator[AnnouncementChannel]:
        async with honest_gossip(*args, **kwargs) as channel:
            channels.append(channel)
            yield channel

    async def flood(**kwargs: Any) -> None:
        driver = kwargs["driver"]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(honest_loop, **kwargs))
            channel = channels[-1]
            pool: deque[Any] = deque()
            period = FLOOD_BATCH / FLOOD_PER_S
            while not member(driver, kwargs["self_id"]):  # sign ahead meanwhile (strangers are muted)
                if len(pool) < FLOOD_POOL:
                    pool.extend(sign(channel, _beats(kwargs, 0)))
                await trio.sleep(0 if len(pool) < FLOOD_POOL else period)
            next_at = trio.current_time()
            while True:
                batch = [pool.popleft() for _ in range(min(FLOOD_BATCH, len(pool)))]
                send(channel, batch or sign(channel, _beats(kwargs, driver.machine.next_step)))
                next_at += period
                await trio.sleep_until(max(next_at, trio.current_time()))

    setattr(peer_node, "open_gossip", keep_channel)  # noqa: B010 (a patch, on purpose)
    setattr(peer_node, "send_heartbeats", flood)  # noqa: B010 (a patch, on purpose)


def _beats(kwargs: dict[str, Any], step: int) -> list[Heartbeat]:
    return [Heartbeat(kwargs["run_id"], kwargs["self_id"], step, os.urandom(32)) for _ in range(FLOOD_BATCH)]


PATCHES: dict[str, Callable[[], None]] = {
    "forge-list": _forge_lists, "equivocate": _equivocate, "double-vote": _double_vote,
    "jump-epochs": _jump_epochs, "gossip-flood": _gossip_flood, "lying-donor": patch_lying_donor,
    **PATCHES_MORE,
}


if __name__ == "__main__":
    kinds, argv = sys.argv[1].split(","), sys.argv[2:]
    for kind in kinds:
        if kind not in PATCHES:
            raise SystemExit(f"unknown adversary kind {kind!r}; one of {', '.join(KINDS)}")
        PATCHES[kind]()
    raise SystemExit(main(argv))
