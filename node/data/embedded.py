"""The default dataset: a Markov corpus generated in memory from a seed, with its exact loss floor.

It needs no files and no network, so a fresh install can train and every result can be read as "loss
above the floor" instead of a bare number whose meaning depends on the data.
"""

from __future__ import annotations

from functools import lru_cache
from types import MappingProxyType

from distro_node.node.data.entropy import source_levels
from distro_node.node.data.errors import DataSettingError
from distro_node.node.data.markov import MarkovSpec, build_chain, generate
from distro_node.node.data.source import TokenSource


def markov_source(seed: int = 0, spec: MarkovSpec | None = None) -> TokenSource:
    """The embedded corpus of ``seed``: ``spec.train_rows`` training rows and ``spec.eval_rows`` held-out
    rows (independent sequences from the same chain). Cached, because every simulated peer in a process asks
    for the same one; the returned arrays are read-only for that reason."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DataSettingError("seed", f"must be a non-negative integer, got {seed!r}")
    return _cached_source(seed, MarkovSpec() if spec is None else spec)


@lru_cache(maxsize=4)
def _cached_source(seed: int, spec: MarkovSpec) -> TokenSource:
    chain = build_chain(seed, spec)
    rows = generate(chain, seed, spec.train_rows + spec.eval_rows, spec.row_len, spec.burn_in)
    rows.flags.writeable = False
    levels = source_levels(chain)
    return TokenSource(
        name=f"markov(seed={seed})",
        vocab_size=spec.vocab_size,
        train=rows[: spec.train_rows],
        eval=rows[spec.train_rows :],
        loss_floor=levels.entropy_rate,
        # An order-2 source: the first target of a window sees one token, so the best it can do is the bigram
        # entropy (exact, since rows start from the stationary distribution after the burn-in).
        short_context_floors=(levels.bigram,),
        reference_losses=MappingProxyType(
            {
                "uniform": levels.uniform,
                "unigram": levels.unigram,
                "bigram": levels.bigram,
                "floor": levels.entropy_rate,
            }
        ),
    )
