"""Positive (and negative) controls of ``dpkd_audit.audit.controls``.

Each control is checked against exact formulas, independently of any auditor: the noise
distribution of every control (KS tests for continuous outputs, chi-square tests against exact
pmfs for discrete ones), its true epsilon (recomputed from exact probabilities), and the flaw
itself on ``neighbours()`` (an event whose exact probability ratio is far above e^epsilon, whose
simulated frequencies match the exact probabilities, and whose Clopper-Pearson lower bound on
the log-ratio exceeds the claim). The floating-point control is checked by an exact,
deterministic support probe.

False-failure rates: every statistical test uses a fixed seed and rejects a correct
implementation with probability ALPHA = 1e-4 over the choice of seed (binomial, KS and
chi-square tests), unless stated otherwise next to the test. Power checks show that the same
tests reject the mechanism that the control claims to be.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from dpkd_audit import Ledger
from dpkd_audit._math.privacy import analytic_gaussian_delta, calibrate_analytic_gaussian
from dpkd_audit.accountants.pure import event_guarantee
from dpkd_audit.audit.controls import (
    CONTROLS,
    NEGATIVE_CONTROLS,
    SVT_ABORTED,
    SVT_BOTTOM,
    SVT_TOP,
    Control,
    GaussianTooLittleNoise,
    HalfNoiseLaplace,
    HistogramWrongScale,
    NaiveFloatLaplace,
    NoisyMaxReturningValue,
    SparseVector,
    SparseVectorNoCutoff,
    SparseVectorNoisyValues,
    SparseVectorNoQueryNoise,
    SparseVectorUnscaledQueryNoise,
    WrongRandomizedResponse,
)
from dpkd_audit.events import event_from_json, event_to_json
from dpkd_audit.mechanisms.base import Mechanism, Norm, Sensitivity

ALPHA = 1e-4
FEW = settings(derandomize=True, max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.too_slow])

POSITIVE = [factory() for factory in CONTROLS]
NEGATIVE = [factory() for factory in NEGATIVE_CONTROLS]
ALL = POSITIVE + NEGATIVE
IDS = [type(m).__name__ for m in ALL]
SVT_CLASSES = [SparseVector, SparseVectorNoisyValues, SparseVectorUnscaledQueryNoise,
               SparseVectorNoQueryNoise, SparseVectorNoCutoff]
SVT_WITH_CUTOFF = [SparseVector, SparseVectorNoisyValues, SparseVectorUnscaledQueryNoise]


def rng_(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def binom_pvalue(count: int, n: int, p: float) -> float:
    return float(stats.binomtest(int(count), n, p).pvalue)


def cp_log_ratio_lower(k1: int, n1: int, k0: int, n0: int, alpha: float = ALPHA) -> float:
    """ln(LCB(p1)/UCB(p0)) with one-sided exact Clopper-Pearson bounds at level alpha each."""
    lcb = stats.beta.ppf(alpha, k1, n1 - k1 + 1) if k1 > 0 else 0.0
    ucb = stats.beta.ppf(1 - alpha, k0 + 1, n0 - k0) if k0 < n0 else 1.0
    return math.log(lcb / ucb) if lcb > 0 else -math.inf


def chi2_pvalue(observed: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square p-value, cells with expected count < 5 pooled into one."""
    n = observed.sum()
    expected = n * probs
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        assert obs[-1] == 0
        obs, exp = obs[:-1], exp[:-1]
    exp *= obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


# =============================================================================== contract


@pytest.fixture(params=ALL, ids=IDS)
def control(request) -> Control:
    return request.param


def test_registries_hold_positive_and_negative_controls():
    assert len(CONTROLS) >= 10 and len(NEGATIVE_CONTROLS) >= 1
    for m in POSITIVE:
        assert isinstance(m, Control) and isinstance(m, Mechanism)
        assert m.true_epsilon > m.epsilon * 1.2, type(m).__name__  # clearly wrong
        assert not m.is_private_as_claimed
    for m in NEGATIVE:
        assert m.true_epsilon == pytest.approx(m.epsilon, rel=1e-12)
        assert m.is_private_as_claimed
    names = {type(m).__name__ for m in ALL}
    assert len(names) == len(ALL)  # one entry per control class


def test_frozen_keyword_only_dataclass(control):
    assert dataclasses.is_dataclass(control)
    first = dataclasses.fields(control)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(control, first, getattr(control, first))
    with pytest.raises(TypeError):
        type(control)(getattr(control, first))  # positional arguments are refused


def test_declared_sensitivity_reference_and_flaw(control):
    assert isinstance(control.sensitivity, Sensitivity)
    assert control.sensitivity.value > 0
    assert type(control).reference
    assert isinstance(type(control).flaw, str) and type(control).flaw
    assert "\n" not in type(control).flaw
    assert isinstance(control.true_epsilon, float)


def test_event_charges_exactly_the_claim(control):
    eps, delta = event_guarantee(control.event)
    assert eps == control.epsilon
    assert delta == control.delta
    assert event_from_json(event_to_json(control.event)) == control.event
    ledger = Ledger(epsilon=1e6, delta=0.5)
    x, _ = control.neighbours()
    control.release(x, rng=rng_(1), ledger=ledger)
    assert [c.event for c in ledger.charges()] == [control.event]


