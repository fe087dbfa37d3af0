"""Pulling one payload from its holders over ``/distro/payload/1.0.0`` (transfer.py): which holder to ask
when (``fetch_plan.FetchPlan``), racing a silent one, keeping the verified bytes.

Apart from transfer.py (the wire format, the server, one attempt) because this is the fetch's policy: the
order by route and the retries that decide a NAT'd peer's step time.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import trio
from libp2p.peer.id import ID

from .errors import FetchFailedError, PayloadNotFoundError, StoreError, TransportError
from .fetch_plan import FetchPlan, Route
from .host import P2PHost
from .store import PayloadStore
from .transfer import PayloadRequest, TransferConfig, fetch_from, order_holders

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Delivery:
    """Verified bytes and who sent them (None: our own store had them)."""

    data: bytes
    holder: ID | None


async def fetch_payload(
    host: P2PHost,
    request: PayloadRequest,
    holders: Sequence[ID],
    *,
    store: PayloadStore | None = None,
    config: TransferConfig | None = None,
    expected_size: int | None = None,
    spread: bool = True,
) -> bytes:
    """Get a payload from the local store or the first holder that delivers verified bytes.

    ``spread=True`` reorders ``holders`` with ``order_holders``; ``False`` keeps the caller's preference
    order. Each holder is asked once (a NOT_FOUND is final here; the daemon's :func:`pull_payload` asks
    again). On success the payload is added to ``store`` (when given), so this peer serves it from then on.
    Raises FetchFailedError listing each holder's typed error when none delivered.
    """
    order = order_holders(host.peer_id, request.payload_hash, holders) if spread else holders
    once = replace(config or TransferConfig(), not_found_retries=0)
    got = await pull_payload(host, request, [(h, Route.DIRECT) for h in order], store=store, config=once,
                             expected_size=expected_size)
    return got.data


async def pull_payload(
    host: P2PHost,
    request: PayloadRequest,
    holders: Sequence[tuple[ID, Route]],
    *,
    author: ID | None = None,
    store: PayloadStore | None = None,
    config: TransferConfig | None = None,
    expected_size: int | None = None,
) -> Delivery:
    """:func:`fetch_payload` with each holder's route, asked as ``fetch_plan.FetchPlan`` says (better
    routes first, NOT_FOUND from anyone but ``author`` asked again shortly), and who delivered."""
    if store is not None:
        cached = store.get(request.step, request.payload_hash)
        if cached is not None:
            return Delivery(cached, None)
    cfg = config or TransferConfig()
    plan = FetchPlan([(h, r) for h, r in holders if h != host.peer_id], author=author, config=cfg.plan())
    won, attempts = await _race(host, request, plan, cfg, expected_size)
    if won is None:
        raise FetchFailedError(request.payload_hash, attempts)
    if store is not None and request.run_id == store.run_id:
        try:
            store.put_verified(request.step, request.payload_hash, won.data)
        except StoreError as exc:
            logger.debug("fetched payload not kept for serving: %s", exc)
    return won


class _Wake:
    """Wakes the race's driver when an attempt answers or ends."""

    def __init__(self) -> None:
        self.event = trio.Event()

    def set(self) -> None:
        self.event.set()

    def renew(self) -> trio.Event:
        self.event = trio.Event()
        return self.event


async def _race(host: P2PHost, request: PayloadRequest, plan: FetchPlan[ID], cfg: TransferConfig,
                expected_size: int | None) -> tuple[Delivery | None, list[tuple[str, TransportError]]]:
    """Carry out ``plan``: start the holders it names when it names them; the first verified body wins and
    cancels the rest.

    Why hedging at all: a holder behind a cut link (a partition, a peer whose process hangs) never answers,
    and waiting out its ``attempt_timeout`` before asking the next one stalled a peer that had missed only
    the payloads of the cut-off side although its neighbours held them (the namespace partition test, a 3/2
    split, stood still for 20 s). A holder that answered is sending: it is not raced, so a slow link costs
    no second download. The loop ends: each pass starts an attempt or waits for one to end or for the
    plan's next time, and the plan allows a bounded number of attempts per holder.
    """
    attempts: list[tuple[str, TransportError]] = []
    won: list[Delivery] = []
    wake = _Wake()
    began = trio.current_time()
    async with trio.open_nursery() as nursery:

        async def attempt(peer_id: ID) -> None:
            answered = trio.Event()

            async def note_answer() -> None:
                await answered.wait()
                plan.answered(peer_id)
                wake.set()

            async with trio.open_nursery() as watch:
                watch.start_soon(note_answer)
                try:
                    data = await fetch_from(host, peer_id, request, config=cfg, expected_size=expected_size,
                                            answered=answered)
                except TransportError as exc:
                    logger.debug("fetch of %s from %s failed: %r", request.payload_hash.hex()[:16], peer_id,
                                 exc)
                    attempts.append((str(peer_id), exc))
                    plan.failed(peer_id, trio.current_time(), not_found=isinstance(exc, PayloadNotFoundError))
                else:
                    logger.debug("fetched %s from %s (%s) %.3f s after the first ask, %d failed before",
                                 request.payload_hash.hex()[:16], peer_id, plan.route(peer_id).name,
                                 trio.current_time() - began, len(attempts))
                    won.append(Delivery(data, peer_id))
                    nursery.cancel_scope.cancel()
                finally:
                    watch.cancel_scope.cancel()
                    wake.set()

        while True:
            changed = wake.renew()
            now = trio.current_time()
            for peer_id in plan.due(now):
                nursery.start_soon(attempt, peer_id)
            if plan.exhausted():
                break
            at = plan.next_wakeup(now)
            with trio.move_on_at(at if at is not None else math.inf):
                await changed.wait()
    return (won[0] if won else None), attempts
