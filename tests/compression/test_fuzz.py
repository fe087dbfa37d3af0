"""W1: seeded mutations of valid payloads never raise anything but PayloadError."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import msgpack
import pytest
from compression_fixtures import PEER, RUN_ID, STEP, small_spec, valid_bytes
from distro_node.compression.envelope import F_INDICES, F_SCALE, F_VALUES, FIELD_KEYS, LEGACY_VERSION_KEY
from distro_node.compression.errors import PayloadError
from distro_node.compression.payload import PayloadSpec
from distro_node.compression.wire import decode

# First bytes of msgpack headers that carry a length (bin, str, array, map, ext).
_LENGTH_MARKERS = frozenset([0xC4, 0xC5, 0xC6, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF, 0xC7, 0xC8, 0xC9])
_LENGTH_MARKERS |= frozenset(range(0x80, 0xC0))  # fixmap, fixarray, fixstr


def _random_value(rng: random.Random) -> object:
    choices: list[Any] = [
        None,
        True,
        rng.randint(-(2**63), 2**64 - 1),
        rng.random(),
        float("nan"),
        "x" * rng.randint(0, 300),
        rng.randbytes(rng.randint(0, 300)),
        {},
        {F_VALUES: b""},
        [],
        [1.0, 2.0],
        {"a": {"b": {"c": {}}}},
        msgpack.ExtType(5, b"zz"),
    ]
    return rng.choice(choices)


def _replace_field(data: bytes, rng: random.Random) -> bytes:
    try:  # an earlier mutation may already have broken the document: then leave it as it is
        doc = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:
        return data
    if not isinstance(doc, dict):
        return data
    fields = [k for k in FIELD_KEYS if isinstance(doc.get(k), bytes) and doc[k]]
    how = rng.random()
    if how < 0.5 or not fields:  # any key, present or not, gets an arbitrary value
        doc[rng.choice([*doc, F_INDICES, F_SCALE, LEGACY_VERSION_KEY, "bogus"])] = _random_value(rng)
    else:  # a field bin keeps its type but gets bytes cut out of, or spliced into, one place
        key = rng.choice(fields)
        at = rng.randrange(len(doc[key]))
        cut = rng.choice([0, 1, 2, 4])
        doc[key] = doc[key][:at] + rng.randbytes(rng.choice([0, 1, 4])) + doc[key][at + cut :]
    return msgpack.packb(doc, use_bin_type=True)


def _corrupt_length(data: bytes, rng: random.Random) -> bytes:
    positions = [i for i, b in enumerate(data) if b in _LENGTH_MARKERS]
    at = rng.choice(positions)
    out = bytearray(data)
    if out[at] in (0xC6, 0xDB, 0xDD, 0xDF, 0xC9):
        out[at + 1 : at + 5] = rng.choice([b"\xff\xff\xff\xff", b"\x80\x00\x00\x00", rng.randbytes(4)])
    elif out[at] >= 0xC4 and at + 1 < len(out):
        out[at + 1] = rng.randrange(256)
    else:
        out[at] = rng.choice([0xC6, 0xDD, 0xDF, 0xDB, rng.randrange(0x80, 0xC0)])
    return bytes(out)


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    kind = rng.choice(["truncate", "flip", "insert", "delete", "replace", "length"])
    if kind == "truncate":
        return kind, data[: rng.randrange(len(data))]
    if kind == "flip":
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] ^= (
                1 << rng.randrange(8) if rng.random() < 0.5 else rng.randint(1, 255)
            )
        return kind, bytes(out)
    if kind == "insert":
        at = rng.randrange(len(data) + 1)
        return kind, data[:at] + rng.randbytes(rng.randint(1, 16)) + data[at:]
    if kind == "delete":
        at = rng.randrange(len(data))
        return kind, data[:at] + data[at + rng.randint(1, 16) :]
    if kind == "replace":
        return kind, _replace_field(data, rng)
    return kind, _corrupt_length(data, rng)


SPECS: list[PayloadSpec] = [
    small_spec("auto", "fp32"),
    small_spec("packed", "int8"),
    small_spec("enum", "1bit"),
    small_spec("auto", "bf16", k=1),
]


def test_ten_thousand_mutations_only_raise_payload_error() -> None:
    rng = random.Random(20240601)
    originals = [valid_bytes(spec, seed=i) for i, spec in enumerate(SPECS)]
    reasons: Counter[str] = Counter()
    for i in range(10_000):
        spec, data = SPECS[i % len(SPECS)], originals[i % len(SPECS)]
        kinds = []
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            kind, data = mutate(data, rng) if data else ("empty", data)
            kinds.append(kind)
        try:
            decode(data, spec, run_id=RUN_ID, sender=PEER, step=STEP, max_value_norm=1e6)
            reasons["accepted"] += 1
        except PayloadError as exc:
            reasons[exc.reason] += 1
        except Exception as exc:  # the property under test: nothing else may escape
            pytest.fail(f"mutation {i} ({'+'.join(kinds)}) raised {type(exc).__name__}: {exc}")
    assert reasons["accepted"] < 2_000, reasons  # most mutations must be caught, not silently accepted
    assert {"malformed", "schema", "length"} <= set(reasons), reasons
