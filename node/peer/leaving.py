"""Leaving the swarm: a stop request (SIGINT/SIGTERM), the goodbye, and serving until nobody asks.

A first signal lets the current round finish within ``leave_budget`` seconds (the training loop reads
:class:`StopRequest`); a second one leaves at once. After the goodbye the peer keeps serving payloads: on
slow links the last step's copies of our payload can take many seconds to reach every peer (7 copies of
365 KB at 2 Mbit: 10 s); a peer that left after a fixed second stranded the slowest peers of a run, which
then could not apply its last step.
"""

from __future__ import annotations

import signal

import trio

from .changes import ChangeSignal
from .driver import RoundDriver
from .outbox import Outbox
from .output import Output
from .payload_exchange import PayloadExchange

GOODBYE_DRAIN = 2.0  # seconds the outbox may take to send what is queued, goodbye last


class StopRequest:
    def __init__(self, *, out: Output, changes: ChangeSignal, leave_budget: float) -> None:
        self._out = out
        self._changes = changes
        self._leave_budget = leave_budget
        self.requested = False
        self.deadline = 0.0  # trio time by which the current round must have closed

    def remaining(self) -> float:
        return self.deadline - trio.current_time()

    async def watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                if self.requested:
                    self._out.emit("exit", "second signal: leaving now", signal=int(signum))
                    raise KeyboardInterrupt
                self.requested = True
                self.deadline = trio.current_time() + self._leave_budget
                self._out.emit("stopping", f"signal {signum}: finishing the current round, then leaving",
                               signal=int(signum))
                self._changes.bump()


class Leaver:
    def __init__(self, *, driver: RoundDriver, outbox: Outbox, exchange: PayloadExchange, out: Output,
                 linger: float, linger_max: float) -> None:
        self._driver = driver
        self._outbox = outbox
        self._exchange = exchange
        self._out = out
        self._linger = linger  # quiet seconds (no request, no upload) after which we stop serving
        self._linger_max = linger_max

    async def leave(self) -> None:
        m = self._driver.machine
        if m is not None:
            goodbye = m.make_goodbye()
            self._outbox.publish(goodbye)  # behind whatever is still queued, so the goodbye is the last word
            sent = await self._outbox.close(GOODBYE_DRAIN)
            how = "sent" if sent else "queued (the outbox did not drain within 2 s)"
            self._out.emit("left", f"goodbye {how} at step {goodbye.step}", step=goodbye.step, sent=sent)
        await self._serve_until_quiet()

    async def _serve_until_quiet(self) -> None:
        exchange = self._exchange
        start = trio.current_time()
        with trio.move_on_after(self._linger_max):
            while True:
                now = trio.current_time()
                last = max(start, exchange.last_request_at or start)
                if exchange.uploads_in_progress == 0 and now - last >= self._linger:
                    return
                await trio.sleep(min(0.1, self._linger))
