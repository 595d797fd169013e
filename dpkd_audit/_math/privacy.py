"""Closed-form privacy curves shared by events, mechanisms and accountants.

Kept free of torch and of the package's higher layers so that every layer can use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np
from scipy import special

if TYPE_CHECKING:  # imported where used: only the exact (checking) evaluations need mpmath
    import mpmath

__all__ = [
    "analytic_gaussian_delta",
    "analytic_gaussian_delta_exact",
    "analytic_gaussian_epsilon",
    "calibrate_analytic_gaussian",
    "calibrate_discrete_gaussian",
    "calibrate_zcdp_rho",
    "discrete_gaussian_delta",
    "discrete_gaussian_pmf",
    "smallest_satisfying",
    "zcdp_delta",
]


_SQRT_HALF = math.sqrt(0.5)
_SQRT_HALF_PI = math.sqrt(0.5 * math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
#: Gauss-Legendre rule (nodes, weights on [-1, 1]) for the short integrals below.
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(24)


def _mills(t: np.ndarray | float) -> np.ndarray:
    """Mills ratio R(t) = Phi(-t) / phi(t) = sqrt(pi/2) erfcx(t / sqrt 2), for t >= 0.

    ``scipy.special.erfcx`` is accurate to a few ulps over the whole range (no underflow).
    """
    return _SQRT_HALF_PI * special.erfcx(np.asarray(t, dtype=np.float64) * _SQRT_HALF)


def _mills_difference(u: float, h: float) -> float:
    """R(u) - R(u + h) for u >= 0, h > 0, without cancellation.

    R'(t) = t R(t) - 1 < 0, so R(u) - R(u + h) = integral_u^(u+h) (1 - t R(t)) dt. For h >= 1 the
    direct difference loses at most a factor ~(u + 1) of relative accuracy; below, the integral
    of the smooth positive integrand is taken by a 24-point Gauss-Legendre rule (its error on an
    interval of length < 1 is far below double rounding).
    """
    if h >= 1.0:
        return float(_mills(u) - _mills(u + h))
    t = u + 0.5 * h * (_GL_NODES + 1.0)
    g = 1.0 - t * _mills(t)
    return float(0.5 * h * np.dot(_GL_WEIGHTS, g))


def analytic_gaussian_delta(epsilon: float, sigma: float, sensitivity: float = 1.0) -> float:
    """Exact delta(epsilon) of the Gaussian mechanism N(0, sigma^2) with L2 sensitivity Delta.

    Balle and Wang, "Improving the Gaussian mechanism for differential privacy", ICML 2018,
    Theorem 8: delta = Phi(a - b) - e^eps Phi(-a - b), with a = Delta/(2 sigma) and
    b = eps sigma/Delta. Evaluated without overflow or cancellation (relative error ~1e-12 over
    the whole range, checked against mpmath by the tests): as eps = 2ab,
    e^eps phi(a + b) = phi(a - b), so with x = a - b, y = a + b and the Mills ratio R,

    - x < 0: delta = phi(x) (R(-x) - R(y)), the difference of Mills ratios taken as an integral
      when y + x = 2a is small (:func:`_mills_difference`);
    - x >= 0: delta = (erf(x/sqrt 2) + erf(y/sqrt 2))/2 - (e^eps - 1) Phi(-y), the last term as
      ``expm1(eps) Phi(-y)`` for eps < 1 and as phi(x) R(y) - Phi(-y) above.

    (The log-space form log Phi(a-b) vs eps + log Phi(-a-b) cancels catastrophically for tiny
    and for huge eps: e.g. it returned 0 for eps = 2^62 where the exact delta is 0.5.)
    """
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    x, y = a - b, a + b
    if x < 0.0:
        u = -x
        if u > 40.0:  # phi(40) < 1e-347: delta underflows
            return 0.0
        phi = _INV_SQRT_2PI * math.exp(-0.5 * u * u)
        return max(0.0, phi * _mills_difference(u, 2.0 * a))  # y - u = 2a, taken exactly
    first = 0.5 * (math.erf(x * _SQRT_HALF) + math.erf(y * _SQRT_HALF))
    if epsilon < 1.0:
        second = math.expm1(epsilon) * float(special.ndtr(-y))
    else:
        second = (_INV_SQRT_2PI * math.exp(-0.5 * x * x) * float(_mills(y))
                  - float(special.ndtr(-y)))
    return min(1.0, max(0.0, first - second))


def _mp_ncdf(x: mpmath.mpf) -> mpmath.mpf:
    """Phi(x) in mpmath; for |x| > 1e50 through the asymptotic Mills series.

    ``mpmath.ncdf`` overflows a float inside its series test for arguments beyond ~1e150;
    there R(t) = 1/t - 1/t^3 + 3/t^5 - 15/t^7 has relative error < 105/t^8 < 1e-398
    (Abramowitz-Stegun 7.1.23).
    """
    import mpmath

    if abs(x) <= mpmath.mpf(10) ** 50:
        return mpmath.ncdf(x)
    t = abs(x)
    mills = 1 / t - 1 / t**3 + 3 / t**5 - 15 / t**7
    tail = mpmath.npdf(t) * mills
    return tail if x < 0 else 1 - tail


def analytic_gaussian_delta_exact(epsilon: float, sigma: float,
                                  sensitivity: float = 1.0) -> float:
    """Balle-Wang Theorem 8 evaluated in arbitrary precision (mpmath), rounded *up* to a float.

    An independent check of :func:`analytic_gaussian_delta`: the textbook form
    Phi(a - b) - e^eps Phi(-a - b) on the exact binary values of the arguments, at increasing
    precision (50 to 1600 digits) until two successive precisions agree to 1e-20 relative (the
    cancellation of the two terms costs as many digits as their ratio to delta has).

    Returns:
        A float >= the exact delta (the smallest subnormal when delta < Phi(a - b) < 1e-320).
    """
    import mpmath

    if sensitivity / (2.0 * sigma) - epsilon * sigma / sensitivity < -38.0:
        # delta <= Phi(a - b) < Phi(-37.9) < 1e-313 (the a - b computed in floats is within
        # 1e-15 relative of the exact one): no double can tell it from 0.
        return 5e-324
    previous = None
    for dps in (50, 100, 200, 400, 800, 1600):
        with mpmath.workdps(dps):
            eps = mpmath.mpf(epsilon)
            sig = mpmath.mpf(sigma)
            sens = mpmath.mpf(sensitivity)
            a = sens / (2 * sig)
            b = eps * sig / sens
            value = _mp_ncdf(a - b) - mpmath.exp(eps) * _mp_ncdf(-a - b)
            # The exact delta is > 0 for every finite sigma: a value <= 0 is cancellation.
            if (previous is not None and value > 0
                    and abs(value - previous) <= mpmath.mpf("1e-20") * value):
                out = float(value)
                return min(1.0, math.nextafter(out, math.inf) if out < value else out)
            previous = value
    raise ValueError(  # pragma: no cover - 1600 digits cover every double argument
        f"could not evaluate the Gaussian delta at epsilon={epsilon!r}, sigma={sigma!r}")


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


def analytic_gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """Exact epsilon of N(0, sigma^2) vs N(Delta, sigma^2) at ``delta`` (Balle-Wang 2018, Thm 8).

    Bisection on the exact curve (:func:`analytic_gaussian_delta`); the upper end of the final
    bracket is returned, so the curve at the returned epsilon is <= ``delta`` (never below the
    exact epsilon). 0 when the curve is already <= ``delta`` at epsilon 0; ``inf`` when
    ``delta`` is 0 or the epsilon exceeds the floating-point range.
    """
    if delta <= 0:
        return math.inf
    if analytic_gaussian_delta(0.0, sigma, sensitivity) <= delta:
        return 0.0
    hi = 1.0
    while analytic_gaussian_delta(hi, sigma, sensitivity) > delta:
        hi *= 2.0
        if hi > 1e300:
            return math.inf
    return smallest_satisfying(lambda e: analytic_gaussian_delta(e, sigma, sensitivity), delta,
                               0.0, hi, rel_tol=1e-13)


#: Sigmas (relative to the sensitivity) searched by :func:`calibrate_analytic_gaussian`.
_MAX_SIGMA_SEARCH = 1e300


def calibrate_analytic_gaussian(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma for which N(0, sigma^2) is (epsilon, delta)-DP (Balle-Wang 2018, Alg. 1).

    Solved by bisection on the exact curve of Theorem 8 (:func:`analytic_gaussian_delta`, to
    1e-12 relative), then *verified* in arbitrary precision
    (:func:`analytic_gaussian_delta_exact`) and, if the float bisection landed a hair short,
    increased by relative steps of 2^-40, 2^-39, ... until the exact curve meets the target.
    The returned sigma therefore always satisfies delta(epsilon, sigma) <= delta exactly.

    Raises:
        ValueError: If no sigma up to 1e300 * sensitivity meets the target (epsilon or delta
            far too small).
    """
    def curve(s: float) -> float:
        return analytic_gaussian_delta(epsilon, s, sensitivity)

    hi = sensitivity
    while curve(hi) > delta:
        hi *= 2.0
        if not hi <= _MAX_SIGMA_SEARCH * sensitivity:
            raise ValueError(
                f"epsilon={epsilon!r} and delta={delta!r} need a Gaussian sigma above "
                f"{_MAX_SIGMA_SEARCH:g} x sensitivity; increase epsilon or delta")
    sigma = smallest_satisfying(curve, delta, max(1e-12 * sensitivity, 1e-300), hi)
    step = 2.0**-40
    for _ in range(48):
        if analytic_gaussian_delta_exact(epsilon, sigma, sensitivity) <= delta:
            return sigma
        sigma *= 1.0 + step
        step *= 2.0
    raise ValueError(  # pragma: no cover - the float curve is accurate to ~1e-12
        f"could not calibrate a Gaussian sigma meeting epsilon={epsilon!r}, delta={delta!r} "
        f"exactly")


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


