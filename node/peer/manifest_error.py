"""The run manifest's error type and the hash syntax its fields share.

A module of its own so that the manifest's parts (``manifest.py``, ``init_spec.py``) raise one type without
importing each other: ``ManifestError`` is still imported from ``manifest.py`` by everyone else.
"""

from __future__ import annotations

import re

SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class ManifestError(ValueError):
    """A manifest field is missing or invalid; ``field`` names it."""

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(f"manifest {field}: {detail}")
        self.field = field


__all__ = ["SHA256_HEX", "ManifestError"]
