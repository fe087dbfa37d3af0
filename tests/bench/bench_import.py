"""A bench script as a module, for tests that call its functions: bench scripts run as ``python bench/x.py``
and import each other as top-level modules (``from _common import ...``), so bench/ is on the path only
while the script is imported."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
