"""The sha256 of a file, read in bounded blocks: how a run names every file it shares (data files, token
shards, tokenizers, checkpoint files) and how a fetched file is checked before anything reads it.

Standard library only, so the data tools can use it without loading the network stack.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

BLOCK_BYTES = 1 << 20


def file_sha256(path: Path, block: int = BLOCK_BYTES) -> bytes:
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while chunk := f.read(block):
            digest.update(chunk)
    return digest.digest()