def expected_row_shape(m: Control) -> tuple[int, ...]:
    if isinstance(m, HistogramWrongScale):
        return (m.num_bins,)
    if isinstance(m, NoisyMaxReturningValue):
        return (2,) if m.with_index else ()
    if isinstance(m, SparseVectorNoisyValues):
        return (2 * m.num_queries,)
    if isinstance(m, tuple(SVT_CLASSES)):
        return (m.num_queries,)
    return ()


def test_sample_shapes_on_neighbours_and_reproducible(control):
    x, x_prime = control.neighbours()
    for value in (x, x_prime):
        out = control.sample(value, 13, rng=rng_(3))
        assert out.shape == (13, *expected_row_shape(control))
        again = control.sample(value, 13, rng=rng_(3))
        np.testing.assert_array_equal(out, again)  # all randomness comes from the rng
        one = control.release(value, rng=rng_(3))
        assert np.shape(one) == expected_row_shape(control)


def test_randomness_must_be_injected(control):
    x, _ = control.neighbours()
    with pytest.raises(ValueError, match="rng"):
        control.sample(x, 3, rng=np.random.RandomState(0))
    with pytest.raises(ValueError, match="rng"):
        control.release(x, rng=None)


@pytest.mark.parametrize("n", [0, -3, 2.5, "10", True])
def test_sample_rejects_bad_n(control, n):
    x, _ = control.neighbours()
    with pytest.raises(ValueError, match="n must be"):
        control.sample(x, n, rng=rng_(0))


# =============================================================================== validation

BAD_EPSILON = [0, -1.0, math.nan, math.inf, "1", True, None]

CONSTRUCTORS = [
    (HalfNoiseLaplace, {}),
    (HistogramWrongScale, {"num_bins": 3}),
    (NoisyMaxReturningValue, {"num_classes": 4}),
    (SparseVector, {}),
    (SparseVectorNoisyValues, {}),
    (SparseVectorUnscaledQueryNoise, {}),
    (SparseVectorNoQueryNoise, {}),
    (SparseVectorNoCutoff, {}),
    (WrongRandomizedResponse, {"num_classes": 4}),
    (NaiveFloatLaplace, {}),
    (GaussianTooLittleNoise, {"delta": 1e-5}),
]


@pytest.mark.parametrize(("cls", "base"), CONSTRUCTORS, ids=[c.__name__ for c, _ in CONSTRUCTORS])
@pytest.mark.parametrize("eps", BAD_EPSILON)
def test_constructors_reject_bad_epsilon(cls, base, eps):
    with pytest.raises(ValueError, match="epsilon must be"):
        cls(epsilon=eps, **base)


BAD_PARAMETERS = [
    (HalfNoiseLaplace, {"epsilon": 1.0, "sensitivity": 0}, "sensitivity"),
    (HalfNoiseLaplace, {"epsilon": 1.0, "sensitivity": -2.0}, "sensitivity"),
    (HalfNoiseLaplace, {"epsilon": 1.0, "sensitivity": math.nan}, "sensitivity"),
    (HalfNoiseLaplace, {"epsilon": 1.0, "sensitivity": Sensitivity(value=1, norm=Norm.L2)},
     "sensitivity"),
    (HistogramWrongScale, {"epsilon": 1.0}, "epsilon"),
    (HistogramWrongScale, {"epsilon": 3.0}, "epsilon"),
    (HistogramWrongScale, {"epsilon": 0.5, "num_bins": 0}, "num_bins"),
    (HistogramWrongScale, {"epsilon": 0.5, "num_bins": 2.0}, "num_bins"),
    (HistogramWrongScale, {"epsilon": 0.5, "num_bins": True}, "num_bins"),
    (NoisyMaxReturningValue, {"epsilon": 1.0, "num_classes": 2}, "num_classes"),
    (NoisyMaxReturningValue, {"epsilon": 1.0, "num_classes": 5.0}, "num_classes"),
    (NoisyMaxReturningValue, {"epsilon": 1.0, "sensitivity": 0}, "sensitivity"),
    (NoisyMaxReturningValue, {"epsilon": 1.0, "with_index": "yes"}, "with_index"),
    (WrongRandomizedResponse, {"epsilon": 701.0}, "epsilon"),
    (WrongRandomizedResponse, {"epsilon": 1.0, "num_classes": 2}, "num_classes"),
    (WrongRandomizedResponse, {"epsilon": 1.0, "num_classes": 3.0}, "num_classes"),
    (NaiveFloatLaplace, {"epsilon": 1.0, "sensitivity": 0}, "sensitivity"),
    (NaiveFloatLaplace, {"epsilon": 1.0, "sensitivity": math.inf}, "sensitivity"),
    (GaussianTooLittleNoise, {"epsilon": 1.0, "delta": 0.0}, "delta"),
    (GaussianTooLittleNoise, {"epsilon": 1.0, "delta": 1.0}, "delta"),
    (GaussianTooLittleNoise, {"epsilon": 1.0, "delta": -1e-5}, "delta"),
    (GaussianTooLittleNoise, {"epsilon": 1.0, "delta": math.nan}, "delta"),
    (GaussianTooLittleNoise, {"epsilon": 1.0, "delta": 1e-5, "sensitivity": 0}, "sensitivity"),
    (GaussianTooLittleNoise, {"epsilon": 1.0, "delta": 1e-5,
                              "sensitivity": Sensitivity(value=1, norm=Norm.L1)}, "sensitivity"),
]
for _cls in SVT_CLASSES:
    BAD_PARAMETERS += [
        (_cls, {"epsilon": 1.0, "num_queries": 1}, "num_queries"),
        (_cls, {"epsilon": 1.0, "num_queries": 4.0}, "num_queries"),
        (_cls, {"epsilon": 1.0, "threshold": math.nan}, "threshold"),
        (_cls, {"epsilon": 1.0, "threshold": -math.inf}, "threshold"),
        (_cls, {"epsilon": 1.0, "threshold": "0"}, "threshold"),
        (_cls, {"epsilon": 1.0, "sensitivity": 0}, "sensitivity"),
    ]
