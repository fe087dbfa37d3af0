"""Whether this node can be dialed from outside, from dial-back probes (protocol/dialback.py).

Never on one peer's word: a prober can lie (say "reached" to make us advertise an address nobody can dial,
or "unreached" to push us onto relays), and one prober's path can be special (the same LAN). An address is
*confirmed* when ``confirmations`` distinct probers reached it; the node is ``public`` once one address is
confirmed, ``private`` once that many probers have answered and none reached anything, and ``unknown``
before. Only the newest answer of each prober counts, and at most ``max_probers`` are remembered. Pure: the
caller runs the probes and feeds the answers in.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

VERDICTS = ("unknown", "public", "private")


@dataclass(frozen=True)
class ReachabilityConfig:
    confirmations: int = 2
    max_probers: int = 16

    def __post_init__(self) -> None:
        if not 1 <= self.confirmations <= self.max_probers:
            raise ValueError("ReachabilityConfig needs 1 <= confirmations <= max_probers")


class Reachability:
    def __init__(self, config: ReachabilityConfig | None = None) -> None:
        self.config = config or ReachabilityConfig()
        self._answers: OrderedDict[str, tuple[str, dict[int, bool]]] = OrderedDict()

    def record(self, prober: str, observed_ip: str, reached: Mapping[int, bool]) -> None:
        """One prober's answer: the IP our connection came from and, per port, whether it got through."""
        self._answers[prober] = (observed_ip, dict(reached))
        self._answers.move_to_end(prober)
        while len(self._answers) > self.config.max_probers:
            self._answers.popitem(last=False)

    def forget(self, prober: str) -> None:
        self._answers.pop(prober, None)

    def confirmed(self) -> list[tuple[str, int]]:
        """(ip, port) pairs that ``confirmations`` distinct probers reached, most confirmed first."""
        votes: Counter[tuple[str, int]] = Counter(
            (ip, port) for ip, reached in self._answers.values() for port, ok in reached.items() if ok)
        return [addr for addr, n in votes.most_common() if n >= self.config.confirmations]

    def verdict(self) -> str:
        if self.confirmed():
            return "public"
        answered = len(self._answers)
        if answered >= self.config.confirmations and not any(
                ok for _, reached in self._answers.values() for ok in reached.values()):
            return "private"
        return "unknown"
