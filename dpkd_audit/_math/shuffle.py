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
hockey-stick divergence of the dominating pair of their reduction exactly (up to rigorously
bounded binomial tails, in O(sqrt(n)) time) instead of bounding it in closed form; it has no
validity condition, never exceeds epsilon0 and is several times tighter (e.g. n = 10^5,
epsilon0 = 4, delta = 1e-6: 0.1698 against 0.54 for Theorem 3.1).
:class:`dpkd_audit.accountants.shuffle.ShuffleAccountant` composes shuffled releases with
either bound. This module holds only the math, so that mechanisms (below accountants in the
layering) can use it too.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

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
#     (1 + e^-eps0) D_c = (1 - e^(eps - eps0)) F(k) + (e^-eps0 - e^eps) F(k - 1)
#                       = (1 - e^(eps - eps0)) b_c(k) - (1 + e^-eps0)(e^eps - 1) F(k - 1).
#
# This is FMT21's computation (their Appendix E and reference code, apple/ml-shuffling-
# amplification, which bins c in steps and bounds each bin by its end points); here every c of
# a window [lo, hi] around the mean of C is summed exactly (vectorised), and the rest is
# charged with rigorous bounds, so the result stays an upper bound on the exact sum:
#
# * D_c is non-increasing in c: given C = c + 1 the first coordinate is the one given C = c
#   plus an independent Bernoulli(1/2) (one more clone), the same post-processing of P0 and P1,
#   and the hockey-stick divergence does not grow under post-processing (data processing
#   inequality). So sum_{c > hi} P[C = c] D_c <= P[C > hi] D_hi and
#   sum_{c < lo} P[C = c] D_c <= P[C < lo] D_0, with D_0 = (e^eps0 - e^eps)/(e^eps0 + 1)
#   (one user: binary randomized response).
# * The tail masses are bounded by the Chernoff-Hoeffding bound (Hoeffding 1963, Thm 1, in its
#   relative-entropy form): P[C <= a] <= exp(-N KL(a/N || q)) for a <= Nq and
#   P[C >= a] <= exp(-N KL(a/N || q)) for a >= Nq (N = n - 1, q = e^-eps0).
#
# The window is chosen so that these charges are below ~1e-14 of the result: it spans about 17
# standard deviations of C, so the cost is O(sqrt(n)) time and memory (about 3e5 terms at
# n = 10^9) instead of O(n). Windows longer than 4096 use the exact recurrences of the
# Bin(c, 1/2) cdf and pmf between anchors 128 apart (see :func:`_recurrence_cdfs`).
#
# Accuracy (measured against an mpmath evaluation of the same sum, tests/test_accountant_
# shuffle.py): ~1e-13 relative up to n = 10^6, ~1e-11 at n = 10^9 (the float64 limit of the
# binomial pmf and incomplete beta at c ~ 4e8). The weights P[C = c] are Boost's binomial pmf
# (``stats.binom.pmf``) and F the regularised incomplete beta (``special.betainc``, Boost):
# ``stats.binom.logpmf`` (a difference of log-gammas) loses ~1e-9 relative at n = 10^6 and
# ~1e-6 at n = 10^9, and ``special.bdtr`` (Cephes) ~5e-10 at c = 10^6 and 3e-4 at c = 10^7.

#: Upper tail of C left out of the window (charged at D_hi, so relative to the sum).
_UPPER_TAIL = 1e-14
#: numerical_epsilon: lower tail of C left out, as a fraction of the target delta.
_LOWER_TAIL_FRACTION = 1e-14
#: numerical_delta: first lower tail tried, then the charge must stay below this fraction.
_FIRST_LOWER_TAIL = 1e-16
_RELATIVE_CHARGE = 1e-14
#: Tail masses below this are not worth resolving (float64's smallest normal is 2.2e-308).
_SMALLEST_TAIL = 1e-300
#: Relative safety factor on the Chernoff bounds for floating-point rounding of exp(-N KL).
_CHERNOFF_ROUNDING = 1.0 + 1e-9
#: Relative safety margin for floating-point rounding in the sum (cdf differences).
_ROUNDING_MARGIN = 1e-6
#: Beyond this local epsilon e^-eps0 underflows: no clone is possible, no amplification claimed.
_MAX_AMPLIFIED_LOCAL_EPSILON = 700.0
#: Windows longer than this use the anchored recurrences (speed); shorter ones exact cdfs.
_DIRECT_WINDOW = 4096
#: Distance between the anchors of the recurrences (each anchor: one cdf and one pmf).
_ANCHOR_STRIDE = 128


