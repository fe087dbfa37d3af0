"""Leave-one-out sign agreement of each peer's payload with the votes of the other peers.

Why leave-one-out: scoring a peer against an aggregate that contains its own payload rewards it for agreeing
with itself, so a loud attacker would score positive. Why signs (one vote per peer per coefficient) rather
than values: an attacker that scales its values up would otherwise dominate the "others' aggregate" every
honest peer is compared with, and honest peers would be the ones scored negative. Why integer counts: the
result must be identical on every replica (a ban changes weights), and counts of agreeing and disagreeing
coefficients are exact integers whatever the device or summation order.

Honest DeMo payloads overlap on only part of their coefficients (each peer picks its own top-k; ~10% of
them on the tiny preset, almost always with a single other peer), so the score divides by everything the
peer sent, not by the overlap: a peer whose coefficients nobody else chose (e.g. random directions) gets a
score near 0, an honest peer a small positive one (~0.05), a sign-flipper a negative one. The scores are
small and drift during training, so ``protocol/scores.py`` compares them within each round (a z-score).
Weighting each coefficient by the others' vote margin instead of its sign was tried: identical scores,
because shared coefficients are nearly always shared by two peers only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from distro_node.compression.payload import Payload, TensorSpec


@dataclass(frozen=True)
class Agreement:
    """One peer's counts over every coefficient it sent in one step.

    ``agree``/``disagree``: coefficients where the sign of the other peers' vote sum matches / opposes this
    peer's sign (ties and coefficients nobody else chose count in neither). ``sent``: coefficients sent.
    """

    agree: int
    disagree: int
    sent: int

    @property
    def score(self) -> float:
        """``(agree - disagree) / sent`` in [-1, 1]: +1 every coefficient confirmed by the others, -1 every
        one contradicted, 0 nothing in common."""
        return (self.agree - self.disagree) / self.sent if self.sent else 0.0

    @property
    def overlap(self) -> float:
        """Share of the sent coefficients that at least one other peer voted on (ties excluded)."""
        return (self.agree + self.disagree) / self.sent if self.sent else 0.0


def _votes(values: torch.Tensor) -> torch.Tensor:
    # int32 so sums over peers are exact; sign(0) = 0 means "no vote".
    return torch.sign(values).to(torch.int32)


def leave_one_out_agreement(
    specs: Sequence[TensorSpec], payloads: Mapping[str, Payload]
) -> dict[str, Agreement]:
    """Per peer, :class:`Agreement` of its payload with the sign-vote sum of all OTHER peers.

    ``payloads`` must already be validated (shapes, unique indices: see ``aggregate.check_payloads``); one
    peer gives every peer an empty agreement (nobody to compare with).
    """
    peers = sorted(payloads)
    agree = dict.fromkeys(peers, 0)
    disagree = dict.fromkeys(peers, 0)
    sent = dict.fromkeys(peers, 0)
    for spec in specs:
        total = torch.zeros(spec.n_chunks, spec.chunk_numel, dtype=torch.int32)
        votes: dict[str, torch.Tensor] = {}
        for peer in peers:
            entry = payloads[peer].tensors[spec.name]
            v = _votes(entry.values.cpu())
            votes[peer] = v
            if entry.indices is None:
                total += v
            else:
                total.scatter_add_(1, entry.indices.cpu(), v)
        for peer in peers:
            entry = payloads[peer].tensors[spec.name]
            own = votes[peer]
            others = total - own if entry.indices is None else total.gather(1, entry.indices.cpu()) - own
            product = torch.sign(others) * own
            agree[peer] += int((product > 0).sum())
            disagree[peer] += int((product < 0).sum())
            sent[peer] += int(own.numel())
    return {p: Agreement(agree[p], disagree[p], sent[p]) for p in peers}
