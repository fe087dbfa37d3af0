"""Exact information-theoretic levels of the Markov source: the loss floor and the reference losses.

The floor is the entropy rate H(X_t | X_<t) = sum over contexts of stationary probability times the entropy
of the next-token distribution. Because P(next | prev2, prev) depends on prev2 only through its group, the
chain on (group of prev2, prev) is itself Markov (the pair chain lumped by group), with ``groups * vocab``
states; its stationary distribution is found by power iteration, vectorised as two matrix products per step.
These numbers are for reporting only; nothing that decides the corpus depends on them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from distro_node.node.data.markov import MarkovChain

_TOLERANCE = 1e-15
_MAX_ITERATIONS = 100_000


class ConvergenceError(RuntimeError):
    """Power iteration did not settle; only possible for a chain far slower-mixing than any spec allows."""


@dataclass(frozen=True)
class SourceLevels:
    """Losses in nats/token of ever better predictors, from knowing nothing to knowing the source."""

    uniform: float  # log(vocab): an untrained model
    unigram: float  # H(X): token frequencies only
    bigram: float  # H(X_t | X_t-1): the previous token only; also the best loss at a window's first target
    entropy_rate: float  # H(X_t | X_t-2, X_t-1) = H(X_t | all of the past): the loss floor


def _entropy(p: np.ndarray, axis: int = -1) -> np.ndarray:
    """Shannon entropy in nats along ``axis`` (0 log 0 = 0)."""
    logp = np.log(np.where(p > 0, p, 1.0))
    return -(p * logp).sum(axis=axis)


def step_state(chain: MarkovChain, probs: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """Advance a distribution over (group of prev2, prev) by one token."""
    mass = np.einsum("gb,gbc->bc", dist, probs)  # (prev, next)
    onehot = np.zeros((chain.spec.vocab_size, chain.spec.groups))
    onehot[np.arange(chain.spec.vocab_size), chain.group] = 1.0
    return onehot.T @ mass  # next state's group is the group of prev


def stationary(chain: MarkovChain, probs: np.ndarray | None = None) -> np.ndarray:
    """The unique stationary distribution over (group, token), shape (groups, vocab)."""
    probs = chain.transition() if probs is None else probs
    spec = chain.spec
    dist = np.full((spec.groups, spec.vocab_size), 1.0 / (spec.groups * spec.vocab_size))
    for _ in range(_MAX_ITERATIONS):
        new = step_state(chain, probs, dist)
        new /= new.sum()
        if np.abs(new - dist).sum() < _TOLERANCE:
            return new
        dist = new
    raise ConvergenceError(f"stationary distribution did not converge in {_MAX_ITERATIONS} iterations")


def source_levels(chain: MarkovChain) -> SourceLevels:
    """All reference losses of the chain, from one dense transition tensor."""
    probs = chain.transition()
    pi = stationary(chain, probs)
    token = pi.sum(axis=0)
    entropy_rate = float((pi * _entropy(probs)).sum())
    after = np.einsum("gb,gbc->bc", pi, probs) / np.where(token > 0, token, 1.0)[:, None]
    bigram = float((token * _entropy(after)).sum())
    return SourceLevels(
        uniform=float(np.log(chain.spec.vocab_size)),
        unigram=float(_entropy(token)),
        bigram=bigram,
        entropy_rate=entropy_rate,
    )
