"""Gossip intake: the pubsub validator decodes each message once, and the intake loop dispatches that object.

Decode once. py-libp2p runs our validator synchronously inside ``Pubsub.push_msg`` (after its signature
check, before delivery and forwarding; a message id it has seen is neither validated nor delivered again),
then puts the same message on the topic subscription, which protocol/gossip.py turns into a
``GossipMessage(sender, data, seqno)``. The validator is the only hook before delivery and the delivery
carries no trace of it, so :class:`GossipDecoder` keeps what it decoded in a bounded map keyed by
(signer, bytes) until the loop takes it. Equal bytes from one signer (a repeated heartbeat: signatures are
deterministic) are one entry with a count. An entry is only missing when the map overflowed (more than
``DECODED_CAPACITY`` messages validated but not yet taken: the delivery queues hold far fewer) or the
message was delivered again after py-libp2p forgot it had seen it (its seen cache expires): then the loop
decodes it once itself, and :attr:`GossipDecoder.redecoded` counts it.

Rejected messages are counted by reason (``banned``, ``rate`` for a signer over its message rate
(node/peer/rate_limit.py), ``stranger`` for a heartbeat from outside the roster, or the codec's
metric-safe reason) in
:attr:`GossipDecoder.rejected` and reported through ``on_rejected``. Messages protocol/gossip.py refuses
before calling us (over its size cap) are not seen here.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict, deque
from collections.abc import AsyncIterable, Callable, Collection
from functools import partial
from typing import Protocol

import trio
from distro_node.protocol.codec import CodecError, author_of, check_signed, decode_message
from distro_node.protocol.consensus import Action, RoundMachine
from distro_node.protocol.gossip import GossipMessage
from distro_node.protocol.messages import Announcement, Goodbye, Heartbeat, InclusionList, Message
from libp2p.peer.id import ID

from .announcements import AnnouncementLog
from .changes import ChangeSignal
from .driver import RoundDriver
from .output import Output
from .rate_limit import GossipRates

logger = logging.getLogger(__name__)

BUFFER_MESSAGES = 4096  # gossip held while we sync state, replayed into the machine afterwards
HEARD_CAP = 4096  # authors remembered for startup's "heard from every genesis peer" (made-up ids are free)
DECODED_CAPACITY = 4096  # validated messages awaiting delivery (the queues between hold about 1 100)
FORGED_CAPACITY = 64  # forged lists awaiting the machine; one per (step, epoch) is all it needs


def _forged(lst: InclusionList, m: RoundMachine, now: float) -> list[Action]:
    return m.on_forged_proposal(lst.step, lst.epoch, lst.leader, now)


class BanList(Protocol):
    def is_banned(self, peer: str) -> bool: ...


class GossipDecoder:
    def __init__(self, *, self_id: str, run_id: bytes, bans: BanList,
                 on_rejected: Callable[[str], None] | None = None, capacity: int = DECODED_CAPACITY,
                 rate: GossipRates | None = None, admits: Callable[[str], bool] | None = None) -> None:
        self._self_id = self_id
        self._admits = admits  # a permissioned run's admission: strangers' gossip is dropped unread
        self._rate = rate
        self._run_id = run_id
        self._bans = bans
        self._on_rejected = on_rejected
        self._capacity = capacity
        self._pending: OrderedDict[tuple[bytes, bytes], tuple[Message, int]] = OrderedDict()
        self.rejected: Counter[str] = Counter()
        self.redecoded = 0
        self._forged: deque[InclusionList] = deque(maxlen=FORGED_CAPACITY)
        self._members: Callable[[], Collection[str]] = tuple

    def know_members(self, members: Callable[[], Collection[str]]) -> None:
        """The run's members, asked afresh per message: a heartbeat from anyone else is refused (stranger).

        A heartbeat only tells the round machine that a roster peer is alive; from a stranger it is noise
        that every peer would validate and forward (a crowd of made-up identities sent ours 20 a second
        each). Refusing it also lets protocol/gossip_mute.py mute a stranger that keeps sending them.
        Before start-up knows a roster (empty), nobody is refused.
        """
        self._members = members

    def validate(self, sender: ID, data: bytes) -> bool:
        """Signed by ``sender``, well formed, and not from a peer we banned (not delivered, not forwarded)."""
        author = str(sender)
        if author != self._self_id and self._bans.is_banned(author):
            self._reject("banned")
            return False
        if self._admits is not None and not self._admits(author):
            self._reject("not_admitted")
            return False
        limited = author != self._self_id and self._rate is not None
        if limited and self._rate is not None and not self._rate.allow(author):
            self._reject("rate")
            return False
        try:
            msg = decode_message(data)
            if limited and self._rate is not None and not self._rate.allow_kind(author, msg.KIND):
                self._reject("rate")
                return False
            check_signed(msg, author, self._run_id)
            if isinstance(msg, Heartbeat) and author != self._self_id and self._is_stranger(author):
                self._reject("stranger")
                return False
        except CodecError as exc:
            self._reject(exc.reason)
            if isinstance(exc.refused, InclusionList) and author != self._self_id:
                self._forged.append(exc.refused)
            return False
        if author != self._self_id:  # our own messages are not delivered back to us
            self._hold((sender.to_bytes(), data), msg)
        return True

    def _is_stranger(self, author: str) -> bool:
        members = self._members()
        return bool(members) and author not in members

    def take_forged(self) -> list[InclusionList]:
        """Lists refused for entries their authors did not sign, since the last call: their leaders forged
        them (the lists themselves are signed by their leaders), so those epochs will decide nothing."""
        forged = list(self._forged)
        self._forged.clear()
        return forged

    def take(self, sender: ID, data: bytes) -> Message:
        """The message :meth:`validate` decoded from these bytes; CodecError only if we had to decode it
        here and it fails (it passed the validator, so only if a ban or a bug changed the verdict)."""
        key = (sender.to_bytes(), data)
        held = self._pending.get(key)
        if held is None:
            self.redecoded += 1
            return check_signed(decode_message(data), str(sender), self._run_id)
        msg, count = held
        if count > 1:
            self._pending[key] = (msg, count - 1)
        else:
            del self._pending[key]
        return msg

    def _hold(self, key: tuple[bytes, bytes], msg: Message) -> None:
        held = self._pending.get(key)
        self._pending[key] = (msg, 1 if held is None else held[1] + 1)
        self._pending.move_to_end(key)
        while len(self._pending) > self._capacity:
            self._pending.popitem(last=False)

    def _reject(self, reason: str) -> None:
        self.rejected[reason] += 1
        if self._on_rejected is not None:
            self._on_rejected(reason)


class GossipIntake:
    """Feeds delivered gossip to the round machine, or holds it while the machine cannot take it.

    Held: before the machine runs (start-up, a joiner's state transfer) and during a resync. Dispatched at
    once, the lists and votes of the steps decided during the transfer were far-future steps for our old
    state and were dropped, so a resynced peer waited for laggard answers that came too late (the deciders
    had pruned those steps) and had to resync again, over and over. Held messages are replayed in step
    order on :meth:`release`.
    """

    def __init__(self, *, decoder: GossipDecoder, driver: RoundDriver, announcements: AnnouncementLog,
                 changes: ChangeSignal, out: Output) -> None:
        self._decoder = decoder
        self._driver = driver
        self._announcements = announcements
        self._changes = changes
        self._out = out
        self._buffer: deque[Message] = deque(maxlen=BUFFER_MESSAGES)
        self._heard: set[str] = set()
        self._holding = True

    def _may_remember(self, step: int) -> bool:
        """Announcements far beyond the steps our machine admits are not remembered: the log keeps a fixed
        number of steps, and a peer announcing made-up future steps would push the real ones out."""
        m = self._driver.machine
        return m is None or step <= m.next_step + m.config.max_future_steps

    def heard_all(self, peers: set[str]) -> bool:
        """Whether gossip from every one of ``peers`` reached us."""
        return peers <= self._heard

    def hold(self) -> None:
        self._holding = True

    def release(self) -> None:
        """Replay what was held, in step order: a joiner learns the lists and votes of the steps decided
        during its transfer instead of waiting for laggard timeouts."""
        self._holding = False
        pending = sorted(self._buffer, key=lambda m: m.step)
        self._buffer.clear()
        for msg in pending:
            self._dispatch(msg)

    async def run(self, gossip: AsyncIterable[GossipMessage]) -> None:
        async for item in gossip:
            if not self._holding:
                self._report_forged()
            try:
                msg = self._decoder.take(item.sender, item.data)
            except CodecError as exc:
                logger.debug("dropping gossip from %s: %s", item.sender, exc)
                continue
            if len(self._heard) < HEARD_CAP:
                self._heard.add(author_of(msg) or item.sender.to_base58())
            if isinstance(msg, Announcement) and self._may_remember(msg.step):
                self._announcements.remember(msg, trio.current_time())
            if self._holding or self._driver.machine is None:
                self._buffer.append(msg)
                self._changes.bump()
                continue
            self._dispatch(msg)

    def _report_forged(self) -> None:
        """Tell the machine which leaders sent lists with forged entries (checked at the door, so they
        never reach it as messages): it need not wait out their epochs."""
        for lst in self._decoder.take_forged():
            self._driver.feed(partial(_forged, lst))

    async def watch_lost_peers(self, lost: trio.MemoryReceiveChannel[ID]) -> None:
        """A peer's last connection closed: the machine stops waiting for it (a crash is seen at once instead
        of after ``liveness_timeout``; see RoundMachine.on_disconnected)."""
        async for peer_id in lost:
            m = self._driver.machine
            if m is not None:
                self._driver.handle(m.on_disconnected(str(peer_id), trio.current_time()))
                self._changes.bump()  # deadlines moved even when there is nothing to do yet

    def _dispatch(self, msg: Message) -> None:
        m = self._driver.machine
        if m is None:
            return
        stale = m.counters["stale_goodbye"]
        actions = m.on_message(msg, trio.current_time())
        logger.debug("gossip in: %s", msg)
        # A replayed old goodbye is ignored by the machine (counted stale_goodbye): no leave to report.
        if isinstance(msg, Goodbye) and m.counters["stale_goodbye"] == stale:
            self._out.emit("goodbye", f"peer {msg.peer_id[-8:]} left at step {msg.step}", peer=msg.peer_id,
                           step=msg.step)
        self._driver.handle(actions)
