"""The documents of ``data prepare``'s local input files, in a fixed order.

What a document is, by file type (chosen by suffix):

* ``.jsonl`` / ``.ndjson`` / ``.json``: JSON lines, one object per line, the document is its text field
  (``--text-field``, default ``text``); blank lines are skipped.
* ``.parquet``: one document per row of the text column (needs pyarrow, the ``data`` extra).
* anything else: a UTF-8 text file is one document. Not split on blank lines: a paragraph is too short to
  hold a training window (windows never cross a document boundary, node/data/rows.py), and a file is the
  unit a user already controls; a corpus in one big file is better given as JSON lines.

Directories are walked recursively in sorted order (hidden entries skipped), so the same inputs always give
the same documents in the same order. Empty documents (and null Parquet values) are skipped and counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from distro_node.node.data.errors import DataFileNotFoundError, DataFormatError
from distro_node.node.data.extras import require_pyarrow

JSONL_SUFFIXES = frozenset({".jsonl", ".ndjson", ".json"})
PARQUET_SUFFIXES = frozenset({".parquet"})
# A text file is read whole as one document; beyond this it is almost surely a corpus, not a document.
MAX_TEXT_DOCUMENT_BYTES = 256 << 20
_PARQUET_BATCH_ROWS = 1024

Progress = Callable[[int], None]  # told the input bytes consumed since its last call


@dataclass(frozen=True)
class InputFile:
    path: Path
    kind: str  # text | jsonl | parquet
    size: int


def _kind(path: Path) -> str:
    suffix = path.suffix.lower()
    return "jsonl" if suffix in JSONL_SUFFIXES else "parquet" if suffix in PARQUET_SUFFIXES else "text"


def collect_inputs(inputs: Sequence[Path]) -> list[InputFile]:
    """The files named, directories expanded (sorted, recursive, hidden entries skipped)."""
    found: list[InputFile] = []
    for given in inputs:
        if given.is_dir():
            paths = sorted(
                p for p in given.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(given).parts)
            )
        elif given.is_file():
            paths = [given]
        else:
            raise DataFileNotFoundError(given)
        found += [InputFile(p, _kind(p), p.stat().st_size) for p in paths]
    if not found:
        raise DataFormatError(None, f"no input files in {', '.join(map(str, inputs))}")
    return found


class DocumentReader:
    """One pass over the documents of ``files``; ``skipped`` counts the empty ones left out."""

    def __init__(
        self, files: Sequence[InputFile], *, text_field: str, progress: Progress | None = None
    ) -> None:
        self.files = list(files)
        self.text_field = text_field
        self.skipped = 0
        self._progress = progress or (lambda _n: None)

    def __iter__(self) -> Iterator[str]:
        for item in self.files:
            if item.kind == "jsonl":
                yield from self._jsonl(item.path)
            elif item.kind == "parquet":
                yield from self._parquet(item)
            else:
                text = self._text(item.path)
                self._progress(item.size)
                if text:
                    yield text
                else:
                    self.skipped += 1

    def _text(self, path: Path) -> str:
        if path.stat().st_size > MAX_TEXT_DOCUMENT_BYTES:
            raise DataFormatError(path, f"a text file is one document and this one is over "
                                        f"{MAX_TEXT_DOCUMENT_BYTES >> 20} MiB; give the corpus as JSON lines")
        raw = path.read_bytes()
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataFormatError(path, f"not UTF-8 text (byte {exc.start}: {exc.reason})") from None

    def _jsonl(self, path: Path) -> Iterator[str]:
        with path.open("rb") as f:
            for number, line in enumerate(f, start=1):
                self._progress(len(line))
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    detail = f"line {number}: not a JSON object ({str(exc)[:120]})"
                    raise DataFormatError(path, detail) from None
                if not isinstance(record, dict) or self.text_field not in record:
                    keys = sorted(record)[:10] if isinstance(record, dict) else type(record).__name__
                    raise DataFormatError(path, f"line {number}: no field {self.text_field!r} (--text-field) "
                                                f"in {keys}")
                text = record[self.text_field]
                if text is not None and not isinstance(text, str):
                    raise DataFormatError(path, f"line {number}: field {self.text_field!r} is "
                                                f"{type(text).__name__}, not a string")
                if text:
                    yield text
                else:
                    self.skipped += 1

    def _parquet(self, item: InputFile) -> Iterator[str]:
        pa, pq = require_pyarrow(f"reading {item.path}")
        errors = (OSError, ValueError, pa.lib.ArrowException)
        try:
            reader = pq.ParquetFile(item.path)
            names = reader.schema_arrow.names
            if self.text_field not in names:
                raise DataFormatError(item.path, f"no column {self.text_field!r} (--text-field) in "
                                                 f"{names[:20]}")
            column_type = reader.schema_arrow.field(self.text_field).type
            if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
                raise DataFormatError(item.path, f"column {self.text_field!r} is {column_type}, not a string")
            rows = max(1, reader.metadata.num_rows)
            done = 0
            for batch in reader.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=[self.text_field]):
                for text in batch.column(0).to_pylist():
                    if text:
                        yield text
                    else:
                        self.skipped += 1
                # Progress in file bytes, pro rata of the rows read: Parquet pages are compressed.
                before, done = done, done + batch.num_rows
                self._progress(item.size * done // rows - item.size * before // rows)
        except DataFormatError:
            raise
        except errors as exc:
            raise DataFormatError(item.path, f"cannot read as Parquet: {str(exc)[:200]}") from None
