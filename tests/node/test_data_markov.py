"""The embedded Markov source: determinism across machines, and a loss floor that is exact."""

from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np
import pytest
from distro_node.node.data import DataSettingError, MarkovSpec, markov_source
from distro_node.node.data.entropy import source_levels, stationary, step_state
from distro_node.node.data.markov import build_chain, generate

SPEC = MarkovSpec(train_rows=8, eval_rows=2, row_len=512)


def test_corpus_is_pinned() -> None:
    # Every peer must derive the same corpus from the same seed whatever its numpy/torch version or CPU.
    # Generation uses only sha256 and integer arithmetic; this digest pins it. If it changes, the data of
    # every existing run changed: bump the format, do not just update the digest.
    source = markov_source(0, SPEC)
    digest = hashlib.sha256(source.train.tobytes() + source.eval.tobytes()).hexdigest()
    assert digest == "e07e6e57396217f615e1c9191f14381121dd350cdc4a3bdcc10e7244e30cf2d6"
    assert source.train[0, :12].tolist() == [8, 41, 244, 233, 6, 24, 212, 82, 163, 211, 154, 147]


def test_same_seed_same_corpus_other_seed_differs() -> None:
    chain = build_chain(5, SPEC)
    a = generate(chain, 5, rows=4, row_len=300, burn_in=16)
    b = generate(build_chain(5, SPEC), 5, rows=4, row_len=300, burn_in=16)
    c = generate(build_chain(6, SPEC), 6, rows=4, row_len=300, burn_in=16)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_source_shape_and_cache() -> None:
    source = markov_source(1, SPEC)
    assert source.train.shape == (8, 512) and source.eval.shape == (2, 512)
    assert source.vocab_size == 256 and source.train.max() < 256
    assert markov_source(1, SPEC) is source
    assert markov_source() is markov_source(0, MarkovSpec())  # default spec spelled either way: one corpus
    assert not source.train.flags.writeable  # shared through the cache: must not be mutable


def test_levels_are_ordered() -> None:
    refs = markov_source(0, SPEC).reference_losses
    assert 0 < refs["floor"] < refs["bigram"] < refs["unigram"] <= refs["uniform"]
    assert refs["uniform"] == pytest.approx(math.log(256))
    # The default design keeps a clear gap for order-2 structure above the floor.
    assert refs["bigram"] - refs["floor"] > 0.2


def test_stationary_matches_linear_solve() -> None:
    chain = build_chain(2, dataclasses.replace(SPEC, vocab_size=32, groups=3, branching=4))
    probs = chain.transition()
    assert np.allclose(probs.sum(axis=2), 1.0)
    pi = stationary(chain, probs)
    n = chain.spec.groups * chain.spec.vocab_size
    # Build the lumped transition matrix explicitly and solve pi (M - I) = 0, sum(pi) = 1.
    matrix = np.zeros((n, n))
    for s in range(n):
        unit = np.zeros(n)
        unit[s] = 1.0
        matrix[s] = step_state(chain, probs, unit.reshape(chain.spec.groups, -1)).ravel()
    system = np.vstack([(matrix - np.eye(n)).T, np.ones(n)])
    rhs = np.zeros(n + 1)
    rhs[-1] = 1.0
    solved = np.linalg.lstsq(system, rhs, rcond=None)[0]
    assert np.abs(solved - pi.ravel()).max() < 1e-12


def test_floor_equals_average_true_model_loss_on_the_corpus() -> None:
    # The perfect model's loss on generated data must converge to the stated floor: checks that the
    # generator samples exactly the distribution the entropy computation describes.
    spec = dataclasses.replace(SPEC, train_rows=64, row_len=8192)
    chain = build_chain(0, spec)
    rows = generate(chain, 0, spec.train_rows, spec.row_len, spec.burn_in).astype(np.int64)
    probs = chain.transition()
    prev2, prev, nxt = rows[:, :-2], rows[:, 1:-1], rows[:, 2:]
    nll = -np.log(probs[chain.group[prev2], prev, nxt])
    levels = source_levels(chain)
    standard_error = nll.std() / math.sqrt(nll.size)
    assert abs(nll.mean() - levels.entropy_rate) < 5 * standard_error + 1e-3


def test_single_profile_floor_is_analytic() -> None:
    # With one decay every context has the same next-token entropy, so the rate needs no stationary weights.
    spec = dataclasses.replace(SPEC, decays=(0.5,), branching=4, noise=0.0625)
    chain = build_chain(0, spec)
    weights = np.array([2.0**-r for r in range(4)])
    p = (1 - 0.0625) * weights / weights.sum() + 0.0625 / 256
    rest = 252 * (0.0625 / 256)
    expected = -(p * np.log(p)).sum() - rest * math.log(0.0625 / 256)
    assert source_levels(chain).entropy_rate == pytest.approx(expected, rel=1e-12)


def test_burn_in_reaches_stationarity() -> None:
    # Rows start after ``burn_in`` steps from uniform random (prev2, prev); the first targets of a row are
    # only as predictable as the floor claims if that is indistinguishable from stationary.
    chain = build_chain(0, MarkovSpec())
    probs = chain.transition()
    pi = stationary(chain, probs)
    counts = np.bincount(chain.group, minlength=chain.spec.groups) / chain.spec.vocab_size
    dist = np.outer(counts, np.full(chain.spec.vocab_size, 1 / chain.spec.vocab_size))
    for _ in range(MarkovSpec().burn_in):
        dist = step_state(chain, probs, dist)
    assert np.abs(dist - pi).sum() < 1e-9


def test_window_floor_accounts_for_short_context() -> None:
    source = markov_source(0, SPEC)
    refs = source.reference_losses
    assert source.window_floor(1) == pytest.approx(refs["bigram"])
    assert source.window_floor(64) == pytest.approx((refs["bigram"] + 63 * refs["floor"]) / 64)
    assert refs["floor"] < source.window_floor(512) < source.window_floor(64)
    with pytest.raises(DataSettingError):
        source.window_floor(0)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"vocab_size": 1}, "vocab_size"),
        ({"vocab_size": 4096}, "vocab_size"),  # dense floor computation would not fit
        ({"groups": 300}, "groups"),
        ({"branching": 0}, "branching"),
        ({"branching": 257}, "branching"),
        ({"decays": ()}, "decays"),
        ({"decays": (0.5, 1.5)}, "decays"),
        ({"noise": 0.0}, "noise"),
        ({"noise": 1e-12}, "noise"),
        ({"row_len": 0}, "row_len"),
        ({"burn_in": -1}, "burn_in"),
        ({"train_rows": 2.0}, "train_rows"),
    ],
)
def test_spec_errors_name_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(DataSettingError) as info:
        dataclasses.replace(MarkovSpec(), **changes)
    assert info.value.field == field
