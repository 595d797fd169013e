"""Exact samplers (CKS 2020, Algorithms 1-3) against their exact pmfs.

Every statistical test below uses a fixed seed, so it is deterministic; the stated false-failure
rate is the probability, over the choice of seed, that a *correct* sampler fails it. Chi-square
tests pool tail bins so that every expected count is >= 5 (the usual validity rule) and reject at
p < ALPHA = 1e-4; each hypothesis-driven test runs a handful of fixed (derandomized) examples, so
its false-failure rate is at most (number of examples) x 1e-4. The power tests at the end show
that the same helpers reject a 5% error in the scale, so the tests can fail.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from dpkd_audit._math.privacy import discrete_gaussian_pmf
from dpkd_audit.mechanisms import samplers

ALPHA = 1e-4
N = 200_000
FEW = settings(derandomize=True, max_examples=8, deadline=None,
               suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------- helpers
def dlap_pmf(scale: float, grid: np.ndarray) -> np.ndarray:
    """Discrete Laplace pmf exp(-|x|/b) tanh(1/(2b)) (CKS 2020, Def. 2; GRS 2012)."""
    return np.exp(-np.abs(grid) / scale) * math.tanh(1.0 / (2.0 * scale))


def chi2_pvalue(samples: np.ndarray, grid: np.ndarray, pmf: np.ndarray) -> float:
    """Chi-square goodness-of-fit p-value of integer samples against a unimodal pmf on ``grid``.

    ``grid`` is a run of consecutive integers carrying all but a negligible mass (< 1e-12).
    Bins are the single values whose expected count is >= 5; everything to their left
    (right) is pooled into the first (last) of them, so every bin expects >= 5.
    """
    samples = np.asarray(samples).ravel()
    n = samples.size
    assert abs(pmf.sum() - 1.0) < 1e-12, "grid must carry all the mass"
    big = np.flatnonzero(n * pmf >= 5)
    lo, hi = int(big[0]), int(big[-1])
    assert np.all(n * pmf[lo:hi + 1] >= 5), "pmf must be unimodal"
    expected = pmf[lo:hi + 1].copy()
    expected[0] += pmf[:lo].sum()
    expected[-1] += pmf[hi + 1:].sum()
    expected *= n / expected.sum()
    clipped = np.clip(samples, grid[lo], grid[hi]) - grid[lo]
    observed = np.bincount(clipped, minlength=hi - lo + 1)
    if observed.size == 1:  # a point mass: nothing to test beyond equality
        return 1.0 if observed[0] == n else 0.0
    return float(stats.chisquare(observed, expected).pvalue)


def dlap_pvalue(samples: np.ndarray, scale: float) -> float:
    half = math.ceil(40 * scale) + 5  # tail mass beyond: < e^-40
    grid = np.arange(-half, half + 1)
    return chi2_pvalue(samples, grid, dlap_pmf(scale, grid))


def dgauss_pvalue(samples: np.ndarray, sigma: float) -> float:
    half = math.ceil(10 * sigma) + 5  # tail mass beyond: < e^-50
    grid = np.arange(-half, half + 1)
    return chi2_pvalue(samples, grid, discrete_gaussian_pmf(sigma, grid))


# ----------------------------------------------------------------------------- rational_at_least
@FEW
@given(value=st.floats(min_value=5e-324, max_value=1e300, allow_nan=False, allow_infinity=False),
       max_den=st.integers(min_value=1, max_value=1 << 40))
def test_rational_at_least_never_rounds_down(value, max_den):
    frac = samplers.rational_at_least(value, max_denominator=max_den)
    assert frac >= Fraction(value)  # exact comparison, no floating point
    assert frac.denominator <= max_den
    assert frac - Fraction(value) <= Fraction(1, max_den)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(value=st.floats(min_value=1e-9, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_rational_at_least_default_denominator(value):
    frac = samplers.rational_at_least(value)
    assert Fraction(value) <= frac <= Fraction(value) + Fraction(1, 1 << 20)


@pytest.mark.parametrize("value, expected", [(1 / 3, None), (0.1, None), (7 / 3, None),
                                             (2.0, Fraction(2)), (0.5, Fraction(1, 2))])
def test_rational_at_least_examples(value, expected):
    frac = samplers.rational_at_least(value)
    assert frac >= Fraction(value)
    if expected is not None:
        assert frac == expected


@pytest.mark.parametrize("bad", [0, -1, -0.5, math.nan, math.inf, "a", True, None])
def test_rational_at_least_rejects(bad):
    with pytest.raises(ValueError, match="value"):
        samplers.rational_at_least(bad)


# ----------------------------------------------------------------------------- discrete Laplace
# Each parametrized case: chi-square at ALPHA with a fixed seed (false-failure rate 1e-4 each).
@pytest.mark.parametrize("num, den", [(1, 1), (7, 3), (40, 1), (1, 4), (3, 7), (1, 10), (10, 1)])
def test_discrete_laplace_matches_exact_pmf(num, den):
    rng = np.random.default_rng(1000 + 37 * num + den)
    x = samplers.discrete_laplace(num, den, N, rng=rng)
    assert x.dtype == np.int64 and x.shape == (N,)
    assert dlap_pvalue(x, num / den) > ALPHA


# False-failure rate <= 8 examples x 1e-4.
@FEW
@given(num=st.integers(min_value=1, max_value=60), den=st.integers(min_value=1, max_value=20))
def test_discrete_laplace_random_rational_scales(num, den):
    rng = np.random.default_rng([num, den])
    x = samplers.discrete_laplace(num, den, N // 2, rng=rng)
    assert dlap_pvalue(x, num / den) > ALPHA


def test_discrete_laplace_is_symmetric_and_sized():
    rng = np.random.default_rng(3)
    assert samplers.discrete_laplace(5, 2, 0, rng=rng).shape == (0,)
    x = samplers.discrete_laplace(5, 2, N, rng=rng)
    # Mean 0, variance 2 e^{-1/b} / (1 - e^{-1/b})^2; z-test at |z| < 4.4 (false failure 1e-5).
    a = math.exp(-2 / 5)
    var = 2 * a / (1 - a) ** 2
    assert abs(x.mean()) < 4.4 * math.sqrt(var / N)


@pytest.mark.parametrize("kwargs, name", [
    ({"scale_num": 0, "scale_den": 1, "size": 5}, "scale_num"),
    ({"scale_num": 1.5, "scale_den": 1, "size": 5}, "scale_num"),
    ({"scale_num": 1, "scale_den": 0, "size": 5}, "scale_den"),
    ({"scale_num": 1, "scale_den": 1, "size": -1}, "size"),
])
def test_discrete_laplace_rejects(kwargs, name):
    with pytest.raises(ValueError, match=name):
        samplers.discrete_laplace(rng=np.random.default_rng(0), **kwargs)


# ----------------------------------------------------------------------------- discrete Gaussian
# Chi-square at ALPHA with a fixed seed each (false-failure rate 1e-4 each). (2^28, 2^28) is
# sigma^2 = 1 written with a huge denominator: it sends |Y| > 3 through the exact Python-int path.
@pytest.mark.parametrize("num, den", [(1, 4), (4, 1), (21, 2), (1, 1), (1 << 28, 1 << 28),
                                      (10**6, 1)])
def test_discrete_gaussian_matches_exact_pmf(num, den):
    rng = np.random.default_rng(2000 + num % 9973 + den % 7919)
    x = samplers.discrete_gaussian(num, den, N, rng=rng)
    assert x.dtype == np.int64 and x.shape == (N,)
    assert dgauss_pvalue(x, math.sqrt(num / den)) > ALPHA


# False-failure rate <= 8 examples x 1e-4.
@FEW
@given(num=st.integers(min_value=1, max_value=400), den=st.integers(min_value=1, max_value=30))
def test_discrete_gaussian_random_rational_variances(num, den):
    rng = np.random.default_rng([num, den, 7])
    x = samplers.discrete_gaussian(num, den, N // 2, rng=rng)
    assert dgauss_pvalue(x, math.sqrt(num / den)) > ALPHA


def test_discrete_gaussian_rejects_too_large_variance():
    with pytest.raises(ValueError, match="too large"):
        samplers.discrete_gaussian(10**12, 1, 3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="var_num"):
        samplers.discrete_gaussian(0, 1, 3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="var_den"):
        samplers.discrete_gaussian(1, -2, 3, rng=np.random.default_rng(0))


# ----------------------------------------------------------------------------- Bernoulli(exp(-g))
def _binom_ok(ones: int, n: int, p: float, alpha: float = ALPHA) -> bool:
    return stats.binomtest(int(ones), n, p).pvalue > alpha


@pytest.mark.parametrize("num, den", [(0, 1), (1, 3), (1, 1), (7, 3), (20, 1)])
def test_bernoulli_exp_rate(num, den):
    """Two-sided exact binomial test at ALPHA, fixed seed: false-failure rate 1e-4 each."""
    rng = np.random.default_rng(3000 + 10 * num + den)
    b = samplers.bernoulli_exp(num, den, N, rng=rng)
    assert b.dtype == bool and b.shape == (N,)
    p = math.exp(-num / den)
    if num == 0:
        assert b.all()
    else:
        assert _binom_ok(b.sum(), N, p)


# False-failure rate <= 8 examples x 1e-4.
@FEW
@given(num=st.integers(min_value=0, max_value=100), den=st.integers(min_value=1, max_value=30))
def test_bernoulli_exp_random_rationals(num, den):
    rng = np.random.default_rng([num, den, 11])
    b = samplers.bernoulli_exp(num, den, N // 2, rng=rng)
    assert _binom_ok(b.sum(), N // 2, math.exp(-num / den))


def test_bernoulli_exp_vectorised_mixed_parameters():
    """Several gammas in one call; per-group binomial tests, Bonferroni: false failure <= 1e-4."""
    gammas = [(0, 1), (1, 3), (1, 1), (7, 3), (5, 2), (20, 1)]
    reps = 50_000
    num = np.repeat([g[0] for g in gammas], reps)
    den = np.repeat([g[1] for g in gammas], reps)
    order = np.random.default_rng(4).permutation(num.size)  # interleave the groups
    b = samplers.bernoulli_exp(num[order], den[order], rng=np.random.default_rng(5))
    b = b[np.argsort(order)].reshape(len(gammas), reps)
    for (g_num, g_den), row in zip(gammas, b, strict=True):
        assert _binom_ok(row.sum(), reps, math.exp(-g_num / g_den), ALPHA / len(gammas))


def test_bernoulli_exp_rejects_negative():
    with pytest.raises(ValueError, match="num"):
        samplers.bernoulli_exp(-1, 1, 3, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="den"):
        samplers.bernoulli_exp(1, 0, 3, rng=np.random.default_rng(0))


# ----------------------------------------------------------------------------- power
# These show the helpers detect a 5% scale error at the sample sizes used above (with the
# fixed seeds used here, the p-values are far below ALPHA; a correct test could never pass them).
def test_chi_square_detects_wrong_laplace_scale():
    x = samplers.discrete_laplace(7, 3, N, rng=np.random.default_rng(6))
    assert dlap_pvalue(x, 7 / 3 * 1.05) < ALPHA


def test_chi_square_detects_wrong_gaussian_variance():
    x = samplers.discrete_gaussian(4, 1, N, rng=np.random.default_rng(7))
    assert dgauss_pvalue(x, 2.0 * 1.05) < ALPHA


def test_binomial_detects_wrong_rate():
    b = samplers.bernoulli_exp(7, 3, N, rng=np.random.default_rng(8))
    assert not _binom_ok(b.sum(), N, math.exp(-7 / 3) * 1.05)
