"""Signed peer records on gossip RPCs: checked once per peer and record, built once per few seconds.

py-libp2p 0.8.1 attaches the sender's signed peer record (an envelope naming its listen addresses) to every
pubsub RPC it sends, building it afresh each time (reading the listen addresses, serializing), and on
receipt verifies that envelope's signature and stores it in the peerstore, again for every RPC. A profile
of an honest daemon (4 peers of the tiny preset and a crowd of 10 made-up identities, 2 shared cores) had
8.6% of its CPU in the receiving check and 4.5% in building. A peer's record changes only when its
addresses do, and we do not read the peerstore's certified addresses anyway (where peers listen comes from
protocol/peer_exchange.py), so:
- a record is verified the first time a peer sends it; the same bytes from the same peer later pass
  unchecked (bounded memory, least recently used forgotten first);
- our own record is built at most once per ``OWN_RECORD_TTL_S``.
An invalid record still fails exactly as before, every time, since only successes are remembered.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from libp2p.abc import IHost
from libp2p.peer import peerstore
from libp2p.peer.id import ID
from libp2p.pubsub import floodsub, gossipsub, pubsub, utils
from libp2p.pubsub.pb.rpc_pb2 import RPC

VERIFIED_CAPACITY = 4096  # (peer, record) pairs remembered as verified
OWN_RECORD_TTL_S = 5.0
OWN_RECORDS_KEPT = 64

_MODULES = (pubsub, gossipsub, floodsub)
_check: Callable[[RPC, IHost, ID], bool] = utils.maybe_consume_signed_record
_build: Callable[[IHost], tuple[bytes, bool]] = peerstore.env_to_send_in_RPC
_verified: OrderedDict[tuple[bytes, bytes], None] = OrderedDict()
_own: dict[bytes, tuple[float, bytes]] = {}


def consume_record_once(msg: RPC, host: IHost, peer_id: ID) -> bool:
    """``maybe_consume_signed_record`` that remembers which (peer, record bytes) it already accepted."""
    if not msg.HasField("senderRecord"):
        return True
    key = (peer_id.to_bytes(), bytes(msg.senderRecord))
    if key in _verified:
        _verified.move_to_end(key)
        return True
    ok = _check(msg, host, peer_id)
    if ok:
        _verified[key] = None
        while len(_verified) > VERIFIED_CAPACITY:
            _verified.popitem(last=False)
    return ok


def own_record(host: IHost) -> tuple[bytes, bool]:
    """``env_to_send_in_RPC`` rebuilt at most every OWN_RECORD_TTL_S per host."""
    me = host.get_id().to_bytes()
    now = time.monotonic()
    cached = _own.get(me)
    if cached is not None and now < cached[0]:
        return cached[1], False
    record, fresh = _build(host)
    if len(_own) >= OWN_RECORDS_KEPT:  # hosts of this process (tests start many); all rebuilt soon anyway
        _own.clear()
    _own[me] = (now + OWN_RECORD_TTL_S, record)
    return record, fresh


def install_record_cache() -> None:
    """Rebind py-libp2p's names in the pubsub modules (they imported the functions by name). Idempotent."""
    for module in _MODULES:
        if hasattr(module, "maybe_consume_signed_record"):
            setattr(module, "maybe_consume_signed_record", consume_record_once)  # noqa: B010
        if hasattr(module, "env_to_send_in_RPC"):
            setattr(module, "env_to_send_in_RPC", own_record)  # noqa: B010


__all__ = ["OWN_RECORD_TTL_S", "VERIFIED_CAPACITY", "consume_record_once", "install_record_cache",
           "own_record"]
