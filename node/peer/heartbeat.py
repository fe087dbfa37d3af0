"""Heartbeats: how the swarm tells a live peer that has nothing else to say from a crashed one.

Sent from the moment gossip runs, before our round machine exists (then at step 0), so a founder's cohort
and a joiner's donors hear us while we start; never after our goodbye.
"""

from __future__ import annotations

import trio
from distro_node.protocol.messages import Heartbeat

from .driver import RoundDriver
from .outbox import Outbox
from .trainer import Trainer


async def send_heartbeats(*, driver: RoundDriver, outbox: Outbox, trainer: Trainer, run_id: bytes,
                          self_id: str, interval: float) -> None:
    while True:
        m = driver.machine
        weights = trainer.weights_hash
        hb = m.make_heartbeat(weights) if m is not None else Heartbeat(run_id, self_id, 0, weights)
        if not outbox.closed:
            outbox.publish(hb)
        await trio.sleep(interval)
