"""The payloads this peer holds: bytes counted as they move, and the decoded payloads a round may apply.

Decoded payloads are kept by (step, author, payload hash) from the moment they pass validation (ours when
we announce, others' when fetched) until the step before the one just applied: an inclusion list names
payloads by exactly that key, and the round machine only lists payloads we reported valid.
"""

from __future__ import annotations

from collections.abc import Iterable

from distro_node.compression.payload import Payload

PayloadKey = tuple[int, str, bytes]  # (step, author peer id, payload hash)


class MissingPayloadError(KeyError):
    """An inclusion list named a payload we never validated: the round machine and this peer disagree."""


class ByteCounters:
    """Payload bytes moved since start (cumulative, as the step event and the metrics want them)."""

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0
        self.received_relayed = 0  # of ``received``: bytes that came over a relayed connection

    def count_sent(self, count: int) -> None:
        """Payload bytes went out (either payload server's upload hook)."""
        self.sent += count

    def received_via(self, count: int, *, relayed: bool) -> None:
        self.received += count
        if relayed:
            self.received_relayed += count


class DecodedPayloads:
    def __init__(self) -> None:
        self._payloads: dict[PayloadKey, Payload] = {}

    def __contains__(self, key: PayloadKey) -> bool:
        return key in self._payloads

    def put(self, key: PayloadKey, payload: Payload) -> None:
        self._payloads[key] = payload

    def listed(self, step: int, entries: Iterable[tuple[str, bytes]]) -> dict[str, Payload]:
        """The payloads an inclusion list of ``step`` names, by author."""
        try:
            return {peer: self._payloads[(step, peer, digest)] for peer, digest in entries}
        except KeyError as exc:
            raise MissingPayloadError(f"step {step}: no validated payload for {exc.args[0]!r}") from exc

    def forget_before(self, step: int) -> None:
        for key in [k for k in self._payloads if k[0] < step]:
            del self._payloads[key]
