"""What an identity costs: a newcomer is listed (warming) only once its payload was fetched and validated,
so one process announcing for many made-up ids (nothing to fetch behind them) never enters the roster."""

from __future__ import annotations

from distro_node.protocol.consensus import FetchPayload
from distro_node.protocol.consensus.leader_rank import leader_order
from distro_node.protocol.messages import InclusionList
from protocol_swarm_sim import RUN_ID
from test_rounds import PEERS, ann, feed_all, machine, of, payload_hash, published


def test_a_newcomer_is_listed_only_after_its_payload_validated() -> None:
    leader = leader_order(RUN_ID, 0, PEERS)[0]
    sybils = [f"sybil{i}" for i in range(5)]
    m = machine(leader)
    out: list[object] = []
    for peer in [*sybils, "newcomer"]:
        out += m.on_message(ann(peer, 0), 0.0)
    fetched = {f.peer_id for f in of(out, FetchPayload)}
    assert {"newcomer", *sybils} <= fetched  # asked for, to see whether anything stands behind the id
    out += m.on_payload_validated(0, "newcomer", payload_hash("newcomer", 0), 0.1)
    out += feed_all(m, 0, 0.2)
    lists = published(out, InclusionList)
    assert len(lists) == 1 and lists[0].warming == ("newcomer",) and lists[0].peers == PEERS
