"""One broadcast wake-up for the peer's tasks.

Why one signal instead of an event per condition: the waiters (the training loop waiting for a decision,
start-up waiting to hear its cohort, a snapshot request waiting for a cut, the genesis answer)
each re-check their own condition after waking, so a single "something changed" serves them all, and the
code that changes state does not need to know who is waiting for what.
"""

from __future__ import annotations

import trio


class ChangeSignal:
    def __init__(self) -> None:
        self._event = trio.Event()

    def bump(self) -> None:
        """Wake every current waiter; later waiters wait for the next bump."""
        self._event.set()
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()
