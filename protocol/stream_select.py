"""Opening a stream with one protocol in a single write: multistream-select without its first round trip.

py-libp2p 0.8.1's client writes the multistream header, waits for the other side's, then writes the
protocol and waits again: two round trips and two frames before a stream carries its first message. Each
step of a run opens a piece session per (fetcher, holder, payload), 49 a peer at 8 peers, and a slow
origin's first copies waited on those round trips, each queued behind the small frames of the step's start
on its uplink (bench/exchange.py --capture-uplink). Proposing exactly one protocol, the client writes the
header and the protocol together and then reads both answers, as multistream-select allows (other
implementations call it lazy or optimistic negotiation); the listener's side is unchanged, so every libp2p
peer still understands it. A stream offered several protocols (gossipsub's versions) negotiates as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio
from libp2p.abc import IMultiselectCommunicator
from libp2p.custom_types import TProtocol
from libp2p.io.exceptions import IOException
from libp2p.protocol_muxer.exceptions import MultiselectClientError, MultiselectCommunicatorError
from libp2p.protocol_muxer.multiselect_client import (
    DEFAULT_NEGOTIATE_TIMEOUT,
    MULTISELECT_PROTOCOL_ID,
    PROTOCOL_NOT_FOUND_MSG,
    MultiselectClient,
)
from libp2p.protocol_muxer.multiselect_communicator import MultiselectCommunicator
from libp2p.utils import encode_delim


class OneWriteSelect(MultiselectClient):
    """A multistream-select client that proposes a single protocol in the header's write."""

    async def select_one_of(self, protocols: Sequence[TProtocol], communicator: IMultiselectCommunicator,
                            negotiate_timeout: int = DEFAULT_NEGOTIATE_TIMEOUT) -> TProtocol:
        if len(protocols) != 1 or not isinstance(communicator, MultiselectCommunicator):
            return await super().select_one_of(protocols, communicator, negotiate_timeout)
        protocol = protocols[0]
        with trio.move_on_after(negotiate_timeout):
            return await self._select(protocol, communicator)
        raise MultiselectClientError(f"no answer within {negotiate_timeout}s proposing {protocol}")

    async def _select(self, protocol: TProtocol, communicator: MultiselectCommunicator) -> TProtocol:
        proposal = encode_delim(MULTISELECT_PROTOCOL_ID.encode()) + encode_delim(str(protocol).encode())
        try:
            await communicator.read_writer.write(proposal)
            header = await communicator.read()
            answer = await communicator.read()
        except (IOException, MultiselectCommunicatorError, ValueError) as exc:
            raise MultiselectClientError(f"negotiating {protocol}: {exc}") from exc
        if header != MULTISELECT_PROTOCOL_ID:
            raise MultiselectClientError(f"not a multistream-select peer: answered {header!r}")
        if answer == protocol:
            return protocol
        if answer == PROTOCOL_NOT_FOUND_MSG:
            raise MultiselectClientError(f"protocols not supported: {protocol}")
        raise MultiselectClientError(f"answered {answer!r} proposing {protocol}")


__all__ = ["OneWriteSelect"]
