"""The basic mechanisms: Laplace, Gaussian, DiscreteLaplace, DiscreteGaussian, RandomizedResponse.

Distributions are tested against exact formulas: KS tests for the continuous mechanisms (against
scipy's Laplace / normal), chi-square tests against exact pmfs for the discrete ones (tail bins
pooled so every expected count is >= 5). The reference parameters (Laplace b = Delta/eps,
Balle-Wang sigma, CKS Thm 7 sigma, randomized-response probabilities e^eps/(e^eps+k-1)) are
computed in the tests from the published formulas (``reference_formulas``), never read from the
mechanism's ``scale`` / ``sigma`` / ``keep_probability``: a mechanism whose attribute and sampler
are wrong by the same factor fails. All statistical tests use fixed seeds; each rejects at
ALPHA = 1e-4, so a correct mechanism fails one of them with probability 1e-4 over the choice of
seed (stated per test where it differs). Power checks show the same tests reject a 5% error in
the noise scale (or in epsilon) at these sample sizes.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import reference_formulas as ref
from dp_accounting import dp_event as _dp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from dpkd_audit._math.privacy import (
    analytic_gaussian_delta,
    discrete_gaussian_delta,
    discrete_gaussian_pmf,
)
from dpkd_audit.accountants.pure import event_guarantee
from dpkd_audit.events import CalibratedGaussianDpEvent, DiscreteGaussianDpEvent
from dpkd_audit.mechanisms.base import Guarantee, Norm, Sensitivity
from dpkd_audit.mechanisms.continuous import Gaussian, Laplace, TextbookGaussian
from dpkd_audit.mechanisms.discrete import DiscreteGaussian, DiscreteLaplace
from dpkd_audit.mechanisms.randomized_response import RandomizedResponse

ALPHA = 1e-4
N = 100_000
FEW = settings(derandomize=True, max_examples=10, deadline=None,
               suppress_health_check=[HealthCheck.too_slow])


def rng_(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def chi2_pvalue(samples: np.ndarray, grid: np.ndarray, pmf: np.ndarray) -> float:
    """Chi-square p-value of integer samples against a unimodal pmf on consecutive ``grid``.

    Single-value bins where n * pmf >= 5; the tails are pooled into the outermost such bins.
    """
    samples = np.asarray(samples).ravel()
    n = samples.size
    assert abs(pmf.sum() - 1.0) < 1e-12
    big = np.flatnonzero(n * pmf >= 5)
    lo, hi = int(big[0]), int(big[-1])
    expected = pmf[lo:hi + 1].copy()
    expected[0] += pmf[:lo].sum()
    expected[-1] += pmf[hi + 1:].sum()
    expected *= n / expected.sum()
    observed = np.bincount(np.clip(samples, grid[lo], grid[hi]) - grid[lo], minlength=hi - lo + 1)
    return float(stats.chisquare(observed, expected).pvalue)


def dlap_pvalue(noise: np.ndarray, scale: float) -> float:
    """Against the exact discrete Laplace pmf exp(-|x|/b) tanh(1/(2b)) (GRS 2012)."""
    half = math.ceil(40 * scale) + 5
    grid = np.arange(-half, half + 1)
    return chi2_pvalue(noise, grid, ref.discrete_laplace_pmf(scale, grid))


def dgauss_pvalue(noise: np.ndarray, sigma: float) -> float:
    """Against the exact discrete Gaussian pmf (CKS 2020, Def. 1), tail beyond 10 sigma < e^-50."""
    half = math.ceil(10 * sigma) + 5
    grid = np.arange(-half, half + 1)
    return chi2_pvalue(noise, grid, ref.discrete_gaussian_pmf(sigma, grid))


# ----------------------------------------------------------------------------- constructors
VALID = {
    Laplace: {"epsilon": 1.0, "sensitivity": 1.0},
    Gaussian: {"epsilon": 1.0, "delta": 1e-5, "sensitivity": 1.0},
    DiscreteLaplace: {"epsilon": 1.0, "sensitivity": 1},
    DiscreteGaussian: {"epsilon": 1.0, "delta": 1e-5, "sensitivity": 1},
    RandomizedResponse: {"epsilon": 1.0, "num_classes": 4},
}
COMMON_BAD = [0, -1, math.nan, math.inf, "a", True]
EXTRA_BAD = {
    (DiscreteLaplace, "sensitivity"): [1.5, None],
    (DiscreteGaussian, "sensitivity"): [1.5, None],
    (Laplace, "sensitivity"): [None],
    (Gaussian, "sensitivity"): [None],
    (Gaussian, "delta"): [1, 1.5, None],
    (DiscreteGaussian, "delta"): [1, 1.5, None],
    (RandomizedResponse, "num_classes"): [1, 2.5, 4.0, None],
    (RandomizedResponse, "epsilon"): [701.0, None],
    (DiscreteLaplace, "epsilon"): [1e-13, None],  # scale 1e13 > the exact sampler's 2^40
    (DiscreteGaussian, "epsilon"): [1e-6],  # sigma ~ 5e6 > the exact sampler's 30,000
}
BAD_CASES = [
    pytest.param(cls, name, bad, id=f"{cls.__name__}-{name}-{bad!r}")
    for cls, params in VALID.items()
    for name in params
    for bad in COMMON_BAD + EXTRA_BAD.get((cls, name), [])
]


def test_valid_constructors():
    for cls, params in VALID.items():
        mech = cls(**params)
        assert mech.epsilon == 1.0
        assert isinstance(mech.guarantee, Guarantee)


@pytest.mark.parametrize("cls, name, bad", BAD_CASES)
def test_constructor_rejects_bad_parameter(cls, name, bad):
    with pytest.raises(ValueError, match=name):
        cls(**{**VALID[cls], name: bad})


@pytest.mark.parametrize("cls, norm", [(Laplace, Norm.L2), (Gaussian, Norm.L1),
                                       (DiscreteLaplace, Norm.L2), (DiscreteGaussian, Norm.L1)])
def test_sensitivity_in_wrong_norm_is_rejected(cls, norm):
    with pytest.raises(ValueError, match="sensitivity"):
        cls(**{**VALID[cls], "sensitivity": Sensitivity(value=1, norm=norm)})


def test_declared_sensitivities():
    assert Laplace(epsilon=1, sensitivity=2.5).sensitivity == Sensitivity(value=2.5, norm=Norm.L1)
    assert DiscreteLaplace(epsilon=1, sensitivity=3).sensitivity == Sensitivity(value=3,
                                                                                 norm=Norm.L1)
    assert DiscreteLaplace(epsilon=1, sensitivity=3.0).sensitivity.value == 3
    assert DiscreteGaussian(epsilon=1, delta=1e-5, sensitivity=2).sensitivity.norm is Norm.L2
    assert RandomizedResponse(epsilon=1, num_classes=3).sensitivity == Sensitivity(
        value=1, norm=Norm.RECORDS)


# ----------------------------------------------------------------------------- inputs
@pytest.mark.parametrize("cls", [DiscreteLaplace, DiscreteGaussian])
@pytest.mark.parametrize("bad", [1.5, 2.0, "a", True, [1.5], np.array([1.0]), None, 2**70,
                                 [[1], [1, 2]], 2**63 - 1])
def test_integer_mechanisms_reject_non_integer_values(cls, bad):
    mech = cls(**VALID[cls])
    with pytest.raises(ValueError, match="value"):
        mech.sample(bad, 3, rng=rng_(0))
    with pytest.raises(ValueError, match="value"):
        mech.release(bad, rng=rng_(0))


@pytest.mark.parametrize("cls", [Laplace, Gaussian])
@pytest.mark.parametrize("bad", [math.nan, [1.0, math.inf], "a", None])
def test_continuous_mechanisms_reject_bad_values(cls, bad):
    with pytest.raises(ValueError, match="value"):
        cls(**VALID[cls]).sample(bad, 3, rng=rng_(0))


@pytest.mark.parametrize("bad", [-1, 4, [0, 4], [-1, 2], 1.0, [0.0], "a", True, None])
def test_randomized_response_rejects_bad_labels(bad):
    mech = RandomizedResponse(epsilon=1.0, num_classes=4)
    with pytest.raises(ValueError, match="value"):
        mech.release(bad, rng=rng_(0))
    with pytest.raises(ValueError, match="reports"):
        mech.estimate_counts(bad if np.ndim(bad) else [bad])


@pytest.mark.parametrize("cls", list(VALID))
def test_rng_and_n_are_validated(cls):
    mech = cls(**VALID[cls])
    value = mech.neighbours()[0]
    with pytest.raises(ValueError, match="rng"):
        mech.sample(value, 3, rng=None)
    with pytest.raises(ValueError, match="rng"):
        mech.release(value, rng=np.random.RandomState(0))
    for bad_n in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="n must"):
            mech.sample(value, bad_n, rng=rng_(0))


def test_discrete_gaussian_refuses_vectors_above_unit_sensitivity():
    mech = DiscreteGaussian(epsilon=1.0, delta=1e-5, sensitivity=2)
    assert mech.sample(np.array([3]), 4, rng=rng_(0)).shape == (4, 1)  # one entry is fine
    with pytest.raises(ValueError, match="value"):
        mech.sample(np.array([1, 2]), 4, rng=rng_(0))
    unit = DiscreteGaussian(epsilon=1.0, delta=1e-5, sensitivity=1)
    assert unit.sample(np.zeros((2, 3), dtype=int), 4, rng=rng_(0)).shape == (4, 2, 3)


def test_thm7_is_not_valid_for_vectors_with_sensitivity_5():
    """Why vectors are refused above sensitivity 1: the exact delta of a (3, 4) shift exceeds it.

    Exact computation (no sampling): delta = sum_z max(0, P(z) - e^eps P(z - v)) over Z^2.
    """
    mech = DiscreteGaussian(epsilon=1.0, delta=1e-5, sensitivity=5)
    sigma = mech.sigma
    half = math.ceil(40 * sigma) + 10
    grid = np.arange(-half, half + 1)
    p1 = discrete_gaussian_pmf(sigma, grid)
    joint = np.outer(p1, p1)
    shifted = np.zeros_like(joint)
    shifted[3:, 4:] = joint[:-3, :-4]
    exact = float(np.maximum(0.0, joint - math.e * shifted).sum())
    assert discrete_gaussian_delta(1.0, sigma, 5) <= 1e-5 < exact


# ----------------------------------------------------------------------------- distributions
def test_laplace_ks():
    """KS against Laplace(value, Delta/eps) at ALPHA, fixed seed (false-failure rate 1e-4).

    The reference scale is the formula 2.0/0.7, not ``mech.scale``.
    """
    mech = Laplace(epsilon=0.7, sensitivity=2.0)
    b = ref.laplace_scale(0.7, 2.0)
    x = mech.sample(np.array([1.5, -3.0]), N // 2, rng=rng_(10)) - np.array([1.5, -3.0])
    assert stats.kstest(x.ravel(), stats.laplace(scale=b).cdf).pvalue > ALPHA
    # Power: a 5% wrong scale is rejected.
    assert stats.kstest(x.ravel(), stats.laplace(scale=1.05 * b).cdf).pvalue < ALPHA
    # the float-safe grid adds at most one step per sensitivity-512th and changed coordinate
    assert b <= mech.scale <= b * (1 + 1 / 512 + 1e-6)


def test_float_safe_laplace_grid_is_exact():
    """Issue 32: outputs are multiples of a power-of-two g, and the discrete claim is exact."""
    for eps, sens, coords in ((0.7, 2.0, None), (1.0, 1.0, 1), (0.05, 3.7, 5), (40.0, 1e-3, 2)):
        mech = Laplace(epsilon=eps, sensitivity=sens, coordinates=coords)
        changed = coords or 3
        grid = mech.grid(changed)
        g = grid.granularity
        assert math.frexp(g)[0] == 0.5  # a power of two
        steps = Fraction(sens) / Fraction(g)
        assert 512 * changed <= steps < 1024 * changed
        assert grid.sensitivity == math.floor(steps) + changed
        # pure (S / t)-DP with S / t <= epsilon, exactly
        assert Fraction(grid.sensitivity) / grid.scale <= Fraction(eps)
        event = mech.release_event(np.zeros(3))
        assert event.sensitivity == grid.sensitivity
        assert event.noise_parameter * event.sensitivity <= eps * (1 + 1e-15)
        out = mech.sample(np.array([0.1, -2.3, 7.0]), 1000, rng=rng_(12))
        assert np.all(np.mod(out, g) == 0)  # every output on the grid: no float artefact


def test_float_safe_laplace_refuses_values_beyond_its_grid_before_charging(tmp_path):
    mech = Laplace(epsilon=1.0)
    limit = 2.0 ** 61 * mech.grid(1).granularity
    with pytest.raises(ValueError, match=r"\|value\| <= "):
        mech.sample(2 * limit, 1, rng=rng_(0))
    assert mech.sample(limit / 2, 1, rng=rng_(0)).shape == (1,)


def test_textbook_gaussian_ks():
    """KS against N(value, sigma^2) at ALPHA, fixed seed (false-failure rate 1e-4).

    sigma is Balle-Wang's (Thm 8), found here by brentq on the closed form, not ``mech.sigma``.
    (The float-safe Gaussian's distribution: tests/test_float_safe_gaussian.py.)
    """
    mech = TextbookGaussian(epsilon=1.0, delta=1e-5, sensitivity=3.0)
    sigma = ref.analytic_gaussian_sigma(1.0, 1e-5, 3.0)
    x = mech.sample(2.5, N, rng=rng_(11)) - 2.5
    assert stats.kstest(x, stats.norm(scale=sigma).cdf).pvalue > ALPHA
    assert stats.kstest(x, stats.norm(scale=1.05 * sigma).cdf).pvalue < ALPHA
    assert mech.sigma == pytest.approx(sigma, rel=1e-9)


# Chi-square at ALPHA, fixed seed each (false-failure rate 1e-4 per case). The reference scale
# is the formula Delta/eps (the documented rounding up adds at most 2^-20, far below what 10^5
# samples resolve), not ``mech.scale``.
@pytest.mark.parametrize("eps, sens", [(1.0, 1), (0.3, 2), (0.1, 1), (2.5, 3), (7.0, 1)])
def test_discrete_laplace_exact_pmf(eps, sens):
    mech = DiscreteLaplace(epsilon=eps, sensitivity=sens)
    b = ref.laplace_scale(eps, sens)
    x = mech.sample(7, N, rng=rng_(int(100 * eps) + sens))
    assert x.dtype == np.int64
    noise = x - 7
    assert dlap_pvalue(noise, b) > ALPHA
    if eps == 0.3:  # power: the chi-square rejects a 5% wrong scale
        assert dlap_pvalue(noise, 1.05 * b) < ALPHA


# Chi-square at ALPHA, fixed seed each (false-failure rate 1e-4 per case). The reference sigma is
# the smallest one meeting CKS 2020 Thm 7, computed in the test (within 1e-5 of the package's),
# not ``mech.sigma``.
@pytest.mark.parametrize("eps, delta, sens", [(1.0, 1e-5, 1), (0.5, 1e-6, 2), (4.0, 1e-3, 1),
                                              (8.0, 1e-5, 1)])
def test_discrete_gaussian_exact_pmf(eps, delta, sens):
    mech = DiscreteGaussian(epsilon=eps, delta=delta, sensitivity=sens)
    sigma = ref.discrete_gaussian_sigma(eps, delta, sens)
    x = mech.sample(-4, N, rng=rng_(int(10 * eps) + sens))
    assert x.dtype == np.int64
    noise = x + 4
    assert dgauss_pvalue(noise, sigma) > ALPHA
    if eps == 1.0:
        assert dgauss_pvalue(noise, 1.05 * sigma) < ALPHA


# Chi-square over the k labels at ALPHA, fixed seed each (false-failure rate 1e-4 per case),
# against keep e^eps/(e^eps+k-1), other 1/(e^eps+k-1) computed here (not the mechanism's
# ``keep_probability``).
@pytest.mark.parametrize("eps, k, label", [(1.0, 2, 0), (1.0, 5, 3), (0.2, 10, 9), (4.0, 4, 1)])
def test_randomized_response_exact_pmf(eps, k, label):
    mech = RandomizedResponse(epsilon=eps, num_classes=k)
    x = mech.sample(label, N, rng=rng_(int(10 * eps) + k))
    assert x.dtype == np.int64 and x.shape == (N,)
    observed = np.bincount(x, minlength=k)
    pmf = ref.rr_pmf(eps, k, label)
    assert stats.chisquare(observed, N * pmf).pvalue > ALPHA
    wrong = ref.rr_pmf(1.05 * eps, k, label)
    if eps == 1.0 and k == 5:  # power: a 5% wrong epsilon is rejected
        assert stats.chisquare(observed, N * wrong).pvalue < ALPHA


def test_randomized_response_array_entries_are_independent():
    """Joint of two entries vs the product of exact marginals: one chi-square at ALPHA."""
    mech = RandomizedResponse(epsilon=0.8, num_classes=3)
    x = mech.sample(np.array([[0, 2], [1, 1]]), N, rng=rng_(12))
    assert x.shape == (N, 2, 2)
    joint = np.bincount(3 * x[:, 0, 0] + x[:, 0, 1], minlength=9)
    expected = np.outer(ref.rr_pmf(0.8, 3, 0), ref.rr_pmf(0.8, 3, 2)).ravel() * N
    assert stats.chisquare(joint, expected).pvalue > ALPHA


def test_randomized_response_probabilities():
    for eps in (1e-6, 0.5, 3.0, 50.0):
        for k in (2, 7, 1000):
            mech = RandomizedResponse(epsilon=eps, num_classes=k)
            p, q = mech.keep_probability, mech.other_probability
            assert p == pytest.approx(ref.rr_keep_probability(eps, k), rel=1e-12)
            assert q == pytest.approx(ref.rr_other_probability(eps, k), rel=1e-12)
            assert p + (k - 1) * q == pytest.approx(1.0, rel=1e-14)
            assert p / q == pytest.approx(math.exp(eps), rel=1e-12)


def test_randomized_response_huge_epsilon_still_randomizes_in_principle():
    """At eps = 700 the flip probability is ~0 but the sampler keeps it >= 0 and stays valid."""
    mech = RandomizedResponse(epsilon=700.0, num_classes=3)
    assert (mech.sample(2, 1000, rng=rng_(13)) == 2).all()
    assert mech.event.noise_parameter > 0.0


def test_estimate_counts_is_unbiased():
    """z-test per class with Bonferroni over k classes: false-failure rate <= 1e-4 in total.

    Var(c_j) = n_j p(1-p) + (n - n_j) q(1-q) and n_j_hat = (c_j - n q)/(p - q).
    """
    k, eps = 5, 0.7
    mech = RandomizedResponse(epsilon=eps, num_classes=k)
    true = np.array([50_000, 120_000, 0, 30_000, 200_000])
    labels = np.repeat(np.arange(k), true)
    reports = mech.sample(labels, 1, rng=rng_(14))[0]
    est = mech.estimate_counts(reports)
    assert est.shape == (k,) and est.sum() == pytest.approx(true.sum(), rel=1e-12)
    p, q = ref.rr_keep_probability(eps, k), ref.rr_other_probability(eps, k)
    n = true.sum()
    sd = np.sqrt(true * p * (1 - p) + (n - true) * q * (1 - q)) / (p - q)
    z_max = stats.norm.isf(ALPHA / (2 * k))
    assert np.all(np.abs(est - true) < z_max * sd)
    # Power: decoding with a 5% wrong epsilon is detected as biased.
    wrong = RandomizedResponse(epsilon=1.05 * eps, num_classes=k).estimate_counts(reports)
    assert np.any(np.abs(wrong - true) > z_max * sd)


def test_estimate_counts_averages_to_truth_over_repetitions():
    """Mean of 200 small-batch estimates: z-test per class, Bonferroni, false failure <= 1e-4."""
    k, eps, reps = 3, 1.5, 200
    mech = RandomizedResponse(epsilon=eps, num_classes=k)
    true = np.array([30, 0, 70])
    labels = np.repeat(np.arange(k), true)
    reports = mech.sample(labels, reps, rng=rng_(15))  # reps independent batches
    est = np.stack([mech.estimate_counts(r) for r in reports])
    p, q = ref.rr_keep_probability(eps, k), ref.rr_other_probability(eps, k)
    n = true.sum()
    sd = np.sqrt(true * p * (1 - p) + (n - true) * q * (1 - q)) / (p - q) / math.sqrt(reps)
    assert np.all(np.abs(est.mean(axis=0) - true) < stats.norm.isf(ALPHA / (2 * k)) * sd)


# ----------------------------------------------------------------------------- events
@FEW
@given(eps=st.floats(min_value=0.01, max_value=20.0), sens=st.floats(min_value=0.1, max_value=10))
def test_laplace_event(eps, sens):
    mech = Laplace(epsilon=eps, sensitivity=sens)
    # float-safe: the discrete Laplace on the grid, pure (a S)-DP with a S <= eps (the scale
    # t >= S / eps is rounded up by at most 2^-20 relative)
    event = mech.event
    assert isinstance(event, _dp.DiscreteLaplaceDpEvent)
    assert event.sensitivity == mech.grid(1).sensitivity
    assert eps * (1 - 1e-6) <= event.noise_parameter * event.sensitivity <= eps * (1 + 1e-15)
    assert event_guarantee(event) == (pytest.approx(eps, rel=1e-6), 0.0)
    assert mech.guarantee == Guarantee(epsilon=eps, delta=0.0)


@FEW
@given(eps=st.floats(min_value=0.05, max_value=10.0),
       delta=st.floats(min_value=1e-10, max_value=0.1), sens=st.floats(min_value=0.1, max_value=10))
def test_textbook_gaussian_event(eps, delta, sens):
    mech = TextbookGaussian(epsilon=eps, delta=delta, sensitivity=sens)
    assert isinstance(mech.event, CalibratedGaussianDpEvent)
    assert event_guarantee(mech.event) == (eps, delta)
    assert analytic_gaussian_delta(eps, mech.sigma, sens) <= delta
    # the event's noise multiplier is Balle-Wang's sigma / Delta_2, computed here by brentq
    want = ref.analytic_gaussian_sigma(eps, delta, sens) / sens
    assert want * (1 - 1e-12) <= mech.event.noise_multiplier <= want * (1 + 1e-9)


@settings(derandomize=True, max_examples=60, deadline=None)
@given(eps=st.floats(min_value=1e-9, max_value=1e6), sens=st.integers(min_value=1, max_value=1000))
def test_discrete_laplace_event_matches_claim(eps, sens):
    """Two-sided: the event charges eps, less only by the documented rounding of the scale.

    noise_parameter = 1/b with Delta/eps <= b <= ceil(D Delta/eps)/D (D = 2^20, 1 above 2^20),
    computed here from eps and Delta; a float slack of 1e-14 relative.
    """
    mech = DiscreteLaplace(epsilon=eps, sensitivity=sens)
    g_eps, g_delta = event_guarantee(mech.event)
    assert g_delta == 0.0 and mech.event.sensitivity == sens
    lo_scale, hi_scale = ref.discrete_laplace_scale_bounds(eps, sens)
    a = mech.event.noise_parameter
    assert (1 - 1e-14) / hi_scale <= a <= (1 + 1e-14) / lo_scale
    assert sens / hi_scale * (1 - 1e-14) <= g_eps <= eps * (1 + 1e-12)
    # Exactly: the rational scale is >= Delta/eps, so the real epsilon Delta/scale <= eps.
    assert mech.scale_fraction >= Fraction(sens) / Fraction(eps)
    if sens / eps <= 2**20:  # the rounding costs at most 2^-20 of the scale (absolute)
        assert mech.scale - sens / eps <= 2.0**-20 * (1 + 1e-9)
    else:  # integer scale
        assert mech.scale_fraction.denominator == 1


@FEW
@given(eps=st.floats(min_value=0.05, max_value=10.0),
       delta=st.floats(min_value=1e-10, max_value=0.1), sens=st.integers(min_value=1, max_value=4))
def test_discrete_gaussian_event(eps, delta, sens):
    mech = DiscreteGaussian(epsilon=eps, delta=delta, sensitivity=sens)
    event = mech.event
    assert isinstance(event, DiscreteGaussianDpEvent)
    assert event.sigma == mech.sigma and event.sensitivity == sens
    assert event_guarantee(event) == (eps, delta)
    assert discrete_gaussian_delta(eps, mech.sigma, sens) <= delta
    # the event's sigma is the smallest meeting CKS Thm 7, computed here (tolerance: the curve's
    # small upward jumps, and sigma^2 rounded up to a denominator <= 2^20)
    want = ref.discrete_gaussian_sigma(eps, delta, sens)
    tol = 1e-5 + 2.0**-20 / want**2
    assert want * (1 - tol) <= event.sigma <= want * (1 + tol)
    assert mech.variance >= mech.sigma**2 * (1 - 1e-15)
    # sigma is cached (frozen dataclass + cached_property)
    assert mech.sigma is mech.sigma


@settings(derandomize=True, max_examples=50, deadline=None)
@given(eps=st.floats(min_value=0.05, max_value=50.0), k=st.integers(min_value=2, max_value=100))
def test_randomized_response_event_matches_epsilon(eps, k):
    mech = RandomizedResponse(epsilon=eps, num_classes=k)
    g_eps, g_delta = event_guarantee(mech.event)
    assert g_delta == 0.0 and mech.event.num_buckets == k
    assert eps <= g_eps <= eps * (1 + 1e-12)
    # dp_accounting keeps the input w.p. 1 - p + p/k: that is e^eps/(e^eps + k - 1).
    p = mech.event.noise_parameter
    assert p == pytest.approx(ref.rr_noise_parameter(eps, k), rel=1e-12)
    assert 1 - p + p / k == pytest.approx(ref.rr_keep_probability(eps, k), rel=1e-12)


@settings(derandomize=True, max_examples=50, deadline=None)
@given(eps=st.floats(min_value=1e-9, max_value=700.0), k=st.integers(min_value=2, max_value=10**6))
def test_randomized_response_event_is_never_below_epsilon(eps, k):
    """Over the whole range the event never under-charges; its excess is float-resolution only."""
    g_eps = event_guarantee(RandomizedResponse(epsilon=eps, num_classes=k).event)[0]
    m = math.expm1(eps)
    assert eps <= g_eps <= eps + 16 * 2.0**-52 * (k + m) / m * max(eps, 1.0)


# ----------------------------------------------------------------------------- shapes
MECHS = [Laplace(epsilon=1.0), Gaussian(epsilon=1.0, delta=1e-5),
         DiscreteLaplace(epsilon=1.0, sensitivity=2), DiscreteGaussian(epsilon=1.0, delta=1e-5),
         RandomizedResponse(epsilon=1.0, num_classes=4)]


@pytest.mark.parametrize("mech", MECHS, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (0,)])
def test_sample_and_release_shapes(mech, shape):
    value = np.ones(shape, dtype=np.int64)
    if 0 in shape:  # nothing to release: refused before any charge (issue 32)
        with pytest.raises(ValueError, match="at least one entry"):
            mech.sample(value, 5, rng=rng_(20))
        with pytest.raises(ValueError, match="at least one entry"):
            mech.release(value, rng=rng_(21))
        return
    batch = mech.sample(value, 5, rng=rng_(20))
    assert isinstance(batch, np.ndarray) and batch.shape == (5, *shape)
    one = mech.release(value, rng=rng_(21))
    if shape == ():
        expected_type = float if isinstance(mech, (Laplace, Gaussian)) else int
        assert type(one) is expected_type
    else:
        assert isinstance(one, np.ndarray) and one.shape == shape
        if not isinstance(mech, (Laplace, Gaussian)):
            assert one.dtype == np.int64


@pytest.mark.parametrize("mech", MECHS, ids=lambda m: type(m).__name__)
def test_release_is_reproducible_with_the_same_seed(mech):
    assert mech.release(1, rng=rng_(5)) == mech.release(1, rng=rng_(5))


@pytest.mark.parametrize("mech", MECHS, ids=lambda m: type(m).__name__)
def test_neighbours(mech):
    pair = mech.neighbours()
    assert isinstance(pair, tuple) and len(pair) == 2
    x, y = pair
    assert x != y
    if isinstance(mech, RandomizedResponse):
        assert all(type(v) is int and 0 <= v < mech.num_classes for v in pair)
    else:
        assert abs(y - x) == mech.sensitivity.value  # worst case: a full-sensitivity shift
        if isinstance(mech, (DiscreteLaplace, DiscreteGaussian)):
            assert all(type(v) is int for v in pair)
    for v in pair:  # both are valid inputs
        assert mech.sample(v, 2, rng=rng_(0)).shape == (2,)


def test_discrete_laplace_extreme_epsilons():
    big = DiscreteLaplace(epsilon=1e6)  # scale rounded up (by <= 2^-20): still >= 1e-6
    hi_scale = ref.discrete_laplace_scale_bounds(1e6, 1)[1]
    assert big.scale >= 1e-6 and 1 / hi_scale <= event_guarantee(big.event)[0] <= 1e6
    assert (big.sample(3, 1000, rng=rng_(0)) == 3).all()
    small = DiscreteLaplace(epsilon=1e-6)
    # float 1e-6 is a hair below 10^-6, so the exact 1/eps is a hair above 10^6: rounded up.
    assert 10**6 < small.scale_fraction <= 10**6 + Fraction(1, 2**20)
    assert small.sample(0, 10, rng=rng_(0)).dtype == np.int64


@pytest.mark.parametrize("coordinates", [0, -1, 1.5, True, "2"])
def test_float_safe_laplace_refuses_bad_coordinates_by_name(coordinates):
    with pytest.raises(ValueError, match="coordinates"):
        Laplace(epsilon=1.0, coordinates=coordinates)
