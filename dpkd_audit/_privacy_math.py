"""Closed-form privacy curves shared by events, mechanisms and accountants.

Kept free of torch and of the package's higher layers so that every layer can use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import special

__all__ = [
    "analytic_gaussian_delta",
    "calibrate_analytic_gaussian",
    "calibrate_discrete_gaussian",
    "discrete_gaussian_delta",
    "discrete_gaussian_pmf",
    "smallest_satisfying",
]


def _log_ndtr(x: float) -> float:
    return float(special.log_ndtr(x))


def analytic_gaussian_delta(epsilon: float, sigma: float, sensitivity: float = 1.0) -> float:
    """Exact delta(epsilon) of the Gaussian mechanism N(0, sigma^2) with L2 sensitivity Delta.

    Balle and Wang, "Improving the Gaussian mechanism for differential privacy", ICML 2018,
    Theorem 8: delta = Phi(Delta/(2 sigma) - eps sigma/Delta)
    - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta). Computed in log space.
    """
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    log_first = _log_ndtr(a - b)
    log_second = epsilon + _log_ndtr(-a - b)
    if log_second >= log_first:
        return 0.0
    return float(math.exp(log_first) * -math.expm1(log_second - log_first))


def smallest_satisfying(func: Callable[[float], float], target: float, lo: float, hi: float,
                      *, rel_tol: float = 1e-12, max_iter: int = 200) -> float:
    """Smallest x in [lo, hi] (to rel_tol) with func(x) <= target, for func decreasing in x.

    Returns the *upper* end of the final bracket, so the returned x always satisfies
    ``func(x) <= target`` (the calibrated noise never gives less privacy than asked for).
    """
    if func(hi) > target:
        raise ValueError(f"no solution up to {hi}: func({hi}) = {func(hi)} > {target}")
    if func(lo) <= target:
        return lo
    for _ in range(max_iter):
        mid = 0.5 * (lo + hi)
        if func(mid) <= target:
            hi = mid
        else:
            lo = mid
        if hi - lo <= rel_tol * hi:
            break
    return hi


def calibrate_analytic_gaussian(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma for which N(0, sigma^2) is (epsilon, delta)-DP (Balle-Wang 2018, Alg. 1).

    Solved by bisection on the exact curve of Theorem 8; the result satisfies the target.
    """
    hi = sensitivity
    while analytic_gaussian_delta(epsilon, hi, sensitivity) > delta:
        hi *= 2.0
    return smallest_satisfying(lambda s: analytic_gaussian_delta(epsilon, s, sensitivity), delta,
                             1e-12 * sensitivity, hi)


def discrete_gaussian_pmf(sigma: float, support: np.ndarray) -> np.ndarray:
    """Pmf of the discrete Gaussian N_Z(0, sigma^2) at the integers ``support``.

    Canonne, Kamath, Steinke, "The discrete Gaussian for differential privacy", NeurIPS 2020,
    Definition 1: P[X = x] = exp(-x^2 / (2 sigma^2)) / sum_y exp(-y^2 / (2 sigma^2)).
    """
    support = np.asarray(support)
    half = math.ceil(40 * sigma) + 2
    grid = np.arange(-half, half + 1, dtype=np.float64)
    log_norm = special.logsumexp(-(grid**2) / (2 * sigma**2))
    return np.exp(-(support.astype(np.float64) ** 2) / (2 * sigma**2) - log_norm)


def discrete_gaussian_delta(epsilon: float, sigma: float, sensitivity: int = 1) -> float:
    """Exact delta(epsilon) of the discrete Gaussian mechanism with integer L1=L2 sensitivity.

    Canonne-Kamath-Steinke 2020, Theorem 7: for X ~ N_Z(0, sigma^2),
    delta = P[X > eps sigma^2/Delta - Delta/2] - e^eps P[X > eps sigma^2/Delta + Delta/2].
    The tails are summed over the exact (truncated at 40 sigma, error < 1e-300) pmf.
    """
    half = math.ceil(40 * sigma) + sensitivity + 2
    grid = np.arange(-half, half + 1)
    pmf = discrete_gaussian_pmf(sigma, grid)
    t1 = epsilon * sigma**2 / sensitivity - sensitivity / 2.0
    t2 = epsilon * sigma**2 / sensitivity + sensitivity / 2.0
    first = math.fsum(pmf[grid > t1])
    second = math.fsum(pmf[grid > t2])
    return max(0.0, first - math.exp(epsilon) * second)


def calibrate_discrete_gaussian(epsilon: float, delta: float, sensitivity: int = 1) -> float:
    """Smallest sigma (to 1e-9 relative) making N_Z(0, sigma^2) (epsilon, delta)-DP (CKS Thm 7)."""
    hi = float(sensitivity)
    while discrete_gaussian_delta(epsilon, hi, sensitivity) > delta:
        hi *= 2.0
    # discrete_gaussian_delta is not monotone in sigma (lattice effects of up to a few percent
    # have been measured); bisection still returns a point that satisfies the target, which is
    # what soundness needs, and callers that round sigma afterwards must re-check the curve.
    return smallest_satisfying(lambda s: discrete_gaussian_delta(epsilon, s, sensitivity), delta,
                             hi / 2.0 if hi > sensitivity else 1e-3, hi, rel_tol=1e-9)
