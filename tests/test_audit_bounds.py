"""Clopper-Pearson intervals, the epsilon lower bound and the attainable-bound benchmark.

Most checks here are exact (no sampling): the intervals against their defining equations in
mpmath and against scipy's independent implementation, their coverage and the validity of the
epsilon bound by summing the binomial pmf over every possible count. No test in this file can fail
by chance.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpkd_audit.audit import (
    ProbabilityKind,
    clopper_pearson,
    epsilon_lower_bound,
    optimal_attainable_bound,
)
from dpkd_audit.audit.bounds import _epsilon_bound_array

FEW = settings(derandomize=True, max_examples=60, deadline=None)


# --------------------------------------------------------------------------- Clopper-Pearson

@pytest.mark.parametrize(("k", "n"), [(1, 1), (3, 10), (0, 7), (7, 7), (50, 100), (1, 1000),
                                      (999, 1000), (2345, 10_000)])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.999])
def test_clopper_pearson_solves_its_defining_equations(k, n, confidence):
    # Clopper-Pearson 1934: P(Bin(n, L) >= k) = alpha and P(Bin(n, U) <= k) = alpha, with
    # alpha = (1 - confidence) / 2; P(Bin(n, p) >= k) is the regularised incomplete beta
    # I_p(k, n - k + 1). Checked in 40-digit arithmetic.
    lower, upper = clopper_pearson(k, n, confidence)
    alpha = (1 - confidence) / 2
    mpmath.mp.dps = 40
    if k == 0:
        assert lower == 0.0
    else:
        tail = mpmath.betainc(k, n - k + 1, 0, mpmath.mpf(lower), regularized=True)
        assert float(tail) == pytest.approx(alpha, rel=1e-7)
    if k == n:
        assert upper == 1.0
    else:
        cdf = 1 - mpmath.betainc(k + 1, n - k, 0, mpmath.mpf(upper), regularized=True)
        assert float(cdf) == pytest.approx(alpha, rel=1e-7)


@given(n=st.integers(1, 5000), frac=st.floats(0, 1), confidence=st.floats(0.5, 0.9999))
@FEW
def test_clopper_pearson_matches_scipy_binomtest(n, frac, confidence):
    k = round(frac * n)
    ours = clopper_pearson(k, n, confidence)
    ref = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    assert ours[0] == pytest.approx(ref.low, abs=1e-12, rel=1e-9)
    assert ours[1] == pytest.approx(ref.high, abs=1e-12, rel=1e-9)
    assert ours[0] <= k / n <= ours[1]


def test_clopper_pearson_closed_forms_at_the_edges():
    n, alpha = 40, 0.025
    assert clopper_pearson(0, n)[1] == pytest.approx(1 - alpha ** (1 / n), rel=1e-12)
    assert clopper_pearson(n, n)[0] == pytest.approx(alpha ** (1 / n), rel=1e-12)


@pytest.mark.parametrize("p", [0.01, 0.1, 0.37, 0.5, 0.93])
def test_clopper_pearson_coverage_is_at_least_the_confidence_exactly(p):
    # Exact coverage: sum of the Bin(n, p) pmf over the k whose interval contains p.
    n, confidence = 150, 0.9
    ks = np.arange(n + 1)
    bounds = np.array([clopper_pearson(int(k), n, confidence) for k in ks])
    covered = (bounds[:, 0] <= p) & (p <= bounds[:, 1])
    coverage = stats.binom.pmf(ks, n, p)[covered].sum()
    assert coverage >= confidence
    # ... and each one-sided end alone errs with probability <= (1 - confidence) / 2.
    assert stats.binom.pmf(ks, n, p)[bounds[:, 0] > p].sum() <= (1 - confidence) / 2 + 1e-12
    assert stats.binom.pmf(ks, n, p)[bounds[:, 1] < p].sum() <= (1 - confidence) / 2 + 1e-12


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"hits": -1, "n": 10}, "hits"), ({"hits": 11, "n": 10}, "hits"),
    ({"hits": 1.5, "n": 10}, "hits"), ({"hits": 0, "n": 0}, "n"),
    ({"hits": 1, "n": 10, "confidence": 1.0}, "confidence"),
    ({"hits": 1, "n": 10, "confidence": 0.0}, "confidence"),
    ({"hits": 1, "n": 10, "confidence": math.nan}, "confidence"),
])
def test_clopper_pearson_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        clopper_pearson(**kwargs)


# --------------------------------------------------------------------------- epsilon bound

def test_epsilon_lower_bound_is_the_log_ratio_of_the_one_sided_bounds():
    k1, n1, k0, n0, conf, delta = 600, 1000, 200, 1200, 0.9, 0.01
    lcb1 = clopper_pearson(k1, n1, conf)[0]
    ucb0 = clopper_pearson(k0, n0, conf)[1]
    expected = math.log((lcb1 - delta) / ucb0)
    assert epsilon_lower_bound(k1, n1, k0, n0, delta=delta, confidence=conf) == \
        pytest.approx(expected, rel=1e-12)
    # Below the point estimate ln((0.6 - 0.01) / (1/6)).
    assert expected < math.log((0.6 - delta) / (200 / 1200))


def test_epsilon_lower_bound_is_floored_at_zero_and_shrinks_with_delta():
    assert epsilon_lower_bound(10, 100, 50, 100) == 0.0
    assert epsilon_lower_bound(0, 100, 0, 100) == 0.0
    bounds = [epsilon_lower_bound(500, 1000, 100, 1000, delta=d) for d in (0, 0.05, 0.2, 0.45)]
    assert bounds[0] > bounds[1] > bounds[2] > 0.0
    assert bounds[3] == 0.0  # LCB_1 - delta <= 0: nothing to show


def test_epsilon_lower_bound_with_no_hits_on_the_denominator_side_is_finite():
    # UCB_0 = 1 - (alpha)^(1/n) > 0: the bound stays finite, about ln(n / 3.7) for k_1 = n.
    value = epsilon_lower_bound(1000, 1000, 0, 1000)
    assert math.isfinite(value)
    assert value == pytest.approx(math.log(clopper_pearson(1000, 1000)[0]
                                           / (1 - 0.025 ** (1 / 1000))), rel=1e-12)


@given(k1=st.integers(0, 300), k0=st.integers(0, 300), extra=st.integers(0, 300))
@FEW
def test_epsilon_lower_bound_is_monotone_in_the_counts(k1, k0, extra):
    n = 600
    base = epsilon_lower_bound(k1, n, k0, n)
    assert epsilon_lower_bound(min(k1 + extra, n), n, k0, n) >= base
    assert epsilon_lower_bound(k1, n, min(k0 + extra, n), n) <= base


@pytest.mark.parametrize(("eps", "delta", "confidence"), [(math.log(3), 0.0, 0.95),
                                                          (1.0, 0.0, 0.8),
                                                          (0.5, 0.02, 0.9)])
def test_epsilon_bound_of_a_fixed_event_errs_with_probability_at_most_one_minus_confidence(
        eps, delta, confidence):
    # Exact validity for the worst-case event of an (eps, delta)-DP pair: P_1(S) = e^eps p0 +
    # delta. P(bound > eps) is the sum of Bin(n, P_1) x Bin(n, P_0) over all count pairs whose
    # bound exceeds eps; it must be <= 1 - confidence (union bound of two one-sided errors).
    n = 300
    for p0 in (0.02, 0.1, 0.2):
        p1 = min(math.exp(eps) * p0 + delta, 1.0)
        ks = np.arange(n + 1)
        bound = _epsilon_bound_array(ks[:, None], n, ks[None, :], n, delta,
                                     (1 - confidence) / 2)
        joint = stats.binom.pmf(ks, n, p1)[:, None] * stats.binom.pmf(ks, n, p0)[None, :]
        error = joint[bound > eps].sum()
        assert error <= 1 - confidence
        assert error > 0.0  # the bound does get close to the truth: it is not vacuous


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"hits_1": 5, "n_1": 4, "hits_0": 1, "n_0": 4}, "hits_1"),
    ({"hits_1": 1, "n_1": 4, "hits_0": -1, "n_0": 4}, "hits_0"),
    ({"hits_1": 1, "n_1": 0, "hits_0": 0, "n_0": 4}, "n_1"),
    ({"hits_1": 1, "n_1": 4, "hits_0": 0, "n_0": 2.0}, "n_0"),
    ({"hits_1": 1, "n_1": 4, "hits_0": 0, "n_0": 4, "delta": 1.0}, "delta"),
    ({"hits_1": 1, "n_1": 4, "hits_0": 0, "n_0": 4, "delta": -0.1}, "delta"),
    ({"hits_1": 1, "n_1": 4, "hits_0": 0, "n_0": 4, "confidence": 1.5}, "confidence"),
])
def test_epsilon_lower_bound_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        epsilon_lower_bound(**kwargs)


# --------------------------------------------------------------------------- attainable

def laplace_tail_events(eps: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Exact P(output > t) of Laplace(1/eps) at 0 and at 1, on a fine grid of t."""
    t = np.linspace(-4, 12, 40_001)
    p0 = np.where(t >= 0, 0.5 * np.exp(-eps * t), 1 - 0.5 * np.exp(eps * t))
    p1 = np.where(t >= 1, 0.5 * np.exp(-eps * (t - 1)), 1 - 0.5 * np.exp(eps * (t - 1)))
    return p0, p1


