"""Exact, vectorised samplers for discrete noise (no floating point in the sampling path).

Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020
(arXiv:2004.00010), Algorithms 1-3, vectorised over numpy arrays: every random decision is a
comparison of uniform *integers* drawn by ``Generator.integers`` against integer thresholds, so
the output distribution is exactly the stated one (up to the quality of the bit generator).
Rejection loops run on the shrinking set of still-pending entries.

Parameters are rationals: the discrete Laplace scale is ``scale_num / scale_den`` and the
discrete Gaussian variance is ``var_num / var_den``. :func:`rational_at_least` turns a float into
such a rational *rounded up*, so the noise actually used is never smaller than requested.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from dpkd_audit import _validate

__all__ = [
    "bernoulli_exp",
    "coin_probability",
    "discrete_gaussian",
    "discrete_laplace",
    "log_ratio_upper",
    "rational_at_least",
]

_INT64_SAFE = 1 << 62
# Largest discrete Gaussian sigma the int64 path supports: 2 * var_num * var_den * t^2 < 2^62.
MAX_DISCRETE_GAUSSIAN_SIGMA = 30_000.0


def coin_probability(threshold: float) -> Fraction:
    """Exact probability of ``rng.random() < threshold`` for a numpy ``Generator``.

    ``Generator.random()`` returns k 2^-53 with k uniform on {0, ..., 2^53 - 1} (the top 53 bits
    of a 64-bit draw), so the probability is ceil(threshold 2^53) / 2^53 for threshold in
    [0, 1]: the threshold rounded *up* to the 2^-53 grid. The floating-point mechanisms of the
    package (randomized responses, Collision) verify their claims against these exact values.
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be a real number in [0, 1]; got {threshold!r}")
    return Fraction(math.ceil(Fraction(threshold) * (1 << 53)), 1 << 53)


def log_ratio_upper(numerator: Fraction, denominator: Fraction) -> float:
    """A float >= ln(numerator / denominator) for positive rationals.

    Computed as log1p((a - b) / b) with a = n1 d2 and b = d1 n2 exact integers (no cancellation
    for ratios near 1), in mpmath at 50 significant digits, then rounded up.
    """
    import mpmath  # local: only the constructors of the float-coin mechanisms need it

    a = numerator.numerator * denominator.denominator
    b = numerator.denominator * denominator.numerator
    with mpmath.workdps(50):
        value = mpmath.log1p(mpmath.mpf(a - b) / mpmath.mpf(b))
        out = float(value)
        return math.nextafter(out, math.inf) if out < value else out


def rational_at_least(value: float, *, max_denominator: int = 1 << 20,
                      name: str = "value") -> Fraction:
    """The simplest rational >= ``value`` with denominator <= ``max_denominator`` (or 2^20 grid).

    Note: ``value`` is a float; if it is itself a rounded quotient (such as ``Delta / epsilon``),
    the exact quotient may lie half an ulp above it. Callers that need the bound against the
    exact quotient compare with ``Fraction(Delta) / Fraction(epsilon)`` afterwards, as
    :mod:`dpkd_audit.mechanisms.discrete` does.

    Args:
        value: A finite real number > 0.
        max_denominator: Bound on the denominator of the approximation.
        name: Parameter name for error messages.
    """
    value = _validate.check_positive(name, value)
    frac = Fraction(value).limit_denominator(max_denominator)
    if frac < Fraction(value):
        frac = Fraction(math.ceil(Fraction(value) * max_denominator), max_denominator)
    return frac


def _as_int_array(x: int | np.ndarray, size: int) -> np.ndarray:
    arr = np.asarray(x, dtype=np.int64)
    return np.broadcast_to(arr, (size,)).copy() if arr.ndim == 0 else arr.astype(np.int64)


