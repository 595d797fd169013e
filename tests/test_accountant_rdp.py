"""RDP accountant: every curve against an independent computation, conversions, order search.

No test here is statistical: every reference is a deterministic computation (mpmath quadrature
or exact sums at 30+ digits, closed forms, dp_accounting), so the tolerances below are numerical
and the false-failure rate is zero.
"""

from __future__ import annotations

import contextlib
import itertools
import math

import attr
import mpmath as mp
import numpy as np
import pytest
from dp_accounting import dp_event as _dp
from dp_accounting.pld import pld_privacy_accountant as _pld
from dp_accounting.rdp import rdp_privacy_accountant as _dpa_rdp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize
from work_bounds import MB, peak_bytes

from dpkd_audit._math.privacy import (
    analytic_gaussian_delta,
    calibrate_analytic_gaussian,
    discrete_gaussian_delta,
)
from dpkd_audit.accountants.base import (
    BoundKind,
    Epsilon,
    NeighboringRelation,
    UnsupportedEventError,
)
from dpkd_audit.accountants.rdp import (
    DEFAULT_ORDERS,
    DP_ACCOUNTING_DEFAULT_ORDERS,
    RDPAccountant,
    delta_from_rdp,
    discrete_laplace_rdp,
    epsilon_from_rdp,
    gaussian_rdp,
    is_data_dependent,
    laplace_rdp,
    pure_dp_rdp,
    randomized_response_rdp,
    rdp_curve,
    register_rdp_curve,
    subsampled_gaussian_rdp,
    unregister_rdp_curve,
)
from dpkd_audit.events import (
    ApproxDpEvent,
    BitRandomizedResponseDpEvent,
    CalibratedGaussianDpEvent,
    CollisionDpEvent,
    DiscreteGaussianDpEvent,
    GaussianNoisyMaxDpEvent,
    LaplaceNoisyMaxDpEvent,
    PureDpEvent,
    SelectiveRandomizedResponseDpEvent,
    ShuffledHistogramDpEvent,
    ShuffledLocalDpEvent,
)

ADD_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE
REPLACE_ONE = NeighboringRelation.REPLACE_ONE
REL = 1e-8  # tolerance of curves against the high-precision references

mp.mp.dps = 30


# --------------------------------------------------------------------------- references


def _renyi_quad(logp, logq, alpha, points):
    """D_alpha(P||Q) = log int p^alpha q^(1-alpha) / (alpha-1), by mpmath quadrature."""
    a = mp.mpf(alpha)
    integral = mp.quad(lambda x: mp.exp(a * logp(x) + (1 - a) * logq(x)), points)
    return float(mp.log(integral) / (a - 1))


def _renyi_sum(p, q, alpha):
    """D_alpha(P||Q) for finite distributions given as lists of mpf."""
    a = mp.mpf(alpha)
    total = mp.fsum(pi ** a * qi ** (1 - a) for pi, qi in zip(p, q, strict=True) if pi > 0)
    return float(mp.log(total) / (a - 1))


def _gaussian_ref(sigma, alpha, shift=1.0):
    s, m = mp.mpf(sigma), mp.mpf(shift)
    norm = mp.log(s * mp.sqrt(2 * mp.pi))
    return _renyi_quad(lambda x: -x * x / (2 * s * s) - norm,
                       lambda x: -(x - m) ** 2 / (2 * s * s) - norm, alpha,
                       [-mp.inf, (1 - mp.mpf(alpha)) * m, 0, m, mp.inf])


def _laplace_ref(scale, alpha):
    b = mp.mpf(scale)
    norm = mp.log(2 * b)
    return _renyi_quad(lambda x: -abs(x) / b - norm, lambda x: -abs(x - 1) / b - norm, alpha,
                       [-mp.inf, 0, 1, mp.inf])


def _discrete_laplace_ref(a, shift, alpha):
    a = mp.mpf(a)
    n = shift + int(90 / float(a)) + 2  # tails below e^-90 of the mass
    c = mp.tanh(a / 2)
    xs = range(-n, n + shift + 1)
    p = [c * mp.exp(-a * abs(x)) for x in xs]
    q = [c * mp.exp(-a * abs(x - shift)) for x in xs]
    return _renyi_sum(p, q, alpha)


def _discrete_gaussian_ref(sigma, shift, alpha):
    s = mp.mpf(sigma)
    n = int(40 * sigma) + shift + 2
    xs = range(-n, n + 1)
    z = mp.fsum(mp.exp(-mp.mpf(x) ** 2 / (2 * s * s)) for x in xs)
    p = [mp.exp(-mp.mpf(x) ** 2 / (2 * s * s)) / z for x in xs]
    q = [mp.exp(-mp.mpf(x - shift) ** 2 / (2 * s * s)) / z for x in xs]
    return _renyi_sum(p, q, alpha)


def _rr_dists(p, k):
    keep, other = 1 - mp.mpf(p) + mp.mpf(p) / k, mp.mpf(p) / k
    return [keep, other] + [other] * (k - 2), [other, keep] + [other] * (k - 2)


def _sgm_ref(q, sigma, alpha, reverse=False):
    """D_alpha(mu||mu0) (or D_alpha(mu0||mu)) for mu = (1-q)N(0,s^2) + qN(1,s^2), mu0 = N(0,s^2)."""
    q, s, a = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)

    def mix(z):
        return (1 - q) * mp.npdf(z, 0, s) + q * mp.npdf(z, 1, s)

    def integrand(z):
        if reverse:
            return mix(z) * (mp.npdf(z, 0, s) / mix(z)) ** a
        return mp.npdf(z, 0, s) * (mix(z) / mp.npdf(z, 0, s)) ** a

    z0 = s * s * mp.log(1 / q - 1) + mp.mpf(1) / 2
    points = sorted({-mp.inf, mp.mpf(0), mp.mpf(1), z0, a, mp.inf})
    return float(mp.log(mp.quad(integrand, points)) / (a - 1))


# --------------------------------------------------------------------------- curves


@pytest.mark.parametrize(("sigma", "alpha"), [(0.5, 1.001), (1.0, 2.5), (2.0, 17.3), (5.0, 400.0),
                                              (1.3, 1.07)])
def test_gaussian_curve_matches_quadrature(sigma, alpha):
    assert gaussian_rdp(sigma, [alpha])[0] == pytest.approx(_gaussian_ref(sigma, alpha), rel=REL)
    assert rdp_curve(_dp.GaussianDpEvent(sigma), alpha)[0] == pytest.approx(
        alpha / (2 * sigma**2), rel=1e-15)


@pytest.mark.parametrize(("scale", "alpha"), [(20.0, 1.001), (20.0, 1e4 + 0.5), (1.0, 1.5),
                                              (1.0, 37.7), (0.2, 1.01), (0.2, 3.0),
                                              (1000.0, 2.0), (2.0, 1.0001)])
