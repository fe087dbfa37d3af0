"""Saying when this node has no connected member at all, and that it keeps redialing.

Why: a node whose every link went down (its router rebooted, its uplink failed) cannot hear that it fell
behind, so nothing in the round machine moves; an operator then saw a silent process. Discovery keeps
redialing the known peers and the bootstrap ones meanwhile (protocol/discovery.py, which never forgets a
peer while isolated); this watch makes that visible: an ``isolated`` event when the last member connection
goes, a ``reconnected`` event when one is back, and the ``distro_isolated_seconds`` gauge ``status`` reads.
Only once a member was connected: before that, start-up (bootstrap, the genesis cohort) says what it waits
for.
"""

from __future__ import annotations

from collections.abc import Callable

import trio
from distro_node.protocol.host import P2PHost

from .output import Output

CHECK_EVERY_S = 1.0


class IsolationWatch:
    def __init__(self, host: P2PHost, out: Output, report: Callable[[float], None] | None = None) -> None:
        self._host = host
        self._out = out
        self._report = report
        self.isolated = False
        self._was_connected = False

    async def run(self, every: float = CHECK_EVERY_S) -> None:
        while True:
            self.check(trio.current_time())
            await trio.sleep(every)

    def check(self, now: float) -> None:
        discovery = self._host.discovery
        isolated = discovery.note_isolation(now)
        self._was_connected = self._was_connected or not isolated
        if not self._was_connected:  # still starting: bootstrap says itself when no peer answers
            return
        since = discovery.isolated_since
        if isolated and not self.isolated:
            known = len(self._host.peer_book)
            self._out.emit("isolated", f"no connected peer: redialing {known} known peer(s) until one "
                           "answers", known_peers=known)
        elif not isolated and self.isolated:
            self._out.emit("reconnected", f"connected again ({len(self._host.member_peers())} peer(s); "
                           f"{discovery.isolated_redials} redial(s) while isolated so far)",
                           peers=len(self._host.member_peers()))
        self.isolated = isolated
        if self._report is not None:
            self._report(now - since if isolated and since is not None else 0.0)
