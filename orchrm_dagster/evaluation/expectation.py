"""Expected correctness of a choice among N runs drawn without replacement from a problem's pool of M runs.

A method that ranks runs by a per-run key (the reward model's score, the plan's log-probability) picks the
best-ranked run of the drawn set. Ranking the pool once (best first, ties broken by run_id), the run at position i is
picked exactly when it is drawn and none of the i runs above it is:

    P(i) = C(M - 1 - i, N - 1) / C(M, N)

so the expected accuracy is the sum of P(i) over the correct runs: exact, no sampling. The oracle (correct when any
drawn run is) is 1 - C(K, N) / C(M, N) with K incorrect runs. Methods whose choice depends on the whole set (a vote,
agreement, a judge) are averaged over every possible set when there are few, otherwise over seeded draws.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def _log_comb(n: np.ndarray, k: np.ndarray) -> np.ndarray:
    from scipy.special import gammaln  # scipy: when an expectation is computed, not on import

    return gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)


def pick_probability(pool_size: np.ndarray, position: np.ndarray, n: int) -> np.ndarray:
    """P(the run ranked `position` (0 = best) in a pool of `pool_size` is the best of `n` drawn at random)."""
    m = np.asarray(pool_size, dtype=np.float64)
    below = m - 1 - np.asarray(position, dtype=np.float64)
    possible = (below >= n - 1) & (m >= n)
    log_p = _log_comb(np.where(possible, below, n - 1), np.full_like(m, n - 1)) - _log_comb(np.maximum(m, n), n)
    return np.where(possible, np.exp(log_p), 0.0)


def any_correct_probability(pool_size: np.ndarray, incorrect: np.ndarray, n: int) -> np.ndarray:
    """P(at least one of `n` runs drawn from the pool is correct) (the oracle)."""
    m = np.asarray(pool_size, dtype=np.float64)
    k = np.asarray(incorrect, dtype=np.float64)
    all_wrong = np.where(k >= n, np.exp(_log_comb(np.maximum(k, n), n) - _log_comb(np.maximum(m, n), n)), 0.0)
    return 1.0 - all_wrong


def candidate_sets(pool_size: int, n: int, draws: int, max_enumerate: int, seed: int, groups: int,
                   stream: int = 0) -> np.ndarray:
    """Index sets for `groups` pools of one size: shape (groups, sets, n), each set sorted ascending. Every possible
    set when there are at most `max_enumerate` (the same for each group), else `draws` random sets per group, seeded
    by `seed` and `stream` (one stream per slice of problems drawn apart)."""
    if math.comb(pool_size, n) <= max_enumerate:
        every = np.array(list(itertools.combinations(range(pool_size), n)), dtype=np.int32)
        return np.broadcast_to(every, (groups, *every.shape))
    rng = np.random.default_rng([seed, pool_size, n, stream])
    keys = rng.random((groups, draws, pool_size))
    return np.sort(np.argpartition(keys, n - 1, axis=2)[:, :, :n], axis=2).astype(np.int32)
