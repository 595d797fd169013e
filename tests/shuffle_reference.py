"""The O(n) FMT21 numerical shuffle bound as it was before issue 9 (a reference, not the package).

Kept verbatim in logic so that the tests can compare the O(sqrt n) implementation of
:mod:`dpkd_audit._math.shuffle` with it, and ``benchmarks/pld_shuffle.py`` can time it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special, stats

from dpkd_audit.accountants.shuffle import closed_form_epsilon, closed_form_max_local_epsilon


def clone_weights(eps0: float, n: int, log_floor: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Clone counts c with Bin(n - 1, e^-eps0) log-pmf >= log_floor, their weights, the rest."""
    c = np.arange(n, dtype=np.int64)
    log_pmf = stats.binom.logpmf(c, n - 1, math.exp(-eps0))
    keep = log_pmf >= log_floor
    return c[keep], np.exp(log_pmf[keep]), float(np.exp(log_pmf[~keep]).sum())


def old_clone_sum(eps: float, eps0: float, c: np.ndarray, weights: np.ndarray) -> float:
    """Previous implementation (verbatim logic): O(n) weights, Cephes cdfs."""
    if eps >= eps0:
        return 0.0
    upper = -math.expm1(eps - eps0)
    ratio = upper / (-math.expm1(-eps0) * (1.0 + math.exp(eps)))
    k = np.minimum(np.floor((c + 1) * ratio), c).astype(np.int64)
    cdf_k = special.bdtr(k, c, 0.5)
    cdf_below = np.where(k >= 1, special.bdtr(np.maximum(k - 1, 0), c, 0.5), 0.0)
    lower = math.exp(-eps0) - math.exp(eps)
    terms = (upper * cdf_k + lower * cdf_below) / (1.0 + math.exp(-eps0))
    return float(np.dot(weights, np.maximum(terms, 0.0)))


def old_numerical_delta(eps0: float, n: int, eps: float) -> float:
    if eps >= eps0:
        return 0.0
    c, weights, left_out = clone_weights(eps0, n, -745.0)
    return min(1.0, old_clone_sum(eps, eps0, c, weights) + left_out)


def old_numerical_epsilon(eps0: float, n: int, delta: float) -> float:
    c, weights, left_out = clone_weights(eps0, n, math.log(1e-10 * delta / n))
    budget = delta * (1.0 - 1e-6) - left_out

    def excess(eps: float) -> float:
        return old_clone_sum(eps, eps0, c, weights) - budget

    if excess(0.0) <= 0.0:
        return 0.0
    hi = eps0
    if eps0 <= closed_form_max_local_epsilon(n, delta):
        guess = closed_form_epsilon(eps0, n, delta)
        if guess < hi and excess(guess) <= 0.0:
            hi = guess
    tol = 1e-10 * hi
    root = optimize.brentq(excess, 0.0, hi, xtol=tol, rtol=1e-12)
    step, result = tol, min(hi, root + tol)
    while excess(result) > 0.0:
        result, step = min(hi, result + step), 2.0 * step
    return result