def test_laplace_curve_matches_quadrature(scale, alpha):
    ours = laplace_rdp(1.0 / scale, [alpha])[0]
    assert ours == pytest.approx(_laplace_ref(scale, alpha), rel=REL)
    assert rdp_curve(_dp.LaplaceDpEvent(scale), [alpha])[0] == ours


@pytest.mark.parametrize(("scale", "alpha"), [(0.7, 2.0), (3.0, 1.2), (0.05, 11.0), (20.0, 64.0)])
def test_laplace_curve_matches_dp_accounting(scale, alpha):
    theirs = _dpa_rdp._laplace_rdp(1.0 / scale, alpha)
    assert laplace_rdp(1.0 / scale, [alpha])[0] == pytest.approx(theirs, rel=1e-10)


@pytest.mark.parametrize(("a", "shift", "alpha"), [
    (0.05, 1, 1.01), (0.7, 1, 2.5), (3.0, 1, 40.0), (0.05, 2, 1.5), (0.7, 2, 1.001),
    (0.3, 5, 3.3), (2.0, 3, 200.0), (0.01, 4, 1.2)])
def test_discrete_laplace_curve_matches_exact_sum(a, shift, alpha):
    ours = discrete_laplace_rdp(a, shift, [alpha])[0]
    assert ours == pytest.approx(_discrete_laplace_ref(a, shift, alpha), rel=REL)
    event = _dp.DiscreteLaplaceDpEvent(a, shift)
    assert rdp_curve(event, [alpha])[0] == ours


def test_discrete_laplace_worst_shift_is_the_sensitivity():
    # The curve at sensitivity D must dominate every smaller shift (H_k increasing in k).
    orders = np.array([1.05, 2.0, 7.5, 100.0])
    for a in (0.1, 1.0):
        curves = [discrete_laplace_rdp(a, k, orders) for k in range(1, 7)]
        assert all((later >= earlier).all() for earlier, later in itertools.pairwise(curves))
    # Sensitivity 1 is exactly binary randomized response with eps = a.
    np.testing.assert_allclose(discrete_laplace_rdp(0.4, 1, orders), pure_dp_rdp(0.4, orders),
                               rtol=1e-15)


@pytest.mark.parametrize(("p", "k", "alpha"), [(0.3, 2, 1.5), (0.3, 5, 1.001), (0.05, 10, 30.0),
                                               (0.9, 3, 2.0), (0.5, 100, 7.7)])
def test_randomized_response_curve_matches_exact_sum(p, k, alpha):
    pdist, qdist = _rr_dists(p, k)
    ref = _renyi_sum(pdist, qdist, alpha)
    assert randomized_response_rdp(p, k, [alpha])[0] == pytest.approx(ref, rel=REL)
    assert rdp_curve(_dp.RandomizedResponseDpEvent(p, k), [alpha])[0] == pytest.approx(
        ref, rel=REL)
    assert _dpa_rdp._randomized_response_rdp_replace_one(p, k, alpha) == pytest.approx(
        ref, rel=1e-9)


@pytest.mark.parametrize(("p", "k", "alpha"), [(0.3, 5, 2.5), (0.8, 2, 1.01), (0.1, 7, 20.0)])
def test_randomized_response_replace_special_is_max_of_both_directions(p, k, alpha):
    pdist, _ = _rr_dists(p, k)
    uniform = [mp.mpf(1) / k] * k
    ref = max(_renyi_sum(pdist, uniform, alpha), _renyi_sum(uniform, pdist, alpha))
    ours = randomized_response_rdp(p, k, [alpha], NeighboringRelation.REPLACE_SPECIAL)[0]
    assert ours == pytest.approx(ref, rel=REL)
    assert ours == pytest.approx(_dpa_rdp._randomized_response_rdp_replace_special(p, k, alpha),
                                 rel=1e-9)


def test_randomized_response_edge_cases():
    orders = [1.5, 2.0, np.inf]
    assert (randomized_response_rdp(1.0, 4, orders) == 0).all()
    assert np.isinf(randomized_response_rdp(0.0, 4, orders)).all()
    eps = math.log1p(4 * 0.7 / 0.3)
    assert randomized_response_rdp(0.3, 4, [np.inf])[0] == pytest.approx(eps, rel=1e-15)


@pytest.mark.parametrize(("eps", "alpha"), [(1e-3, 1.001), (0.05, 2.0), (1.0, 1.5), (1.0, 1e3),
                                            (5.0, 3.3), (0.3, 1.0001)])
def test_pure_curve_is_binary_randomized_response(eps, alpha):
    e = mp.mpf(eps)
    keep = mp.exp(e) / (1 + mp.exp(e))
    ref = _renyi_sum([keep, 1 - keep], [1 - keep, keep], alpha)
    ours = pure_dp_rdp(eps, [alpha])[0]
    assert ours == pytest.approx(ref, rel=REL)
    for event in (PureDpEvent(eps), ApproxDpEvent(eps, 0.0), SelectiveRandomizedResponseDpEvent(
            eps, 10), ShuffledLocalDpEvent(eps, 1000), CollisionDpEvent(eps, 40, 2, 8)):
        assert rdp_curve(event, [alpha])[0] == ours


def test_pure_curve_dominates_every_pure_mechanism_and_known_bounds():
    """RR_eps is the worst eps-DP pair: Laplace, k-RR and discrete Laplace stay below it."""
    orders = np.concatenate([1 + np.logspace(-3, 3, 40), [np.inf]])
    for eps in (0.01, 0.3, 1.0, 4.0):
        worst = pure_dp_rdp(eps, orders)
        assert (laplace_rdp(eps, orders) <= worst * (1 + 1e-12)).all()
        assert (discrete_laplace_rdp(eps / 3, 3, orders) <= worst * (1 + 1e-12)).all()
        k = 6
        p = k / (math.exp(eps) - 1 + k)  # k-RR with log(q_keep/q_other) = eps
        assert (randomized_response_rdp(p, k, orders) <= worst * (1 + 1e-12)).all()
        finite = orders[np.isfinite(orders)]
        bound = np.minimum(eps, finite * eps * eps / 2)  # Bun-Steinke 2016, Prop 3.3
        assert (pure_dp_rdp(eps, finite) <= bound * (1 + 1e-12)).all()
        assert worst[-1] == eps


@pytest.mark.parametrize(("q", "sigma", "alpha"), [
    (0.01, 1.0, 1.5), (0.01, 1.0, 12.25), (0.5, 0.5, 1.001), (0.1, 0.3, 2.5), (0.9, 2.0, 7.3),
    (0.05, 0.8, 33.3)])
def test_subsampled_gaussian_fractional_orders_match_quadrature(q, sigma, alpha):
    ours = subsampled_gaussian_rdp(q, sigma, [alpha])[0]
    ref = _sgm_ref(q, sigma, alpha)
    assert ours == pytest.approx(ref, rel=1e-9)
    # MTZ19: the mixture-to-Gaussian direction is the larger one (checked, not assumed).
    assert _sgm_ref(q, sigma, alpha, reverse=True) <= ref * (1 + 1e-12)


