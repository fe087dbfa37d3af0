"""Who gets an origin's first copies: fetchers that pass them on fast, when any such fetcher is waiting.

Pure (time is an argument), shared by the daemon's pieces server (protocol/pieces_serve.py) and the flow
model (node/sim/flow_step.py).

Why: a slow origin (2 Mbit/s) sends each piece of its payload about once (``pick_to_serve``), and whoever gets
that first copy must spread it to everyone else. Given to a peer whose own uplink is no faster than the
origin's, or one that relays nothing until its own first copies are out (``relay_waits``), a piece sat there
for seconds: in the flow model of the testbed's ``mixed`` lines (2 gigabit, 4 home, 2 slow, 8 peers, 1.45 MB),
a slow origin's piece that went to the other slow peer at 0.1 s was relayed from 5.6 s on and reached its last
fetcher at 7.7 s, where the exchange's bound is 6.1 s. So while a fetcher that downloads from us at least
``factor`` times our own upload rate is waiting (it asked within ``window``), a first copy goes to such a
fetcher only; others are told their turn and fetch from the fast ones. With nobody that fast (every line
alike, or the first step, before anything was measured) the rule stands aside.

What "fast" rests on: only rates this peer measured itself, downloading pieces from that peer
(:class:`PeerRates`), never a rate a peer claims. A peer that wants first copies must have served us fast;
one that then keeps them to itself costs the origin the repeats it sends once its first copies are out.
The rate a slow peer measures is capped by its own downlink (20 Mbit/s), which is why the factor is
against our upload rate, not against the fastest peer we know.

No repeats of a piece just handed on. Once a copy of one of our pieces reached such a fast fetcher,
asking us for that piece again is asking the slowest uplink for what a fast one holds: for ``window``
seconds after, a repeat of it is refused (busy), and the fetcher takes it from the fast peer once it
hears of it. A capture of a slow testbed peer's uplink found those repeats at 1-1.3 pieces a round, a
tenth of the payload it was there to send once (mixed 8, a quarter of the rates, dilated). After the
window the piece is served again as before, so a fast peer that left or keeps it to itself costs a
wait, not the piece.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Mapping

from .swarm_pick import Decline


class PeerRates:
    """Download rates (bytes/s) this peer measured from each other peer, over every payload and step: a
    moving average per peer, the least recently measured forgotten beyond ``max_tracked``."""

    def __init__(self, *, smoothing: float = 0.3, max_tracked: int = 1024) -> None:
        if not 0 < smoothing <= 1 or max_tracked < 1:
            raise ValueError("PeerRates needs smoothing in (0, 1] and max_tracked >= 1")
        self._smoothing = smoothing
        self._max_tracked = max_tracked
        self._rates: OrderedDict[str, float] = OrderedDict()

    def observe(self, peer: str, rate: float) -> None:
        if not rate > 0:
            return
        old = self._rates.pop(peer, None)
        a = self._smoothing
        self._rates[peer] = rate if old is None else a * rate + (1 - a) * old
        while len(self._rates) > self._max_tracked:
            self._rates.popitem(last=False)

    def get(self, peer: str) -> float:
        """The peer's rate; 0.0 when never measured."""
        return self._rates.get(peer, 0.0)

    def values(self) -> list[float]:
        """Every rate measured (a peer each): this peer's view of the swarm's lines (gossip_uplink.py)."""
        return list(self._rates.values())

    def known(self, peer: str) -> float | None:
        """The peer's rate, None when never measured: what a new fetch's scheduler starts that holder
        from (protocol/swarm_schedule.py ``holder_has``), where it would otherwise assume its prior."""
        return self._rates.get(peer)


class FirstCopies:
    """One origin's side of the rule in the module docstring. ``factor`` <= 0 turns it off."""

    def __init__(self, factor: float, window: float, *, max_tracked: int = 1024) -> None:
        if factor < 0 or window <= 0 or max_tracked < 1:
            raise ValueError("FirstCopies needs factor >= 0, window > 0 and max_tracked >= 1")
        self.factor = factor
        self.window = window
        self._max_tracked = max_tracked
        self._asked: OrderedDict[str, float] = OrderedDict()  # fetcher of our payload -> when last seen
        self._handed: OrderedDict[tuple[Hashable, int], float] = OrderedDict()  # when a fast peer got it

    def asked(self, fetcher: str, now: float) -> None:
        """``fetcher`` asked for a piece of our own payload, or an upload of one to it ended."""
        self._asked.pop(fetcher, None)
        self._asked[fetcher] = now
        while len(self._asked) > self._max_tracked:
            self._asked.popitem(last=False)

    def keeps(self, payload: Hashable, piece: int | Decline, started: Mapping[int, int], fetcher: str,
              now: float, own_rate: float, rates: PeerRates) -> bool:
        """Whether ``piece``, the holder's pick for ``fetcher`` of our own ``payload`` (any key naming it;
        ``pick_to_serve``'s answer, a piece or a refusal), is held back: a first copy the rule keeps for a
        faster fetcher, or a repeat of a piece a fast fetcher just got."""
        if not isinstance(piece, int):
            return False
        if started.get(piece, 0) > 0:
            return self.repeat_waits((payload, piece), now)
        return not self.may_send(fetcher, now, own_rate, rates)

    def may_send(self, fetcher: str, now: float, own_rate: float, rates: PeerRates) -> bool:
        """Whether a first copy of our payload may go to ``fetcher`` now. ``own_rate``: our upload rate as
        our uploads measured it (bytes/s)."""
        if self.factor <= 0:
            return True
        need = self.factor * own_rate
        if rates.get(fetcher) >= need:
            return True
        return not any(rates.get(other) >= need for other, seen in self._asked.items()
                       if other != fetcher and now - seen <= self.window)

    def delivered(self, payload: Hashable, piece: int, fetcher: str, now: float, own_rate: float,
                  rates: PeerRates) -> None:
        """A copy of ``piece`` of our own ``payload`` reached ``fetcher``."""
        if self.factor <= 0 or rates.get(fetcher) < self.factor * own_rate:
            return
        key = (payload, piece)
        self._handed.pop(key, None)
        self._handed[key] = now
        while len(self._handed) > self._max_tracked:
            self._handed.popitem(last=False)

    def repeat_waits(self, piece: tuple[Hashable, int], now: float) -> bool:
        """Whether a repeat of our (payload, piece) is refused now: a fast fetcher got a copy within
        ``window`` seconds (module docstring)."""
        handed = self._handed.get(piece)
        return handed is not None and now - handed <= self.window
