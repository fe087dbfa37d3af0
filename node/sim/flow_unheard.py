"""One modelled fetch's unheard holders: those it stopped polling for news while it had other things to ask.

Why a class: the flow model asks at every decision whether any of them would answer a HAVE poll now, and at
64 neighbours per fetch checking each one was over a third of a 64-peer run's time (profiled). A holder
answers when it holds a piece the fetch was not told of and neither holds nor has on its way
(``PieceScheduler.no_news_from``), so this keeps, per piece, the unheard holders that hold it unbeknown to
the fetch; a poll then looks only at the pieces the fetch still lacks.
"""

from __future__ import annotations

from collections.abc import Iterable, Set


class UnheardHolders:
    def __init__(self, pieces: int) -> None:
        self.holders: set[int] = set()  # iterated in this set's order: news is queued in it
        self._untold: list[set[int]] = [set() for _ in range(pieces)]  # per piece, holders with it untold

    def add(self, holder: int, untold: Iterable[int]) -> None:
        """``holder`` is unheard (again), holding ``untold`` (and perhaps more the fetch was told of)."""
        self.holders.add(holder)
        for piece in untold:
            self._untold[piece].add(holder)

    def told(self, holder: int, pieces: Iterable[int]) -> None:
        """A HAVE answer from ``holder`` told the fetch of ``pieces``."""
        for piece in pieces:
            self._untold[piece].discard(holder)

    def polled(self, holder: int) -> None:
        self.holders.discard(holder)
        for untold in self._untold:
            untold.discard(holder)

    def with_news(self, held_or_coming: Set[int]) -> set[int]:
        """The holders that hold a piece the fetch was not told of and neither holds nor receives."""
        return set().union(*(holders for piece, holders in enumerate(self._untold)
                             if piece not in held_or_coming))
