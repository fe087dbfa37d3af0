"""Four real peer processes on loopback train together and stay bit-identical (DESIGN.md section 3)."""

from __future__ import annotations

import pytest
from peer_procs import Procs, assert_identical

pytestmark = [pytest.mark.network, pytest.mark.timeout(120)]

# Founder only (joiners run the printed command): it accumulates two micro-batches of 2, the others take one
# backward of 4; gradient accumulation is local, so all four must still stay bit-identical.
RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "5",
       "--grad-accum", "2"]


def test_four_peers_train_identically_for_20_rounds(procs: Procs) -> None:
    steps = 20
    peers = procs.swarm(4, RUN, ["--steps", str(steps)])
    assert str(peers[0].info()["join_command"]).startswith("distro-node join --bootstrap /ip4/127.0.0.1/tcp/")
    for p in peers:
        p.wait_for(lambda e: e.get("event") == "left", 80, "leave after the last step")
    for p in peers:
        assert p.wait_exit(15) == 0
    assert_identical(peers, range(steps))
    for p in peers:
        rows = p.steps()
        assert sorted(rows) == list(range(steps)), f"{p.name} applied {sorted(rows)}"
        included = [rows[s]["included"] for s in range(steps)]
        # Under CPU overload (5 processes on 2 shared cores) a peer can miss a round's 5 s deadline;
        # that is correct behaviour, not a failure, but it must stay rare.
        assert sum(n == 4 for n in included) >= steps - 3, f"{p.name} included counts {included}"
        # The round splits into waiting for the last included announcement and the exchange after it.
        assert all(0 <= rows[s]["wait_s"] <= rows[s]["round_s"] for s in range(steps)), p.name
    # A peer that fell behind applies a decided step without computing it (loss None): skip those.
    losses = [[p.steps()[s]["loss"] for p in peers if p.steps()[s]["loss"] is not None] for s in range(steps)]
    first = [x for row in losses[:5] for x in row]
    last = [x for row in losses[-5:] for x in row]
    assert sum(last) / len(last) < sum(first) / len(first) - 0.05, f"loss did not go down: {first} -> {last}"
    # Each payload is pulled once: a fetch still running when the round machine repeats its request (every
    # fetch_retry_interval) is not started again; 10% slack for payloads fetched for a list without them.
    biggest = max(row["payload_bytes"] or 0 for p in peers for row in p.steps().values())
    for p in peers:
        pulled = p.steps()[steps - 1]["recv_bytes"]
        assert pulled <= 1.1 * steps * 3 * biggest, f"{p.name} pulled {pulled} B for {steps} x 3 payloads"