#: Largest sigma :func:`discrete_gaussian_delta` evaluates (its grid has 80 sigma points).
_MAX_CHECKED_SIGMA = 1e6
#: Unit roundoff of float64.
_UNIT = 2.0**-53
#: Upper bound on the discrete Gaussian mass beyond 40 sigma + 2 (e^-800 * sqrt(2 pi) sigma
#: for sigma <= 10^6, over the normaliser >= 1): added to every delta, so the truncation is safe.
_TRUNCATED_MASS = 1e-330


def discrete_gaussian_delta(epsilon: float, sigma: float, sensitivity: int = 1, *,
                            variance: Fraction | None = None) -> float:
    """Certified upper bound on delta(epsilon) of the discrete Gaussian mechanism.

    Canonne-Kamath-Steinke 2020, Theorem 7: for X ~ N_Z(0, sigma^2) and integer sensitivity
    Delta, delta = P[X > eps sigma^2/Delta - Delta/2] - e^eps P[X > eps sigma^2/Delta + Delta/2].

    Evaluated over the pmf on [-40 sigma - 2, 40 sigma + 2] in log space (e^eps times a tail is
    ``exp(eps + log pmf)``, so no overflow for any eps; an overflowing term means delta = 0),
    with every floating-point error bounded and charged *against* the claim:

    - each term exp(arg) has relative error <= r = 2^-50 (16 + 2 log2(n) + max|arg|) (the
      argument's absolute error, from x^2/(2 sigma^2), the log-sum-exp normaliser over n points
      and the addition of eps, is below that), so the result is A (1 + r) - B (1 - r);
    - the thresholds (the first integers above eps sigma^2/Delta -+ Delta/2) are computed in
      exact rational arithmetic, from ``variance`` when given (the sampler's exact rational
      sigma^2) and from sigma^2 of the double ``sigma`` otherwise;
    - the tails are summed pairwise (relative error < (32 + log2 n) u, added to r);
    - the mass beyond the grid (< 1e-330) is added.

    The result is therefore >= the exact delta, and within ~1e-12 relative of it in the usual
    range; the tests compare it with an mpmath evaluation.
    """
    if not 0.0 < sigma <= _MAX_CHECKED_SIGMA:
        raise ValueError(f"sigma must be a real number in (0, {_MAX_CHECKED_SIGMA:g}] for the "
                         f"discrete Gaussian curve (a grid of 80 sigma points); got {sigma!r}")
    half = math.ceil(40 * sigma) + 2
    log_norm = _discrete_gaussian_log_norm(sigma, half)
    var = Fraction(sigma) ** 2 if variance is None else Fraction(variance)
    center = Fraction(epsilon) * var / sensitivity
    half_shift = Fraction(sensitivity, 2)
    k1 = math.floor(center - half_shift) + 1  # X > t1  <=>  X >= k1 (exactly)
    k2 = math.floor(center + half_shift) + 1
    # Only the tails x >= k are summed (up to the grid's end): sums of positive terms by numpy's
    # pairwise summation, relative error below (32 + log2 n) u (blocks of 128 summed by 8
    # accumulators, then halving), added to r.
    inv = 1.0 / (2.0 * sigma * sigma)

    def tail(k: int, shift: float) -> float:
        x = np.arange(max(k, -half), half + 1, dtype=np.float64)
        with np.errstate(over="ignore"):
            return float(np.sum(np.exp(shift - x * x * inv - log_norm)))

    first, second = tail(k1, 0.0), tail(k2, epsilon)
    # the largest |log pmf| on the grid (at its ends), plus epsilon: bounds every argument
    worst_arg = half * half * inv + abs(log_norm) + abs(epsilon)
    log_n = math.log2(2 * half + 1)
    r = 4.0 * _UNIT * (16.0 + 2.0 * log_n + worst_arg) + _UNIT * (32.0 + log_n)
    if second * (1.0 - r) >= first * (1.0 + r):
        return 0.0
    return min(1.0, first * (1.0 + r) - second * (1.0 - r) + _TRUNCATED_MASS)