@pytest.mark.parametrize(("q", "sigma", "alpha"), [(0.001, 10.0, 1.2), (0.5, 1e3, 1.5),
                                                  (0.01, 1e4, 2.5), (0.2, 0.1, 1.0005)])
def test_subsampled_gaussian_keeps_relative_precision_at_extremes(q, sigma, alpha):
    # RDP down to 1e-12 (large sigma) and up to ~10 at alpha - 1 = 5e-4 (small sigma).
    ours = subsampled_gaussian_rdp(q, sigma, [alpha])[0]
    assert ours == pytest.approx(_sgm_ref(q, sigma, alpha), rel=1e-9)


@pytest.mark.parametrize(("q", "sigma", "alpha"), [(0.01, 1.0, 3.5), (0.3, 0.6, 10.5),
                                                  (0.9, 2.0, 15.25)])
def test_subsampled_gaussian_quadrature_and_series_agree(q, sigma, alpha):
    import dpkd_audit.accountants.rdp.accountant as rdp_module

    quad = rdp_module._sgm_log_a_quad(q, sigma, alpha)
    series = rdp_module._sgm_log_a_frac(q, sigma, alpha)
    assert quad is not None and quad == pytest.approx(series, rel=1e-11)


def test_subsampled_gaussian_grid_is_monotone():
    # D_alpha is non-decreasing in alpha (van Erven-Harremoes 2014, Thm 3), across all methods.
    for q, sigma in ((0.01, 1.0), (0.5, 0.5), (0.5, 1e3), (0.2, 0.1)):
        values = subsampled_gaussian_rdp(q, sigma, DEFAULT_ORDERS[:-1])
        assert np.all(np.diff(values) >= 0)


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.0), (0.2, 0.7), (0.001, 5.0), (0.5, 2.0)])
def test_subsampled_gaussian_integer_orders_match_dp_accounting(q, sigma):
    orders = np.array([2.0, 3.0, 8.0, 32.0, 256.0])
    theirs = _dpa_rdp._compute_rdp_poisson_subsampled_gaussian(q, sigma, orders)
    np.testing.assert_allclose(subsampled_gaussian_rdp(q, sigma, orders), theirs, rtol=1e-9)


def test_subsampled_gaussian_is_continuous_across_integer_orders():
    for alpha in (2.0, 5.0, 64.0):
        at = subsampled_gaussian_rdp(0.05, 0.9, [alpha])[0]
        near = subsampled_gaussian_rdp(0.05, 0.9, [alpha - 1e-9, alpha + 1e-9])
        np.testing.assert_allclose(near, at, rtol=1e-6)
    np.testing.assert_allclose(subsampled_gaussian_rdp(1.0, 1.3, [1.5, 9.0]),
                               gaussian_rdp(1.3, [1.5, 9.0]), rtol=1e-15)
    assert (subsampled_gaussian_rdp(0.0, 1.3, [1.5, 9.0]) == 0).all()


def test_subsampled_gaussian_curve_needs_add_or_remove():
    event = _dp.PoissonSampledDpEvent(0.01, _dp.GaussianDpEvent(1.0))
    with pytest.raises(UnsupportedEventError, match="ADD_OR_REMOVE_ONE"):
        rdp_curve(event, [2.0], REPLACE_ONE)
    value = rdp_curve(event, [2.0], ADD_REMOVE)[0]
    assert value == pytest.approx(subsampled_gaussian_rdp(0.01, 1.0, [2.0])[0], rel=1e-15)
    # Gaussians composed on the same sample = one Gaussian with (sum s_i^-2)^-1/2.
    twice = _dp.PoissonSampledDpEvent(0.01, _dp.SelfComposedDpEvent(_dp.GaussianDpEvent(2.0), 4))
    assert rdp_curve(twice, [2.0], ADD_REMOVE)[0] == pytest.approx(value, rel=1e-14)


@pytest.mark.parametrize(("sigma", "shift", "alpha"), [(1.0, 1, 2.0), (3.0, 2, 1.3),
                                                       (0.6, 1, 9.0)])
def test_discrete_gaussian_curve_bounds_the_exact_divergence(sigma, shift, alpha):
    exact = _discrete_gaussian_ref(sigma, shift, alpha)
    event = DiscreteGaussianDpEvent(sigma, shift, 1.0, 0.5)
    ours = rdp_curve(event, [alpha])[0]
    assert ours == pytest.approx(alpha * shift**2 / (2 * sigma**2), rel=1e-15)
    assert exact <= ours * (1 + 1e-12)
    if sigma >= 1:
        assert exact >= 0.99 * ours  # the zCDP bound is nearly tight once sigma >= 1


def _two_class_noisy_max_divergence(prob_first, gap, alpha):
    """Largest D_alpha between argmax outputs of vote gaps g and g-2, over both directions."""
    p1, p2 = prob_first(gap), prob_first(gap - 2)
    p, q = [p1, 1 - p1], [p2, 1 - p2]
    return max(_renyi_sum(p, q, alpha), _renyi_sum(q, p, alpha))


def test_gnmax_curve_is_gaussian_with_sensitivity_sqrt2_and_bounds_two_class_argmax():
    sigma = 2.0
    event = GaussianNoisyMaxDpEvent(sigma, 2, 2.0, 0.5)
    for alpha in (1.5, 4.0):
        ours = rdp_curve(event, [alpha])[0]
        assert ours == pytest.approx(alpha / sigma**2, rel=1e-15)  # PATE 2018, Prop 8
        assert ours == pytest.approx(_gaussian_ref(sigma, alpha, math.sqrt(2)), rel=REL)
        s = mp.mpf(sigma)
        exact = max(_two_class_noisy_max_divergence(
            lambda g, s=s: mp.ncdf(mp.mpf(g) / (s * mp.sqrt(2))), gap, alpha)
            for gap in (0, 1, 2, 3))
        assert exact <= ours


def test_lnmax_curve_is_min_of_rr_and_two_laplaces_and_bounds_two_class_argmax():
    b = 3.0
    event = LaplaceNoisyMaxDpEvent(b, 2)
    orders = np.array([1.5, 4.0, 50.0, np.inf])
    ours = rdp_curve(event, orders)
    np.testing.assert_allclose(
        ours, np.minimum(pure_dp_rdp(2 / b, orders), 2 * laplace_rdp(1 / b, orders)), rtol=1e-15)
    assert ours[0] < 0.75 * pure_dp_rdp(2 / b, [1.5])[0]  # the Laplace form helps at small alpha
    assert ours[-1] == pytest.approx(2 / b, rel=1e-15)
    bb = mp.mpf(b)

    def prob_first(g):  # P(Z2 - Z1 < g), Z1, Z2 iid Laplace(b)
        def cdf(x):
            return mp.exp(x / bb) / 2 if x < 0 else 1 - mp.exp(-x / bb) / 2
        return mp.quad(lambda z: mp.exp(-abs(z) / bb) / (2 * bb) * cdf(g + z),
                       [-mp.inf, -g, 0, mp.inf])

    for alpha in (1.5, 4.0):
        exact = max(_two_class_noisy_max_divergence(prob_first, gap, alpha) for gap in (1, 2))
        assert exact <= rdp_curve(event, [alpha])[0]


