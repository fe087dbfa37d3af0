"""Our chain of attested rosters (protocol/attestation.py): what we sign, gather, keep and serve, so that a
newcomer can check the roster it counts donors against from the founder the manifest names, not from its
bootstrap peer's word.

At a step boundary whose active set differs from the previous boundary's, and at every ``attest_every``-th
step, we sign the round state (``at_boundary``). Every honest replica holds the same state at that boundary,
so they all sign the same digest; the collector then asks the state's active peers for their signatures
(``/distro/chain/1.0.0`` ``sig``) until it has them all or gives up after a few rounds. Each time a link gains
signatures it is placed in the chain right after the earliest link (or the root) whose roster it already
verifies from: the links in between are no longer needed and are dropped. So while the founder signs, the
chain is one link long, and after it left the chain grows by one link per ``max_skip`` steps or per turnover
of two thirds of the active peers, whichever comes first; at ``MAX_CHAIN_LINKS`` it stops growing (a newcomer
then cannot check a later roster, it does not trust an unchecked one).

Only runs whose manifest names a root keep a chain: a permissioned run's founder, an open run's ``genesis``
(its founder, when it founded with a kept key; see docs/architecture.md).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence

import trio
from distro_node.node.config.schema import NetworkConfig
from distro_node.protocol.attestation import (
    MAX_CHAIN_LINKS,
    ChainError,
    Link,
    TrustedRoster,
    attest,
    statement,
    verify_chain,
    verify_link,
)
from distro_node.protocol.chain_rpc import ChainServer, fetch_signature
from distro_node.protocol.errors import TransportError
from distro_node.protocol.host import P2PHost
from distro_node.protocol.membership import SyncState
from distro_node.protocol.message_fields import Signer
from distro_node.protocol.signatures import signed_by
from libp2p.peer.id import ID

logger = logging.getLogger(__name__)

OWN_KEPT = 8  # our newest attestations, answered to ``sig`` requests and still gathering signatures
COLLECT_ROUNDS = 7  # asked again after 1, 2, 4, 8, 16, 16 s: a slow peer reaches the boundary later
COLLECT_PAUSE_MAX_S = 16.0
SIG_TIMEOUT_S = 10.0


class ChainKeeper:
    def __init__(self, *, run_id: bytes, self_id: str, root: TrustedRoster, sign: Signer, attest_every: int,
                 max_skip: int) -> None:
        self._run_id = run_id
        self._self_id = self_id
        self._root = root
        self._sign = sign
        self._every = attest_every
        self._max_skip = max_skip
        self._links: list[Link] = []
        self._own: OrderedDict[int, Link] = OrderedDict()  # step -> our state there, signatures so far
        self._last_active: tuple[str, ...] | None = None
        self._todo_send, self._todo = trio.open_memory_channel[int](OWN_KEPT)
        self.refused_signatures = 0  # replies whose signature did not match our state (or did not verify)
        self.full = 0  # links not placed because the chain is at its cap

    @property
    def root(self) -> TrustedRoster:
        return self._root

    @property
    def max_skip(self) -> int:
        return self._max_skip

    def chain(self) -> tuple[Link, ...]:
        return tuple(self._links)

    def own(self, step: int) -> tuple[bytes, bytes] | None:
        """Our (digest, signature) of the state at ``step``, if we attested it lately."""
        link = self._own.get(step)
        return None if link is None else (link.digest, link.signatures[self._self_id])

    def at_boundary(self, state: SyncState) -> None:
        """Called at each step boundary with the round state our weights are at: attest it when due."""
        active = state.roster.eligible()
        due = active != self._last_active or state.next_step % self._every == 0
        self._last_active = active
        if not due or state.next_step in self._own:
            return
        _digest, sig = attest(self._sign, self._run_id, state)
        link = Link(state, {self._self_id: sig})
        self._own[state.next_step] = link
        while len(self._own) > OWN_KEPT:
            self._own.popitem(last=False)
        self._place(link)
        try:
            self._todo_send.send_nowait(state.next_step)
        except trio.WouldBlock:  # the collector is behind: this link keeps only the signatures it has
            pass

    def add_signature(self, step: int, signer: str, digest: bytes, sig: bytes) -> bool:
        """A peer's attestation for one of our steps: kept (and the link re-placed) if it signs our state."""
        link = self._own.get(step)
        if link is None or signer in link.signatures:
            return False
        if digest != link.digest or not signed_by(signer, statement(self._run_id, step, digest), sig):
            self.refused_signatures += 1
            return False
        link = link.with_signatures({signer: sig})
        self._own[step] = link
        self._place(link)
        return True

    def adopt(self, links: Sequence[Link]) -> bool:
        """A chain a donor served: kept instead of ours if it verifies and reaches a later step."""
        try:
            tail = verify_chain(self._root, links, self._run_id, self._max_skip)
        except ChainError:
            return False
        if tail.step is None or (self._links and tail.step <= self._links[-1].step):
            return False
        self._links = list(links)
        return True

    def _place(self, link: Link) -> bool:
        """Put ``link`` right after the earliest trusted roster it verifies from, dropping the links it makes
        unnecessary. Never before our newest link: a late signature for an old step must not cut newer
        ones."""
        if self._links and link.step < self._links[-1].step:
            return False
        trusted = [self._root, *(TrustedRoster(x.state.roster, x.step, "") for x in self._links)]
        for i, anchor in enumerate(trusted):
            try:
                verify_link(anchor, link, self._run_id, self._max_skip)
            except ChainError:
                continue
            if i >= MAX_CHAIN_LINKS:
                self.full += 1
                return False
            self._links = [*self._links[:i], link]
            return True
        return False

    async def collect(self, host: P2PHost, connected: Callable[[], set[ID]]) -> None:
        """Forever: for each step we attested, ask its active peers for their signatures, a few rounds.
        Steps are gathered side by side (at most ``OWN_KEPT`` at once: an older one stops once evicted)."""
        async with trio.open_nursery() as nursery:
            async for step in self._todo:
                nursery.start_soon(self._gather, host, connected, step)

    async def _gather(self, host: P2PHost, connected: Callable[[], set[ID]], step: int) -> None:
        for attempt in range(COLLECT_ROUNDS):
            link = self._own.get(step)
            if link is None:
                return
            peers = {str(p): p for p in connected()}
            missing = [peers[p] for p in link.state.roster.eligible()
                       if p in peers and p not in link.signatures]
            if not missing:
                return
            async with trio.open_nursery() as nursery:
                for peer in missing:
                    nursery.start_soon(self._ask, host, peer, step)
            await trio.sleep(min(COLLECT_PAUSE_MAX_S, 2.0**attempt))

    async def _ask(self, host: P2PHost, peer: ID, step: int) -> None:
        try:
            got = await fetch_signature(host, peer, self._run_id, step, timeout=SIG_TIMEOUT_S)
        except TransportError as exc:
            logger.debug("no attestation of step %d from %s: %s", step, peer, exc)
            return
        if got is not None:
            self.add_signature(step, str(peer), *got)


def open_chain(host: P2PHost, run_id: bytes, root: str, network: NetworkConfig, sign: Signer,
               admit: Callable[[ID, str], bool]) -> ChainKeeper | None:
    """The keeper of a run whose manifest names a root (``RunManifest.chain_root``: a permissioned run's
    founder, an open run's genesis; empty: None), its server installed."""
    if not root:
        return None
    keeper = ChainKeeper(run_id=run_id, self_id=str(host.peer_id), root=TrustedRoster.root(root),
                         sign=sign, attest_every=network.attest_every_steps, max_skip=network.max_link_steps)
    ChainServer(host, run_id, own=keeper.own, chain=keeper.chain, admit=admit).install()
    return keeper


__all__ = ["ChainKeeper", "open_chain"]