def _discrete_gaussian_log_norm(sigma: float, half: int) -> float:
    """The log of sum_x exp(-x^2 / (2 sigma^2)) over the integers (the grid for small sigma).

    sigma >= 8: Poisson summation (the Jacobi theta identity), sum_x e^{-x^2/(2 sigma^2)} =
    sqrt(2 pi) sigma sum_k e^{-2 pi^2 sigma^2 k^2}, whose k != 0 terms are below e^{-1263}: the
    normaliser is sqrt(2 pi) sigma to within far less than an ulp, with no sum over 80 sigma
    points (the mass beyond the grid, < 1e-330, is charged separately). Smaller sigma: the plain
    sum over the grid (largest term exp(0) = 1, so no overflow; (log2 n) u relative).
    """
    if sigma >= 8.0:
        return math.log(math.sqrt(2.0 * math.pi) * sigma)
    grid = np.arange(-half, half + 1, dtype=np.float64)
    return math.log(float(np.sum(np.exp(-(grid * grid) / (2.0 * sigma * sigma)))))


def calibrate_discrete_gaussian(epsilon: float, delta: float, sensitivity: int = 1,
                                *, max_sigma: float = 1e6) -> float:
    """Smallest sigma (to 1e-9 relative) making N_Z(0, sigma^2) (epsilon, delta)-DP (CKS Thm 7).

    Bisection on the certified curve :func:`discrete_gaussian_delta`, so the returned sigma
    meets the target.

    Raises:
        ValueError: If no sigma up to ``max_sigma`` meets the target.
    """
    def curve(s: float) -> float:
        return discrete_gaussian_delta(epsilon, s, sensitivity)

    max_sigma = min(max_sigma, _MAX_CHECKED_SIGMA / 2.0)
    hi = min(float(sensitivity), max_sigma)
    while curve(hi) > delta:
        hi *= 2.0
        if hi > 2.0 * max_sigma:
            raise ValueError(
                f"epsilon={epsilon!r} and delta={delta!r} with sensitivity={sensitivity} need a "
                f"discrete Gaussian sigma above {max_sigma:g}; increase epsilon or delta")
    # discrete_gaussian_delta is not monotone in sigma (lattice effects of up to a few percent
    # have been measured); bisection still returns a point that satisfies the target, which is
    # what soundness needs, and callers that round sigma afterwards must re-check the curve.
    return smallest_satisfying(curve, delta, hi / 2.0 if hi > sensitivity else 1e-3, hi,
                               rel_tol=1e-9)