def test_bit_randomized_response_adds_over_changed_bits():
    eps_bit, alpha = 0.4, 2.7
    e = mp.mpf(eps_bit)
    keep = mp.exp(e) / (1 + mp.exp(e))
    # Two changed bits: product distributions over the 4 outcomes of those bits.
    one = [keep, 1 - keep]
    other = [1 - keep, keep]
    p = [x * y for x in one for y in one]
    q = [x * y for x in other for y in other]
    event = BitRandomizedResponseDpEvent(eps_bit, 10, 2)
    assert rdp_curve(event, [alpha])[0] == pytest.approx(_renyi_sum(p, q, alpha), rel=REL)


def test_zcdp_curve_and_its_conversion():
    event = _dp.ZCDpEvent(0.1)
    np.testing.assert_allclose(rdp_curve(event, [1.5, 10.0]), [0.15, 1.0], rtol=1e-15)
    acc = RDPAccountant().compose(event)
    delta = 1e-6

    def objective(log_t):
        a = 1 + math.exp(log_t)
        return 0.1 * a + math.log1p(-1 / a) - (math.log(delta) + math.log(a)) / (a - 1)

    best = optimize.minimize_scalar(objective, bounds=(-10, 12), method="bounded",
                                    options={"xatol": 1e-12})
    assert acc.get_epsilon(delta) == pytest.approx(best.fun, rel=1e-9)


def test_curves_accept_any_order_and_cache_read_only_arrays():
    event = _dp.LaplaceDpEvent(2.0)
    first = rdp_curve(event, [1.0 + 1e-7, math.pi, 1e6])
    second = rdp_curve(event, [1.0 + 1e-7, math.pi, 1e6])
    assert first is second and not first.flags.writeable
    assert np.all(np.diff(first) > 0) and first[-1] < 0.5


@pytest.mark.parametrize("orders", [[], [1.0], [0.5, 2.0], [float("nan")], [[2.0, 3.0]], "abc",
                                    None])
def test_bad_orders_are_refused(orders):
    with pytest.raises(ValueError, match="orders"):
        rdp_curve(_dp.GaussianDpEvent(1.0), orders)
    if orders is not None:
        with pytest.raises(ValueError, match="orders"):
            RDPAccountant(orders=orders)


def test_bad_curve_parameters_are_refused():
    with pytest.raises(ValueError, match="noise_multiplier"):
        gaussian_rdp(-1.0, [2.0])
    with pytest.raises(ValueError, match="epsilon"):
        laplace_rdp(float("nan"), [2.0])
    with pytest.raises(ValueError, match="sampling_probability"):
        subsampled_gaussian_rdp(1.5, 1.0, [2.0])
    with pytest.raises(ValueError, match="sensitivity"):
        discrete_laplace_rdp(0.5, 0, [2.0])
    with pytest.raises(ValueError, match="num_buckets"):
        randomized_response_rdp(0.5, 0, [2.0])


# --------------------------------------------------------------------------- accountant


def _exact_gaussian_epsilon(sigma, delta):
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if analytic_gaussian_delta(mid, sigma) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def test_empty_and_non_private():
    acc = RDPAccountant()
    eps = acc.get_epsilon(1e-5)
    assert isinstance(eps, Epsilon) and eps == 0.0
    assert eps.method == "RDP" and eps.kind is BoundKind.UPPER_BOUND
    assert acc.get_delta(0.0) == 0.0
    acc.compose(_dp.NonPrivateDpEvent())
    assert math.isinf(acc.get_epsilon(0.5)) and acc.get_delta(10.0) == 1.0


@pytest.mark.parametrize("sigma", [0.5, 1.0, 4.0])
def test_one_gaussian_is_above_the_exact_curve(sigma):
    acc = RDPAccountant().compose(_dp.GaussianDpEvent(sigma))
    for delta in (1e-3, 1e-6, 1e-10):
        assert acc.get_epsilon(delta) >= _exact_gaussian_epsilon(sigma, delta)
    for eps in (0.1, 1.0, 3.0):
        assert acc.get_delta(eps) >= analytic_gaussian_delta(eps, sigma)
    calibrated = CalibratedGaussianDpEvent(calibrate_analytic_gaussian(1.0, 1e-5), epsilon=1.0,
                                           delta=1e-5)
    assert RDPAccountant().compose(calibrated).get_epsilon(1e-5) >= 1.0


def test_one_laplace_rr_and_discrete_gaussian_are_above_their_exact_curves():
    # Laplace, eps0 = 1: exact delta(eps) = int max(0, p - e^eps q), by quadrature.
    b = mp.mpf(1)
    acc = RDPAccountant().compose(_dp.LaplaceDpEvent(1.0))
    for eps in (0.2, 0.6, 0.95):
        e = mp.exp(eps)
        exact = mp.quad(lambda x, e=e: max(mp.mpf(0), mp.exp(-abs(x) / b) / 2
                                           - e * mp.exp(-abs(x - 1) / b) / 2),
                        [-mp.inf, 0, 1, mp.inf])
        assert acc.get_delta(eps) >= float(exact)
    # 5-ary RR: exact hockey-stick divergence.
    pdist, qdist = _rr_dists(0.4, 5)
    acc = RDPAccountant().compose(_dp.RandomizedResponseDpEvent(0.4, 5))
    for eps in (0.1, 1.0, 2.0):
        exact = mp.fsum(max(mp.mpf(0), x - mp.exp(eps) * y) for x, y in zip(pdist, qdist,
                                                                            strict=True))
        assert acc.get_delta(eps) >= float(exact)
    acc = RDPAccountant().compose(DiscreteGaussianDpEvent(2.0, 1, 1.0, 0.5))
    for eps in (0.3, 1.0):
        assert acc.get_delta(eps) >= discrete_gaussian_delta(eps, 2.0, 1)


def test_rdp_is_above_pld():
    # dp_accounting's PLD under REPLACE_ONE shifts a Gaussian by 2 (remove + add); the events of
    # this package normalise the noise by the sensitivity between neighbours (shift 1), which is
    # dp_accounting's ADD_OR_REMOVE_ONE pair, so the PLD reference uses that relation.
    cases = [(_dp.GaussianDpEvent(1.0), 10, REPLACE_ONE),
             (_dp.LaplaceDpEvent(2.0), 20, REPLACE_ONE),
             (_dp.PoissonSampledDpEvent(0.05, _dp.GaussianDpEvent(1.0)), 100, ADD_REMOVE)]
    for event, k, relation in cases:
        pld = _pld.PLDAccountant(ADD_REMOVE).compose(event, k)
        rdp = RDPAccountant(neighboring_relation=relation).compose(event, k)
        for delta in (1e-5, 1e-9):
            assert rdp.get_epsilon(delta) >= pld.get_epsilon(delta)


