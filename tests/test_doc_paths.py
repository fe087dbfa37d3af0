"""Every repository path README.md and docs/*.md name exists.

Why: files move (node/ was regrouped into subpackages, the round machine is moving to protocol/consensus/)
and the docs are read as a map of the code; a path that no longer resolves sends the reader searching. The
check is deliberately literal: a path is what it says, relative to the repository root, so a path written
relative to some section's folder (``peer/settings.py`` meaning node/peer/settings.py) counts as missing;
the failure message then names where the file is.

What counts as a path: a token with a ``/`` whose last part has a file extension (``bench/payload.py``), a
token ending in ``/`` (``tests/testbed/``), or a token that starts with one of the repository's top-level
folders (``deploy/kubernetes``); in code spans, code blocks and prose alike. A markdown link's target is
resolved from the document's own folder, as a renderer does. ``results/x.json`` is benchmarks.md's
shorthand for bench/results/x.json, and a bare ``x.json`` names a result file there too, unless the docs
give that name a folder of its own elsewhere (``swarm-runs/<time>/summary.json``).

Not paths: URLs and host names, paths beside the repository outside links (``../shared/reference/x.md``,
the design folder a checkout sits next to, which a clone elsewhere does not have), absolute paths (/tmp,
/metrics, protocol ids like /distro/payload/1.0.0),
``~`` and ``$VAR`` paths, ``<placeholder>`` paths, upper-case placeholders (``bench/NAME.py``) and the
virtual environments (.venv*), which are made, not committed. A trailing ``/`` marks a folder only at the
end of a word: in ``sign/`adam``` it is prose.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RESULTS = REPO / "bench" / "results"

# Named in the docs on purpose, but not files of this repository.
NOT_REPOSITORY_PATHS: dict[str, str] = {
    "./distro-node.toml": "where the daemon looks for its config, in the directory it runs in",
}

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_SPLIT = re.compile(r"[\s`\"'()\[\]{},;|=]+")
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,9}$")
# NAME.py: upper case is never a module's name (PEP 8), while README.md or LICENSE are real files.
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*\.py$")
_URL = re.compile(r"^[a-z][a-z0-9+.-]*:")


@dataclass(frozen=True)
class Named:
    """One path as a document names it, and where."""

    doc: Path
    line: int
    text: str
    path: Path


def _top_level_folders() -> set[str]:
    return {p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")}


def _clean(token: str) -> str:
    """The path inside a token: no markdown emphasis, sentence punctuation, line number or anchor."""
    token = token.lstrip("*_").rstrip("*_.:!?")
    if _URL.match(token):
        return token
    return re.split(r"[:#]", token, maxsplit=1)[0]


def _ignored(text: str) -> bool:
    first = text.split("/", 1)[0]
    return (
        not text
        or _URL.match(text) is not None
        or text.startswith(("/", "~", "$"))
        or "<" in text
        or ">" in text
        or first.startswith(".venv")
        or ("." in first and not first.startswith(".") and "/" in text)  # a host name: pytorch.org/...
        or any(_PLACEHOLDER.match(part) for part in text.split("/") if part)
    )


def _is_path(text: str, word: str, top: set[str]) -> bool:
    """``word`` is the whitespace-delimited word ``text`` came from."""
    if "/" not in text or set(text) <= {"/", "."}:
        return False
    last = text.rstrip("/").rsplit("/", 1)[-1]
    folder = text.endswith("/") and _clean(word.strip("`\"'()[]{},;:.!?*")) == text
    return folder or bool(_EXTENSION.search(last)) or text.split("/", 1)[0] in top


def _tokens(line: str) -> Iterator[tuple[str, str]]:
    """(token, the word it is part of) for every candidate in a line, link targets left out."""
    for word in _LINK.sub("]", line).split():
        for raw in _SPLIT.split(word):
            yield _clean(raw), word


def named_paths(doc: Path, top: set[str]) -> Iterator[Named]:
    """Every path ``doc`` names, with the file it should be in the repository."""
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        for target in _LINK.findall(line):
            text = _clean(target)
            if not _ignored(text):  # a bare #anchor cleans to ""
                yield Named(doc, number, text, doc.parent / text)
        for text, word in _tokens(line):
            if _ignored(text) or text.startswith("../") or not _is_path(text, word, top):
                continue
            base = RESULTS.parent if text.startswith("results/") else REPO
            yield Named(doc, number, text, base / text)


def bare_result_names(doc: Path, placed: set[str]) -> Iterator[Named]:
    """``x.json`` without a folder: a bench result, unless the docs put that name somewhere else."""
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        for text, _ in _tokens(line):
            if "/" not in text and text.endswith(".json") and text not in placed and not _ignored(text):
                yield Named(doc, number, text, RESULTS / text)


def _exists(path: Path) -> bool:
    if "*" in path.name or "?" in path.name:
        return any(path.parent.glob(path.name))
    return path.exists()


def _repository_files() -> Iterator[Path]:
    """Files and folders of the working tree, without the made ones (.venv*, caches, the mypy link tree)."""
    skip = {".git", "__pycache__", ".typecheck", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis"}
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if d not in skip and not d.startswith(".venv") and "egg-info" not in d]
        for name in [*dirs, *files]:
            yield Path(root) / name


def _elsewhere(text: str) -> list[str]:
    """Where a missing path's file is now, when a file of that name ends the same way."""
    tail = Path(text.rstrip("/")).parts
    if not tail:
        return []
    hits = [p.relative_to(REPO).as_posix() for p in _repository_files() if p.parts[-len(tail):] == tail]
    return sorted(hits)[:3]


