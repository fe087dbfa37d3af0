"""A deterministic corpus for the prepared-data tests, and helpers to tamper with a prepared dataset.

Words are drawn from a seeded list of syllable compounds (tens of thousands of distinct words, so an 8k BPE
vocabulary fills up), with a few documents that stress the round trip: non-ASCII text, odd whitespace, and
the literal text of the end-of-document token, which must stay text and never become a boundary.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distro_node.node.data.prepare import PrepareResult, PrepareSettings

SYLLABLES = ("ka", "to", "ri", "an", "el", "mo", "su", "ne", "la", "vi", "or", "qu", "pe", "di", "xa", "zu",
             "ba", "fo", "gi", "he", "ly", "ost", "um", "wer")
SPECIAL_DOCUMENTS = (
    "naïve café — 日本語のテキスト and emoji 🚀\n",
    "  leading spaces,\ttabs,\r\nCRLF line ends and trailing blanks   \n\n\n",
    "a document that mentions <|endoftext|> in its text, which is not a boundary",
)


def documents(total_chars: int, seed: int = 0) -> list[str]:
    """Documents of 30 to 700 words until ``total_chars`` characters, then the special ones."""
    rng = random.Random(seed)
    words = sorted({"".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))) for _ in range(40000)})
    docs: list[str] = []
    size = 0
    while size < total_chars:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(30, 700)))
        text = sentence[0].upper() + sentence[1:] + ".\n"
        docs.append(text)
        size += len(text)
    return docs + list(SPECIAL_DOCUMENTS)


def write_inputs(folder: Path, docs: list[str], text_files: int) -> list[Path]:
    """The first ``text_files`` documents as one text file each, the rest as JSON lines (two files)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, text in enumerate(docs[:text_files]):
        path = folder / f"doc{i:04d}.txt"
        path.write_bytes(text.encode("utf-8"))
        paths.append(path)
    rest = docs[text_files:]
    half = len(rest) // 2
    for name, chunk in (("a.jsonl", rest[:half]), ("b.jsonl", rest[half:])):
        path = folder / name
        path.write_text("".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(chunk)))
        paths.append(path)
    return paths


def copy_dataset(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_manifest(folder: Path, change: Any) -> dict[str, Any]:
    """Apply ``change(doc)`` to data.json in place; returns the new document."""
    path = folder / "data.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc


def rewrite_shard(folder: Path, split: str, index: int, data: bytes) -> None:
    """Replace a shard's bytes and make data.json agree on its sha256 (a consistent but wrong dataset)."""
    doc = json.loads((folder / "data.json").read_text())
    entry = doc[split]["shards"][index]
    (folder / entry["file"]).write_bytes(data)
    edit_manifest(folder, lambda d: d[split]["shards"][index].update(sha256=hashlib.sha256(data).hexdigest()))


# The folder's one prepared dataset (conftest.py's ``prepared`` fixture) and its settings: imported by name
# from here, not from conftest, which other test folders also have.
CORPUS_CHARS = 2_000_000
SETTINGS = PrepareSettings(vocab_size=8000, eod_token="<|endoftext|>", text_field="text", eval_fraction=0.1,
                           shard_tokens=1 << 16)


@dataclass(frozen=True)
class Prepared:
    docs: list[str]
    inputs: list[Path]
    result: PrepareResult

    @property
    def folder(self) -> Path:
        return self.result.path.parent
