"""The interface every strategy implements, so the node, the simulator and the benchmarks treat them alike.

A strategy is handed the model's parameters (it owns their update) and reads ``p.grad`` after the caller's
backward pass and gradient clipping. It never talks to the network: the caller moves payloads.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from distro_node.compression.payload import Payload, PayloadSpec


class Strategy(ABC):
    """``prepare`` then ``apply`` once per step, on every peer, with the same payloads everywhere.

    The caller's order for step ``s`` is::

        pre_forward(s); forward/backward; clip grads; post_backward(s); payload = prepare(s)
        # sequential: apply(s, payloads of s)
        # overlapped (``overlapped`` is True): apply(s - 1, payloads of s - 1), so the exchange of
        # step s - 1 ran while step s was computed

    ``apply`` must also be called on steps where ``prepare`` returned None (with the payloads that arrived,
    possibly none), so strategies with local inner steps (DiLoCo) can take them.
    """

    name: str = "base"
    overlapped: bool = False

    def pre_forward(self, step: int) -> None:  # noqa: B027 - optional hook
        """Hook before the forward pass (overlapped DisTrO takes its lookahead here)."""

    def post_backward(self, step: int) -> None:  # noqa: B027 - optional hook
        """Hook after backward and clipping (overlapped DisTrO restores the saved weights here)."""

    def withheld(self, step: int) -> None:  # noqa: B027 - optional hook
        """Our payload of ``step`` was left out of the step's decided list; called before ``apply(step)``.

        Strategies with error feedback subtracted what they sent when they sent it; they take back here what
        the swarm did not apply, so a peer that was late, warming or not picked keeps that step's information
        (DisTrO also clears what the others' payloads applied in its momentum's direction; CocktailSGD keeps
        all it sent)."""

    @abstractmethod
    def spec(self) -> PayloadSpec:
        """Shape and codecs of this strategy's payloads, from the local model and settings."""

    @abstractmethod
    def prepare(self, step: int) -> Payload | None:
        """Build this peer's payload from its current gradients; None when nothing is sent this step."""

    @abstractmethod
    def apply(self, step: int, payloads: Mapping[str, Payload]) -> None:
        """Update the parameters from every included peer's payload (own included), keyed by peer id.

        Implementations iterate peers in sorted id order so that every replica does the same float
        operations in the same order and stays bit-identical.
        """

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state needed to resume (momentum, error feedback, ...)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        if state:
            raise ValueError(f"{type(self).__name__} has no state to load")
