"""What every config section shares: field type checks at construction, the range and choice rules
sections use in :meth:`Section.check`, and :func:`doc`, the field metadata ``distro-node init`` renders.

Apart from the sections themselves so each group of sections (schema.py, run.py) builds on it without
importing the others.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, get_type_hints

from distro_node.node.config.errors import ConfigFieldError
from distro_node.node.config.fields import normalize


def doc(text: str, example: str = "") -> dict[str, str]:
    """Field metadata: the documentation (and, for unset optional fields, an example value) that the rendered
    config file shows above the field."""
    return {"doc": text, "example": example}


@dataclass(frozen=True)
class Section:
    """Common validation: every field is type-checked against its annotation, then :meth:`check` runs the
    section's own range and cross-field rules. ``SECTION`` is the dotted prefix errors are reported under."""

    SECTION: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = get_type_hints(type(self))
        for f in fields(self):
            value = normalize(self.dotted(f.name), getattr(self, f.name), hints[f.name])
            object.__setattr__(self, f.name, value)
        self.check()

    @classmethod
    def dotted(cls, name: str) -> str:
        return f"{cls.SECTION}.{name}" if cls.SECTION else name

    def check(self) -> None:
        """Range and cross-field rules of the section; the default has none."""

    def _fail(self, name: str, detail: str) -> ConfigFieldError:
        return ConfigFieldError(self.dotted(name), detail)

    def _choice(self, name: str, choices: tuple[str, ...]) -> None:
        value = getattr(self, name)
        if value not in choices:
            raise self._fail(name, f"must be one of {', '.join(choices)}, got {value!r}")

    def _range(self, name: str, low: float, high: float) -> None:
        value = getattr(self, name)
        if not low <= value <= high:
            raise self._fail(name, f"must be in [{low}, {high}], got {value}")

    def _positive(self, name: str) -> None:
        value = getattr(self, name)
        if not value > 0:
            raise self._fail(name, f"must be > 0, got {value}")
