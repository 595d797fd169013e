"""Published noise formulas, computed in the tests independently of the package.

The mechanism tests compare a mechanism's declared event and its samples with these values,
never with the mechanism's own attributes (``scale``, ``sigma``, ``keep_probability``, ...), so
that a mechanism whose attribute and sampler are wrong by the same factor fails. Only numpy
and scipy are used here; nothing is imported from ``dpkd_audit``.

- Laplace (Dwork-Roth 2014, Thm 3.6): scale b = Delta_1 / epsilon.
- Analytic Gaussian (Balle-Wang ICML 2018, Thm 8): the smallest sigma with
  Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta) <= delta,
  found here by scipy's brentq on the closed form (the curve decreases in sigma).
- Discrete Laplace (GRS 2012; CKS 2020, Sec. 2): pmf exp(-|x|/b) tanh(1/(2b)), b = Delta/eps,
  noise parameter a = 1/b; the package rounds b up to a rational with denominator <= 2^20
  (to an integer above 2^20), the documented rounding bounded by
  :func:`discrete_laplace_scale_bounds`.
- Discrete Gaussian (CKS 2020, Thm 7): delta = P[X > eps sigma^2/Delta - Delta/2]
  - e^eps P[X > eps sigma^2/Delta + Delta/2] for X ~ N_Z(0, sigma^2); sigma by bisection.
- k-ary randomized response (Warner 1965; Kairouz-Oh-Viswanath 2016): keep e^eps/(e^eps+k-1),
  each other label 1/(e^eps+k-1); dp_accounting's noise parameter (replace by a uniform bucket
  with this probability) is k/(e^eps+k-1).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special


def laplace_scale(epsilon: float, sensitivity: float) -> float:
    """Laplace scale b = Delta_1 / epsilon (Dwork-Roth 2014, Thm 3.6)."""
    return sensitivity / epsilon


def analytic_gaussian_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """Balle-Wang 2018, Thm 8: the exact delta(epsilon) of N(0, sigma^2) with L2 sensitivity."""
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    return float(np.exp(special.log_ndtr(a - b)) - np.exp(epsilon + special.log_ndtr(-a - b)))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest sigma meeting (epsilon, delta) (Balle-Wang Thm 8), by brentq (rel 1e-13)."""
    def gap(log_sigma: float) -> float:
        return analytic_gaussian_delta(epsilon, math.exp(log_sigma), sensitivity) - delta

    lo, hi = math.log(sensitivity * 1e-3), math.log(sensitivity * 1e4)
    assert gap(lo) > 0 > gap(hi), "bracket"
    return math.exp(optimize.brentq(gap, lo, hi, xtol=1e-15, rtol=1e-14, maxiter=500))


def discrete_laplace_pmf(scale: float, grid: np.ndarray) -> np.ndarray:
    """Discrete Laplace pmf exp(-|x|/b) tanh(1/(2b)) on ``grid`` (CKS 2020, Def. 2)."""
    return np.exp(-np.abs(grid) / scale) * math.tanh(0.5 / scale)


def discrete_laplace_scale_bounds(epsilon: float, sensitivity: int) -> tuple[float, float]:
    """[Delta/eps, the documented upper end of the rounded-up scale].

    The package rounds b = Delta/eps up to a rational with denominator <= 2^20, adding at most
    2^-20 (to an integer when b > 2^20; ``DiscreteLaplace`` docstring): b <= ceil(b D)/D with
    D = 2^20 (resp. 1). So the noise parameter a = 1/b lies in
    [1/upper, eps/Delta] and the event's epsilon a Delta in [Delta/upper, eps].
    """
    exact = sensitivity / epsilon
    grid = 2.0**20 if exact <= 2.0**20 else 1.0
    return exact, math.ceil(exact * grid) / grid


def discrete_gaussian_pmf(sigma: float, grid: np.ndarray) -> np.ndarray:
    """N_Z(0, sigma^2) pmf on ``grid`` (CKS 2020, Def. 1), normalised over the grid."""
    w = np.exp(-(grid.astype(np.float64) ** 2) / (2.0 * sigma * sigma))
    return w / w.sum()


def discrete_gaussian_delta(epsilon: float, sigma: float, sensitivity: int) -> float:
    """CKS 2020, Thm 7, summed over +-(40 sigma + Delta + 2) (tail beyond < e^-800)."""
    half = math.ceil(40 * sigma) + sensitivity + 2
    grid = np.arange(-half, half + 1)
    pmf = discrete_gaussian_pmf(sigma, grid)
    centre = epsilon * sigma * sigma / sensitivity

    def tail(t: float) -> float:  # P[X > t]
        return float(pmf[grid > t].sum())

    return tail(centre - sensitivity / 2) - math.exp(epsilon) * tail(centre + sensitivity / 2)


def discrete_gaussian_sigma(epsilon: float, delta: float, sensitivity: int) -> float:
    """Smallest sigma with CKS Thm 7 delta <= ``delta``, by bisection to 1e-12 relative.

    Bisection assumes the curve decreases in sigma; it has small upward jumps (where the
    thresholds cross integers), so the result is compared with the package's sigma at a stated
    tolerance, and the package's sigma is also checked to satisfy the curve directly.
    """
    lo = hi = analytic_gaussian_sigma(epsilon, delta, float(sensitivity))
    while discrete_gaussian_delta(epsilon, lo, sensitivity) <= delta:
        lo *= 0.9
    while discrete_gaussian_delta(epsilon, hi, sensitivity) > delta:
        hi *= 1.1
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        if discrete_gaussian_delta(epsilon, mid, sensitivity) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def rr_keep_probability(epsilon: float, k: int) -> float:
    """k-ary randomized response keeps the label w.p. e^eps / (e^eps + k - 1)."""
    return math.exp(epsilon) / (math.exp(epsilon) + k - 1)


def rr_other_probability(epsilon: float, k: int) -> float:
    """Each of the k - 1 other labels has probability 1 / (e^eps + k - 1)."""
    return 1.0 / (math.exp(epsilon) + k - 1)


def rr_pmf(epsilon: float, k: int, label: int) -> np.ndarray:
    """Output law of k-ary randomized response on ``label``."""
    pmf = np.full(k, rr_other_probability(epsilon, k))
    pmf[label] = rr_keep_probability(epsilon, k)
    return pmf


def rr_noise_parameter(epsilon: float, k: int) -> float:
    """dp_accounting's RandomizedResponseDpEvent noise parameter k / (e^eps + k - 1)."""
    return k / (math.exp(epsilon) + k - 1)
