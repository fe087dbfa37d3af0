"""The result type of `distro-node doctor`: a list of checks, each with a verdict and what to do about it.

Why a fixed shape: the text report is for an operator, the ``--json`` one for scripts and CI that gate a
machine before it joins a run; both are rendered from the same :class:`Check` objects so they never disagree.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PASS = "PASS"
WARN = "WARN"
FAIL = "FAIL"
# Optional checks that were not asked for (``--measure-bandwidth``); they never change the exit code.
SKIP = "SKIP"
STATUSES: tuple[str, ...] = (PASS, WARN, FAIL, SKIP)


@dataclass(frozen=True)
class Check:
    """One verdict. ``summary`` is a single line of facts, ``hint`` what to do when not PASS, ``details`` the
    numbers behind it (base units: bytes, seconds) for the JSON report."""

    name: str
    status: str
    summary: str
    hint: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "hint": self.hint,
            "details": dict(self.details),
        }


def worst(statuses: Sequence[str]) -> str:
    """The most severe status (FAIL > WARN > PASS); SKIP counts as PASS."""
    for status in (FAIL, WARN):
        if status in statuses:
            return status
    return PASS


def report_dict(context: Mapping[str, Any], checks: Sequence[Check]) -> dict[str, Any]:
    """The ``--json`` document: ``ok`` is what the exit code says (no FAIL)."""
    return {
        "ok": all(c.status != FAIL for c in checks),
        "context": dict(context),
        "checks": [c.to_dict() for c in checks],
    }


def render_text(title: str, checks: Sequence[Check], width: int = 110) -> str:
    """Each check's summary wrapped to ``width`` columns under its status and name, the hint under it, and a
    closing verdict line."""
    name_width = max((len(c.name) for c in checks), default=0)
    indent = " " * (4 + 2 + name_width + 2)
    lines = [title]
    for c in checks:
        head = f"{c.status:<4}  {c.name:<{name_width}}  "
        lines.append(textwrap.fill(c.summary, width, initial_indent=head, subsequent_indent=indent))
        if c.hint and c.status != PASS:
            lines.append(
                textwrap.fill(c.hint, width, initial_indent=indent + "-> ", subsequent_indent=indent + "   ")
            )
    fails = sum(c.status == FAIL for c in checks)
    warns = sum(c.status == WARN for c in checks)
    verdict = "ready" if not fails else "not ready"
    lines.append(f"{verdict}: {fails} FAIL, {warns} WARN, {len(checks)} checks")
    return "\n".join(lines)


def human_bytes(n: float) -> str:
    """Decimal units (kB = 1000 B), like network rates and the benchmark tables."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    return f"{n:.2f} TB"


def human_seconds(s: float) -> str:
    if s < 0.01:
        return f"{s * 1000:.1f} ms"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