for _cls in SVT_WITH_CUTOFF:
    BAD_PARAMETERS += [
        (_cls, {"epsilon": 1.0, "cutoff": 0}, "cutoff"),
        (_cls, {"epsilon": 1.0, "cutoff": 1.5}, "cutoff"),
        (_cls, {"epsilon": 1.0, "num_queries": 3, "cutoff": 3}, "num_queries"),
    ]


@pytest.mark.parametrize(("cls", "kwargs", "name"), BAD_PARAMETERS,
                         ids=[f"{c.__name__}-{n}-{i}" for i, (c, _, n) in
                              enumerate(BAD_PARAMETERS)])
def test_constructors_reject_bad_parameters(cls, kwargs, name):
    with pytest.raises(ValueError, match=name):
        cls(**kwargs)


BAD_INPUTS = [
    (HalfNoiseLaplace(epsilon=1.0), math.nan),
    (HalfNoiseLaplace(epsilon=1.0), "a"),
    (HistogramWrongScale(epsilon=0.5, num_bins=3), [1.0, 2.0]),
    (HistogramWrongScale(epsilon=0.5, num_bins=3), [1.0, -2.0, 0.0]),
    (NoisyMaxReturningValue(epsilon=1.0, num_classes=3), [1.0, 2.0]),
    (NoisyMaxReturningValue(epsilon=1.0, num_classes=3), [1.0, math.inf, 0.0]),
    (SparseVector(epsilon=1.0, num_queries=4), np.zeros(5)),
    (SparseVectorNoCutoff(epsilon=1.0, num_queries=4), [0.0, 0.0, math.nan, 0.0]),
    (WrongRandomizedResponse(epsilon=1.0, num_classes=3), 3),
    (WrongRandomizedResponse(epsilon=1.0, num_classes=3), -1),
    (WrongRandomizedResponse(epsilon=1.0, num_classes=3), 1.0),
    (NaiveFloatLaplace(epsilon=1.0), math.inf),
    (GaussianTooLittleNoise(epsilon=1.0, delta=1e-5), [0.0, math.nan]),
]


@pytest.mark.parametrize(("mech", "value"), BAD_INPUTS,
                         ids=[f"{type(m).__name__}-{i}" for i, (m, _) in enumerate(BAD_INPUTS)])
def test_sample_rejects_bad_inputs(mech, value):
    with pytest.raises(ValueError, match="value"):
        mech.sample(value, 3, rng=rng_(0))


# =============================================================================== Laplace

N = 200_000


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_half_noise_laplace_scale_and_true_epsilon(eps):
    mech = HalfNoiseLaplace(epsilon=eps, sensitivity=2.0)
    assert mech.scale == pytest.approx(2.0 / (2 * eps))
    assert mech.true_epsilon == pytest.approx(2 * eps)
    noise = mech.sample(0.0, N, rng=rng_(10)).ravel()
    assert stats.kstest(noise, stats.laplace(scale=1.0 / eps).cdf).pvalue > ALPHA
    # power: the scale the claim needs (2/eps) is rejected
    assert stats.kstest(noise, stats.laplace(scale=2.0 / eps).cdf).pvalue < ALPHA


def test_half_noise_laplace_flaw_on_neighbours():
    mech = HalfNoiseLaplace(epsilon=1.0)
    x, x_prime = mech.neighbours()
    assert (x, x_prime) == (0.0, 1.0)
    # event {y <= 0}: exact probabilities 1/2 and e^(-2 eps)/2, ratio e^(2 eps)
    p, q = 0.5, 0.5 * math.exp(-2.0)
    k1 = int((mech.sample(x, N, rng=rng_(11)) <= 0).sum())
    k0 = int((mech.sample(x_prime, N, rng=rng_(12)) <= 0).sum())
    assert binom_pvalue(k1, N, p) > ALPHA and binom_pvalue(k0, N, q) > ALPHA
    assert cp_log_ratio_lower(k1, N, k0, N) > mech.epsilon + 0.5