SHARED_CASES = [
    (_dp.GaussianDpEvent(1.0), 10, REPLACE_ONE), (_dp.GaussianDpEvent(50.0), 10, REPLACE_ONE),
    (_dp.GaussianDpEvent(0.05), 10, REPLACE_ONE), (_dp.LaplaceDpEvent(20.0), 1, REPLACE_ONE),
    (_dp.LaplaceDpEvent(1.0), 100, REPLACE_ONE), (_dp.LaplaceDpEvent(0.3), 3, REPLACE_ONE),
    (_dp.RandomizedResponseDpEvent(0.5, 4), 30, REPLACE_ONE),
    (_dp.PoissonSampledDpEvent(0.01, _dp.GaussianDpEvent(1.1)), 1000, ADD_REMOVE),
    (_dp.PoissonSampledDpEvent(0.2, _dp.GaussianDpEvent(2.0)), 50, ADD_REMOVE),
    (_dp.PoissonSampledDpEvent(0.001, _dp.GaussianDpEvent(0.8)), 10_000, ADD_REMOVE),
]


@pytest.mark.parametrize(("event", "count", "relation"), SHARED_CASES)
def test_never_worse_than_dp_accounting(event, count, relation):
    ours = RDPAccountant(neighboring_relation=relation).compose(event, count)
    theirs = _dpa_rdp.RdpAccountant(neighboring_relation=relation).compose(event, count)
    for delta in (1e-3, 1e-5, 1e-10):
        assert float(ours.get_epsilon(delta)) <= theirs.get_epsilon(delta) * (1 + 1e-9)
    for eps in (0.5, 2.0, 8.0):
        assert ours.get_delta(eps) <= theirs.get_delta(eps) * (1 + 1e-9) + 1e-300


def test_coarse_grid_loses_noticeably():
    # Small total loss (one Laplace eps = 0.05): the best orders are beyond dp_accounting's grid
    # (max 1024); ours reach 1e4 and the pure bound at alpha = inf.
    event = _dp.LaplaceDpEvent(20.0)
    ours = RDPAccountant().compose(event)
    coarse = RDPAccountant(orders=DP_ACCOUNTING_DEFAULT_ORDERS, refine=False).compose(event)
    theirs = _dpa_rdp.RdpAccountant().compose(event)
    assert ours.get_epsilon(1e-5) <= 0.05 + 1e-15
    assert coarse.get_epsilon(1e-5) >= 1.05 * ours.get_epsilon(1e-5)
    assert theirs.get_epsilon(1e-10) >= 1.25 * ours.get_epsilon(1e-10)
    # Ten Gaussians of noise 50 at delta = 1e-10: optimum between dp_accounting's 64 and 128.
    event = _dp.GaussianDpEvent(50.0)
    ours = RDPAccountant().compose(event, 10)
    assert _dpa_rdp.RdpAccountant().compose(event, 10).get_epsilon(1e-10) >= \
        1.03 * ours.get_epsilon(1e-10)
    assert 64 < ours.last_order < 128
    # Large total loss: the optimal order is near 1, below dp_accounting's smallest (1.1).
    event = _dp.GaussianDpEvent(0.05)
    ours = RDPAccountant().compose(event, 10)
    coarse = RDPAccountant(orders=DP_ACCOUNTING_DEFAULT_ORDERS, refine=False).compose(event, 10)
    assert coarse.get_epsilon(1e-5) >= 1.004 * ours.get_epsilon(1e-5)
    assert 1.0 < ours.last_order < 1.1


def test_refinement_never_hurts_and_reports_the_order():
    event = _dp.PoissonSampledDpEvent(0.02, _dp.GaussianDpEvent(0.9))
    fine = RDPAccountant(neighboring_relation=ADD_REMOVE).compose(event, 500)
    grid = RDPAccountant(neighboring_relation=ADD_REMOVE, refine=False).compose(event, 500)
    eps_fine, eps_grid = fine.get_epsilon(1e-6), grid.get_epsilon(1e-6)
    assert eps_fine <= eps_grid
    assert fine.last_order not in set(DEFAULT_ORDERS.tolist())  # a refined, off-grid order
    assert grid.last_order in set(DEFAULT_ORDERS.tolist())
    # The reported order reproduces the answer.
    total = fine.rdp([fine.last_order])
    assert epsilon_from_rdp([fine.last_order], total, 1e-6)[0] == pytest.approx(eps_fine,
                                                                                rel=1e-12)


def test_delta_zero_uses_the_pure_bound_and_tv_bound_gives_zero():
    acc = RDPAccountant().compose(PureDpEvent(0.3), count=3)
    assert acc.get_epsilon(0.0) == pytest.approx(0.9, rel=1e-15) and acc.last_order == math.inf
    assert acc.get_delta(0.9) == 0.0
    assert math.isinf(RDPAccountant().compose(_dp.GaussianDpEvent(3.0)).get_epsilon(0.0))
    quiet = RDPAccountant().compose(_dp.GaussianDpEvent(1000.0))
    assert quiet.get_epsilon(0.01) == 0.0  # delta above sqrt(1 - e^-KL) >= TV
    assert quiet.get_delta(0.0) <= math.sqrt(-math.expm1(-1.0 / (2 * 1000.0**2) * 1.001))
    assert RDPAccountant().compose(_dp.GaussianDpEvent(1.0)).get_epsilon(1.0) == 0.0


ALL_EVENTS = [
    (_dp.GaussianDpEvent(3.0), REPLACE_ONE),
    (CalibratedGaussianDpEvent(calibrate_analytic_gaussian(1.0, 1e-5), epsilon=1.0, delta=1e-5),
     REPLACE_ONE),
    (_dp.LaplaceDpEvent(5.0), REPLACE_ONE),
    (_dp.DiscreteLaplaceDpEvent(0.3, 2), REPLACE_ONE),
    (_dp.RandomizedResponseDpEvent(0.6, 5), REPLACE_ONE),
    (_dp.ZCDpEvent(0.01), REPLACE_ONE),
    (PureDpEvent(0.2), REPLACE_ONE),
    (ApproxDpEvent(0.2, 0.0), REPLACE_ONE),
    (BitRandomizedResponseDpEvent(0.05, 40, 4), REPLACE_ONE),
    (CollisionDpEvent(0.5, 40, 2, 8), REPLACE_ONE),
    (SelectiveRandomizedResponseDpEvent(0.7, 10), REPLACE_ONE),
    (ShuffledLocalDpEvent(0.4, 100), REPLACE_ONE),
    (LaplaceNoisyMaxDpEvent(40.0, 10, votes=[3, 1, 0, 0, 0, 0, 0, 0, 0, 0]), REPLACE_ONE),
    (GaussianNoisyMaxDpEvent(40.0, 10, 0.2, 0.5), REPLACE_ONE),
    (DiscreteGaussianDpEvent(5.0, 1, 1.0, 0.5), REPLACE_ONE),
    (_dp.PoissonSampledDpEvent(0.05, _dp.GaussianDpEvent(1.2)), ADD_REMOVE),
]


