"""The mutations of bench/decode_fuzz.py: byte-level ones (truncate, flip, insert, delete) and those
threats.md W1 names that need the decoded document (missing, duplicate and extra keys, wrong types, value
fields sized for another dtype, 2**32 length headers at every kind of field, deep nesting).

Why apart from the bench: the generator is most of the bench's code and about one thing, what a hostile
peer may send; the bench around it is about running it and measuring the decoder.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import msgpack
from distro_node.compression.envelope import (
    F_INDICES,
    F_SCALE,
    F_VALUES,
    FIELD_KEYS,
    K_LAYOUT,
    K_RUN_ID,
    K_SETTINGS,
    LEGACY_VERSION_KEY,
)

Doc = dict[str, Any]
Mutator = Callable[[bytes, Doc, random.Random], bytes]


# Lengths a hostile header may claim: 2**32 - 1 is the largest a msgpack 32-bit length can say.
HUGE_LENGTHS = (0xFFFFFFFF, 0xFFFFFFFE, 0x80000000, 0x7FFFFFFF)
# msgpack first bytes with a 32-bit length (bin32, str32, array32, map32, ext32), and their 8/16-bit cousins.
LEN32_MARKERS = (0xC6, 0xDB, 0xDD, 0xDF, 0xC9)
LEN_MARKERS = frozenset([0xC4, 0xC5, 0xC6, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF, 0xC7, 0xC8, 0xC9])


# -- document surgery ------------------------------------------------------------------------------------


def _copy_doc(doc: Doc) -> Doc:
    """Copy the one map a payload has (format 2 is flat); the leaves (bytes, str, int) are immutable."""
    return dict(doc)


def _random_value(rng: random.Random) -> object:
    return rng.choice(
        [
            None,
            True,
            False,
            0,
            -1,
            rng.randint(-(2**63), 2**64 - 1),
            rng.random(),
            float("nan"),
            "x" * rng.randint(0, 200),
            rng.randbytes(rng.randint(0, 200)),
            {},
            {F_VALUES: b""},
            {"a": {"b": {"c": {}}}},
            [],
            [1, 2, 3],
            msgpack.ExtType(rng.randint(0, 127), rng.randbytes(4)),
        ]
    )


def _splice(doc: Doc, rng: random.Random, raw: bytes) -> bytes:
    """Pack ``doc`` with ``raw`` (arbitrary msgpack bytes, possibly invalid) as the value of a random key.

    Packing a unique bin sentinel and replacing its encoding puts bytes where no msgpack packer would write
    them (a 2**32 length header, a 10^4-deep nest, a repeated key) at a chosen, structurally real place.
    """
    sentinel = b"\x00fuzz-sentinel\x00" + rng.randbytes(16)
    doc[rng.choice(list(doc))] = sentinel
    packed = msgpack.packb(doc, use_bin_type=True)
    return packed.replace(msgpack.packb(sentinel, use_bin_type=True), raw, 1)


# -- mutations -------------------------------------------------------------------------------------------


def m_truncate(data: bytes, doc: Doc, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data))]


def m_bit_flip(data: bytes, doc: Doc, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def m_insert(data: bytes, doc: Doc, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.randbytes(rng.randint(1, 16)) + data[at:]


def m_delete(data: bytes, doc: Doc, rng: random.Random) -> bytes:
    at = rng.randrange(len(data))
    return data[:at] + data[at + rng.randint(1, 16) :]


def m_extra_key(data: bytes, doc: Doc, rng: random.Random) -> bytes:
    d = _copy_doc(doc)
    # Field keys the spec may not have (scales, indices of an all-dense spec), format 1's long names, junk.
    key = rng.choice(
        [*FIELD_KEYS, "bogus", LEGACY_VERSION_KEY, "tensors", "t", "", "x" * 40, "layers.99.attn.q_proj"]
    )
    if key in d:
        key += "_"
    if rng.random() < 0.1:  # a non-str key: strict_map_key must turn it away
        return _splice(d, rng, b"\x81" + msgpack.packb(rng.choice([7, b"k", 1.5])) + b"\xc0")
    d[key] = _random_value(rng)
    return msgpack.packb(d, use_bin_type=True)


def m_missing_key(data: bytes, doc: Doc, rng: random.Random) -> bytes:
    d = _copy_doc(doc)
    for _ in range(rng.choice([1, 1, 1, 2, len(d)])):
        if d:
            del d[rng.choice(list(d))]
    return msgpack.packb(d, use_bin_type=True)


def m_duplicate_key(data: bytes, doc: Doc, rng: random.Random) -> bytes:
    """A map whose header counts one more pair than it holds distinct keys: same or a different value."""
    d = _copy_doc(doc)
    key = rng.choice(list(d))
    value = d[key] if rng.random() < 0.5 else _random_value(rng)
    packer = msgpack.Packer(use_bin_type=True)
    pairs = [*d.items(), (key, value)]
    return packer.pack_map_header(len(pairs)) + b"".join(packer.pack(k) + packer.pack(v) for k, v in pairs)


def m_wrong_type(data: bytes, doc: Doc, rng: random.Random) -> bytes:
    d = _copy_doc(doc)
    key = rng.choice(list(d))
    old = d[key]
    if isinstance(old, bytes) and rng.random() < 0.5:  # same content, other msgpack type
        new: object = rng.choice([old.decode("latin-1"), list(old[:16]), int.from_bytes(old[:8], "little")])
    elif isinstance(old, int) and rng.random() < 0.5:
        new = rng.choice([str(old), float(old), True, -old - 1, 2**64 - 1, -(2**63)])
    else:
        new = _random_value(rng)
        if type(new) is type(old):
            new = [new]
    d[key] = new
    return msgpack.packb(d, use_bin_type=True)


def m_wrong_length(data: bytes, doc: Doc, rng: random.Random) -> bytes:
    """A bin field (tensor field, digest, run id) of another length, e.g. values sized for another dtype,
    or one tensor's slice of a field grown or shrunk in place (every later tensor then shifts)."""
    d = _copy_doc(doc)
    if rng.random() < 0.2:
        key = rng.choice([K_RUN_ID, K_LAYOUT, K_SETTINGS])
        old: bytes = d[key]
        d[key] = old + rng.randbytes(rng.choice([1, 32, 200])) if rng.random() < 0.5 else old[:-1]
        return msgpack.packb(d, use_bin_type=True)
    field = rng.choice([k for k in FIELD_KEYS if k in d] + [F_SCALE, F_INDICES])
    old = d.get(field, b"")
    n = len(old)
    if n and rng.random() < 0.4:  # bytes cut out of, or spliced into, one place inside the field
        at = rng.randrange(n)
        d[field] = old[:at] + rng.randbytes(rng.choice([0, 1, 2, 4])) + old[at + rng.choice([0, 1, 2, 4]) :]
        return msgpack.packb(d, use_bin_type=True)
    count_guess = max(1, 8 * len(d.get(F_VALUES, b"")))  # 1-bit default: value bytes x 8 ~ coefficient count
    length = rng.choice(
        [n - 1, n + 1, 0, 2 * n, 4 * n, n + 8, count_guess * 4, count_guess * 2, count_guess, 4, 3, 5]
    )
    length = max(0, length)
    d[field] = (old * (length // max(n, 1) + 1))[:length] if rng.random() < 0.5 else rng.randbytes(length)
    return msgpack.packb(d, use_bin_type=True)


def _huge_header(rng: random.Random) -> bytes:
    marker = rng.choice(LEN32_MARKERS)
    head = bytes([marker]) + rng.choice(HUGE_LENGTHS).to_bytes(4, "big")
    if marker == 0xC9:  # ext32 carries a type byte after the length
        head += b"\x05"
    return head + rng.randbytes(rng.randint(0, 64))


def m_length_2_32(data: bytes, doc: Doc, rng: random.Random) -> bytes:
    """Length headers claiming up to 2**32 - 1 bytes or elements, where a parser might pre-allocate."""
    how = rng.random()
    if how < 0.4:  # at a field of the document
        return _splice(_copy_doc(doc), rng, _huge_header(rng))
    if how < 0.55:  # the top-level map itself claims 2**32 - 1 pairs
        return b"\xdf" + rng.choice(HUGE_LENGTHS).to_bytes(4, "big") + data[1:]
    # an existing header, found by scanning: widen it to 32 bits or overwrite its length
    positions = [i for i, b in enumerate(data) if b in LEN_MARKERS or 0x80 <= b <= 0xBF]
    at = rng.choice(positions)
    b = data[at]
    huge = rng.choice(HUGE_LENGTHS).to_bytes(4, "big")
    if b in LEN32_MARKERS:
        return data[: at + 1] + huge + data[at + 5 :]
    widened = {0xC4: 0xC6, 0xC5: 0xC6, 0xD9: 0xDB, 0xDA: 0xDB, 0xDE: 0xDF, 0xDC: 0xDD}.get(b)
    if widened is None:
        widened = 0xDF if 0x80 <= b <= 0x8F else 0xDD if 0x90 <= b <= 0x9F else 0xDB
    return data[:at] + bytes([widened]) + huge + data[at + 1 :]


def _nest(depth: int, rng: random.Random) -> bytes:
    style = rng.choice(["map", "array", "mixed"])
    if style == "map":
        return b"\x81\xa1a" * depth + b"\xc0"
    if style == "array":
        return b"\x91" * depth + b"\xc0"
    return b"\x81\xa1a\x91" * (depth // 2) + b"\xc0"


def m_deep_nesting(data: bytes, doc: Doc, rng: random.Random) -> bytes:
    depth = rng.choice([8, 64, 511, 512, 513, 1024, 1025, 4096, 20_000, 200_000])
    if rng.random() < 0.3:
        return _nest(depth, rng)
    return _splice(_copy_doc(doc), rng, _nest(depth, rng))


MUTATORS: dict[str, Mutator] = {
    "truncate": m_truncate,
    "bit_flip": m_bit_flip,
    "insert": m_insert,
    "delete": m_delete,
    "extra_key": m_extra_key,
    "missing_key": m_missing_key,
    "duplicate_key": m_duplicate_key,
    "wrong_type": m_wrong_type,
    "wrong_length": m_wrong_length,
    "length_2_32": m_length_2_32,
    "deep_nesting": m_deep_nesting,
}
STACK_PROBABILITY = 0.15  # this share of cases applies 2-3 mutations in a row (later ones byte-level)


def mutate(data: bytes, doc: Doc, rng: random.Random) -> tuple[str, bytes]:
    """One labelled mutation of a valid payload (``doc`` is its trusted decoded document)."""
    kind = rng.choice(list(MUTATORS))
    out = MUTATORS[kind](data, doc, rng)
    if rng.random() < STACK_PROBABILITY and out:
        # Structural mutators need the pristine document; stack only byte-level ones on top.
        for _ in range(rng.randint(1, 2)):
            extra = rng.choice(["truncate", "bit_flip", "insert", "delete"])
            if out:
                out = MUTATORS[extra](out, doc, rng)
                kind += "+" + extra
    return kind, out