def _zcdp_log_delta(epsilon: float, rho: float, t: float) -> float:
    """Log delta at order 1 + t, plus a bound on its floating-point error (charged against it)."""
    a = 1.0 + t
    # log(1 - 1/a) = -log1p(1/t): no cancellation (a few ulps relative, amplified by t)
    parts = (t * a * rho, t * epsilon, -t * math.log1p(1.0 / t), math.log1p(t))
    value = parts[0] - parts[1] + parts[2] - parts[3]
    return value + 8.0 * _UNIT * (sum(abs(x) for x in parts) + 1.0)


def zcdp_delta(epsilon: float, rho: float) -> float:
    """Certified upper bound on delta(epsilon) of a rho-zCDP mechanism.

    Canonne-Kamath-Steinke 2020, Proposition 12 (= Balle et al. AISTATS 2020, Theorem 21)
    applied to the Renyi curve alpha rho of rho-zCDP (Bun-Steinke 2016, Definition 1.1): for
    every alpha > 1, delta <= exp(f(alpha)) with f(alpha) = (alpha - 1)(alpha rho - epsilon) +
    (alpha - 1) log(1 - 1/alpha) - log(alpha). f'(alpha) = (2 alpha - 1) rho - epsilon +
    log(1 - 1/alpha) increases (f is convex), so its root, found by bisection on log(alpha - 1),
    is the best order; every alpha gives an upper bound, so an inexact root only loosens it.
    The float evaluation's error is bounded and added (relative ~1e-13).

    Args:
        epsilon: Target epsilon (>= 0).
        rho: The zCDP parameter (>= 0).
    """
    if rho == 0.0:
        return 0.0

    def slope(u: float) -> float:  # f'(1 + e^u)
        t = math.exp(u)
        return (2.0 * t + 1.0) * rho - epsilon - math.log1p(math.exp(-u))

    lo, hi = -300.0, 300.0
    if slope(hi) <= 0.0:  # rho < epsilon / 1e130: the bound at alpha = 1 + e^300
        lo = hi
    for _ in range(200):
        if hi - lo <= 1e-13 * max(1.0, abs(lo)):
            break
        mid = 0.5 * (lo + hi)
        if slope(mid) < 0.0:
            lo = mid
        else:
            hi = mid
    best = min(_zcdp_log_delta(epsilon, rho, math.exp(lo)),
               _zcdp_log_delta(epsilon, rho, math.exp(hi)))
    return math.exp(best) if best < 0.0 else 1.0