@pytest.mark.parametrize(("event", "relation"), ALL_EVENTS)
def test_one_by_one_equals_k_fold_equals_count(event, relation):
    k = 7
    one = RDPAccountant(neighboring_relation=relation)
    for _ in range(k):
        one.compose(event)
    folded = RDPAccountant(neighboring_relation=relation).compose(_dp.SelfComposedDpEvent(event, k))
    counted = RDPAccountant(neighboring_relation=relation).compose(event, count=k)
    nested = RDPAccountant(neighboring_relation=relation).compose(
        _dp.ComposedDpEvent([_dp.SelfComposedDpEvent(event, 3), _dp.SelfComposedDpEvent(event, 4)]))
    expected = k * rdp_curve(event, DEFAULT_ORDERS, relation)
    for acc in (one, folded, counted, nested):
        np.testing.assert_allclose(acc.rdp(), expected, rtol=1e-14)
    values = [float(acc.get_epsilon(1e-6)) for acc in (one, folded, counted, nested)]
    assert values == pytest.approx([values[0]] * 4, rel=1e-12)
    assert values[0] <= k * 2.0  # every event above is at most 2-DP per release or better


@pytest.mark.parametrize(("event", "relation", "match"), [
    (ApproxDpEvent(1.0, 1e-6), REPLACE_ONE, "ApproxDpEvent"),
    (ShuffledHistogramDpEvent(1.0, 1e-6, 100, 10), REPLACE_ONE, "ShuffledHistogramDpEvent"),
    (_dp.PoissonSampledDpEvent(0.1, _dp.GaussianDpEvent(1.0)), REPLACE_ONE, "ADD_OR_REMOVE_ONE"),
    (_dp.PoissonSampledDpEvent(0.1, _dp.LaplaceDpEvent(1.0)), ADD_REMOVE, "LaplaceDpEvent"),
    (_dp.RandomizedResponseDpEvent(0.5, 3), ADD_REMOVE, "REPLACE_ONE"),
    (_dp.UnsupportedDpEvent(), REPLACE_ONE, "UnsupportedDpEvent"),
    (_dp.SampledWithoutReplacementDpEvent(100, 10, _dp.GaussianDpEvent(1.0)), REPLACE_ONE,
     "SampledWithoutReplacementDpEvent"),
    (_dp.LaplaceDpEvent(-1.0), REPLACE_ONE, "noise_multiplier"),
    (_dp.ZCDpEvent(-0.1), REPLACE_ONE, "rho"),
])
def test_refused_events_are_named_and_leave_state_unchanged(event, relation, match):
    acc = RDPAccountant(neighboring_relation=relation).compose(PureDpEvent(0.25))
    before_rdp, before_eps = acc.rdp().copy(), float(acc.get_epsilon(1e-6))
    with pytest.raises(UnsupportedEventError, match=match):
        acc.compose(_dp.ComposedDpEvent([PureDpEvent(1.0), event]))
    assert not acc.supports(event)
    np.testing.assert_array_equal(acc.rdp(), before_rdp)
    assert float(acc.get_epsilon(1e-6)) == before_eps


@settings(derandomize=True, max_examples=25, deadline=None)
@given(sigma=st.floats(0.3, 30.0), k=st.integers(1, 300),
       log_delta=st.floats(-14.0, -2.0))
def test_get_epsilon_and_get_delta_are_inverse(sigma, k, log_delta):
    acc = RDPAccountant().compose(_dp.GaussianDpEvent(sigma), k)
    delta = 10.0**log_delta
    eps = float(acc.get_epsilon(delta))
    if eps == 0.0:
        return
    back = acc.get_delta(eps)
    assert back <= delta * (1 + 1e-9)
    assert back >= delta * (1 - 1e-6)
    assert float(acc.get_epsilon(back)) <= eps * (1 + 1e-9)
    assert float(acc.get_epsilon(delta * 0.5)) >= eps  # monotone in delta


def test_delta_from_rdp_and_epsilon_from_rdp_invert_each_other_on_a_grid():
    orders = np.array([1.5, 2.0, 8.0, 32.0])
    rdp = orders / 2.0
    eps, order = epsilon_from_rdp(orders, rdp, 1e-5)
    delta, order2 = delta_from_rdp(orders, rdp, eps)
    assert order == order2 and delta == pytest.approx(1e-5, rel=1e-12)
    with pytest.raises(ValueError, match="rdp"):
        epsilon_from_rdp(orders, rdp[:2], 1e-5)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.1", None, True])
def test_bad_target_delta(bad):
    with pytest.raises(ValueError, match="target_delta"):
        RDPAccountant().compose(PureDpEvent(1.0)).get_epsilon(bad)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "1", None])
def test_bad_target_epsilon(bad):
    with pytest.raises(ValueError, match="target_epsilon"):
        RDPAccountant().compose(PureDpEvent(1.0)).get_delta(bad)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="refine"):
        RDPAccountant(refine="yes")
    with pytest.raises(ValueError, match="neighboring_relation"):
        RDPAccountant(neighboring_relation="add_remove")
    with pytest.raises(ValueError, match="count"):
        RDPAccountant().compose(PureDpEvent(1.0), count=0)
    acc = RDPAccountant(orders=[3.0, 2.0, 2.0, np.inf])
    np.testing.assert_array_equal(acc.orders, [2.0, 3.0, np.inf])


@attr.s(frozen=True, slots=True, auto_attribs=True)
class CountedEvent(_dp.DpEvent):
    """A Gaussian-like event whose RDP curve records how many orders each evaluation asks for."""

    sigma: float


@contextlib.contextmanager
def counted_curve_evaluations():
    """Register :class:`CountedEvent`'s curve for the block; yield the list of evaluations."""
    calls: list[int] = []

    def curve(event, orders, relation):
        calls.append(len(orders))
        return orders / (2 * event.sigma**2)

    register_rdp_curve(CountedEvent, curve)
    try:
        yield calls
    finally:
        unregister_rdp_curve(CountedEvent)


def test_ten_thousand_identical_events_cost_one_curve_evaluation():
    with counted_curve_evaluations() as calls:
        acc = RDPAccountant()
        for _ in range(10_000):
            acc.compose(CountedEvent(100.0))
        eps = acc.get_epsilon(1e-5)
        grid_calls = [n for n in calls if n == len(DEFAULT_ORDERS)]
        assert len(grid_calls) == 1  # one grid evaluation for 10^4 events
        assert len(calls) <= 70  # + the probe at compose and a bounded refinement
        reference = RDPAccountant().compose(_dp.GaussianDpEvent(100.0), count=10_000)
        assert eps == pytest.approx(reference.get_epsilon(1e-5), rel=1e-12)
    _, peak = peak_bytes(
        lambda: RDPAccountant().compose(PureDpEvent(1e-4), count=10_000).get_epsilon(1e-5))
    assert peak < 16 * MB  # one grid, not one curve per release (measured 0.07 MB)


