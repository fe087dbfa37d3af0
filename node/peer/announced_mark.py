"""The payloads this identity signed for its latest steps, kept beside its key and named after it.

Why: two different signed payloads for one step are equivocation, which every honest replica answers with
a ban (protocol/evidence.py). An honest peer could sign twice without meaning to: after a resync to a
donor's state at a step it had already announced (it recomputes the step on other weights), or after a
crash and a quick restart with the same key (its momentum came back from an older checkpoint). So before
signing it looks here: the same payload again is fine (a resumed run recomputes a step bit for bit), a
different one for a step it signed is refused, and so is any step older than those kept; the peer is
merely left out of that step. A step is written here before its announcement leaves, so a crash in
between costs a step, never a ban. Without a key file the identity dies with the process, and so does the
record (memory only). Named after the key file (``<key file>.announced``), not the folder: identities whose
keys share a folder (several peers on one machine) each keep their own record; one shared file made each
of them refuse to announce the others' steps.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)

MARK_SUFFIX = ".announced"
KEEP_STEPS = 8  # more than a round's lookahead and the steps a resync can go back
_MAX_BYTES = 4096


class AnnouncedMark:
    def __init__(self, key_file: Path | None, run_id: bytes) -> None:
        self._path = mark_path(key_file) if key_file is not None else None
        self._run = run_id.hex()
        self._signed: dict[int, bytes] = self._load()

    def may_announce(self, step: int, payload_hash: bytes) -> bool:
        """False if signing ``payload_hash`` for ``step`` could contradict an earlier signature of ours."""
        if step in self._signed:
            return self._signed[step] == payload_hash
        return not self._signed or step > min(self._signed)

    def record(self, step: int, payload_hash: bytes) -> None:
        """Keep the statement (durably, with a key file) before the announcement leaves."""
        if self._signed.get(step) == payload_hash:
            return
        self._signed[step] = payload_hash
        for old in sorted(self._signed)[:-KEEP_STEPS]:
            del self._signed[old]
        if self._path is None:
            return
        tmp = self._path.with_name(f".{self._path.name}.tmp")
        lines = [self._run, *(f"{s} {h.hex()}" for s, h in sorted(self._signed.items()))]
        with tmp.open("w") as fh:
            fh.write("\n".join(lines) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._path)

    def _load(self) -> dict[int, bytes]:
        """This run's statements; another run's, a missing file or an unreadable one mean none (an unreadable
        record can at worst cost a ban it was meant to spare, so it is said out loud)."""
        if self._path is None or not self._path.exists():
            return {}
        try:
            with self._path.open("rb") as fh:
                run, *rows = fh.read(_MAX_BYTES).decode().split("\n")
            signed = {}
            for row in filter(None, rows[: KEEP_STEPS + 1]):
                step, digest = row.split()
                signed[int(step)] = bytes.fromhex(digest)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            logger.warning("ignoring unreadable %s (%s): a step signed before this start may be signed "
                           "again differently, which peers ban as equivocation", self._path, exc)
            return {}
        return signed if run == self._run else {}


def mark_path(key_file: Path) -> Path:
    return key_file.with_name(key_file.name + MARK_SUFFIX)


__all__ = ["KEEP_STEPS", "AnnouncedMark", "mark_path"]
