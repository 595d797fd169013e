"""Privacy amplification by shuffling: Feldman-McMillan-Talwar closed form and numerical bound.

Feldman, McMillan, Talwar, "Hiding Among the Clones: A Simple and Nearly Optimal Analysis of
Privacy Amplification by Shuffling", FOCS 2021 (arXiv:2012.12803), Theorem 3.1: if each of ``n``
users applies an ``epsilon0``-DP local randomizer to its own record and the ``n`` reports are
uniformly shuffled, then for every delta in (0, 1) with

    epsilon0 <= log(n / (16 log(2 / delta)))                                       (validity)

the shuffled output is (epsilon, delta)-DP (replace-one neighbours) with

    epsilon = log(1 + (e^eps0 - 1)/(e^eps0 + 1) * (8 sqrt(e^eps0 log(4/delta)) / sqrt(n)
                                                    + 8 e^eps0 / n)).

The same statement (condition and formula) is quoted by the reverse k-NN paper
(papers/rknn-fine-grained-private-kd.txt, "Single-message Shuffling").

FMT21's *numerical* bound (:func:`numerical_delta`, :func:`numerical_epsilon`) evaluates the
hockey-stick divergence of the dominating pair of their reduction exactly instead of bounding it
in closed form; it has no validity condition, never exceeds epsilon0 and is several times
tighter (e.g. n = 10^5, epsilon0 = 4, delta = 1e-6: 0.1698 against 0.54 for Theorem 3.1).
:class:`dpkd_audit.accountants.shuffle.ShuffleAccountant` composes shuffled releases with
either bound. This module holds only the math, so that mechanisms (below accountants in the
layering) can use it too.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, special, stats

from dpkd_audit import _validate

__all__ = [
    "closed_form_epsilon",
    "closed_form_max_local_epsilon",
    "numerical_delta",
    "numerical_epsilon",
]


def closed_form_max_local_epsilon(n: int, delta: float) -> float:
    """The largest epsilon0 for which FMT21 Theorem 3.1 applies: log(n / (16 log(2/delta))).

    Args:
        n: Number of users (an integer >= 1).
        delta: Target delta, in (0, 1).

    Returns:
        The bound (negative, or zero, when no epsilon0 > 0 qualifies).
    """
    n = _validate.check_int("n", n, minimum=1)
    delta = _validate.check_delta(delta, allow_zero=False)
    # log(n) - log(16) - log(log(2/delta)), evaluated in log space (log(2/delta) > log 2 > 0).
    return math.log(n) - math.log(16.0) - math.log(math.log(2.0) - math.log(delta))


def closed_form_epsilon(epsilon0: float, n: int, delta: float) -> float:
    """Central epsilon of ``n`` shuffled ``epsilon0``-LDP reports (FMT21, Theorem 3.1).

    epsilon = log(1 + tanh(eps0/2) * (8 sqrt(e^eps0 log(4/delta) / n) + 8 e^eps0 / n)), using
    (e^eps0 - 1)/(e^eps0 + 1) = tanh(eps0 / 2) (no cancellation for small eps0) and ``log1p``.

    Args:
        epsilon0: Pure epsilon of the local randomizer (finite, > 0).
        n: Number of users, each contributing one report (an integer >= 1).
        delta: Target delta of the shuffled output, in (0, 1).

    Returns:
        The epsilon of Theorem 3.1 at ``delta``.

    Raises:
        ValueError: If a parameter is out of range, or if the theorem's validity condition
            epsilon0 <= log(n / (16 log(2/delta))) fails (the message gives the values and
            points to the numerical bound).
    """
    epsilon0 = _validate.check_epsilon(epsilon0, "epsilon0")
    n = _validate.check_int("n", n, minimum=1)
    delta = _validate.check_delta(delta, allow_zero=False)
    limit = closed_form_max_local_epsilon(n, delta)
    if epsilon0 > limit:
        raise ValueError(
            "the Feldman-McMillan-Talwar 2021 closed form (Theorem 3.1) needs "
            f"epsilon0 <= log(n / (16 log(2/delta))) = {limit:.6g}; got epsilon0={epsilon0!r}, "
            f"n={n}, delta={delta!r}. Use more users, a smaller epsilon0, or FMT21's numerical "
            "amplification bound instead")
    e0 = math.exp(epsilon0)  # <= n / (16 log(2/delta)) here, so no overflow
    log4 = math.log(4.0) - math.log(delta)
    bracket = 8.0 * math.sqrt(e0 * log4 / n) + 8.0 * e0 / n
    return math.log1p(math.tanh(0.5 * epsilon0) * bracket)


# =========================================================================== numerical bound
#
# FMT21, Section 3 (Theorem 3.2 of arXiv:2012.12803, the reduction behind Theorem 3.1): for
# eps0-DP local randomizers and replace-one neighbours X0, X1 differing in user 1, the shuffled
# outputs are post-processings of P0 and P1 respectively, where
#
#     C ~ Bin(n - 1, e^-eps0)      (users whose report is a "clone" of user 1's),
#     A ~ Bin(C, 1/2),  Delta ~ Bernoulli(alpha),  alpha = e^eps0 / (e^eps0 + 1),
#     P0 = (A + Delta, C - A + 1 - Delta),   P1 = (A + 1 - Delta, C - A + Delta).
#
# Hence delta(eps) <= D_{e^eps}(P0 || P1) (and the reverse direction, which is equal by the
# symmetry a -> C + 1 - a). C = (sum of both coordinates) - 1 is observed, so the divergence is
# sum_c P[C = c] D_c(eps) with D_c the divergence of the first coordinate given C = c:
#
#     P0(a | c) = alpha b_c(a) + (1 - alpha) b_c(a - 1),
#     P1(a | c) = (1 - alpha) b_c(a) + alpha b_c(a - 1),
#
# b_c the Bin(c, 1/2) pmf. With r_a = b_c(a - 1)/b_c(a) = a/(c + 1 - a) increasing in a, the term
# P0(a|c) - e^eps P1(a|c) is positive exactly for a < t_c, where
#
#     t_c = (c + 1) (e^eps0 - e^eps) / ((e^eps0 - 1)(e^eps + 1))   (<= (c + 1)/2),
#
# so with k = floor(t_c) and F the Bin(c, 1/2) cdf (F(-1) = 0),
#
#     (1 + e^-eps0) D_c = (1 - e^(eps - eps0)) F(k) + (e^-eps0 - e^eps) F(k - 1).
#
# This is FMT21's computation (their Appendix E and reference code, apple/ml-shuffling-
# amplification, which bins c in steps and bounds each bin by its end points); here every c with
# non-negligible binomial weight is summed exactly (vectorised: one regularised incomplete beta
# per c), and the neglected weight is added as if its D_c were 1, so the sum stays an upper bound.

#: Binomial weight left out of the sum, relative to the target delta (added back pessimistically).
_TAIL_FRACTION = 1e-10
#: Relative safety margin for floating-point rounding in the sum (cdf differences).
_ROUNDING_MARGIN = 1e-6
#: Beyond this local epsilon e^-eps0 underflows: no clone is possible, no amplification claimed.
_MAX_AMPLIFIED_LOCAL_EPSILON = 700.0


@functools.lru_cache(maxsize=64)
def _clone_weights(epsilon0: float, n: int, log_floor: float
                   ) -> tuple[np.ndarray, np.ndarray, float]:
    """The c with log P[C = c] >= ``log_floor`` (C ~ Bin(n-1, e^-eps0)), their pmf, the rest."""
    c = np.arange(n, dtype=np.int64)
    log_pmf = stats.binom.logpmf(c, n - 1, math.exp(-epsilon0))
    keep = log_pmf >= log_floor
    left_out = float(np.exp(log_pmf[~keep]).sum())
    return c[keep], np.exp(log_pmf[keep]), left_out


def _clone_sum(epsilon: float, epsilon0: float, c: np.ndarray, weights: np.ndarray) -> float:
    """sum_c w_c D_c(eps) over the given c (exact up to rounding; see the derivation above)."""
    if epsilon >= epsilon0:
        return 0.0
    upper = -math.expm1(epsilon - epsilon0)  # 1 - e^(eps - eps0) > 0
    ratio = upper / (-math.expm1(-epsilon0) * (1.0 + math.exp(epsilon)))  # t_c / (c + 1)
    k = np.minimum(np.floor((c + 1) * ratio), c).astype(np.int64)
    cdf_k = special.bdtr(k, c, 0.5)
    cdf_below = np.where(k >= 1, special.bdtr(np.maximum(k - 1, 0), c, 0.5), 0.0)
    lower = math.exp(-epsilon0) - math.exp(epsilon)  # < 0
    terms = (upper * cdf_k + lower * cdf_below) / (1.0 + math.exp(-epsilon0))
    # Each D_c is a sum of positive terms: clip rounding noise below zero (pessimistic).
    return float(np.dot(weights, np.maximum(terms, 0.0)))


def _check_shuffle_args(epsilon0: float, n: int) -> tuple[float, int]:
    return (_validate.check_epsilon(epsilon0, "epsilon0"),
            _validate.check_int("n", n, minimum=1))


def numerical_delta(epsilon0: float, n: int, epsilon: float) -> float:
    """FMT21 numerical bound: delta of ``n`` shuffled ``epsilon0``-LDP reports at ``epsilon``.

    The exact hockey-stick divergence D_{e^eps}(P0 || P1) of the FMT21 dominating pair (see the
    derivation in this module), summed over every value of the clone count C (vectorised, O(n)).

    Args:
        epsilon0: Pure epsilon of the local randomizer (finite, > 0).
        n: Number of users, each contributing one report (an integer >= 1).
        epsilon: Central epsilon (a real number >= 0).

    Returns:
        A delta such that the shuffled output is (epsilon, delta)-DP (replace-one neighbours).
    """
    epsilon0, n = _check_shuffle_args(epsilon0, n)
    if not (isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool)
            and epsilon >= 0):
        raise ValueError(f"epsilon must be a real number >= 0; got {epsilon!r}")
    if epsilon >= epsilon0:
        return 0.0  # the local reports alone are epsilon0-DP
    if epsilon0 > _MAX_AMPLIFIED_LOCAL_EPSILON:
        # C = 0 almost surely (P[C > 0] < n e^-700): the pair is randomized response.
        return min(1.0, -math.expm1(epsilon - epsilon0) / (1.0 + math.exp(-epsilon0))
                   + n * math.exp(-epsilon0))
    c, weights, left_out = _clone_weights(epsilon0, n, -745.0)
    return min(1.0, _clone_sum(float(epsilon), epsilon0, c, weights) + left_out)


def numerical_epsilon(epsilon0: float, n: int, delta: float) -> float:
    """FMT21 numerical bound: central epsilon of ``n`` shuffled ``epsilon0``-LDP reports.

    The smallest epsilon (to a relative 1e-10, rounded up) with ``numerical_delta`` <= delta,
    found by Brent's method on the exact, continuous and decreasing curve and then checked, so
    the result is never below the exact epsilon of the FMT21 pair. Binomial weights below
    1e-10 * delta / n are not summed but charged in full, and the sum must fit under
    delta * (1 - 1e-6) to absorb rounding. Cost: one O(n) log-pmf, then about 15 evaluations
    over the ~20 standard deviations of C around its mean (vectorised).

    Always <= epsilon0 (the un-amplified guarantee), and below FMT21's closed form
    (:func:`closed_form_epsilon`) wherever that is valid. Cached.

    Args:
        epsilon0: Pure epsilon of the local randomizer (finite, > 0).
        n: Number of users (an integer >= 1).
        delta: Target delta of the shuffled output, in (0, 1).

    Returns:
        The central epsilon at ``delta`` (replace-one neighbours).
    """
    epsilon0, n = _check_shuffle_args(epsilon0, n)
    delta = _validate.check_delta(delta, allow_zero=False)
    return _numerical_epsilon(epsilon0, n, delta)


@functools.lru_cache(maxsize=4096)
def _numerical_epsilon(epsilon0: float, n: int, delta: float) -> float:
    if epsilon0 > _MAX_AMPLIFIED_LOCAL_EPSILON:
        return epsilon0
    c, weights, left_out = _clone_weights(epsilon0, n, math.log(_TAIL_FRACTION * delta / n))
    budget = delta * (1.0 - _ROUNDING_MARGIN) - left_out  # what the exact sum must fit under

    def excess(eps: float) -> float:
        return _clone_sum(eps, epsilon0, c, weights) - budget

    if excess(0.0) <= 0.0:
        return 0.0
    hi = epsilon0  # excess(eps0) = -budget < 0
    if epsilon0 <= closed_form_max_local_epsilon(n, delta):
        guess = closed_form_epsilon(epsilon0, n, delta)  # FMT21 Thm 3.1 bounds the same curve
        if guess < hi and excess(guess) <= 0.0:
            hi = guess
    tol = 1e-10 * hi
    root = optimize.brentq(excess, 0.0, hi, xtol=tol, rtol=1e-12)
    step = tol
    result = min(hi, root + tol)
    while excess(result) > 0.0:  # make sure the returned point satisfies the target
        result = min(hi, result + step)
        step *= 2.0
    return result


# =========================================================================== accountant