def test_registry_hook_for_data_dependent_curves():
    @attr.s(frozen=True, slots=True, auto_attribs=True)
    class VotesEvent(_dp.DpEvent):
        votes: tuple[int, ...]

    def curve(event, orders, relation):
        if max(event.votes) < 0:
            raise ValueError("votes must be non-negative")
        return orders / 1000.0

    with pytest.raises(UnsupportedEventError, match="VotesEvent"):
        RDPAccountant().compose(VotesEvent((3, 1)))
    register_rdp_curve(VotesEvent, curve, data_dependent=lambda e: sum(e.votes) > 0)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_rdp_curve(VotesEvent, curve)
        assert is_data_dependent(VotesEvent((3, 1))) and not is_data_dependent(VotesEvent((0, 0)))
        eps = RDPAccountant().compose(VotesEvent((3, 1))).get_epsilon(1e-5)
        assert eps.kind is BoundKind.DATA_DEPENDENT and eps > 0
        mixed = RDPAccountant().compose(PureDpEvent(0.1)).compose(VotesEvent((0, 0)))
        assert mixed.get_epsilon(1e-5).kind is BoundKind.UPPER_BOUND
        with pytest.raises(UnsupportedEventError, match="non-negative"):
            RDPAccountant().compose(VotesEvent((-1, -2)))
    finally:
        unregister_rdp_curve(VotesEvent)
    assert not RDPAccountant().supports(VotesEvent((3, 1)))
    with pytest.raises(ValueError, match="fn"):
        register_rdp_curve(VotesEvent, "not callable")


def test_default_grid_contains_dp_accounting_orders_and_infinity():
    grid = set(DEFAULT_ORDERS.tolist())
    assert set(DP_ACCOUNTING_DEFAULT_ORDERS) <= grid and math.inf in grid
    assert DEFAULT_ORDERS[0] == pytest.approx(1.001) and DEFAULT_ORDERS[-2] == pytest.approx(10001)
    assert not DEFAULT_ORDERS.flags.writeable


def _continuous_optimum(acc, delta=None, epsilon=None, order=None, span=0.2):
    """Reference: Brent's bounded minimiser on the exact total, in log(alpha - 1) around order."""
    centre = math.log(order - 1.0)

    def objective(s):
        alpha = 1.0 + math.exp(s)
        total = acc.rdp([alpha])
        if delta is not None:
            return epsilon_from_rdp([alpha], total, delta)[0]
        return math.log(delta_from_rdp([alpha], total, epsilon)[0])

    res = optimize.minimize_scalar(objective, bounds=(centre - span, centre + span),
                                   method="bounded", options={"xatol": 1e-12, "maxiter": 500})
    return res.fun


def test_many_distinct_events_refine_to_the_continuous_optimum():
    events = [_dp.LaplaceDpEvent(10.0 + 0.5 * i) for i in range(80)]  # 80 distinct events
    events += [_dp.GaussianDpEvent(30.0 + i) for i in range(40)]
    acc = RDPAccountant()
    grid_only = RDPAccountant(refine=False)
    for event in events:
        acc.compose(event, count=3)
        grid_only.compose(event, count=3)
    eps = float(acc.get_epsilon(1e-7))
    eps_order = acc.last_order
    delta = acc.get_delta(1.0)
    delta_order = acc.last_order
    assert eps == pytest.approx(_continuous_optimum(acc, delta=1e-7, order=eps_order), rel=1e-11)
    assert math.log(delta) == pytest.approx(
        _continuous_optimum(acc, epsilon=1.0, order=delta_order), abs=1e-11)
    assert eps < float(grid_only.get_epsilon(1e-7))
    assert delta < grid_only.get_delta(1.0)
    assert eps_order not in set(DEFAULT_ORDERS.tolist())


@pytest.mark.parametrize(("q", "sigma", "steps"), [(0.01, 1.1, 10_000), (0.2, 0.7, 300),
                                                   (0.001, 3.0, 100)])
def test_subsampled_gaussian_search_reaches_the_continuous_optimum_cheaply(q, sigma, steps,
                                                                          monkeypatch):
    # The subsampled Gaussian is evaluated only where the quasi-convex search looks: far fewer
    # orders than the grid, yet the answer is the continuous optimum and below every grid order.
    import dpkd_audit.accountants.rdp.accountant as rdp_module

    event = _dp.PoissonSampledDpEvent(q, _dp.GaussianDpEvent(sigma))
    evaluated = []
    real = rdp_module._evaluate

    def counting(ev, orders, relation):
        if ev == event:
            evaluated.extend(np.asarray(orders).tolist())
        return real(ev, orders, relation)

    monkeypatch.setattr(rdp_module, "_evaluate", counting)
    rdp_module._LAZY_MEMO.clear()
    acc = RDPAccountant(neighboring_relation=ADD_REMOVE).compose(event, steps)
    for delta in (1e-5, 1e-10):
        evaluated.clear()
        eps = float(acc.get_epsilon(delta))
        assert len(evaluated) < 80  # of 435 grid orders (typically 15-30; sharp minima ~70)
        reference = _continuous_optimum(acc, delta=delta, order=acc.last_order)
        assert reference * (1 - 1e-10) <= eps <= reference * (1 + 1e-11)
    grid_rdp = acc.rdp()  # the whole grid, for the comparison below
    for delta in (1e-5, 1e-10):
        assert float(acc.get_epsilon(delta)) <= epsilon_from_rdp(DEFAULT_ORDERS, grid_rdp,
                                                                 delta)[0]


def test_minimum_next_to_the_end_of_the_grid_is_refined():
    # Large total: log delta at eps = 0.5 is smallest between the first two grid orders (1.001
    # and 1.00106); the search must look inside that interval, not stop at the end point.
    acc = RDPAccountant(neighboring_relation=ADD_REMOVE)
    acc.compose(_dp.PoissonSampledDpEvent(0.11, _dp.GaussianDpEvent(6.79)), 4)
    acc.compose(_dp.ZCDpEvent(0.0399), 185)
    delta = acc.get_delta(0.5)
    assert DEFAULT_ORDERS[0] < acc.last_order < DEFAULT_ORDERS[1]
    res = optimize.minimize_scalar(
        lambda s: math.log(delta_from_rdp([1 + math.exp(s)], acc.rdp([1 + math.exp(s)]), 0.5)[0]),
        bounds=(math.log(DEFAULT_ORDERS[0] - 1), math.log(DEFAULT_ORDERS[1] - 1)),
        method="bounded", options={"xatol": 1e-12})
    assert math.log(delta) == pytest.approx(res.fun, abs=1e-12)