def calibrate_zcdp_rho(epsilon: float, delta: float) -> float:
    """Largest rho (to 1e-12 relative, from below) whose :func:`zcdp_delta` meets the target.

    Bisection on log rho; zcdp_delta increases with rho at every order, so the returned rho
    satisfies ``zcdp_delta(epsilon, rho) <= delta``.

    Raises:
        ValueError: If epsilon or delta is outside (0, inf) x (0, 1).
    """
    if not (math.isfinite(epsilon) and epsilon > 0 and 0.0 < delta < 1.0):
        raise ValueError(f"zCDP calibration needs epsilon > 0 and delta in (0, 1); got "
                         f"epsilon={epsilon!r}, delta={delta!r}")
    # Bun-Steinke 2016, Prop. 1.3: rho-zCDP gives (rho + 2 sqrt(rho log(1/delta)), delta),
    # and the conversion above is never worse: its rho is a valid lower end.
    log_inv = math.log(1.0 / delta)
    lo = (math.sqrt(log_inv + epsilon) - math.sqrt(log_inv)) ** 2 * (1.0 - 1e-12)
    while zcdp_delta(epsilon, lo) > delta:  # pragma: no cover - Prop. 1.3 guarantees it
        lo *= 0.5
    hi = 2.0 * lo
    while zcdp_delta(epsilon, hi) <= delta:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * lo:
        mid = math.sqrt(lo * hi) if hi > 2 * lo else 0.5 * (lo + hi)
        if zcdp_delta(epsilon, mid) <= delta:
            lo = mid
        else:
            hi = mid
    return lo