@dataclasses.dataclass(frozen=True)
class _Window:
    """Clone counts lo..hi with their weights, and bounds on the mass left out on each side.

    ``c`` is 1-D (lo..hi) for short windows; for long ones it is the block layout of
    :func:`_blocks` (c = lo + 128 b + j at row j, column b; padded past hi with weight 0).
    """

    c: np.ndarray
    c_plus_1: np.ndarray  # c + 1 as floats
    weights: np.ndarray
    hi: int
    below: float  # >= P[C < lo]
    above: float  # >= P[C > hi]


def _blocks(values: np.ndarray, fill: float) -> np.ndarray:
    """``values`` in blocks of 128 consecutive entries, one block per column (padded)."""
    blocks = -(-values.size // _ANCHOR_STRIDE)
    padded = np.full(blocks * _ANCHOR_STRIDE, fill, dtype=values.dtype)
    padded[:values.size] = values
    return np.ascontiguousarray(padded.reshape(blocks, _ANCHOR_STRIDE).T)


def _chernoff_exponent(a: int, trials: int, q: float, one_minus_q: float) -> float:
    """N KL(a/N || q) = a ln(a / (Nq)) + (N - a) ln((N - a) / (N (1 - q))), N = ``trials``.

    Written with log1p of the relative deviations (no cancellation near the mean); the
    0 ln 0 terms are 0.
    """
    mean = trials * q
    first = 0.0 if a == 0 else a * math.log1p((a - mean) / mean)
    second = (0.0 if a == trials
              else (trials - a) * math.log1p((mean - a) / (trials * one_minus_q)))
    return max(0.0, first + second)


def _first_true(predicate: Any, low: int, high: int) -> int:
    """Smallest integer x in [low, high] with predicate(x), for predicates false then true.

    Returns high + 1 when predicate(high) is false (bisection: O(log(high - low)) calls).
    """
    if not predicate(high):
        return high + 1
    while low < high:
        middle = (low + high) // 2
        if predicate(middle):
            high = middle
        else:
            low = middle + 1
    return low


@functools.lru_cache(maxsize=8)  # ~7 MB each at n = 10^9
def _window(epsilon0: float, n: int, lower_tail: float, upper_tail: float) -> _Window:
    """The clone counts whose left-out tails are at most ``lower_tail`` and ``upper_tail``.

    C ~ Bin(n - 1, e^-eps0). lo - 1 is the largest a <= mean with Chernoff bound on
    P[C <= a] at most ``lower_tail`` (lo = 0 when none), hi + 1 the smallest a >= mean with
    the bound on P[C >= a] at most ``upper_tail`` (hi = n - 1 when none); the bounds at those
    points are returned as ``below`` and ``above`` (0 when nothing is left out).
    """
    trials = n - 1
    q, one_minus_q = math.exp(-epsilon0), -math.expm1(-epsilon0)
    mean = trials * q

    def exponent(a: int) -> float:
        return _chernoff_exponent(a, trials, q, one_minus_q)

    floor_mean, ceil_mean = min(trials, math.floor(mean)), min(trials, math.ceil(mean))
    need_low, need_high = -math.log(lower_tail), -math.log(upper_tail)
    # lo - 1: the largest a <= mean whose bound fits (the exponent decreases up to the mean)
    lo = floor_mean + 1 - _first_true(lambda x: exponent(floor_mean - x) >= need_low, 0,
                                      floor_mean)
    # hi + 1: the smallest b >= mean whose bound fits (the exponent increases above the mean)
    hi = _first_true(lambda b: exponent(b) >= need_high, ceil_mean, trials) - 1
    below = math.exp(-exponent(lo - 1)) * _CHERNOFF_ROUNDING if lo > 0 else 0.0
    above = math.exp(-exponent(hi + 1)) * _CHERNOFF_ROUNDING if hi < trials else 0.0
    c = np.arange(lo, hi + 1, dtype=np.int64)
    weights = stats.binom.pmf(c, trials, q)
    if c.size > _DIRECT_WINDOW:
        size = -(-c.size // _ANCHOR_STRIDE) * _ANCHOR_STRIDE
        c, weights = _blocks(np.arange(lo, lo + size, dtype=np.int64), 0), _blocks(weights, 0.0)
    return _Window(c, c + 1.0, weights, hi, below, above)


def _recurrence_cdfs(c: np.ndarray, c_plus_1: np.ndarray,
                     k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """F_c(k_c) and b_c(k_c) of Bin(c, 1/2) on the block layout of :func:`_blocks`.

    Within a block c is consecutive and k_c = floor((c + 1) t) with t <= 1/2 grows by 0 or 1
    per step. Exact values (Boost's cdf and pmf, 1-5 us each near the median) at the last c of
    every block, and below them, going down in c, the exact identities (one coin fewer)

        b_c(K) = b_{c+1}(K) 2 (c + 1 - K)/(c + 1),   F_c(K) = F_{c+1}(K) + b_c(K)/2,
        b_c(K - 1) = b_{c+1}(K) 2 K/(c + 1),         F_c(K - 1) = F_c(K) - b_c(K),

    written as reversed cumulative products (b) and sums (F) along each block, so that every
    step is vectorised over the whole window. Downwards in c the left-tail probabilities
    F_c(k_c) (k_c <= (c + 1)/2 here) grow, so the rounding errors, which the recurrence carries
    in absolute terms, shrink relative to them: the result agrees with the direct evaluation to
    ~1e-13 relative (tested).
    """
    grown = c_plus_1[:-1]  # c + 1 for the rows 0 .. stride - 2
    top = k[1:]  # K = k_{c+1}
    down = k[1:] - k[:-1]  # 1.0 where k_c = K - 1, else 0.0
    to_top = 2.0 * (grown - top) / grown  # b_c(K) / b_{c+1}(K)
    factor = to_top + down * (2.0 * (2.0 * top - grown) / grown)  # b_c(k_c) / b_{c+1}(K)
    pmf = np.empty(c.shape)
    cdf = np.empty(c.shape)
    pmf[-1] = stats.binom.pmf(k[-1], c[-1], 0.5)
    cdf[-1] = _half_cdf(k[-1], c[-1])
    pmf[:-1] = pmf[-1] * np.cumprod(factor[::-1], axis=0)[::-1]
    # F_c(k_c) - F_{c+1}(K) = +b_c(K)/2 if k_c = K, -b_c(K)/2 if k_c = K - 1
    steps = (0.5 - down) * (pmf[1:] * to_top)
    cdf[:-1] = cdf[-1] + np.cumsum(steps[::-1], axis=0)[::-1]
    return cdf, pmf


def _half_cdf(k: np.ndarray, c: np.ndarray) -> np.ndarray:
    """F_c(k) = P[Bin(c, 1/2) <= k] = I_{1/2}(c - k, k + 1) for integers 0 <= k (1 if k >= c).

    The regularised incomplete beta function (Boost's, accurate to ~1e-14 relative here).
    ``scipy.special.bdtr`` (Cephes) is not used: against mpmath it is off by 5e-10 relative at
    c = 10^6 and by 3e-4 at c = 10^7 near the median.
    """
    inside = k < c
    a = np.where(inside, c - k, 1.0)
    return np.where(inside, special.betainc(a, k + 1.0, 0.5), 1.0)


def _below_and_pmf(c: np.ndarray, c_plus_1: np.ndarray,
                   k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """F_c(k - 1) (0 if k = 0) and b_c(k) of Bin(c, 1/2), elementwise; ``k`` holds integers.

    Direct evaluations (Boost's incomplete beta and pmf) for 1-D (short) windows, the anchored
    recurrences for the block layout.
    """
    if c.ndim == 1:
        cdf_below = np.where(k >= 1, _half_cdf(np.maximum(k - 1.0, 0.0), c), 0.0)
        return cdf_below, stats.binom.pmf(k, c, 0.5)
    cdf_k, pmf_k = _recurrence_cdfs(c, c_plus_1, k)
    cdf_below = np.maximum(cdf_k - pmf_k, 0.0)
    if k[0].min() < 1.0:  # F(-1) = 0 exactly (k is non-decreasing down each column)
        cdf_below[k < 1.0] = 0.0
    return cdf_below, pmf_k


def _clone_terms(epsilon: float, epsilon0: float, c: np.ndarray,
                 c_plus_1: np.ndarray) -> np.ndarray:
    """D_c(eps) for the given c (and c + 1 as floats), 0 <= eps < eps0 (see above).

    Evaluated as (1 + e^-eps0) D_c = (1 - e^(eps - eps0)) b_c(k) - (1 + e^-eps0)(e^eps - 1)
    F(k - 1), the formula above with F(k) = F(k - 1) + b_c(k): its two terms are O(b_c(k)) and
    O(eps F), not O(F), so it cancels F/b_c(k) times less (up to ~sqrt(c)) than the cdf form.
    """
    upper = -math.expm1(epsilon - epsilon0)  # 1 - e^(eps - eps0) > 0
    ratio = upper / (-math.expm1(-epsilon0) * (1.0 + math.exp(epsilon)))  # t_c / (c + 1)
    k = np.minimum(np.floor(c_plus_1 * ratio), c)
    cdf_below, pmf_k = _below_and_pmf(c, c_plus_1, k)
    norm = 1.0 + math.exp(-epsilon0)
    terms = (upper / norm) * pmf_k - math.expm1(epsilon) * cdf_below
    # Each D_c is a sum of positive terms: clip rounding noise below zero (pessimistic).
    return np.maximum(terms, 0.0)


def _one_user_divergence(epsilon: float, epsilon0: float) -> float:
    """D_0(eps) = (e^eps0 - e^eps)/(e^eps0 + 1): binary randomized response (C = 0)."""
    return max(0.0, -math.expm1(epsilon - epsilon0) / (1.0 + math.exp(-epsilon0)))


def _window_sum(epsilon: float, epsilon0: float, window: _Window) -> float:
    """sum_{lo <= c <= hi} P[C = c] D_c(eps) (exact up to rounding)."""
    terms = _clone_terms(epsilon, epsilon0, window.c, window.c_plus_1)
    return float(np.sum(window.weights * terms))


def _tail_charge(epsilon: float, epsilon0: float, window: _Window) -> float:
    """Upper bound on the terms outside the window: P[C < lo] D_0 + P[C > hi] D_hi."""
    charge = 0.0
    if window.below:
        charge += window.below * _one_user_divergence(epsilon, epsilon0)
    if window.above:
        hi = np.array([window.hi], dtype=np.int64)
        charge += window.above * float(_clone_terms(epsilon, epsilon0, hi, hi + 1.0)[0])
    return charge


def _delta_bound(epsilon: float, epsilon0: float, window: _Window) -> float:
    """Upper bound on sum_c P[C = c] D_c(eps): the window exactly, the tails bounded."""
    if epsilon >= epsilon0:
        return 0.0
    return _window_sum(epsilon, epsilon0, window) + _tail_charge(epsilon, epsilon0, window)


#: Largest number of users the numerical bound is evaluated for (its window of ~17 sqrt(n)
#: clone counts takes ~64 MB at 10^12); above it :func:`numerical_epsilon` uses the closed form.
MAX_NUMERICAL_USERS = 10**12


def _check_shuffle_args(epsilon0: float, n: int) -> tuple[float, int]:
    return (_validate.check_epsilon(epsilon0, "epsilon0"),
            _validate.check_int("n", n, minimum=1))


def numerical_delta(epsilon0: float, n: int, epsilon: float) -> float:
    """FMT21 numerical bound: delta of ``n`` shuffled ``epsilon0``-LDP reports at ``epsilon``.

    The hockey-stick divergence D_{e^eps}(P0 || P1) of the FMT21 dominating pair (see the
    derivation in this module): the clone counts around the mean of C summed exactly, the rest
    charged with rigorous tail bounds below 1e-14 of the result (the window is widened until
    the charge fits, or is below 1e-300). An upper bound on the exact divergence up to
    floating-point rounding (~1e-13 relative up to n = 10^6, ~1e-11 at n = 10^9). Cost
    O(sqrt(n)) time and memory: 0.1-0.2 s at n = 10^9.

    Args:
        epsilon0: Pure epsilon of the local randomizer (finite, > 0).
        n: Number of users, each contributing one report (an integer in [1, 10^12]).
        epsilon: Central epsilon (a real number >= 0).

    Returns:
        A delta such that the shuffled output is (epsilon, delta)-DP (replace-one neighbours).
    """
    epsilon0, n = _check_shuffle_args(epsilon0, n)
    if not (isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool)
            and epsilon >= 0):
        raise ValueError(f"epsilon must be a real number >= 0; got {epsilon!r}")
    epsilon = float(epsilon)
    if epsilon >= epsilon0:
        return 0.0  # the local reports alone are epsilon0-DP
    if n > MAX_NUMERICAL_USERS:
        raise ValueError(f"n must be <= {MAX_NUMERICAL_USERS:.0e} for the numerical delta (its "
                         f"window of ~17 sqrt(n) clone counts would not fit in memory); got {n}")
    if epsilon0 > _MAX_AMPLIFIED_LOCAL_EPSILON:
        # C = 0 almost surely (P[C > 0] < n e^-700): the pair is randomized response.
        return min(1.0, _one_user_divergence(epsilon, epsilon0) + n * math.exp(-epsilon0))
    window = _window(epsilon0, n, _FIRST_LOWER_TAIL, _UPPER_TAIL)
    inside = _window_sum(epsilon, epsilon0, window)
    one_user = _one_user_divergence(epsilon, epsilon0)
    if window.below * one_user > _RELATIVE_CHARGE * inside:
        # the sum is dominated by few clones (eps close to eps0): widen the window downwards
        lower_tail = max(_SMALLEST_TAIL, 0.1 * _RELATIVE_CHARGE * inside / one_user)
        if lower_tail < _FIRST_LOWER_TAIL:
            window = _window(epsilon0, n, lower_tail, _UPPER_TAIL)
            inside = _window_sum(epsilon, epsilon0, window)
    return min(1.0, inside + _tail_charge(epsilon, epsilon0, window))


def numerical_epsilon(epsilon0: float, n: int, delta: float) -> float:
    """FMT21 numerical bound: central epsilon of ``n`` shuffled ``epsilon0``-LDP reports.

    The smallest epsilon (to a relative 1e-10, rounded up) at which the FMT21 divergence,
    bounded above as in :func:`numerical_delta`, fits under delta * (1 - 1e-6) (a margin for
    rounding), found by Brent's method on the continuous decreasing curve and then checked, so
    the result is never below the exact epsilon of the FMT21 pair. The clone counts are summed
    over a window whose left-out binomial tails are charged in full (Chernoff-Hoeffding bounds
    of at most 1e-14 delta below the mean and 1e-14 above it, times the largest D_c they can
    hold). Cost O(sqrt(n)) time and memory: about 15 evaluations over the ~17 standard
    deviations of C around its mean (0.25-0.6 s and ~26 MB at n = 10^9, measured on a shared
    2-core machine; the previous O(n) evaluation took ~6 s and 0.9 GB at n = 10^7).

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
    if n > MAX_NUMERICAL_USERS:
        # The window of ~17 sqrt(n) clone counts no longer fits in memory. Both answers below
        # are valid upper bounds: the closed form where Theorem 3.1 applies, else no
        # amplification.
        if epsilon0 <= closed_form_max_local_epsilon(n, delta):
            return min(epsilon0, closed_form_epsilon(epsilon0, n, delta))
        return epsilon0
    return _numerical_epsilon(epsilon0, n, delta)


@functools.lru_cache(maxsize=4096)
def _numerical_epsilon(epsilon0: float, n: int, delta: float) -> float:
    if epsilon0 > _MAX_AMPLIFIED_LOCAL_EPSILON:
        return epsilon0
    window = _window(epsilon0, n, max(_SMALLEST_TAIL, _LOWER_TAIL_FRACTION * delta),
                     _UPPER_TAIL)
    budget = delta * (1.0 - _ROUNDING_MARGIN)  # what the bound must fit under

    def excess(eps: float) -> float:
        return _delta_bound(eps, epsilon0, window) - budget

    if excess(0.0) <= 0.0:
        return 0.0
    hi = epsilon0  # excess(eps0) = -budget < 0
    if epsilon0 <= closed_form_max_local_epsilon(n, delta):
        guess = closed_form_epsilon(epsilon0, n, delta)  # FMT21 Thm 3.1 bounds the same curve
        if guess < hi and excess(guess) <= 0.0:
            hi = guess
    return _smallest_fitting(excess, hi)


def _smallest_fitting(excess: Any, hi: float) -> float:
    """Root of the decreasing ``excess`` on [0, hi] to 1e-10 hi, rounded up and checked."""
    tol = 1e-10 * hi
    root = optimize.brentq(excess, 0.0, hi, xtol=tol, rtol=1e-12)
    step = tol
    result = min(hi, root + tol)
    while excess(result) > 0.0:  # make sure the returned point satisfies the target
        result = min(hi, result + step)
        step *= 2.0
    return result


# =========================================================================== accountant
