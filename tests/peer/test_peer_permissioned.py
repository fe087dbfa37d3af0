"""A permissioned run (threats: Sybil stall): the founder's key, named in the manifest, signs admission
tickets (those `distro-node ticket` issues), and only ticket holders are served and heard. Ten made-up
identities (node/testbed/sybils.py, a process of their own) flood gossip with signed heartbeats and ask
every peer for state and peers: none of them is admitted, served or listed, and the four ticket holders
train on, bit-identical. A stranger without a ticket is told so at start.

One ticket holder is a lying state donor (node/testbed/adversary_donor.py: it trains honestly but describes
every snapshot as zeroed weights under a roster of itself and its own Sybils), and a newcomer with a ticket
joins through it, the liar as its bootstrap peer. It counts descriptions against the roster that the
members' chain of attestations certifies from the founder (node/peer/trust_chain.py), not against the
roster its bootstrap describes, and ends on the honest weights. Under the old rule (trust the bootstrap's
roster) it joined on the zeroed weights: the lie's roster is the liar and its Sybils, and the newcomer's own
requests reach those Sybils (a stranger cannot ask a member for anything, but it can answer)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from distro_node.node.peer.tickets import issue_ticket_file
from distro_node.protocol.identity import load_or_create_identity, peer_id_of
from distro_node.protocol.tickets import DEFAULT_TICKET_DAYS
from peer_procs import Procs, assert_identical

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]

RUN = ["--preset", "tiny", "--batch-size", "4", "--seq-len", "32", "--round-timeout", "3"]
SYBILS = [sys.executable, "-m", "distro_node.node.testbed.sybils"]
LONG = ["--steps", "100000"]  # never reached: the test ends by killing the processes


def issue_ticket(founder_key: Path, key: Path, run_id: str, out: Path) -> None:
    """What `distro-node ticket id` and `ticket issue` do (tests/node/test_cli_ticket.py runs those), in this
    process: each command is a Python start importing torch and libp2p, ~4.5 s of CPU, and eight of them
    ran while the founder waited for its cohort."""
    peer_id = str(peer_id_of(load_or_create_identity(key)))
    issue_ticket_file(out, load_or_create_identity(founder_key).private_key, bytes.fromhex(run_id), peer_id,
                      DEFAULT_TICKET_DAYS)


def test_ten_sybils_get_nothing_and_a_stranger_is_told_it_needs_a_ticket(
    procs: Procs, tmp_path: Path
) -> None:
    keys = {name: tmp_path / f"{name}.key" for name in ("peer0", "peer1", "peer2", "liar", "newcomer",
                                                        "stranger")}
    founder = procs.start([*RUN, *LONG, "--genesis-peers", "4", "--admission", "permissioned",
                           "--key-file", str(keys["peer0"])], "peer0")
    info = founder.info()
    command = str(info["join_command"])

    def ticket(name: str) -> list[str]:
        out = tmp_path / f"{name}.ticket"
        issue_ticket(keys["peer0"], keys[name], str(info["run_id"]), out)
        return ["--key-file", str(keys[name]), "--ticket", str(out)]

    honest = [founder]
    honest += [procs.start_command(command, [*LONG, *ticket(f"peer{i}")], f"peer{i}") for i in (1, 2)]
    liar = procs.start_adversary("lying-donor", command, [*LONG, *ticket("liar")], "liar")
    members = [*honest, liar]  # the liar trains honestly: only the snapshots it describes are poisoned
    sybils = procs.start_raw([*SYBILS, str(info["addrs"][0]), str(info["run_id"]), "10"], "sybils")
    stranger = procs.start_command(command, [*LONG, "--key-file", str(keys["stranger"])], "stranger")
    assert stranger.wait_exit(120) != 0
    error = stranger.wait_for(lambda e: e.get("event") == "error", 5, "error")
    assert error["field"] == "network.ticket" and "needs a ticket" in error["reason"], error

    start = max(p.wait_step(1, 180)["step"] for p in members)
    newcomer = procs.start_command(str(liar.info()["join_command"]), [*LONG, *ticket("newcomer")], "newcomer")
    end = start + 4
    for p in members:
        p.wait_step(end, 120)
    assert_identical(members, range(start, end + 1))
    for p in members:  # no Sybil ever entered the roster
        rows = p.steps()
        assert all(rows[s]["roster"] == 4 and rows[s]["included"] <= 4 for s in range(start, end + 1)), p.name
    attacked: set[str] = set()

    def each_attacked(e: dict[str, object]) -> bool:
        # Both halves of the attack, from every Sybil: its flood reached a peer's pubsub queue (a member opens
        # its pubsub stream to a new connection in its own time, later on a busy machine), and it asked for
        # state and was refused.
        counts = ("state_refused", "heartbeats_sent")
        if e.get("event") == "sybil" and all(int(str(e[k])) > 0 for k in counts):
            attacked.add(str(e["sybil"]))
        return len(attacked) == 10

    sybils.wait_for(each_attacked, 90, "a flood sent and a refused state request from each of the 10 Sybils")
    reports = {e["sybil"]: e for e in sybils.poll_events() if e.get("event") == "sybil"}
    for r in reports.values():  # each Sybil's last report
        assert r["heartbeats_sent"] > 0 and r["connected"] >= 1, r
        # Every stream a stranger opens is reset, gossip included: it learns nothing and is never heard.
        assert r["state_served"] == 0 and r["state_refused"] > 0 and r["peers_learned"] == 0, r

    joined = newcomer.wait_for(lambda e: e.get("event") == "joined", 120, "joined")
    at = int(str(joined["step"])) - 1  # it adopted the weights after this step
    founder.wait_step(at, 60)
    assert joined["weights_hash"] == founder.steps()[at]["weights_hash"], joined
    assert not joined["genesis"] and "bootstrap" not in joined["how"], joined
    assert "chain certifies" in joined["how"] or "founder the manifest names" in joined["how"], joined
    first = newcomer.wait_step(0, 60)["step"]
    newcomer.wait_step(first + 1, 60)
    assert_identical([*members, newcomer], range(first, first + 2))
