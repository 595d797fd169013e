"""Batched RDP kernels (issue 9) against the per-event curves and independent references.

The accountant evaluates randomized response and discrete Laplace events together, one
vectorised expression per family (``rdp_curves._sym3_rows``, ``_rr_special_rows``,
``_dlap_rows``). These tests check that every row equals the per-event curve (to 1e-12 relative,
at extreme parameters included), that rows do not depend on the batch, that the values are
exact (mpmath, finite privacy-loss sums), and that the subsampled-Gaussian curve is now an upper
bound where its series used to sit below the exact value. Deterministic references only.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from dp_accounting import dp_event as _dp

from dpkd_audit.accountants.base import NeighboringRelation, UnsupportedEventError
from dpkd_audit.accountants.rdp import (
    DEFAULT_ORDERS,
    RDPAccountant,
    discrete_laplace_rdp,
    laplace_rdp,
    pure_dp_rdp,
    randomized_response_rdp,
    rdp_curve,
    subsampled_gaussian_rdp,
)
from dpkd_audit.accountants.rdp import curves as rdp_curves
from dpkd_audit.accountants.rdp import plans as rdp_plans
from dpkd_audit.accountants.rdp.subsampled import _sgm_log_a_frac, _sgm_log_a_quads

REPLACE_ONE = NeighboringRelation.REPLACE_ONE
REPLACE_SPECIAL = NeighboringRelation.REPLACE_SPECIAL
ADD_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE

#: Finite orders from 1 + 1e-6 to 1 + 1e6 (the near/far branches of every kernel).
ORDERS = 1.0 + np.logspace(-6.0, 6.0, 97)
RR_P = [1e-300, 1e-12, 1e-6, 0.01, 0.3, 0.7, 0.99, 1 - 1e-6, 1 - 1e-12]
RR_K = [2, 3, 10, 1000, 10**6]
DL_A = [1e-12, 1e-9, 1e-5, 1e-3, 0.05, 0.7, 3.0, 40.0, 700.0]
DL_K = [2, 3, 17, 1000, 10**6]


@pytest.fixture(autouse=True)
def _restore_mpmath_precision():
    saved = mp.mp.dps
    yield
    mp.mp.dps = saved


def _close(batched, scalar, rtol=1e-12):
    batched, scalar = np.asarray(batched), np.asarray(scalar)
    assert batched.shape == scalar.shape
    both_inf = np.isinf(batched) & np.isinf(scalar)
    diff = np.abs(batched - scalar)
    ok = both_inf | (diff <= rtol * np.abs(scalar)) | (diff <= 1e-300)
    assert ok.all(), (batched[~ok], scalar[~ok])


def _rr_row(p, k):
    if k == 2:
        return rdp_curves._pure_params(math.log1p(k * (1.0 - p) / p))
    return rdp_curves._rr_one_params(p, k)


# --------------------------------------------------------------------------- randomized response


@pytest.mark.parametrize("k", RR_K)
def test_rr_replace_one_kernel_equals_per_event_curve(k):
    rows = np.array([_rr_row(p, k) for p in RR_P])
    batched = rdp_curves._sym3_rows(rows, ORDERS)
    for row, p in zip(batched, RR_P, strict=True):
        scalar = randomized_response_rdp(p, k, ORDERS)
        _close(row, scalar)
        assert math.log1p(k * (1 - p) / p) == pytest.approx(
            randomized_response_rdp(p, k, [np.inf])[0], rel=1e-15)
    # Rows are independent of the batch: one row alone gives the same numbers.
    alone = rdp_curves._sym3_rows(rows[3:4], ORDERS)
    np.testing.assert_array_equal(alone[0], batched[3])


@pytest.mark.parametrize("k", RR_K)
def test_rr_replace_special_kernel_equals_per_event_curve(k):
    rows = np.array([rdp_curves._rr_special_params(p, k) for p in RR_P])
    batched = rdp_curves._rr_special_rows(rows, ORDERS)
    at_inf = rdp_curves._rr_special_at_inf(rows)
    for row, inf_value, p in zip(batched, at_inf, RR_P, strict=True):
        _close(row, randomized_response_rdp(p, k, ORDERS, REPLACE_SPECIAL))
        assert inf_value == randomized_response_rdp(p, k, [np.inf], REPLACE_SPECIAL)[0]


def _rr_exact(p, k, alpha, special=False):
    p, a = mp.mpf(p), mp.mpf(alpha)
    keep, other = 1 - p + p / k, p / k
    if not special:
        total = keep**a * other**(1 - a) + other**a * keep**(1 - a) + (k - 2) * other
        return mp.log(total) / (a - 1)
    u = mp.mpf(1) / k
    forward = keep**a * u**(1 - a) + (k - 1) * other**a * u**(1 - a)
    backward = u**a * keep**(1 - a) + (k - 1) * u**a * other**(1 - a)
    return max(mp.log(forward), mp.log(backward)) / (a - 1)


@pytest.mark.parametrize(("p", "k"), [(1e-12, 2), (1e-6, 10**6), (0.99, 1000), (1 - 1e-6, 10**6),
                                      (1 - 1e-12, 3), (0.3, 10**6)])
def test_rr_curves_are_exact_at_extreme_parameters(p, k):
    mp.mp.dps = 60  # restored after each test (fixture below)
    orders = [1.0 + 1e-5, 1.01, 2.0, 7.5, 300.0, 1e5]
    for special in (False, True):
        relation = REPLACE_SPECIAL if special else REPLACE_ONE
        ours = randomized_response_rdp(p, k, orders, relation)
        for alpha, value in zip(orders, ours, strict=True):
            ref = float(_rr_exact(p, k, alpha, special))
            assert value == pytest.approx(ref, rel=1e-12)


# --------------------------------------------------------------------------- discrete Laplace


@pytest.mark.parametrize("k", DL_K)
def test_discrete_laplace_kernel_rows_are_the_per_event_curves(k):
    rows = np.array([rdp_curves._dlap_params(a, k) for a in DL_A])
    batched = rdp_curves._dlap_rows(rows, ORDERS)
    for row, a in zip(batched, DL_A, strict=True):
        _close(row, discrete_laplace_rdp(a, k, ORDERS), rtol=1e-15)
        assert rdp_curve(_dp.DiscreteLaplaceDpEvent(a, k), [np.inf])[0] == a * k
    np.testing.assert_array_equal(rdp_curves._dlap_rows(rows[4:5], ORDERS)[0], batched[4])


def _dl_atoms(a, k):
    """The privacy loss of the discrete Laplace pair (P, P shifted by k) as k + 1 atoms.

    P(x) = tanh(a/2) e^{-a|x|}; the loss a(|x - k| - |x|) is a k on x <= 0 (mass 1/(1+u)),
    -a k on x >= k (mass u^k/(1+u)) and a(k - 2x) at 0 < x < k (mass tanh(a/2) u^x), u = e^-a.
    Masses, losses and KL at 50 digits.
    """
    a_mp = mp.mpf(a)
    u = mp.exp(-a_mp)
    c = mp.tanh(a_mp / 2)
    masses = [1 / (1 + u)] + [c * u**x for x in range(1, k)] + [u**k / (1 + u)]
    losses = [a_mp * (k - 2 * x) for x in range(k + 1)]
    kl = mp.fsum(m * loss for m, loss in zip(masses, losses, strict=True))
    return (np.array([float(mp.log(m)) for m in masses]), np.array([float(v) for v in losses]),
            float(kl))


@pytest.mark.parametrize("a", [1e-9, 1e-5, 0.05, 3.0])
@pytest.mark.parametrize("k", [2, 3, 17, 200])
def test_discrete_laplace_curve_equals_finite_privacy_loss_sum(a, k):
    # An independent evaluation: the generic finite-atom Renyi divergence of the k + 1 losses.
    mp.mp.dps = 50  # restored after each test (fixture below)
    log_w, losses, kl = _dl_atoms(a, k)
    reference = rdp_curves._renyi_finite(log_w, losses, kl, ORDERS)
    _close(discrete_laplace_rdp(a, k, ORDERS), reference, rtol=1e-11)


@pytest.mark.parametrize(("a", "k"), [(1e-12, 2), (1e-9, 3), (1e-6, 10**6), (700.0, 2),
                                      (40.0, 17), (1e-3, 1000)])
def test_discrete_laplace_is_exact_at_extreme_parameters(a, k):
    # Closed form at 90 digits: H = [(1 - ur) e^{a t k} + (u - r) e^{-a alpha k}] / ((1-r)(1+u)).
    mp.mp.dps = 90  # restored after each test (fixture below)
    for alpha in (1.0 + 1e-5, 1.5, 11.0, 1e3, 1e6):
        a_mp, al = mp.mpf(a), mp.mpf(alpha)
        u, r = mp.exp(-a_mp), mp.exp(-a_mp * (2 * al - 1))
        h = ((1 - u * r) * mp.exp(a_mp * (al - 1) * k) + (u - r) * mp.exp(-a_mp * al * k)) \
            / ((1 - r) * (1 + u))
        ref = float(mp.log(h) / (al - 1))
        assert discrete_laplace_rdp(a, k, [alpha])[0] == pytest.approx(ref, rel=1e-12)


# --------------------------------------------------------------------------- pure DP and Laplace


@pytest.mark.parametrize("eps", [1e-12, 1e-6, 0.01, 1.0, 30.0, 700.0, 1000.0])
def test_pure_rows_equal_pure_dp_rdp(eps):
    row = rdp_curves._sym3_rows(np.array([rdp_curves._pure_params(eps)]), ORDERS)[0]
    _close(row, pure_dp_rdp(eps, ORDERS))


@pytest.mark.parametrize("eps", [1e-5, 2e-4, 3e-3, 0.05, 1.0, 7.0])
def test_laplace_grid_row_and_scalar_equal_the_matrix(eps):
    # Same formulas, evaluated in another order: the direct form's relative accuracy is
    # 6e-16 / (alpha eps) <= 6e-13 (see _laplace_matrix), the tolerance here.
    grid = rdp_plans._grid_for(DEFAULT_ORDERS)
    reference = laplace_rdp(eps, grid.a)
    _close(rdp_plans._laplace_grid_row((eps,), grid), reference, rtol=1e-12)
    for alpha in (1.0005, 1.3, 40.0, 9000.0):
        assert rdp_plans._laplace_scalar((eps,), alpha) == pytest.approx(
            laplace_rdp(eps, [alpha])[0], rel=1e-12)
    group = rdp_plans._Group(1)
    for e, w in ((eps, 2.0), (2 * eps, 1.0), (eps, 3.0)):
        group.add((e,), w)
    for alpha in (1.0005, 1.3, 40.0, 9000.0):
        expected = 5 * laplace_rdp(eps, [alpha])[0] + laplace_rdp(2 * eps, [alpha])[0]
        assert rdp_plans._LAPLACE_KERNEL.total_at(group, alpha) == pytest.approx(expected,
                                                                                rel=1e-12)


# --------------------------------------------------------------------------- in the accountant


def _extreme_events():
    events = [_dp.RandomizedResponseDpEvent(p, k) for p in RR_P[1:-1] for k in (2, 3, 10**6)]
    events += [_dp.DiscreteLaplaceDpEvent(a, k) for a in (1e-9, 1e-3, 0.7, 40.0)
               for k in (1, 2, 1000)]
    return events


def test_accountant_totals_equal_the_sum_of_per_event_curves_at_extremes():
    events = _extreme_events()
    one_by_one = RDPAccountant()
    batched = RDPAccountant()
    for i, event in enumerate(events):
        one_by_one.compose(event, count=1 + i % 3)
        one_by_one.get_epsilon(1e-6)  # running totals and pools after every event
    batched.compose(_dp.ComposedDpEvent(
        [_dp.SelfComposedDpEvent(e, 1 + i % 3) for i, e in enumerate(events)]))
    orders = np.concatenate([DEFAULT_ORDERS, [1.0 + 1e-6, 3.3, 77.7]])
    expected = sum((1 + i % 3) * rdp_curve(e, orders) for i, e in enumerate(events))
    for acc in (one_by_one, batched):
        _close(acc.rdp(orders), expected, rtol=1e-12)
        _close(acc.rdp(), expected[:DEFAULT_ORDERS.size], rtol=1e-12)


def test_replace_special_randomized_response_is_batched_in_the_accountant():
    events = [_dp.RandomizedResponseDpEvent(p, k) for p in (0.05, 0.5, 0.9) for k in (2, 7)]
    acc = RDPAccountant(neighboring_relation=REPLACE_SPECIAL)
    for event in events:
        acc.compose(event)
        acc.get_epsilon(1e-5)
    assert rdp_plans._RR_SPECIAL_KERNEL in acc._groups
    expected = sum(rdp_curve(e, DEFAULT_ORDERS, REPLACE_SPECIAL) for e in events)
    _close(acc.rdp(), expected, rtol=1e-13)


def test_refusals_are_unchanged_by_the_plans():
    with pytest.raises(UnsupportedEventError, match="REPLACE_ONE"):
        RDPAccountant(neighboring_relation=ADD_REMOVE).compose(
            _dp.RandomizedResponseDpEvent(0.5, 3))
    with pytest.raises(UnsupportedEventError, match="sensitivity"):
        RDPAccountant().compose(_dp.DiscreteLaplaceDpEvent(0.5, 0))
    with pytest.raises(UnsupportedEventError, match="noise_parameter"):
        RDPAccountant().compose(_dp.RandomizedResponseDpEvent(1.5, 3))
    # No noise: infinite RDP; all noise (p = 1) or one bucket: zero.
    assert math.isinf(RDPAccountant().compose(_dp.RandomizedResponseDpEvent(0.0, 3)).rdp([2.0])[0])
    assert RDPAccountant().compose(_dp.RandomizedResponseDpEvent(1.0, 3)).rdp([2.0])[0] == 0.0
    assert RDPAccountant().compose(_dp.DiscreteLaplaceDpEvent(math.inf, 3)).rdp([2.0])[0] == 0.0


@pytest.mark.parametrize("event", [
    _dp.SampledWithoutReplacementDpEvent(100, 10, _dp.GaussianDpEvent(1.0)),
    _dp.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.5, 0.5]),  # lists: not hashable
    _dp.MixtureOfGaussiansDpEvent(1.0, (0.0, 1.0), (0.5, 0.5)),
])
@pytest.mark.parametrize("relation", [REPLACE_ONE, ADD_REMOVE, REPLACE_SPECIAL])
def test_unverified_events_are_refused_with_the_reason(event, relation):
    name = type(event).__name__
    acc = RDPAccountant(neighboring_relation=relation)
    with pytest.raises(UnsupportedEventError, match=name) as info:
        acc.compose(event)
    assert "not supported" in str(info.value)
    with pytest.raises(UnsupportedEventError, match=f"{name} is not supported"):
        rdp_curve(event, [2.0], relation)
    assert acc.is_empty


# --------------------------------------------------------------------------- subsampled Gaussian


def _sgm_series_reference(q, sigma, alpha):
    """log A_alpha by the MTZ19 series at 50 digits, summed until terms are below 1e-45."""
    mp.mp.dps = 50  # restored after each test (fixture below)
    q, s, a = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)
    z0 = s * s * mp.log(1 / q - 1) + mp.mpf(1) / 2
    total, i = mp.mpf(0), 0
    while True:
        j = a - i
        c = mp.binomial(a, i)
        term = c * q**i * (1 - q)**j * mp.exp((i * i - i) / (2 * s * s)) * mp.ncdf((z0 - i) / s) \
            + c * q**j * (1 - q)**i * mp.exp((j * j - j) / (2 * s * s)) * mp.ncdf((j - z0) / s)
        total += term
        if i > a + 50 and abs(term) < mp.mpf(10)**-45 * abs(total):
            return total
        i += 1


@pytest.mark.parametrize(("q", "sigma", "alpha"), [
    (0.01, 100.0, 100.5), (0.1, 1000.0, 100.5), (0.01, 100.0, 1000.5), (0.5, 50.0, 100.5),
    (0.01, 1.0, 100.5), (0.001, 3.0, 16.5)])
def test_subsampled_gaussian_series_is_an_upper_bound_at_large_orders(q, sigma, alpha):
    # Before issue 9, (0.01, 100, 1000.5) and (0.1, 1000, 100.5) came out 6e-11 and 5e-10 below.
    log_a = mp.log(_sgm_series_reference(q, sigma, alpha))
    exact = float(log_a / (alpha - 1))
    ours = subsampled_gaussian_rdp(q, sigma, [alpha])[0]
    assert exact <= ours <= exact * (1 + 1e-6)
    assert _sgm_log_a_frac(q, sigma, alpha) >= float(log_a)


@pytest.mark.parametrize(("q", "sigma"), [(0.01, 1.0), (0.2, 0.3), (0.01, 100.0), (0.5, 5.0)])
def test_subsampled_gaussian_quadrature_is_an_upper_bound(q, sigma):
    mp.mp.dps = 40  # restored after each test (fixture below)
    alphas = np.array([1.001, 1.5, 4.25, 12.75])
    ours = _sgm_log_a_quads(q, sigma, alphas)
    qq, s = mp.mpf(q), mp.mpf(sigma)
    for alpha, value in zip(alphas, ours, strict=True):
        a = mp.mpf(alpha)

        def integrand(z, a=a):
            x = qq * mp.expm1((2 * z - 1) / (2 * s * s))
            return mp.npdf(z, 0, s) * ((1 + x)**a - 1 - a * x)

        z0 = s * s * mp.log(1 / qq - 1) + mp.mpf(1) / 2
        points = sorted({-mp.inf, -20 * s, mp.mpf(0), mp.mpf(1), z0, a, a + 20 * s, mp.inf})
        exact = float(mp.log1p(mp.quad(integrand, points, maxdegree=10)))
        assert exact <= value <= exact * (1 + 1e-9) + 1e-300
