"""Every signed claim a gossip message makes, checked at the door against its signers' keys.

A message is signed by its publisher (libp2p), but it may carry statements signed by others: a list names
payloads their authors signed, proves equivocations with the equivocator's own signatures and justifies a
re-proposal with a quorum's prevotes; a certificate shows a quorum's precommits. The round machine trusts
that whatever reaches it passed this check, so it only has to count who signed (against the roster of the
step), never verify a signature itself.
"""

from __future__ import annotations

from .authorship import authorship_valid
from .ballots import PRECOMMIT, PREVOTE, Certificate, Vote, vote_statement
from .inclusion_list import Endorsements, InclusionList
from .messages import Announcement, Message
from .signatures import signed_by


def forged_part(message: Message) -> str | None:
    """The first claim in ``message`` that its claimed signer did not sign (None: all signed)."""
    run = message.run_id
    if isinstance(message, Announcement):
        ok = authorship_valid(run, message.step, message.peer_id, message.payload_hash, message.signature)
        return None if ok else "announcement signature"
    if isinstance(message, Vote):
        ok = vote_signed(run, message.step, message.epoch, message.phase, message.voter, message.digest,
                         message.signature)
        return None if ok else "vote signature"
    if isinstance(message, InclusionList):
        return _forged_in_list(message)
    if isinstance(message, Certificate):
        lst = message.decided
        voter = endorsements_signed(run, lst.step, lst.epoch, PRECOMMIT, lst.digest(), message.precommits)
        if voter is not None:
            return f"precommit of {voter[-8:]}"
        return _forged_in_list(lst)
    return None


def _forged_in_list(lst: InclusionList) -> str | None:
    run = lst.run_id
    for (peer, payload_hash), signature in zip(lst.entries, lst.signatures, strict=True):
        if not authorship_valid(run, lst.step, peer, payload_hash, signature):
            return f"entry of {peer[-8:]}"
    for proof in lst.evidence:
        for payload_hash, signature in (proof.first, proof.second):
            if not authorship_valid(run, proof.step, proof.peer, payload_hash, signature):
                return f"evidence against {proof.peer[-8:]}"
    if lst.pol:
        voter = endorsements_signed(run, lst.step, lst.pol_epoch, PREVOTE, lst.digest(), lst.pol)
        if voter is not None:
            return f"prevote of {voter[-8:]}"
    return None


def vote_signed(run_id: bytes, step: int, epoch: int, phase: int, voter: str, digest: bytes,
                signature: bytes) -> bool:
    return signed_by(voter, vote_statement(run_id, step, epoch, phase, voter, digest), signature)


def endorsements_signed(run_id: bytes, step: int, epoch: int, phase: int, digest: bytes,
                        endorsements: Endorsements) -> str | None:
    """The first voter whose signature does not sign this ballot (None: all do)."""
    for voter, signature in endorsements:
        if not vote_signed(run_id, step, epoch, phase, voter, digest, signature):
            return voter
    return None


__all__ = ["endorsements_signed", "forged_part", "vote_signed"]
