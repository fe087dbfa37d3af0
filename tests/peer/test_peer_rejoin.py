"""A peer killed with SIGKILL and restarted with its data dir (so its identity) is included again.

That is what a volunteer does after a crash (threats.md N3): same identity, same listen address, joining
through the printed command. The others remember that identity (they dropped it from the roster for missed
rounds), so it must go through state sync and warm-up like a newcomer and then match their weights.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest
from peer_procs import Event, Procs, assert_identical

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "10"]
LONG = ["--steps", "100000"]  # never reached: the test ends by killing the processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _included(e: Event) -> bool:
    return e.get("event") == "step" and bool(e["self_included"])


def test_killed_peer_rejoins_with_its_identity_and_is_included(procs: Procs, tmp_path: Path) -> None:
    peers = procs.swarm(3, RUN, LONG)
    command = peers[0].info()["join_command"]
    own = [*LONG, "--data-dir", str(tmp_path / "volunteer"), "--listen", f"/ip4/127.0.0.1/tcp/{_free_port()}"]
    volunteer = procs.start_command(command, own, "volunteer")
    volunteer.wait_for(_included, 120, "first round including the volunteer")
    identity = volunteer.info()["peer_id"]
    volunteer.proc.send_signal(signal.SIGKILL)
    assert volunteer.wait_exit(15) == -signal.SIGKILL
    peers[0].wait_for(lambda e: e.get("event") == "membership" and e.get("peer") == identity, 60,
                      "the volunteer dropped from the roster")
    peers[0].poll_events()
    dropped_at = max(peers[0].steps(), default=0)
    back = procs.start_command(command, own, "volunteer.1")
    assert back.info()["peer_id"] == identity
    joined = back.wait_for(lambda e: e.get("event") == "joined", 120, "joined")
    assert joined["step"] >= dropped_at
    included = back.wait_for(_included, 120, "first round including the restarted volunteer")
    end = included["step"] + 2
    for p in [*peers, back]:
        p.wait_step(end, 60)
    assert_identical([*peers, back], range(included["step"], end + 1))
