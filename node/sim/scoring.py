"""What the score keeper observes about one round's included payloads: one helper for the simulator and the
networked peer, so both score exactly alike.

Both inputs are replica-independent: leave-one-out sign agreement counts integers, and the payload norm is
accumulated in float64 in layout order (``optimizer/robust.py``, the number clipping uses too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from distro_node.compression.payload import Payload, TensorSpec
from distro_node.optimizer.agreement import leave_one_out_agreement
from distro_node.optimizer.robust import payload_norm


def round_observations(
    specs: Sequence[TensorSpec], payloads: Mapping[str, Payload]
) -> tuple[dict[str, float], dict[str, float]]:
    """Per included peer: (leave-one-out agreement score, payload L2 norm), as ``ScoreKeeper.observe_round``
    takes them."""
    agreements = leave_one_out_agreement(specs, payloads)
    scores = {peer: a.score for peer, a in agreements.items()}
    norms = {peer: payload_norm(specs, payloads[peer]) for peer in sorted(payloads)}
    return scores, norms