@pytest.mark.parametrize(("n", "expected"), [(10**4, 0.94), (10**5, 0.98), (10**6, 0.99)])
def test_attainable_bound_for_laplace_matches_the_figures_of_the_notes(n, expected):
    # NOTES.md (Auditing): about 0.94, 0.98, 0.99 at 95% for Laplace eps=1 with 10^4..10^6.
    p0, p1 = laplace_tail_events()
    assert optimal_attainable_bound(p0, p1, n=n) == pytest.approx(expected, abs=0.005)


def test_attainable_bound_for_randomized_response_pmf_is_the_bound_of_the_true_label():
    eps, k, n = 1.0, 10, 100_000
    keep, other = math.exp(eps) / (math.exp(eps) + k - 1), 1 / (math.exp(eps) + k - 1)
    pmf0 = np.full(k, other)
    pmf0[0] = keep
    pmf1 = np.full(k, other)
    pmf1[1] = keep
    value = optimal_attainable_bound(pmf0, pmf1, n=n, kind=ProbabilityKind.PMF)
    alpha = 0.025
    lcb = stats.beta.ppf(alpha, n * keep, n - n * keep + 1)
    ucb = stats.beta.isf(alpha, n * other + 1, n - n * other)
    assert value == pytest.approx(math.log(lcb / ucb), rel=1e-9)
    assert value < eps
    # A scalar pair is one event.
    assert optimal_attainable_bound(keep, other, n=n) == pytest.approx(value, rel=1e-12)


def test_attainable_bound_grows_with_n_and_falls_with_delta():
    p0, p1 = laplace_tail_events()
    values = [optimal_attainable_bound(p0, p1, n=n) for n in (10**3, 10**4, 10**5)]
    assert values[0] < values[1] < values[2] < 1.0
    assert optimal_attainable_bound(p0, p1, n=10**4, delta=1e-3) < values[1]


@pytest.mark.parametrize(("args", "kwargs", "name"), [
    ((0.5, 0.2), {"n": 0}, "n"),
    ((1.5, 0.2), {"n": 10}, "p_x"),
    ((0.5, [0.2, 0.1]), {"n": 10}, "p_x and p_x_prime"),
    ((0.5, math.nan), {"n": 10}, "p_x_prime"),
    (([0.5, 0.4], [0.5, 0.5]), {"n": 10, "kind": ProbabilityKind.PMF}, "p_x"),
    ((0.5, 0.2), {"n": 10, "kind": "pmf"}, "kind"),
    ((0.5, 0.2), {"n": 10, "confidence": 1.0}, "confidence"),
])
def test_attainable_bound_rejects_bad_arguments(args, kwargs, name):
    with pytest.raises(ValueError, match=name):
        optimal_attainable_bound(*args, **kwargs)
