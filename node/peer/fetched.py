"""A folder of files a joiner fetched for its run: the prepared data's head and shards (data_fetch.py), or an
imported checkpoint's files (init_fetch.py)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FetchedFolder:
    """Where the files are, whether that folder is temporary (no data dir: nothing of this process
    persists, so it is removed at exit) and how many bytes came over the network (0 when a previous run left
    them all verified)."""

    folder: Path
    temporary: bool
    fetched_bytes: int = 0

    def remove_if_temporary(self) -> None:
        if self.temporary:
            shutil.rmtree(self.folder, ignore_errors=True)