def _placed_names(docs: list[Path]) -> set[str]:
    """File names the docs give a folder other than bench/results/ (summary.json in swarm-runs/<time>/), read
    before placeholders are dropped, since those paths are the ones with a placeholder in them."""
    return {
        text.rsplit("/", 1)[-1]
        for doc in docs
        for line in doc.read_text(encoding="utf-8").splitlines()
        for text, _ in _tokens(line)
        if "/" in text and not text.startswith(("results/", "bench/results/"))
    }


def missing_in(doc: Path) -> list[str]:
    """``doc:line: path`` for every path of ``doc`` that does not exist, with where its file is now."""
    found = [*named_paths(doc, _top_level_folders()), *bare_result_names(doc, _placed_names(DOCS))]
    out: set[tuple[int, str]] = set()
    for n in found:
        if n.text in NOT_REPOSITORY_PATHS or _exists(n.path):
            continue
        where = _elsewhere(n.text)
        out.add((n.line, n.text + (f" (now at: {', '.join(where)})" if where else "")))
    return [f"{doc.relative_to(REPO)}:{line}: {what}" for line, what in sorted(out)]


@pytest.mark.parametrize("doc", DOCS, ids=[d.relative_to(REPO).as_posix() for d in DOCS])
def test_paths_named_in_docs_exist(doc: Path) -> None:
    missing = missing_in(doc)
    header = f"{len(missing)} path(s) named in {doc.relative_to(REPO)} do not exist:"
    assert not missing, "\n".join([header, *missing])


# The rules above decide what is a path; these pin them.


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("see `bench/payload.py` and bench/results/payload.json.",
         ["bench/payload.py", "bench/results/payload.json"]),
        ("`protocol/host.py:449` and node/peer/node.py#L3", ["protocol/host.py", "node/peer/node.py"]),
        ("folders `tests/testbed/` and `deploy/kubernetes`", ["tests/testbed/", "deploy/kubernetes"]),
        ("`results/soak.json`", ["results/soak.json"]),
        ("https://example.org/a/b.py www.example.org/x.md pytorch.org/whl/cpu", []),
        ("`/tmp/x.json` `/distro/payload/1.0.0` `~/.config/a.toml` `$HOME/a.toml`", []),
        ("`swarm-runs/<time>/summary.json` `.venv/bin/python` `.venv-hivemind/` `bench/NAME.py`", []),
        ("MB/s and/or 10/100 Mbit, (agree - disagree) / sent, sign/`adam`: 2.75", []),
        ("`docs/README.md` and `bench/README`", ["docs/README.md", "bench/README"]),
    ],
)
def test_what_counts_as_a_path(tmp_path: Path, line: str, expected: list[str]) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(line + "\n")
    assert [n.text for n in named_paths(doc, {"bench", "protocol", "node", "tests", "deploy"})] == expected


def test_links_resolve_from_the_document(tmp_path: Path) -> None:
    doc = tmp_path / "docs" / "a.md"
    doc.parent.mkdir()
    doc.write_text("[b](b.md#part) [root](../README.md) [web](https://example.org/x.md) [here](#anchor)\n")
    assert [(n.text, n.path) for n in named_paths(doc, set())] == [
        ("b.md", tmp_path / "docs" / "b.md"),
        ("../README.md", tmp_path / "docs" / "../README.md"),
    ]


def test_bare_json_names_are_bench_results(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("writes `swarm-runs/<time>/summary.json`; summary.json, `exchange.json` and gone.json\n")
    placed = _placed_names([doc])
    assert [(n.text, n.path) for n in bare_result_names(doc, placed)] == [
        ("exchange.json", RESULTS / "exchange.json"),
        ("gone.json", RESULTS / "gone.json"),
    ]
