"""The optional dependencies of data preparation, imported only when used.

A node that trains on prepared shards reads them with numpy alone; only ``distro-node data prepare`` needs
``tokenizers`` (and ``pyarrow`` for Parquet input). Importing them here, on first use, keeps the daemon's
start-up and install free of them, and turns their absence into one clear error naming the extra.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from distro_node.node.data.errors import MissingExtraError


def require_tokenizers(purpose: str) -> ModuleType:
    """The ``tokenizers`` package, or :class:`MissingExtraError` naming ``purpose`` and the extra."""
    try:
        return importlib.import_module("tokenizers")
    except ImportError:
        raise MissingExtraError("tokenizers", purpose) from None


def require_pyarrow(purpose: str) -> tuple[Any, Any]:
    """(``pyarrow``, ``pyarrow.parquet``), untyped (pyarrow ships no type information), or
    :class:`MissingExtraError` naming ``purpose``."""
    try:
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise MissingExtraError("pyarrow", purpose) from None
