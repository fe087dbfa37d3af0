"""What a faulty leader can cost: a voter votes only for payloads it holds, so a list around a payload nobody
serves (the leader's own, announced and withheld) costs its epoch and the next leader's list, built from what
was really delivered, is decided without it; a list refused at the door for forged entries ends its epoch
at once."""

from __future__ import annotations

from collections.abc import Sequence

from distro_node.protocol.consensus import Penalize, RoundMachine
from distro_node.protocol.consensus.leader_rank import leader_order
from distro_node.protocol.messages import InclusionList, Status, Vote
from protocol_swarm_sim import RUN_ID
from test_rounds import PEERS, ann, hold, machine, payload_hash, proposal, published, votes_from


def _all_announced(me: str, received: Sequence[str]) -> RoundMachine:
    """Machine ``me`` at step 0: every peer announced, the payloads of ``received`` arrived and validated."""
    m = machine(me)
    m.on_local_announcement(ann(me, 0), 0.0)
    for p in PEERS:
        if p != me:
            m.on_message(ann(p, 0), 0.0)
            if p in received:
                m.on_payload_validated(0, p, payload_hash(p, 0), 0.0)
    return m


def test_a_list_naming_a_withheld_payload_gets_no_vote_and_the_next_epoch_decides_without_it() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    withholder, me = order[0], order[1]  # we lead epoch 1
    m = _all_announced(me, received=[p for p in PEERS if p != withholder])  # its bytes never arrive
    bad = proposal(0, 0, PEERS)  # epoch 0: the withholder's own list, naming its own payload
    out = m.on_message(bad, 0.1) + votes_from(m, bad, [withholder], 0.1)
    assert published(out, Vote) == [] and m.decided_list(0) is None
    out = m.on_tick(3.0)  # epoch 1: ours
    for p in PEERS:
        if p not in (me, withholder):  # the honest peers did not vote in epoch 0 either
            out += m.on_message(Status(RUN_ID, 0, 1, p), 3.0)
    lists = published(out, InclusionList)
    assert len(lists) == 1 and withholder not in lists[0].peers and len(lists[0].peers) == 3
    honest = [p for p in PEERS if p not in (me, withholder)]
    hold(m, lists[0], 3.1)
    votes_from(m, lists[0], honest, 3.1)
    assert m.decided_list(0) == lists[0]


def test_an_epoch_whose_leader_forged_its_list_is_left_at_once() -> None:
    order = leader_order(RUN_ID, 0, PEERS)
    forger, me = order[0], order[1]  # we lead epoch 1
    m = _all_announced(me, received=PEERS)
    # The forger's epoch-0 list was refused at the gossip door; the driver reports it.
    out = m.on_forged_proposal(0, 0, forger, 0.1)
    assert Penalize(forger, 0, "forged_list") in out
    statuses = published(out, Status)
    assert [s.epoch for s in statuses] == [1]  # left epoch 0 at once, well before its 3 s end
    for p in PEERS:
        if p not in (me, forger):
            out += m.on_message(Status(RUN_ID, 0, 1, p), 0.2)
    lists = published(out, InclusionList)
    assert len(lists) == 1 and lists[0].epoch == 1 and len(lists[0].peers) == 4