def test_quasi_convex_scan_and_full_grid_search_agree():
    # An LNMax event (a minimum of two curves) switches the search to the whole grid; with a
    # negligible LNMax the answers of both searches must agree.
    event = _dp.PoissonSampledDpEvent(0.05, _dp.GaussianDpEvent(0.9))
    scan = RDPAccountant(neighboring_relation=ADD_REMOVE).compose(event, 400)
    full = RDPAccountant(neighboring_relation=ADD_REMOVE).compose(event, 400)
    full.compose(LaplaceNoisyMaxDpEvent(1e9, 2))
    scan.get_epsilon(0.5)
    full.get_epsilon(0.5)
    assert not full._convex and scan._convex
    for delta in (1e-3, 1e-6, 1e-12):
        assert float(scan.get_epsilon(delta)) == pytest.approx(float(full.get_epsilon(delta)),
                                                               rel=1e-9)
    for eps in (0.5, 3.0):
        assert scan.get_delta(eps) == pytest.approx(full.get_delta(eps), rel=1e-8)


def test_running_totals_match_a_fresh_sum_after_interleaved_queries():
    rng = np.random.default_rng(3)
    acc = RDPAccountant()
    events = []
    for i in range(60):
        kind = i % 5
        if kind == 0:
            event = _dp.LaplaceDpEvent(float(rng.uniform(1, 50)))
        elif kind == 1:
            event = _dp.GaussianDpEvent(float(rng.uniform(1, 50)))
        elif kind == 2:
            event = PureDpEvent(float(rng.uniform(0.01, 1)))
        elif kind == 3:
            event = _dp.RandomizedResponseDpEvent(float(rng.uniform(0.2, 0.9)), 5)
        else:
            event = LaplaceNoisyMaxDpEvent(float(rng.uniform(5, 50)), 4)
        count = int(rng.integers(1, 4))
        events.append((event, count))
        acc.compose(event, count)
        if i % 7 == 0:
            acc.get_epsilon(1e-6)
    expected = sum(count * rdp_curve(event, DEFAULT_ORDERS) for event, count in events)
    np.testing.assert_allclose(acc.rdp(), expected, rtol=1e-13)
    orders = np.array([1.0005, 2.5, 77.7, np.inf])
    expected = sum(count * rdp_curve(event, orders) for event, count in events)
    np.testing.assert_allclose(acc.rdp(orders), expected, rtol=1e-13)
    fresh = RDPAccountant()
    for event, count in events:
        fresh.compose(event, count)
    assert float(acc.get_epsilon(1e-6)) == pytest.approx(float(fresh.get_epsilon(1e-6)),
                                                         rel=1e-12)


def test_copy_is_independent_and_results_are_cached():
    acc = RDPAccountant().compose(_dp.LaplaceDpEvent(3.0), 5)
    eps = acc.get_epsilon(1e-6)
    order = acc.last_order
    twin = acc.copy()
    twin.compose(_dp.GaussianDpEvent(2.0))
    assert float(twin.get_epsilon(1e-6)) > float(eps)
    acc.get_delta(1.0)
    again = acc.get_epsilon(1e-6)
    assert again is eps and acc.last_order == order  # cached, with its order
    assert float(acc.get_epsilon(1e-6)) == float(RDPAccountant().compose(
        _dp.LaplaceDpEvent(3.0), 5).get_epsilon(1e-6))
    acc.compose(_dp.GaussianDpEvent(2.0))
    assert float(acc.get_epsilon(1e-6)) == float(twin.get_epsilon(1e-6))


def test_registering_a_curve_after_compose_is_picked_up():
    @attr.s(frozen=True, slots=True, auto_attribs=True)
    class LineEvent(_dp.DpEvent):
        slope: float

    register_rdp_curve(LineEvent, lambda e, orders, r: e.slope * orders)
    try:
        acc = RDPAccountant().compose(LineEvent(0.01), 3)
        np.testing.assert_allclose(acc.rdp([2.0]), [0.06], rtol=1e-15)
        register_rdp_curve(LineEvent, lambda e, orders, r: 2 * e.slope * orders, replace=True)
        np.testing.assert_allclose(acc.rdp([2.0]), [0.12], rtol=1e-15)
        np.testing.assert_allclose(acc.rdp()[:3], 0.06 * DEFAULT_ORDERS[:3], rtol=1e-15)
    finally:
        unregister_rdp_curve(LineEvent)
    with pytest.raises(UnsupportedEventError, match="LineEvent"):
        acc.get_epsilon(1e-5)


@pytest.mark.parametrize("eps", [1e-5, 3e-4, 2e-3, 0.05, 1.0, 7.0])
def test_laplace_direct_and_cancellation_free_forms_are_precise(eps):
    # The direct form is used where alpha * eps >= 1e-3; both forms against mpmath.
    orders = np.array([1.0001, 1.01, 1.5, 3.0, 40.0, 900.0, 2e4])
    ours = laplace_rdp(eps, orders)
    for alpha, value in zip(orders, ours, strict=True):
        e, a = mp.mpf(eps), mp.mpf(alpha)
        t = a - 1
        ref = mp.log(a / (2 * a - 1) * mp.exp(t * e) + t / (2 * a - 1) * mp.exp(-a * e)) / t
        assert value == pytest.approx(float(ref), rel=1e-12)


def test_vectorised_quadrature_does_not_depend_on_the_batch():
    import dpkd_audit.accountants.rdp.accountant as rdp_module

    alphas = np.array([1.001, 1.37, 2.5, 4.6714, 9.99, 15.5])
    batch = rdp_module._sgm_log_a_quads(0.01, 1.1, alphas)
    alone = [rdp_module._sgm_log_a_quads(0.01, 1.1, np.array([a]))[0] for a in alphas]
    np.testing.assert_allclose(batch, alone, rtol=1e-14)
    assert not np.isnan(batch).any()


def test_online_composition_is_fast():
    # Issue 3: a ledger composes one event per call and queries after each; the running totals
    # make that about one grid pass per call, never a pass over every earlier event: counted
    # on an event whose curve records each evaluation (200 distinct events, a query after each).
    with counted_curve_evaluations() as calls:
        acc = RDPAccountant()
        for i in range(200):
            acc.compose(CountedEvent(20.0 + i))
            acc.get_epsilon(1e-5)
        grid_calls = [n for n in calls if n == len(DEFAULT_ORDERS)]
        assert len(grid_calls) == 200  # each event's curve on the grid once, when composed
        # + the order refinement of each query: a few new orders for each distinct event so far
        # (measured 21,026 in all), never the whole grid again (200 x 201 / 2 grid passes)
        assert len(calls) <= 200 + 2 * (200 * 201 // 2)
    rng = np.random.default_rng(0)
    acc = RDPAccountant()
    for i in range(200):
        event = (_dp.LaplaceDpEvent(float(rng.uniform(200, 400))) if i % 2
                 else _dp.GaussianDpEvent(float(rng.uniform(20, 40))))
        acc.compose(event)
        eps = acc.get_epsilon(1e-5)
    reference = _dpa_rdp.RdpAccountant(neighboring_relation=REPLACE_ONE)
    rng = np.random.default_rng(0)
    for i in range(200):
        reference.compose(_dp.LaplaceDpEvent(float(rng.uniform(200, 400))) if i % 2
                          else _dp.GaussianDpEvent(float(rng.uniform(20, 40))))
    assert float(eps) <= reference.get_epsilon(1e-5)
