"""An identity never signs two payloads for one step, across resyncs and restarts
(node/peer/announced_mark.py)."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest
from distro_node.node.peer.announced_mark import KEEP_STEPS, AnnouncedMark, mark_path

RUN = hashlib.sha256(b"run").digest()
OTHER = hashlib.sha256(b"other run").digest()


def h(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def test_same_payload_again_is_fine_a_different_one_is_refused(tmp_path: Path) -> None:
    mark = AnnouncedMark(tmp_path / "node.key", RUN)
    assert mark.may_announce(5, h("a"))
    mark.record(5, h("a"))
    assert mark.may_announce(5, h("a"))  # a resumed run recomputes the step bit for bit
    assert not mark.may_announce(5, h("b"))  # other weights after a resync: equivocation, so no
    assert not mark.may_announce(4, h("c"))  # older than anything kept: we may have signed it
    assert mark.may_announce(6, h("d"))


def test_the_record_survives_a_restart_for_its_run_only(tmp_path: Path) -> None:
    mark = AnnouncedMark(tmp_path / "node.key", RUN)
    for step in range(20):
        mark.record(step, h(str(step)))
    again = AnnouncedMark(tmp_path / "node.key", RUN)
    assert again.may_announce(19, h("19")) and not again.may_announce(19, h("x"))
    assert not again.may_announce(20 - KEEP_STEPS - 1, h("old"))
    assert AnnouncedMark(tmp_path / "node.key", OTHER).may_announce(0, h("new run"))  # another run: afresh
    assert len(mark_path(tmp_path / "node.key").read_text().splitlines()) == KEEP_STEPS + 1


def test_identities_whose_keys_share_a_folder_keep_their_own_records(tmp_path: Path) -> None:
    one, other = AnnouncedMark(tmp_path / "a.key", RUN), AnnouncedMark(tmp_path / "b.key", RUN)
    one.record(5, h("a's payload"))
    assert other.may_announce(5, h("b's payload"))


def test_without_a_key_folder_it_lives_in_memory_and_an_unreadable_file_is_named(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mark = AnnouncedMark(None, RUN)
    mark.record(3, h("a"))
    assert not mark.may_announce(3, h("b"))
    mark_path(tmp_path / "node.key").write_bytes(b"\xff\xfe garbage")
    with caplog.at_level(logging.WARNING):
        assert AnnouncedMark(tmp_path / "node.key", RUN).may_announce(3, h("b"))
    assert "node.key.announced" in caplog.text
