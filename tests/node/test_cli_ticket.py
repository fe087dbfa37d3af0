"""`distro-node ticket`: a volunteer's peer id, a founder's ticket, and a clear error for each bad input."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from distro_node.node.cli.main import main
from distro_node.node.peer.tickets import read_ticket_file
from distro_node.protocol.identity import load_or_create_identity, peer_id_of
from distro_node.protocol.tickets import TicketError

RUN = "ab" * 32


def test_id_then_issue_writes_a_ticket_that_admits_that_peer(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    founder, volunteer = tmp_path / "founder.key", tmp_path / "me.key"
    assert main(["ticket", "id", "--key-file", str(founder)]) == 0
    founder_id = capsys.readouterr().out.strip()
    assert main(["ticket", "id", "--key-file", str(volunteer)]) == 0
    peer = capsys.readouterr().out.strip()
    assert peer == str(peer_id_of(load_or_create_identity(volunteer)))
    out = tmp_path / "t.hex"
    assert main(["ticket", "issue", peer, "--key-file", str(founder), "--run-id", RUN, "--days", "2",
                 "--out", str(out)]) == 0
    assert "admits" in capsys.readouterr().out
    ticket = read_ticket_file(out)
    ticket.check(run_id=bytes.fromhex(RUN), founder=founder_id, holder=peer, now=time.time())
    assert ticket.expires - time.time() == pytest.approx(2 * 86400, abs=60)


@pytest.mark.parametrize(("argv", "named"), [
    (["not-a-peer-id", "--run-id", RUN], "PEER_ID"),
    (["{peer}", "--run-id", "abc"], "--run-id"),
    (["{peer}", "--run-id", RUN, "--days", "0"], "--days"),
    (["{peer}", "--run-id", RUN, "--key-file", "{missing}"], "--key-file"),
])
def test_bad_issue_input_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           argv: list[str], named: str) -> None:
    key = tmp_path / "founder.key"
    load_or_create_identity(key)
    peer = str(peer_id_of(load_or_create_identity(tmp_path / "me.key")))
    args = [a.format(peer=peer, missing=tmp_path / "none.key") for a in argv]
    if "--key-file" not in args:
        args += ["--key-file", str(key)]
    assert main(["ticket", "issue", *args]) == 2
    assert f"error: {named}" in capsys.readouterr().err


def test_a_damaged_ticket_file_names_itself(tmp_path: Path) -> None:
    bad = tmp_path / "t.hex"
    bad.write_text("zz not hex\n")
    with pytest.raises(TicketError, match=r"t\.hex"):
        read_ticket_file(bad)
