"""Type checks and text parsing for config fields, driven by the dataclasses' own annotations.

Why one place: a TOML file gives typed values, environment variables and flags give strings, and code builds
configs directly. All three must end in the same validated dataclass with the same error for the same mistake,
so the rules live here once, keyed by the annotated type, instead of in every section.
"""

from __future__ import annotations

import dataclasses
import math
import types
from pathlib import Path
from typing import Any, Union, get_args, get_origin

from distro_node.node.config.errors import ConfigFieldError

_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


def optional_inner(hint: Any) -> Any | None:
    """``X`` for ``X | None``, else None."""
    if get_origin(hint) in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        if len(args) == 1 and len(get_args(hint)) == 2:
            return args[0]
    return None


def is_section(hint: Any) -> bool:
    """True for a nested config section (a dataclass type), which is a TOML table rather than a value."""
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _is_str_tuple(hint: Any) -> bool:
    return get_origin(hint) is tuple and get_args(hint) == (str, ...)


def type_name(hint: Any) -> str:
    """How the type is named in error messages ("an integer", "a list of strings", ...)."""
    inner = optional_inner(hint)
    if inner is not None:
        return f"{type_name(inner)} or empty"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", Path: "a path"}
    if hint in names:
        return names[hint]
    if _is_str_tuple(hint):
        return "a list of strings"
    if is_section(hint):
        return "a table"
    return str(hint)


def normalize(field: str, value: Any, hint: Any) -> Any:
    """Check ``value`` against ``hint`` and return it in canonical form (int -> float for float fields,
    list -> tuple, str -> Path); raises :class:`ConfigFieldError` naming ``field`` otherwise.

    Booleans are never accepted as numbers: ``port = true`` in a file is a mistake, not port 1.
    Hints this module does not know (nested strategy configs) pass through for their owner to check.
    """
    inner = optional_inner(hint)
    if inner is not None:
        return None if value is None else normalize(field, value, inner)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigFieldError(field, f"must be a boolean, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigFieldError(field, f"must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigFieldError(field, f"must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigFieldError(field, f"must be a finite number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigFieldError(field, f"must be a string, got {value!r}")
        return value
    if hint is Path:
        if not isinstance(value, str | Path) or not str(value):
            raise ConfigFieldError(field, f"must be a non-empty path, got {value!r}")
        return Path(value)
    if _is_str_tuple(hint):
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigFieldError(field, f"must be a list of strings, got {value!r}")
        return tuple(value)
    if is_section(hint):
        if not isinstance(value, hint):
            raise ConfigFieldError(field, f"must be a table ({hint.__name__}), got {value!r}")
        return value
    return value


def parse_text(field: str, text: str, hint: Any, source: str | None) -> Any:
    """Turn a string from an environment variable or a flag into a value of type ``hint``.

    Lists are comma-separated (multiaddrs and paths never contain commas); an empty string means "unset"
    for optional fields and an empty list for list fields; booleans accept true/false, yes/no, on/off, 1/0.
    """
    inner = optional_inner(hint)
    if inner is not None:
        return None if text.strip() == "" else parse_text(field, text, inner, source)
    stripped = text.strip()
    try:
        if hint is bool:
            lowered = stripped.lower()
            if lowered in _TRUE:
                return True
            if lowered in _FALSE:
                return False
            raise ValueError(text)
        if hint is int:
            return int(stripped, 10)
        if hint is float:
            return float(stripped)
    except ValueError:
        raise ConfigFieldError(field, f"must be {type_name(hint)}, got {text!r}", source) from None
    if _is_str_tuple(hint):
        return tuple(part.strip() for part in text.split(",") if part.strip())
    if is_section(hint):
        raise ConfigFieldError(field, "is a table: set its fields one by one", source)
    return text