def _bernoulli_exp_le1(num: np.ndarray, den: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for 0 <= num <= den (CKS 2020, Algorithm 1, first case).

    K <- 1; loop: A ~ Bernoulli(gamma/K); stop at A = 0, else K <- K+1; return [K odd].
    Bernoulli(gamma/K) = Bernoulli(num/den) * Bernoulli(1/K), two integer comparisons.
    """
    size = num.shape[0]
    k = np.ones(size, dtype=np.int64)
    active = np.arange(size)
    # Every still-active entry has K = the round number, and a common denominator is drawn
    # with a scalar bound: numpy draws the same integers from a scalar bound as from an array
    # of that bound (one bounded draw per entry, in order), about 3x faster.
    common = size > 0 and int(den.min()) == int(den.max())
    rounds = 1
    while active.size:
        bound = int(den[0]) if common else den[active]
        a = ((rng.integers(0, bound, size=active.size) < num[active])
             & (rng.integers(0, rounds, size=active.size) == 0))
        k[active[a]] += 1
        active = active[a]
        rounds += 1
    return (k % 2) == 1


def bernoulli_exp(num: int | np.ndarray, den: int | np.ndarray, size: int | None = None, *,
                  rng: np.random.Generator) -> np.ndarray:
    """Exact Bernoulli(exp(-num/den)) samples for integers num >= 0, den >= 1 (int64 arrays).

    CKS 2020, Algorithm 1: for gamma > 1, the product of floor(gamma) Bernoulli(exp(-1)) draws
    and one Bernoulli(exp(-(gamma - floor(gamma)))) draw; each factor uses the gamma <= 1 loop.
    """
    num_arr = np.asarray(num, dtype=np.int64)
    den_arr = np.asarray(den, dtype=np.int64)
    if size is None:
        size = int(np.broadcast(num_arr, den_arr).size)
    num_arr = _as_int_array(num_arr, size)
    den_arr = _as_int_array(den_arr, size)
    if np.any(num_arr < 0) or np.any(den_arr < 1):
        raise ValueError("bernoulli_exp needs num >= 0 and den >= 1; got min num "
                         f"{num_arr.min() if num_arr.size else None}, min den "
                         f"{den_arr.min() if den_arr.size else None}")
    whole, rem = np.divmod(num_arr, den_arr)
    return _bernoulli_exp_split(whole, rem, den_arr, rng)


def _bernoulli_exp_split(whole: np.ndarray, rem: np.ndarray, den: np.ndarray,
                         rng: np.random.Generator) -> np.ndarray:
    """Bernoulli(exp(-(whole + rem/den))) with 0 <= rem < den, as a product of exact factors."""
    out = _bernoulli_exp_le1(rem, den, rng)
    # floor(gamma) factors of Bernoulli(exp(-1)); the surviving set shrinks by e each round.
    pending = np.flatnonzero(out & (whole > 0))
    done = np.zeros(out.shape[0], dtype=np.int64)
    ones = np.ones(out.shape[0], dtype=np.int64)
    while pending.size:
        b = _bernoulli_exp_le1(ones[pending], ones[pending], rng)
        out[pending[~b]] = False
        done[pending] += 1
        pending = pending[b & (done[pending] < whole[pending])]
    return out


def discrete_laplace(scale_num: int, scale_den: int, size: int, *,
                     rng: np.random.Generator) -> np.ndarray:
    """Exact discrete Laplace samples: P[X = x] proportional to exp(-|x| * scale_den/scale_num).

    CKS 2020, Algorithm 2 (which samples Lap_Z(t/s)) with t = scale_num, s = scale_den:
    U ~ Unif{0..t-1}; reject unless Bernoulli(exp(-U/t)); V ~ Geometric via Bernoulli(exp(-1));
    X = U + tV; Y = floor(X/s); B ~ Bernoulli(1/2); reject if B = 1 and Y = 0; return (1-2B)Y.
    """
    t = _validate.check_int("scale_num", scale_num, minimum=1)
    s = _validate.check_int("scale_den", scale_den, minimum=1)
    size = _validate.check_int("size", size, minimum=0)
    out = np.zeros(size, dtype=np.int64)
    pending = np.arange(size)
    while pending.size:
        m = pending.size
        u = rng.integers(0, t, size=m) if t > 1 else np.zeros(m, dtype=np.int64)
        d = bernoulli_exp(u, t, m, rng=rng)
        v = np.zeros(m, dtype=np.int64)
        going = np.flatnonzero(d)
        while going.size:  # V = number of successes before the first failure of Bern(e^-1)
            a = bernoulli_exp(1, 1, going.size, rng=rng)
            v[going[a]] += 1
            going = going[a]
        y = (u + t * v) // s
        b = rng.integers(0, 2, size=m)
        ok = d & ~((b == 1) & (y == 0))
        out[pending[ok]] = ((1 - 2 * b) * y)[ok]
        pending = pending[~ok]
    return out


def discrete_gaussian(var_num: int, var_den: int, size: int, *,
                      rng: np.random.Generator) -> np.ndarray:
    """Exact discrete Gaussian samples N_Z(0, sigma^2) with sigma^2 = var_num / var_den.

    CKS 2020, Algorithm 3: t = floor(sigma) + 1; Y ~ discrete Laplace of scale t; accept with
    probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)). With sigma^2 = p/q the exponent is the
    rational (q t |Y| - p)^2 / (2 p q t^2), evaluated in exact integer arithmetic (Python
    integers for the rare entries whose square would not fit in int64).

    Speed depends on the rational: keep q small enough that q t |Y| stays well inside int64
    (``DiscreteGaussian`` picks q <= 2^31 / (41 (sigma + 1)^2)); a large denominator sends many
    proposals to the slow Python-integer path or exceeds the int64 bound on 2 p q t^2.
    """
    p = _validate.check_int("var_num", var_num, minimum=1)
    q = _validate.check_int("var_den", var_den, minimum=1)
    size = _validate.check_int("size", size, minimum=0)
    t = math.isqrt(p // q) + 1  # floor(sigma) + 1, exact
    while (t - 1) ** 2 * q > p:  # isqrt of the integer part can overshoot only by rounding
        t -= 1
    den = 2 * p * q * t * t
    if den >= _INT64_SAFE:
        raise ValueError(
            f"discrete Gaussian variance {p}/{q} is too large for the exact int64 sampler "
            f"(sigma must be <= about {MAX_DISCRETE_GAUSSIAN_SIGMA:g})")
    out = np.zeros(size, dtype=np.int64)
    pending = np.arange(size)
    qt = q * t
    while pending.size:
        m = pending.size
        y = discrete_laplace(t, 1, m, rng=rng)
        a = np.abs(y)
        small = a <= (math.isqrt(_INT64_SAFE) - p) // qt
        whole = np.empty(m, dtype=np.int64)
        rem = np.empty(m, dtype=np.int64)
        diff = qt * a[small] - p
        whole[small], rem[small] = np.divmod(diff * diff, den)
        for i in np.flatnonzero(~small):  # exact Python-int path for huge |Y| (very rare)
            w, r = divmod((qt * int(a[i]) - p) ** 2, den)
            whole[i], rem[i] = min(w, _INT64_SAFE), r
        c = _bernoulli_exp_split(whole, rem, np.full(m, den, dtype=np.int64), rng)
        out[pending[c]] = y[c]
        pending = pending[~c]
    return out