def test_naive_float_laplace_is_laplace_over_the_reals():
    mech = NaiveFloatLaplace(epsilon=0.5)
    noise = mech.sample(0.0, N, rng=rng_(13))
    assert stats.kstest(noise, stats.laplace(scale=2.0).cdf).pvalue > ALPHA
    assert stats.kstest(noise, stats.laplace(scale=2.2).cdf).pvalue < ALPHA  # power
    vec = mech.sample(np.array([0.0, 5.0]), 10, rng=rng_(13))
    assert vec.shape == (10, 2)


# =============================================================================== histogram


@pytest.mark.parametrize("eps", [0.1, 0.5, 0.9])
def test_histogram_wrong_scale(eps):
    mech = HistogramWrongScale(epsilon=eps, num_bins=4)
    assert mech.scale == eps
    assert mech.true_epsilon == pytest.approx(1.0 / eps)
    assert mech.sensitivity == Sensitivity(value=1.0, norm=Norm.L1)
    x, x_prime = mech.neighbours()
    assert np.abs(x - x_prime).sum() == 1.0  # one record added
    counts = np.array([3.0, 0.0, 7.0, 1.0])
    out = mech.sample(counts, N // 4, rng=rng_(14))
    assert out.shape == (N // 4, 4)
    noise = (out - counts).ravel()
    assert stats.kstest(noise, stats.laplace(scale=eps).cdf).pvalue > ALPHA
    assert stats.kstest(noise, stats.laplace(scale=1.0 / eps).cdf).pvalue < ALPHA  # power


def test_histogram_flaw_on_neighbours():
    mech = HistogramWrongScale(epsilon=0.5, num_bins=5)
    x, x_prime = mech.neighbours()
    # event {bin 0 <= 0}: 1/2 under the empty histogram, e^(-1/eps)/2 with one record
    p, q = 0.5, 0.5 * math.exp(-2.0)
    k1 = int((mech.sample(x, N, rng=rng_(15))[:, 0] <= 0).sum())
    k0 = int((mech.sample(x_prime, N, rng=rng_(16))[:, 0] <= 0).sum())
    assert binom_pvalue(k1, N, p) > ALPHA and binom_pvalue(k0, N, q) > ALPHA
    assert cp_log_ratio_lower(k1, N, k0, N) > mech.epsilon + 1.0


# =============================================================================== noisy max


def noisy_max_cdf(q: np.ndarray, scale: float):
    """CDF of max_j (q_j + Lap(scale)): prod_j F(v - q_j) (independent noises)."""
    def cdf(v):
        v = np.atleast_1d(v)
        return np.prod(stats.laplace.cdf(v[:, None] - q[None, :], scale=scale), axis=1)
    return cdf


@pytest.mark.parametrize("k", [3, 5, 8])
def test_noisy_max_value_distribution_and_true_epsilon(k):
    mech = NoisyMaxReturningValue(epsilon=1.0, num_classes=k)
    assert mech.scale == 2.0
    assert mech.true_epsilon == pytest.approx(k / 2)
    q = np.linspace(-1.0, 2.0, k)
    values = mech.sample(q, N // 2, rng=rng_(17 + k))
    assert stats.kstest(values, noisy_max_cdf(q, 2.0)).pvalue > ALPHA
    assert stats.kstest(values, noisy_max_cdf(q, 1.0)).pvalue < ALPHA  # power


def test_noisy_max_with_index():
    mech = NoisyMaxReturningValue(epsilon=1.0, num_classes=4, with_index=True)
    out = mech.sample(np.zeros(4), N // 2, rng=rng_(21))
    index = out[:, 0].astype(int)
    np.testing.assert_array_equal(out[:, 0], index)
    # equal answers: the index is uniform
    assert chi2_pvalue(np.bincount(index, minlength=4), np.full(4, 0.25)) > ALPHA
    assert stats.kstest(out[:, 1], noisy_max_cdf(np.zeros(4), 2.0)).pvalue > ALPHA


def test_noisy_max_flaw_on_neighbours():
    mech = NoisyMaxReturningValue(epsilon=1.0, num_classes=5)
    x, x_prime = mech.neighbours()
    np.testing.assert_array_equal(x_prime - x, np.ones(5))
    # event {V < 0}: prod F(-q_j) = 2^-k under x, (e^(-1/b)/2)^k under x'; ratio e^(k eps/2)
    p, q = 0.5 ** 5, (0.5 * math.exp(-0.5)) ** 5
    assert math.log(p / q) == pytest.approx(mech.true_epsilon)
    k1 = int((mech.sample(x, N, rng=rng_(22)) < 0).sum())
    k0 = int((mech.sample(x_prime, N, rng=rng_(23)) < 0).sum())
    assert binom_pvalue(k1, N, p) > ALPHA and binom_pvalue(k0, N, q) > ALPHA
    assert cp_log_ratio_lower(k1, N, k0, N) > mech.epsilon + 0.8


# =============================================================================== sparse vector


def test_svt_scales_follow_lyu_su_li():
    eps, c, d = 0.8, 3, 2.0
    alg1 = SparseVector(epsilon=eps, cutoff=c, sensitivity=d)
    assert (alg1.threshold_scale, alg1.query_scale) == pytest.approx((2 * d / eps, 4 * c * d / eps))
    assert alg1.true_epsilon == pytest.approx(eps)
    alg3 = SparseVectorNoisyValues(epsilon=eps, cutoff=c, sensitivity=d)
    assert (alg3.threshold_scale, alg3.query_scale) == pytest.approx((2 * d / eps, 2 * c * d / eps))
    alg4 = SparseVectorUnscaledQueryNoise(epsilon=eps, cutoff=c, sensitivity=d)
    assert (alg4.threshold_scale, alg4.query_scale) == pytest.approx((4 * d / eps,
                                                                      4 * d / (3 * eps)))
    # (1 + 6c) eps / 4 = Delta/b_rho + 2 c Delta/b_nu
    assert alg4.true_epsilon == pytest.approx((1 + 6 * c) * eps / 4)
    assert alg4.true_epsilon == pytest.approx(d / alg4.threshold_scale
                                              + 2 * c * d / alg4.query_scale)
    alg5 = SparseVectorNoQueryNoise(epsilon=eps, sensitivity=d)
    assert (alg5.threshold_scale, alg5.query_scale) == (2 * d / eps, 0.0)
    alg6 = SparseVectorNoCutoff(epsilon=eps, sensitivity=d)
    assert (alg6.threshold_scale, alg6.query_scale) == pytest.approx((2 * d / eps, 2 * d / eps))
    assert math.isinf(alg3.true_epsilon) and math.isinf(alg5.true_epsilon)
    assert math.isinf(alg6.true_epsilon)


def test_svt_neighbours_pattern():
    mech = SparseVectorUnscaledQueryNoise(epsilon=1.0, num_queries=6, cutoff=2, threshold=3.0,
                                          sensitivity=0.5)
    x, x_prime = mech.neighbours()
    np.testing.assert_array_equal(x, [3.0, 3.0, 3.0, 3.0, 3.5, 3.5])
    np.testing.assert_array_equal(x_prime, [3.5, 3.5, 3.5, 3.5, 3.0, 3.0])
    assert mech.distinguishing_outcome() == (0, 0, 0, 0, 1, 1)
    x, x_prime = SparseVectorNoCutoff(epsilon=1.0, num_queries=5).neighbours()
    np.testing.assert_array_equal(x, [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(x_prime, [1, 1, 1, 0, 0])
    assert np.all(np.abs(x - x_prime) <= 1.0)  # every answer moves by at most Delta


def svt_strategy():
    @st.composite
    def build(draw):
        cls = draw(st.sampled_from(SVT_CLASSES))
        m = draw(st.integers(2, 8))
        kwargs = {"epsilon": draw(st.floats(0.1, 5.0)), "num_queries": m,
                  "threshold": draw(st.floats(-3.0, 3.0))}
        if cls in SVT_WITH_CUTOFF:
            kwargs["cutoff"] = draw(st.integers(1, m - 1))
        q = draw(st.lists(st.floats(-5.0, 5.0), min_size=m, max_size=m))
        return cls(**kwargs), np.array(q), draw(st.integers(0, 2**32 - 1))
    return build()


@FEW
@given(svt_strategy())
def test_svt_output_format(case):
    mech, q, seed = case
    m = mech.num_queries
    out = mech.sample(q, 300, rng=rng_(seed))
    if isinstance(mech, SparseVectorNoisyValues):
        assert out.dtype == np.float64 and out.shape == (300, 2 * m)
        codes, values = out[:, :m].astype(np.int8), out[:, m:]
        np.testing.assert_array_equal(out[:, :m], codes)
        assert np.all(values[codes != SVT_TOP] == 0.0)
        assert np.all(np.isfinite(values))
    else:
        assert out.dtype == np.int8 and out.shape == (300, m)
        codes = out
    assert np.all(np.isin(codes, (SVT_TOP, SVT_BOTTOM, SVT_ABORTED)))
    tops = np.cumsum(codes == SVT_TOP, axis=1)
    c = mech.cutoff_or_none
    if c is None:
        assert not np.any(codes == SVT_ABORTED)
    else:
        assert np.all(tops[:, -1] <= c)
        # aborted exactly after the c-th top
        before = tops - (codes == SVT_TOP)
        np.testing.assert_array_equal(codes == SVT_ABORTED, before >= c)
    if isinstance(mech, SparseVectorNoQueryNoise):
        # without query noise, a larger answer is a top whenever a smaller one is
        order = np.argsort(q, kind="stable")
        sorted_tops = codes[:, order] == SVT_TOP
        assert np.all(np.diff(sorted_tops.astype(int), axis=1) >= 0)


def allowed(outcome: tuple[int, ...], cutoff: int | None) -> bool:
    """Whether the cut-off rules allow a code vector: aborted exactly after the c-th top."""
    tops = 0
    for code in outcome:
        if code == SVT_ABORTED:
            if cutoff is None or tops < cutoff:
                return False
        elif cutoff is not None and tops >= cutoff:
            return False
        tops += code == SVT_TOP
    return True


def all_outcomes(mech) -> list[tuple[int, ...]]:
    """Every code vector the cut-off rules allow."""
    return [o for o in itertools.product((SVT_ABORTED, SVT_BOTTOM, SVT_TOP),
                                         repeat=mech.num_queries)
            if allowed(o, mech.cutoff_or_none)]


SMALL_SVT = [
    SparseVector(epsilon=1.0, num_queries=4, cutoff=2, threshold=0.5),
    SparseVectorNoisyValues(epsilon=1.0, num_queries=4, cutoff=1),
    SparseVectorUnscaledQueryNoise(epsilon=1.0, num_queries=4, cutoff=2),
    SparseVectorNoQueryNoise(epsilon=1.0, num_queries=4),
    SparseVectorNoCutoff(epsilon=1.0, num_queries=4, threshold=-0.3),
]


@pytest.mark.parametrize("mech", SMALL_SVT, ids=[type(m).__name__ for m in SMALL_SVT])
def test_svt_outcome_distribution_is_exact(mech):
    """Chi-square of the full code distribution (m = 4) against ``outcome_probability``."""
    outcomes = all_outcomes(mech)
    m = mech.num_queries
    for value in mech.neighbours():
        probs = np.array([mech.outcome_probability(value, np.array(o)) for o in outcomes])
        assert probs.sum() == pytest.approx(1.0, abs=1e-9)
        out = mech.sample(value, N // 2, rng=rng_(31))
        codes = out[:, :m].astype(np.int8)
        index = {o: i for i, o in enumerate(outcomes)}
        ids = np.array([index[tuple(row)] for row in codes.tolist()])
        observed = np.bincount(ids, minlength=len(outcomes))
        assert chi2_pvalue(observed, probs / probs.sum()) > ALPHA


def test_svt_outcome_probability_validation():
    mech = SparseVector(epsilon=1.0, num_queries=3, cutoff=1)
    with pytest.raises(ValueError, match="outcome"):
        mech.outcome_probability(np.zeros(3), [0, 1])
    with pytest.raises(ValueError, match="outcome"):
        mech.outcome_probability(np.zeros(3), [0.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="value"):
        mech.outcome_probability(np.zeros(4), [0, 1, -1])
    # ruled out by the cut-off: a second top, or an abort before the first top
    assert mech.outcome_probability(np.zeros(3), [1, 1, 0]) == 0.0
    assert mech.outcome_probability(np.zeros(3), [0, -1, -1]) == 0.0
    assert mech.outcome_probability(np.zeros(3), [1, 0, 0]) == 0.0
    assert mech.outcome_probability(np.zeros(3), [1, -1, -1]) > 0.0
    assert SparseVectorNoCutoff(epsilon=1.0, num_queries=3).outcome_probability(
        np.zeros(3), [1, -1, -1]) == 0.0


# (exact log-ratio of the distinguishing outcome on neighbours(), lower limit asserted)
SVT_FLAWS = [
    (SparseVectorNoisyValues(epsilon=1.0, num_queries=10, cutoff=1), 1.45),
    (SparseVectorUnscaledQueryNoise(epsilon=1.0, num_queries=10, cutoff=2), 3.1),
    (SparseVectorNoQueryNoise(epsilon=1.0, num_queries=10), math.inf),
    (SparseVectorNoCutoff(epsilon=1.0, num_queries=10), 4.0),
]


@pytest.mark.parametrize(("mech", "least"), SVT_FLAWS, ids=[type(m).__name__ for m, _ in SVT_FLAWS])
def test_svt_flaw_on_neighbours(mech, least):
    x, x_prime = mech.neighbours()
    outcome = np.array(mech.distinguishing_outcome())
    p = mech.outcome_probability(x, outcome)
    q = mech.outcome_probability(x_prime, outcome)
    exact = math.log(p / q) if q > 0 else math.inf
    assert exact >= least
    assert exact <= mech.true_epsilon
    n = N
    m = mech.num_queries
    k1 = int(np.all(mech.sample(x, n, rng=rng_(41))[:, :m] == outcome, axis=1).sum())
    k0 = int(np.all(mech.sample(x_prime, n, rng=rng_(42))[:, :m] == outcome, axis=1).sum())
    assert binom_pvalue(k1, n, p) > ALPHA
    if q == 0:
        assert k0 == 0  # impossible under x' (Alg. 5), never observed
    else:
        assert binom_pvalue(k0, n, q) > ALPHA
    # The Clopper-Pearson bound exceeds the claim. False-failure rate: with the exact p, q the
    # bound stays above the claim unless count_x < k1_lo or count_x' > k0_hi, which have
    # probability <= 1e-6 each (checked here); the random check below then fails w.p. <= 2e-6.
    k1_lo = int(stats.binom.ppf(1e-6, n, p))
    k0_hi = int(stats.binom.isf(1e-6, n, q)) if q > 0 else 0
    assert cp_log_ratio_lower(k1_lo, n, k0_hi, n) > mech.epsilon
    assert cp_log_ratio_lower(k1, n, k0, n) > mech.epsilon


def test_correct_svt_is_not_flawed_on_the_same_pattern():
    mech = SparseVector(epsilon=1.0, num_queries=10, cutoff=1)
    x, x_prime = mech.neighbours()
    worst = 0.0
    # with c = 1 the outcomes are: first top at position j (rest aborted), or no top
    for j in range(mech.num_queries + 1):
        o = np.full(mech.num_queries, SVT_ABORTED)
        o[:j] = SVT_BOTTOM
        if j < mech.num_queries:
            o[j] = SVT_TOP
        p, q = mech.outcome_probability(x, o), mech.outcome_probability(x_prime, o)
        worst = max(worst, abs(math.log(p / q)))
    assert 0.95 < worst <= mech.epsilon  # tight (about 0.989) but within the claim


def test_svt_noisy_values_releases_the_noisy_answers():
    """With one query answered, P(top, value <= a) = int p_rho(r) (F(a-q) - F(T+r-q))^+ dr."""
    mech = SparseVectorNoisyValues(epsilon=1.0, num_queries=2, cutoff=1, threshold=0.5)
    q = np.array([1.0, -20.0])  # the second query is (almost) never a top
    out = mech.sample(q, N, rng=rng_(51))
    b_rho, b_nu, t = mech.threshold_scale, mech.query_scale, mech.threshold
    for a in (0.0, 1.0, 3.0, 8.0):
        def integrand(r, a=a):
            upper = stats.laplace.cdf(a - q[0], scale=b_nu)
            lower = stats.laplace.cdf(t + r - q[0], scale=b_nu)
            return stats.laplace.pdf(r, scale=b_rho) * max(0.0, upper - lower)
        exact = sum(integrate.quad(integrand, lo, hi, limit=200)[0]
                    for lo, hi in ((-80.0, a - t), (a - t, 80.0)))
        k = int(((out[:, 0] == SVT_TOP) & (out[:, 2] <= a)).sum())
        assert binom_pvalue(k, N, exact) > ALPHA


# =============================================================================== randomized resp.


@pytest.mark.parametrize(("eps", "k"), [(0.5, 3), (1.0, 10), (3.0, 5)])
def test_wrong_randomized_response_pmf_and_true_epsilon(eps, k):
    mech = WrongRandomizedResponse(epsilon=eps, num_classes=k)
    p = math.exp(eps) / (math.exp(eps) + 1)
    assert mech.keep_probability == pytest.approx(p)
    assert mech.other_probability == pytest.approx((1 - p) / (k - 1))
    pmf_x = np.full(k, (1 - p) / (k - 1))
    pmf_x[2] = p
    assert mech.true_epsilon == pytest.approx(math.log(pmf_x[2] / pmf_x[0]))
    assert mech.true_epsilon == pytest.approx(eps + math.log(k - 1))
    out = mech.sample(2, N, rng=rng_(60 + k))
    assert out.dtype == np.int64
    assert chi2_pvalue(np.bincount(out, minlength=k), pmf_x) > ALPHA
    # power: correct k-ary RR (keep e^eps/(e^eps+k-1)) is rejected
    correct = np.full(k, 1 / (math.exp(eps) + k - 1))
    correct[2] = math.exp(eps) / (math.exp(eps) + k - 1)
    assert chi2_pvalue(np.bincount(out, minlength=k), correct) < ALPHA


def test_wrong_randomized_response_flaw_on_neighbours():
    mech = WrongRandomizedResponse(epsilon=1.0, num_classes=10)
    x, x_prime = mech.neighbours()
    k1 = int((mech.sample(x, N, rng=rng_(71)) == x).sum())
    k0 = int((mech.sample(x_prime, N, rng=rng_(72)) == x).sum())
    assert binom_pvalue(k1, N, mech.keep_probability) > ALPHA
    assert binom_pvalue(k0, N, mech.other_probability) > ALPHA
    assert cp_log_ratio_lower(k1, N, k0, N) > mech.epsilon + 1.5
    batch = mech.sample(np.array([[0, 1], [2, 9]]), 5, rng=rng_(73))
    assert batch.shape == (5, 2, 2)


# =============================================================================== floating point


def test_naive_float_laplace_probe_is_consistent_with_the_sampler():
    """Every sampled output is attainable on its own input (the probe reproduces the sampler)."""
    mech = NaiveFloatLaplace(epsilon=1.0)
    for x in (0.0, 1.0, -3.25):
        y = mech.sample(x, 5_000, rng=rng_(80))
        assert mech.attainable(x, y).all()
    assert mech.attainable(1.0, [1.0]).all()  # U = 1 gives exactly x


def test_naive_float_laplace_has_impossible_outputs():
    """Deterministic: most outputs of x = 1 in [2, 3) can never be produced by x = 0."""
    mech = NaiveFloatLaplace(epsilon=1.0)
    x, x_prime = mech.neighbours()
    y1 = mech.sample(x_prime, 20_000, rng=rng_(81))
    band = y1[(y1 >= 2.0) & (y1 < 3.0)]
    assert band.size > 1_000
    impossible = ~mech.attainable(x, band)
    assert impossible.mean() > 0.5
    # an explicit witness: an exact double that x' = 1 outputs and x = 0 cannot output
    witness = float(band[impossible][0])
    assert mech.attainable(x_prime, witness) and not mech.attainable(x, witness)
    # and the other direction
    y0 = mech.sample(x, 20_000, rng=rng_(82))
    assert (~mech.attainable(x_prime, y0[(y0 >= 2.0) & (y0 < 3.0)])).any()


@pytest.mark.parametrize(("eps", "sensitivity"), [(0.1, 1.0), (1.0, 0.3), (2.0, 5.0)])
def test_naive_float_laplace_impossible_outputs_for_other_parameters(eps, sensitivity):
    """Deterministic: a large share of either input's outputs is impossible under the other."""
    mech = NaiveFloatLaplace(epsilon=eps, sensitivity=sensitivity)
    x, x_prime = mech.neighbours()
    for a, b, seed in ((x, x_prime, 85), (x_prime, x, 86)):
        y = mech.sample(a, 10_000, rng=rng_(seed))
        assert mech.attainable(a, y).all()
        assert (~mech.attainable(b, y)).mean() > 0.4


def test_naive_float_laplace_probe_on_constructed_values():
    mech = NaiveFloatLaplace(epsilon=1.0)
    j = np.array([1.0, 12345.0, 2.0**40, 2.0**52 + 7.0, 2.0**53])
    for x in (0.0, 1.0):
        for sign in (1.0, -1.0):
            y = x + sign * (mech.scale * -np.log(j / 2.0**53))
            assert mech.attainable(x, y).all()
    # beyond the largest attainable magnitude b * 53 ln 2 nothing is attainable
    assert not mech.attainable(0.0, [40.0, -40.0]).any()
    with pytest.raises(ValueError, match="value"):
        mech.attainable(math.nan, [1.0])
    with pytest.raises(ValueError, match="outputs"):
        mech.attainable(0.0, [math.inf])


def test_naive_float_laplace_lowest_bit_differs():
    """Generic bit-level evidence: on [2, 3) the lowest mantissa bit is biased under x = 1.

    fl(1 + z) for z in [1, 2) ties half the time and ties round to even: P(bit = 0) is about
    3/4 under x = 1 and 1/2 under x = 0. With about 4,600 and 1,700 outputs in the band the
    difference is more than 10 standard deviations (false-failure rate far below 1e-10).
    """
    mech = NaiveFloatLaplace(epsilon=1.0)
    x, x_prime = mech.neighbours()
    bits = []
    for value, seed in ((x, 83), (x_prime, 84)):
        y = mech.sample(value, 40_000, rng=rng_(seed))
        band = y[(y >= 2.0) & (y < 3.0)]
        bits.append((band.view(np.uint64) & np.uint64(1)) == 0)
    zero_x, zero_x_prime = bits[0].mean(), bits[1].mean()
    assert abs(zero_x - 0.5) < 0.06 and abs(zero_x_prime - 0.75) < 0.04
    table = [[bits[0].sum(), (~bits[0]).sum()], [bits[1].sum(), (~bits[1]).sum()]]
    assert stats.fisher_exact(table).pvalue < ALPHA


# =============================================================================== Gaussian


@pytest.mark.parametrize(("eps", "delta"), [(1.0, 1e-5), (0.5, 1e-3), (3.0, 1e-6)])
def test_gaussian_too_little_noise(eps, delta):
    mech = GaussianTooLittleNoise(epsilon=eps, delta=delta)
    correct = calibrate_analytic_gaussian(eps, delta, 1.0)
    assert mech.sigma == pytest.approx(correct / 2, rel=1e-9)
    assert mech.delta_at_claimed_epsilon > 10 * delta
    true = mech.true_epsilon
    assert true > eps * 1.2
    assert analytic_gaussian_delta(true, mech.sigma) <= delta
    assert analytic_gaussian_delta(true * (1 - 1e-6), mech.sigma) > delta  # smallest such
    noise = mech.sample(0.0, N // 2, rng=rng_(90))
    assert stats.kstest(noise, stats.norm(scale=mech.sigma).cdf).pvalue > ALPHA
    assert stats.kstest(noise, stats.norm(scale=correct).cdf).pvalue < ALPHA  # power


def test_gaussian_flaw_on_neighbours():
    mech = GaussianTooLittleNoise(epsilon=1.0, delta=1e-5)
    assert mech.true_epsilon == pytest.approx(2.1547, abs=1e-3)
    x, x_prime = mech.neighbours()
    # event {y >= 6}: exact probabilities from the normal tail; (P1 - delta)/P0 >> e^eps
    p1 = stats.norm.sf(6.0 - x_prime, scale=mech.sigma)
    p0 = stats.norm.sf(6.0 - x, scale=mech.sigma)
    assert math.log((p1 - mech.delta) / p0) > 1.7
    n = 400_000
    k1 = int((mech.sample(x_prime, n, rng=rng_(91)) >= 6.0).sum())
    k0 = int((mech.sample(x, n, rng=rng_(92)) >= 6.0).sum())
    assert binom_pvalue(k1, n, p1) > ALPHA and binom_pvalue(k0, n, p0) > ALPHA
