"""Round messages: construction checks, dict round trips, strict decoding, list digests."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from distro_node.protocol.consensus import RoundConfig, RoundConfigError
from distro_node.protocol.messages import (
    MAX_LIST_PEERS,
    Announcement,
    Certificate,
    Goodbye,
    Heartbeat,
    InclusionList,
    MessageError,
    Status,
    Vote,
    message_from_dict,
)

RUN = hashlib.sha256(b"messages").digest()
H1 = hashlib.sha256(b"1").digest()
H2 = hashlib.sha256(b"2").digest()
SIG = bytes(64)  # shape only: signatures are checked at the gossip door (tests/protocol/test_authorship.py)

SAMPLES: list[Any] = [
    Announcement(RUN, 3, "peerA", H1, 2_800_000, H2, SIG),
    InclusionList(RUN, 3, 1, "peerA", (("peerA", H1), ("peerB", H2)), ("peerC",), ("peerD",), (SIG, SIG)),
    InclusionList(RUN, 0, 0, "peerA", ()),
    InclusionList(RUN, 3, 2, "peerA", (("peerA", H1),), (), (), (SIG,), (), 1,
                  (("peerB", SIG), ("peerC", SIG))),
    Vote(RUN, 3, 2, 0, "peerB", H1, SIG),
    Vote(RUN, 3, 2, 1, "peerB", H1, SIG),
    Status(RUN, 3, 2, "peerB"),
    Certificate(InclusionList(RUN, 3, 1, "peerA", (("peerA", H1),), signatures=(SIG,)), (("peerA", SIG),)),
    Heartbeat(RUN, "peerA", 7, H2),
    Goodbye(RUN, "peerA", 8),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg: Any) -> None:
    assert message_from_dict(msg.to_dict()) == msg
    assert type(msg).from_dict(msg.to_dict()) == msg


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_missing_or_extra_keys_are_rejected(msg: Any) -> None:
    doc = msg.to_dict()
    for key in [k for k in doc if k != "kind"]:
        broken = {k: v for k, v in doc.items() if k != key}
        with pytest.raises(MessageError) as err:
            message_from_dict(broken)
        assert err.value.reason == "keys"
    with pytest.raises(MessageError):
        message_from_dict({**doc, "surprise": 1})


def test_field_types_and_sizes_are_strict() -> None:
    good = SAMPLES[0].to_dict()
    cases: list[tuple[dict[str, Any], str]] = [
        ({**good, "step": True}, "type"),
        ({**good, "step": 1.0}, "type"),
        ({**good, "step": -1}, "range"),
        ({**good, "step": 2**63}, "range"),
        ({**good, "payload_size": 0}, "range"),
        ({**good, "payload_size": 2**40}, "range"),
        ({**good, "payload_hash": H1[:31]}, "size"),
        ({**good, "payload_hash": H1.hex()}, "type"),
        ({**good, "run_id": bytearray(RUN)}, "type"),
        ({**good, "peer_id": ""}, "size"),
        ({**good, "peer_id": "x" * 129}, "size"),
        ({**good, "peer_id": "bad id"}, "type"),
        ({**good, "peer_id": "caf\u00e9"}, "type"),
        ({**good, "kind": "heartbeat"}, "keys"),
    ]
    for doc, reason in cases:
        with pytest.raises(MessageError) as err:
            message_from_dict(doc)
        assert err.value.reason == reason, doc


def test_unknown_kind_and_non_mapping() -> None:
    for doc in ({"kind": "nope"}, {"kind": 3}, {}, [1, 2], None):
        with pytest.raises(MessageError):
            message_from_dict(doc)  # type: ignore[arg-type]


def test_inclusion_list_canonical_form() -> None:
    with pytest.raises(MessageError) as err:
        InclusionList(RUN, 0, 0, "a", (("b", H1), ("a", H2)), signatures=(SIG, SIG))
    assert err.value.reason == "order"
    with pytest.raises(MessageError):
        InclusionList(RUN, 0, 0, "a", (("a", H1), ("a", H2)), signatures=(SIG, SIG))  # duplicate peer
    with pytest.raises(MessageError) as err:
        InclusionList(RUN, 0, 0, "a", (("a", H1),), warming=("a",), signatures=(SIG,))
    assert err.value.reason == "overlap"
    with pytest.raises(MessageError):
        InclusionList(RUN, 0, 0, "a", (), warming=("b", "a"))
    with pytest.raises(MessageError) as err:
        InclusionList(RUN, 0, 0, "a", [("a", H1)])  # type: ignore[arg-type]
    assert err.value.reason == "type"
    doc = SAMPLES[1].to_dict()
    for bad_entries in ([["a"]], [["a", H1, 1]], ["a"], [[1, H1]], "ab"):
        with pytest.raises(MessageError):
            InclusionList.from_dict({**doc, "entries": bad_entries})
    too_many = [[f"p{i:05d}", H1] for i in range(MAX_LIST_PEERS + 1)]
    with pytest.raises(MessageError) as err:
        InclusionList.from_dict({**doc, "entries": too_many, "warming": [], "departed": []})
    assert err.value.reason == "size"


def test_digest_names_the_content_not_the_proposer() -> None:
    base = SAMPLES[1]
    same = InclusionList(RUN, 3, 9, "peerZ", base.entries, base.warming, base.departed, base.signatures)
    assert same.digest() == base.digest()
    justified = InclusionList(RUN, 3, 9, "peerZ", base.entries, base.warming, base.departed, base.signatures,
                              (), 4, (("peerB", SIG),))
    assert justified.digest() == base.digest()  # a re-proposal with its pol proposes the very same value
    others = [
        InclusionList(RUN, 4, 1, "peerA", base.entries, base.warming, base.departed, base.signatures),
        InclusionList(RUN, 3, 1, "peerA", base.entries[:1], base.warming, base.departed, (SIG,)),
        InclusionList(RUN, 3, 1, "peerA", base.entries, (), base.departed, base.signatures),
        InclusionList(RUN, 3, 1, "peerA", base.entries, base.warming, (), base.signatures),
        InclusionList(RUN, 3, 1, "peerA", base.entries, base.departed, base.warming, base.signatures),
        InclusionList(H2, 3, 1, "peerA", base.entries, base.warming, base.departed, base.signatures),
    ]
    assert len({o.digest() for o in others} | {base.digest()}) == len(others) + 1


def test_ballot_fields_are_checked() -> None:
    with pytest.raises(MessageError):
        Status(RUN, 3, 0, "p")  # epoch 0 needs no status
    with pytest.raises(MessageError):
        Vote(RUN, 3, -1, 0, "p", H1, SIG)
    with pytest.raises(MessageError):
        Vote(RUN, 3, 1, 2, "p", H1, SIG)  # phases are prevote (0) and precommit (1)
    with pytest.raises(MessageError):
        Vote(RUN, 3, 1, 0, "p", H1, SIG[:10])
    one = (("peerA", H1),)
    with pytest.raises(MessageError):  # a pol from the list's own epoch or later proves nothing
        InclusionList(RUN, 3, 1, "peerA", one, signatures=(SIG,), pol_epoch=1, pol=(("peerB", SIG),))
    with pytest.raises(MessageError):  # a pol epoch without prevotes, or prevotes without an epoch
        InclusionList(RUN, 3, 1, "peerA", one, signatures=(SIG,), pol_epoch=0)
    with pytest.raises(MessageError):
        InclusionList(RUN, 3, 1, "peerA", one, signatures=(SIG,), pol=(("peerB", SIG),))
    with pytest.raises(MessageError):  # voters sorted and distinct: one canonical form
        InclusionList(RUN, 3, 1, "peerA", one, signatures=(SIG,), pol_epoch=0,
                      pol=(("peerB", SIG), ("peerB", SIG)))
    with pytest.raises(MessageError):
        Certificate(InclusionList(RUN, 3, 1, "peerA", one, signatures=(SIG,)), ())
    with pytest.raises(MessageError):
        message_from_dict({"kind": "certificate", "decided": {"kind": "vote"}, "precommits": []})


def test_round_config_validation() -> None:
    RoundConfig(run_id=RUN)
    bad: list[dict[str, Any]] = [
        {"run_id": b"short"},
        {"collect_timeout": 0},
        {"leader_timeout": -1.0},
        {"leader_timeout": True},
        {"warmup_rounds": 0},
        {"max_roster_peers": 5000},
        {"max_tracked_peers": 10, "max_roster_peers": 20},
        {"max_announcements_per_step": 10, "max_roster_peers": 20},
        {"history_steps": 1.5},
    ]
    for kwargs in bad:
        with pytest.raises(RoundConfigError):
            RoundConfig(**{"run_id": RUN, **kwargs})
