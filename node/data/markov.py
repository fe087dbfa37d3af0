"""The embedded dataset's source: a sparse random order-2 Markov chain over a byte-sized vocabulary.

Why this shape: it must be learnable by a 0.2M-parameter model in a minute on CPU, yet have an exactly
computable entropy rate and a gap between easy and hard structure so optimizers can be told apart. So:

* after token ``b`` only ``branching`` successors are likely (a per-``b`` set: plain bigram statistics,
  learned in the first few hundred steps);
* how probability is spread over that set (a geometric profile over ranks, with a per-``b`` decay) depends on
  the token before, but only through its *group* (one of ``groups`` random classes): the order-2 structure a
  model needs attention for, with ``groups * vocab`` contexts instead of ``vocab**2`` so a small model can
  learn it;
* with probability ``noise`` the next token is uniform over the whole vocabulary, which makes the chain
  irreducible and aperiodic (a unique stationary distribution, so the entropy rate is well defined) and keeps
  every token's probability non-zero, as in real text.

All sampling decisions use integer arithmetic only (see :mod:`prng`), so every platform generates the same
corpus from the same seed. Probabilities are exact rationals of those integers; see :mod:`entropy`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from distro_node.node.data.errors import DataSettingError
from distro_node.node.data.prng import derive_key, random_below, random_u64

# Rank weights are integers on this scale; the sampler draws below their sum, so probabilities are exact.
_WEIGHT_SCALE = 1 << 24
# The noise probability is rounded down to a multiple of 2**-32 and compared against 32 random bits.
_NOISE_BITS = 32
# The dense entropy computation holds groups * vocab**2 float64 values; keep that within a few hundred MB.
_MAX_TRANSITIONS = 1 << 25


@dataclass(frozen=True)
class MarkovSpec:
    """Shape of the chain and the corpus drawn from it; part of the cache key, so immutable."""

    vocab_size: int = 256
    groups: int = 4
    branching: int = 8
    # Per-token choices of how fast probability falls over the successor ranks (weight of rank r ~ decay**r).
    decays: tuple[float, ...] = (0.25, 0.5, 0.7, 0.85)
    noise: float = 0.02
    train_rows: int = 256
    eval_rows: int = 16
    row_len: int = 8192
    # Tokens generated and dropped before a row starts, so rows start from (numerically) the stationary
    # distribution and the first positions of a row are as predictable as any other.
    burn_in: int = 256

    def __post_init__(self) -> None:
        for name in ("vocab_size", "groups", "branching", "train_rows", "eval_rows", "row_len", "burn_in"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise DataSettingError(name, f"must be an integer, got {value!r}")
            if value < (0 if name == "burn_in" else 1):
                raise DataSettingError(name, f"out of range: {value}")
        if not 2 <= self.vocab_size <= 65536:
            raise DataSettingError("vocab_size", f"must be in [2, 65536], got {self.vocab_size}")
        if self.groups > self.vocab_size:
            raise DataSettingError("groups", f"{self.groups} exceeds vocab_size={self.vocab_size}")
        if self.branching > self.vocab_size:
            raise DataSettingError("branching", f"{self.branching} exceeds vocab_size={self.vocab_size}")
        if self.groups * self.vocab_size**2 > _MAX_TRANSITIONS:
            raise DataSettingError(
                "vocab_size", f"groups * vocab_size**2 must be <= {_MAX_TRANSITIONS} for the exact loss floor"
            )
        if not self.decays or not all(isinstance(d, float | int) and 0 < d <= 1 for d in self.decays):
            raise DataSettingError("decays", f"must be non-empty numbers in (0, 1], got {self.decays}")
        if not (isinstance(self.noise, float | int) and 0 < self.noise < 1):
            raise DataSettingError("noise", f"must be in (0, 1) to keep the chain ergodic, got {self.noise}")
        if self.noise * 2**_NOISE_BITS < 1:
            raise DataSettingError("noise", f"{self.noise} rounds to zero at 2**-{_NOISE_BITS} resolution")


def _rank_weights(decay: float, count: int) -> list[int]:
    """Integer weights decay**r; repeated multiplication (not pow) so every platform gets the same bits."""
    weights, x = [], 1.0
    for _ in range(count):
        weights.append(max(1, int(x * _WEIGHT_SCALE)))
        x *= decay
    return weights


@dataclass(frozen=True, eq=False)
class MarkovChain:
    """P(next | prev2, prev) = (1 - eps) * weight[prev, rank] / total[prev] + eps / vocab, where the token of
    each rank is ``table[group[prev2], prev, rank]`` and eps = ``noise_threshold / 2**32``."""

    spec: MarkovSpec
    group: np.ndarray  # (vocab,) int64: group of each token
    table: np.ndarray  # (groups, vocab, branching) int64: successor token at each rank
    weights: np.ndarray  # (vocab, branching) int64: rank weights after each token
    noise_threshold: int

    @property
    def noise(self) -> float:
        return self.noise_threshold / 2**_NOISE_BITS

    def transition(self) -> np.ndarray:
        """Dense P[g, b, c] = P(next = c | group of prev2 = g, prev = b), float64, rows sum to one."""
        spec = self.spec
        eps = self.noise
        probs = np.full((spec.groups, spec.vocab_size, spec.vocab_size), eps / spec.vocab_size)
        rank_p = (1 - eps) * self.weights / self.weights.sum(axis=1, keepdims=True)  # (vocab, branching)
        g_idx, b_idx, _ = np.indices(self.table.shape)
        # Successors within one context are distinct, so plain fancy-index addition is exact.
        probs[g_idx, b_idx, self.table] += np.broadcast_to(rank_p, self.table.shape)
        return probs


def build_chain(seed: int, spec: MarkovSpec) -> MarkovChain:
    """The chain of ``seed``: every random choice comes from its own keyed integer stream."""
    v, g, k = spec.vocab_size, spec.groups, spec.branching
    group = random_below(derive_key("markov", seed, "group"), g, v)
    # Distinct successors per token: the first k of a random permutation (argsort of random 64-bit keys;
    # stable sort so the order is fixed even in the astronomically unlikely case of equal keys).
    perm_keys = random_u64(derive_key("markov", seed, "successors"), 0, v * v).reshape(v, v)
    successors = np.argsort(perm_keys, axis=1, kind="stable")[:, :k]
    # Each (group, token) context ranks the same successor set in its own order.
    rank_keys = random_u64(derive_key("markov", seed, "ranks"), 0, g * v * k).reshape(g, v, k)
    order = np.argsort(rank_keys, axis=2, kind="stable")
    table = np.take_along_axis(np.broadcast_to(successors, (g, v, k)), order, axis=2)
    profiles = np.array([_rank_weights(float(d), k) for d in spec.decays], dtype=np.int64)
    weights = profiles[random_below(derive_key("markov", seed, "decay"), len(spec.decays), v)]
    noise_threshold = math.floor(spec.noise * 2**_NOISE_BITS)  # exact: scaling by a power of two
    return MarkovChain(spec, group, np.ascontiguousarray(table), weights, noise_threshold)


def generate(chain: MarkovChain, seed: int, rows: int, row_len: int, burn_in: int) -> np.ndarray:
    """``rows`` independent sequences of ``row_len`` tokens, stepped together so the Python loop runs
    ``burn_in + row_len`` times however many rows there are."""
    v = chain.spec.vocab_size
    dtype = np.uint8 if v <= 256 else np.uint16
    cum = np.cumsum(chain.weights, axis=1).astype(np.uint64)  # (vocab, branching)
    total = cum[:, -1]
    start_key = derive_key("markov", seed, "start")
    prev2 = random_below(start_key, v, rows)
    prev = random_below(start_key, v, rows, start=rows)
    keys = [derive_key("markov", seed, "steps", name) for name in ("noise", "noise_token", "rank")]
    out = np.empty((row_len, rows), dtype=dtype)  # time-major: each step writes one contiguous row
    steps = burn_in + row_len
    block = max(1, min(steps, (1 << 20) // rows))  # draw randomness in ~1M-value blocks to bound memory
    threshold = np.uint64(chain.noise_threshold)
    shift = np.uint64(64 - _NOISE_BITS)
    for t0 in range(0, steps, block):
        n = min(block, steps - t0)
        is_noise = (random_u64(keys[0], t0 * rows, n * rows) >> shift).reshape(n, rows) < threshold
        noise_tok = (random_u64(keys[1], t0 * rows, n * rows) % np.uint64(v)).astype(np.int64)
        noise_tok = noise_tok.reshape(n, rows)
        rank_u = random_u64(keys[2], t0 * rows, n * rows).reshape(n, rows)
        for i in range(n):
            y = rank_u[i] % total[prev]
            rank = (cum[prev] <= y[:, None]).sum(axis=1)
            nxt = chain.table[chain.group[prev2], prev, rank]
            nxt = np.where(is_noise[i], noise_tok[i], nxt)
            t = t0 + i
            if t >= burn_in:
                out[t - burn_in] = nxt
            prev2, prev = prev, nxt
    return np.ascontiguousarray(out.T)
