"""PATE accountant: data-dependent RDP of GNMax/LNMax, smooth sensitivity, the accountant.

Soundness is checked against exact computations wherever one exists: for two classes the noisy
argmax is a Bernoulli whose Renyi divergence at the worst neighbour is exact, the q bound is
exact too (and checked by Monte Carlo), the Theorem 6 formula is re-evaluated in linear space
with mpmath, and the smooth-sensitivity machinery is compared with brute force over every
histogram of a small ensemble.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import warnings

import dp_accounting
import mpmath
import numpy as np
import pytest
from dp_accounting import dp_event as _dp
from dp_accounting import rdp as dp_rdp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats
from work_bounds import MB, peak_bytes

from dpkd_audit.accountants import (
    BoundKind,
    Epsilon,
    NeighboringRelation,
    UnsupportedEventError,
    pate,
)
from dpkd_audit.accountants.pate import (
    DEFAULT_ORDERS,
    PATEAccountant,
    gnmax_data_independent_rdp,
    gnmax_local_sensitivity_bounds,
    gnmax_logq,
    gnmax_rdp,
    gnmax_rdp_from_logq,
    gnmax_smooth_sensitivity,
    gnss_rdp,
    lnmax_data_independent_log_moments,
    lnmax_log_moments,
    lnmax_logq,
    lnmax_rdp,
    smooth_sensitivity_release_cost,
)
from dpkd_audit.accountants.pate.smooth_sensitivity import _gnmax_thresholds
from dpkd_audit.accountants.rdp import RDPAccountant, epsilon_from_rdp, rdp_curve
from dpkd_audit.events import GaussianNoisyMaxDpEvent, LaplaceNoisyMaxDpEvent, PureDpEvent
from dpkd_audit.mechanisms.pate import GaussianNoisyMax

DELTA = 1e-5
SIGMA = 40.0
GN = GaussianNoisyMax.from_sigma(SIGMA, 10, DELTA)  # PATE 2018's MNIST noise level


def gn_event(votes, sigma: float = SIGMA) -> GaussianNoisyMaxDpEvent:
    mech = GN if sigma == SIGMA else GaussianNoisyMax.from_sigma(sigma, len(votes), DELTA)
    if len(votes) != mech.num_classes:
        mech = GaussianNoisyMax.from_sigma(sigma, len(votes), DELTA)
    return mech.event_with_votes(votes)


def ln_event(votes, scale: float = 40.0) -> LaplaceNoisyMaxDpEvent:
    return LaplaceNoisyMaxDpEvent(noise_scale=scale, num_classes=len(votes), votes=tuple(votes))


def bernoulli_renyi(lp, l1p, lq, l1q, orders):
    """D_lambda(Bern(p) || Bern(q)) from log p, log(1-p), log q, log(1-q)."""
    return np.logaddexp(orders * lp + (1 - orders) * lq,
                        orders * l1p + (1 - orders) * l1q) / (orders - 1)


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("votes", [[5], [[1, 2], [3, 4]], [1, -1], [1.5, 2], [np.nan, 1],
                                   "ab", [], None])
def test_votes_are_validated(votes):
    for fn in (lambda: gnmax_rdp(votes, 1.0, [2.0]), lambda: gnmax_logq(votes, 1.0),
               lambda: lnmax_log_moments(votes, 1.0, [1.0]), lambda: lnmax_rdp(votes, 1.0),
               lambda: lnmax_logq(votes, 1.0),
               lambda: gnmax_local_sensitivity_bounds(votes, 1.0, 2.0)):
        with pytest.raises(ValueError, match="votes"):
            fn()


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, "1", None, True])
def test_noise_parameters_are_validated(bad):
    with pytest.raises(ValueError, match="sigma"):
        gnmax_rdp([3, 1], bad, [2.0])
    with pytest.raises(ValueError, match="sigma"):
        gnmax_data_independent_rdp(bad, [2.0])
    with pytest.raises(ValueError, match="sigma"):
        gnmax_rdp_from_logq(-3.0, bad, [2.0])
    with pytest.raises(ValueError, match="noise_scale"):
        lnmax_log_moments([3, 1], bad, [1.0])
    with pytest.raises(ValueError, match="noise_scale"):
        lnmax_data_independent_log_moments(bad, [1.0])
    with pytest.raises(ValueError, match="sigma_ss"):
        gnss_rdp(0.01, bad, 5.0)
    with pytest.raises(ValueError, match="beta"):
        gnss_rdp(bad, 1.0, 5.0)


@pytest.mark.parametrize("orders", [1.0, [0.5, 2.0], [2.0, math.nan], [math.inf], [],
                                    [[2.0, 3.0]], "x"])
def test_orders_are_validated(orders):
    with pytest.raises(ValueError, match="orders"):
        gnmax_rdp([3, 1], 1.0, orders)
    with pytest.raises(ValueError, match="orders"):
        lnmax_rdp([3, 1], 1.0, orders)
    with pytest.raises(ValueError, match="orders"):
        PATEAccountant(orders=orders)


def test_moment_orders_are_validated():
    with pytest.raises(ValueError, match="orders"):
        lnmax_log_moments([3, 1], 1.0, [0.0, 1.0])
    with pytest.raises(ValueError, match="orders"):
        lnmax_data_independent_log_moments(1.0, [-1.0])


def test_other_parameters_are_validated():
    with pytest.raises(ValueError, match="logq"):
        gnmax_rdp_from_logq(0.5, 1.0, [2.0])
    with pytest.raises(ValueError, match="logq"):
        gnmax_rdp_from_logq(math.nan, 1.0, [2.0])
    with pytest.raises(ValueError, match="order"):
        gnss_rdp(0.1, 1.0, 5.0)  # order * beta >= 1/2
    with pytest.raises(ValueError, match="order"):
        gnss_rdp(0.1, 1.0, 1.0)
    with pytest.raises(ValueError, match="order"):
        gnmax_local_sensitivity_bounds([5, 1], 1.0, 0.5)
    with pytest.raises(ValueError, match="beta"):
        gnmax_smooth_sensitivity([5, 1], 40.0, 5.0, -1.0)
    with pytest.raises(ValueError, match="data_dependent"):
        PATEAccountant(data_dependent=1)
    with pytest.raises(ValueError, match="neighboring_relation"):
        PATEAccountant(neighboring_relation=NeighboringRelation.REPLACE_SPECIAL)
    with pytest.raises(ValueError, match="neighboring_relation"):
        PATEAccountant(neighboring_relation="replace")
    acc = PATEAccountant().compose(gn_event([200] + [0] * 9))
    for bad in (-0.1, 1.5, math.nan, "x"):
        with pytest.raises(ValueError, match="target_delta"):
            acc.get_epsilon(bad)
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match="target_delta"):
            acc.report(bad)
    for bad in (-1.0, math.nan, "x", None):
        with pytest.raises(ValueError, match="target_epsilon"):
            acc.get_delta(bad)


def test_release_parameters_are_validated():
    ev = gn_event([200] + [0] * 9)
    with pytest.raises(ValueError, match="events"):
        smooth_sensitivity_release_cost([GN.event], 5.0)  # nothing carries votes
    with pytest.raises(ValueError, match="events"):
        smooth_sensitivity_release_cost([PureDpEvent(1.0)], 5.0)
    with pytest.raises(ValueError, match="events"):
        smooth_sensitivity_release_cost([ln_event([5, 1])], 5.0)
    with pytest.raises(ValueError, match="events"):
        smooth_sensitivity_release_cost(3, 5.0)
    with pytest.raises(ValueError, match="count"):
        smooth_sensitivity_release_cost({ev: 0}, 5.0)
    with pytest.raises(ValueError, match="beta"):
        smooth_sensitivity_release_cost([ev], 5.0, beta=0.1)
    with pytest.raises(ValueError, match="sigma_ss"):
        smooth_sensitivity_release_cost([ev], 5.0, sigma_ss=-1.0)
    with pytest.raises(ValueError, match="order"):
        smooth_sensitivity_release_cost([ev], 1.0)


# --------------------------------------------------------------------------- q bounds


def _clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    lo = 0.0 if k == 0 else stats.beta.ppf(alpha / 2, k, n - k + 1)
    hi = 1.0 if k == n else stats.beta.ppf(1 - alpha / 2, k + 1, n - k)
    return lo, hi


def test_gnmax_q_bound_vs_monte_carlo():
    # Two-sided Clopper-Pearson intervals at alpha = 1e-6 each (fixed seed): a correct bound
    # fails with probability <= 1e-6 per check. For 2 classes Prop. 7 is exact (the interval
    # must contain q); for 10 classes it is a union bound (q must be >= the lower end).
    rng = np.random.default_rng(20180224)
    n = 200_000
    for votes, sigma, exact in (([20, 12], 5.0, True), ([30, 25, 20, 10, 5, 0, 0, 0, 0, 0],
                                                       8.0, False),
                                ([60, 50, 50, 40, 0], 10.0, False)):
        votes = np.array(votes, dtype=float)
        noisy = votes + rng.normal(0.0, sigma, size=(n, votes.size))
        k = int(np.sum(np.argmax(noisy, axis=1) != np.argmax(votes)))
        lo, hi = _clopper_pearson(k, n, 1e-6)
        q = math.exp(gnmax_logq(votes.astype(int), sigma))
        assert q >= lo
        if exact:
            assert lo <= q <= hi


def test_lnmax_q_bound_vs_monte_carlo():
    # Same design as the GNMax test (alpha = 1e-6 per check, fixed seed); Lemma 4 is exact
    # for two classes.
    rng = np.random.default_rng(20170301)
    n = 200_000
    for votes, scale, exact in (([20, 12], 4.0, True), ([30, 25, 20, 10, 5, 0, 0, 0], 5.0, False)):
        votes = np.array(votes, dtype=float)
        noisy = votes + rng.laplace(0.0, scale, size=(n, votes.size))
        k = int(np.sum(np.argmax(noisy, axis=1) != np.argmax(votes)))
        lo, hi = _clopper_pearson(k, n, 1e-6)
        q = math.exp(lnmax_logq(votes.astype(int), scale))
        assert q >= lo
        if exact:
            assert lo <= q <= hi


def test_q_bound_closed_forms_and_cap():
    # Prop. 7 for two classes: Phi(-(gap)/(sqrt(2) sigma)); Lemma 4: (2 + g/b) e^{-g/b} / 4.
    assert gnmax_logq([20, 12], 5.0) == pytest.approx(
        float(special.log_ndtr(-8 / (math.sqrt(2) * 5.0))), rel=1e-12)
    assert lnmax_logq([20, 12], 4.0) == pytest.approx(math.log((2 + 2) * math.exp(-2) / 4),
                                                      rel=1e-12)
    # Ties: the union bound exceeds 1 - 1/m and is capped there.
    assert gnmax_logq([7, 7, 7, 7], 3.0) == pytest.approx(math.log(0.75), rel=1e-12)
    assert lnmax_logq([7, 7, 7, 7], 3.0) == pytest.approx(math.log(0.75), rel=1e-12)


# --------------------------------------------------------------------------- GNMax RDP


def _theorem6_mpmath(logq: float, sigma: float, order: float) -> float:
    """Theorem 6 of PATE 2018 with Proposition 10's mu1, mu2, in linear space at 60 digits."""
    with mpmath.workdps(60):
        q = mpmath.exp(mpmath.mpf(logq))
        sigma = mpmath.mpf(sigma)
        lam = mpmath.mpf(order)
        mu2 = sigma * mpmath.sqrt(-mpmath.mpf(logq))
        mu1 = mu2 + 1
        eps1, eps2 = mu1 / sigma**2, mu2 / sigma**2
        a = (1 - q) / (1 - (q * mpmath.exp(eps2)) ** ((mu2 - 1) / mu2))
        b = mpmath.exp(eps1) / q ** (1 / (mu1 - 1))
        return float(mpmath.log((1 - q) * a ** (lam - 1) + q * b ** (lam - 1)) / (lam - 1))


@pytest.mark.parametrize(("logq", "sigma", "order"), [
    (-8.0, 40.0, 2.0), (-10.0, 40.0, 20.0), (-50.0, 40.0, 100.0), (-700.0, 40.0, 500.0),
    (-2000.0, 10.0, 50.0), (-30.0, 2.0, 5.0)])
def test_theorem6_matches_mpmath(logq, sigma, order):
    got = float(gnmax_rdp_from_logq(logq, sigma, [order])[0])
    ref = _theorem6_mpmath(logq, sigma, order)
    assert ref < order / sigma**2  # the data-dependent bound is the one in use here
    assert got == pytest.approx(ref, rel=1e-9, abs=1e-300)


# The authors' hand-calculated -log q0 (where the data-dependent bound meets lambda/sigma^2),
# sigma-major over orders (1.1, 2.5, 32, 250), from tensorflow/privacy research/pate_2018
# core_test.py (_test_rdp_gaussian_as_function_of_q); None: not given there.
_AUTHORS_NEGLOGQ0 = {1.5: (2.8, 2.6, 427, None), 15: (4.8, 4.0, 4.7, 275),
                     1500: (9.6, 8.8, 6.0, 4), 15000: (12, 11.2, 8.6, 6.4)}


@pytest.mark.parametrize("sigma", sorted(_AUTHORS_NEGLOGQ0))
def test_data_dependent_range_matches_the_authors_q0(sigma):
    for order, neglogq0 in zip((1.1, 2.5, 32.0, 250.0), _AUTHORS_NEGLOGQ0[sigma], strict=True):
        if neglogq0 is None:
            continue
        # Below q0 (halving q three times) the bound strictly decreases; above it (q0 + 0.1 ..
        # 0.4) it is the constant data-independent value, as in the authors' test.
        below = [gnmax_rdp_from_logq(-neglogq0 - math.log(2**k), sigma, [order])[0]
                 for k in range(4)]
        assert all(a > b for a, b in itertools.pairwise(below))
        for extra in (0.1, 0.2, 0.3, 0.4):
            above = gnmax_rdp_from_logq(math.log(math.exp(-neglogq0) + extra), sigma, [order])
            assert above[0] == below[0] == order / sigma**2
        # Our exact crossing lies just below their eyeballed value (within 6%).
        ours = -_gnmax_thresholds(float(sigma), order, 10).logq0
        assert neglogq0 <= ours <= 1.06 * neglogq0


def test_theorem6_conditions_fall_back_to_data_independent():
    # order > mu1 = sigma sqrt(log 1/q) + 1: Theorem 6 does not apply.
    sigma, logq = 2.0, -4.0  # mu1 = 5
    assert float(gnmax_rdp_from_logq(logq, sigma, [5.5])[0]) == 5.5 / sigma**2
    # mu2 <= 1 (q not small enough for sigma): data-independent everywhere.
    curve = gnmax_rdp_from_logq(-0.2, 1.0, DEFAULT_ORDERS)
    np.testing.assert_array_equal(curve, DEFAULT_ORDERS / 1.0)


@pytest.mark.parametrize("sigma", [0.5, 2.0, 10.0, 40.0])
def test_gnmax_bound_dominates_exact_divergence_for_two_classes(sigma):
    # Two classes: the output is Bernoulli(Phi(-gap/(sqrt(2) sigma))); a neighbour moves the
    # gap by 2. The data-dependent bound must be >= the exact Renyi divergence at every order.
    orders = DEFAULT_ORDERS
    c = math.sqrt(2) * sigma
    for gap in range(0, 400, 3):
        bound = gnmax_rdp([gap + 5, 5], sigma, orders)
        lp, l1p = special.log_ndtr(-gap / c), special.log_ndtr(gap / c)
        for gap2 in (gap - 2, gap + 2):
            lq, l1q = special.log_ndtr(-gap2 / c), special.log_ndtr(gap2 / c)
            exact = bernoulli_renyi(lp, l1p, lq, l1q, orders)
            assert np.all(exact <= bound * (1 + 1e-10) + 1e-300)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(votes=st.lists(st.integers(0, 400), min_size=2, max_size=12),
       sigma=st.floats(0.3, 300.0),
       orders=st.lists(st.floats(1.0001, 1e4), min_size=1, max_size=8))
def test_gnmax_rdp_is_below_data_independent(votes, sigma, orders):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = gnmax_rdp(votes, sigma, orders)
    ind = gnmax_data_independent_rdp(sigma, orders)
    assert np.all(np.isfinite(got)) and np.all(got >= 0) and np.all(got <= ind)


def test_strong_consensus_is_much_cheaper():
    votes = [250] + [0] * 9
    curve = gnmax_rdp(votes, SIGMA, DEFAULT_ORDERS)
    low = DEFAULT_ORDERS <= 20
    assert np.all(curve[low] < 0.05 * DEFAULT_ORDERS[low] / SIGMA**2)
    dep = PATEAccountant().compose(gn_event(votes), count=1000)
    ind = PATEAccountant().compose(GN.event, count=1000)
    eps_dep, eps_ind = dep.get_epsilon(DELTA), ind.get_epsilon(DELTA)
    assert eps_dep.kind is BoundKind.DATA_DEPENDENT and eps_ind.kind is BoundKind.UPPER_BOUND
    assert float(eps_dep) < 0.1 * float(eps_ind)
    # Weak consensus: nothing to gain, the data-independent bound is returned as such.
    weak = PATEAccountant().compose(gn_event([30, 25, 25, 20, 20, 30, 30, 30, 20, 20]), 1000)
    eps_weak = weak.get_epsilon(DELTA)
    assert eps_weak.kind is BoundKind.UPPER_BOUND
    assert float(eps_weak) == pytest.approx(float(eps_ind), rel=1e-12)


@pytest.mark.parametrize("orders", [[2.0, 5.0, 10.0, 20.0, 30.0]])
def test_gnmax_rdp_is_monotone_in_the_vote_gap(orders):
    # At sigma = 40 and these orders the conditions C5 (bound non-decreasing in q) hold.
    curves = np.array([gnmax_rdp([200, 200 - g] + [0] * 8, SIGMA, orders) for g in range(201)])
    assert np.all(np.diff(curves, axis=0) <= 1e-15)
    assert curves[-1, 0] < curves[0, 0]


def test_huge_gaps_are_numerically_stable():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        orders = [1.001, 2.0, 100.0, 1e4]
        for votes, sigma in (([10**12, 0, 0], 0.01), ([10**15, 3], 1e-6), ([400, 0], 0.5)):
            logq = gnmax_logq(votes, sigma)
            assert math.isfinite(logq) and logq < -1e3
            curve = gnmax_rdp(votes, sigma, orders)
            ind = np.array(orders) / sigma**2
            assert np.all(np.isfinite(curve)) and np.all(curve >= 0) and np.all(curve <= ind)
            assert np.all(curve[:3] <= 1e-12 * ind[:3])  # orders <= mu1 = sigma sqrt(-log q) + 1
            moments = lnmax_log_moments(votes, sigma, [0.5, 1.0, 100.0, 1e4])
            assert np.all(np.isfinite(moments)) and np.all(moments >= 0)
            assert np.all(np.isfinite(lnmax_rdp(votes, sigma, orders)))
        # log q = -inf is floored (q = exp(-1e300) is still an upper bound).
        assert np.all(gnmax_rdp_from_logq(-math.inf, 1.0, orders) == 0.0)


# --------------------------------------------------------------------------- LNMax


def test_lnmax_data_independent_moments_follow_pate2017():
    gamma = 1 / 40.0
    moments = np.array([0.5, 1.0, 2.0, 8.0, 32.0, 128.0])
    ind = lnmax_data_independent_log_moments(40.0, moments)
    assert np.all(ind <= 2 * gamma**2 * moments * (moments + 1) * (1 + 1e-12))  # Theorem 2
    assert np.all(ind <= 2 * gamma * moments * (1 + 1e-12))
    # It is l times the RDP curve the RDP accountant uses for the same event.
    rdp_acc_curve = pate.data_independent_rdp(LaplaceNoisyMaxDpEvent(40.0, 10), moments + 1)
    np.testing.assert_allclose(ind, moments * rdp_acc_curve, rtol=1e-12)


def test_lnmax_moments_vs_data_independent_and_exact():
    moments = np.array([0.25, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0])
    for scale in (0.5, 2.0, 10.0, 40.0):
        ind = lnmax_data_independent_log_moments(scale, moments)
        gamma = 1.0 / scale
        for gap in range(0, 300, 5):
            got = lnmax_log_moments([gap + 3, 3], scale, moments)
            assert np.all(got <= ind) and np.all(got >= 0)

            # Exact for two classes: P(out = 1) = tail of a Laplace difference at the gap.
            def logp(g, gamma=gamma):
                x = gamma * abs(g)
                tail = math.log(2 + x) - x - 2 * math.log(2)
                return (tail, math.log1p(-math.exp(tail))) if g >= 0 else (
                    math.log1p(-math.exp(tail)), tail)

            lp, l1p = logp(gap)
            for gap2 in (gap - 2, gap + 2):
                lq, l1q = logp(gap2)
                exact = moments * bernoulli_renyi(lp, l1p, lq, l1q, moments + 1)
                assert np.all(exact <= got * (1 + 1e-10) + 1e-300)
    # Strong consensus with gamma = 1: far below the data-independent moments.
    strong = lnmax_log_moments([40, 5, 0, 0], 1.0, moments)
    ind = lnmax_data_independent_log_moments(1.0, moments)
    assert np.all(strong[:5] < 1e-6 * ind[:5]) and np.all(strong <= ind)
    # RDP and moments are the same object: alpha(l) = l D_(l+1).
    np.testing.assert_allclose(lnmax_rdp([40, 5, 0, 0], 1.0, moments + 1) * moments, strong,
                               rtol=1e-12)


def test_lnmax_theorem3_condition_is_respected():
    # Theorem 3 needs q < 1/(e^(2 gamma) + 1): here q ~ 0.3 with gamma = 1, above
    # 1/(e^2 + 1) = 0.119, so the data-independent moments must be returned.
    votes = [3, 2, 0]
    assert math.exp(lnmax_logq(votes, 1.0)) > 1 / (math.exp(2) + 1)
    np.testing.assert_array_equal(lnmax_log_moments(votes, 1.0, [1.0, 4.0]),
                                  lnmax_data_independent_log_moments(1.0, [1.0, 4.0]))


# --------------------------------------------------------------------------- smooth sensitivity


def _all_histograms(teachers: int, m: int) -> list[tuple[int, ...]]:
    return [h for h in itertools.product(range(teachers + 1), repeat=m) if sum(h) == teachers]


def _neighbours(h: tuple[int, ...]):
    for a, b in itertools.permutations(range(len(h)), 2):
        if h[a] > 0:
            g = list(h)
            g[a] -= 1
            g[b] += 1
            yield tuple(g)


@pytest.mark.parametrize(("teachers", "m", "sigma", "order"),
                         [(30, 3, 5.0, 3.0), (24, 3, 2.0, 2.0), (12, 4, 3.0, 2.0)])
def test_local_sensitivity_bounds_against_brute_force(teachers, m, sigma, order):
    # Every histogram of the ensemble: exact LS of the released RDP, then the exact A^(d) as a
    # max over balls; the algorithmic A^(d) must dominate it at every histogram and distance.
    hist = _all_histograms(teachers, m)
    index = {h: i for i, h in enumerate(hist)}
    rdp = np.array([gnmax_rdp(h, sigma, [order])[0] for h in hist])
    ls = np.array([max(abs(rdp[index[g]] - rdp[i]) for g in _neighbours(h))
                   for i, h in enumerate(hist)])
    arr = np.array(hist)
    dist = np.abs(arr[:, None, :] - arr[None, :, :]).sum(-1) // 2
    for i, h in enumerate(hist):
        bounds = gnmax_local_sensitivity_bounds(h, sigma, order)
        assert bounds.shape == (teachers + 1,)
        assert np.all(np.diff(bounds) >= 0)
        for d in range(teachers + 1):
            assert ls[dist[i] <= d].max() <= bounds[d] * (1 + 1e-9) + 1e-15


@pytest.mark.parametrize("beta", [0.01, 0.1])
def test_smooth_sensitivity_is_beta_smooth(beta):
    # NRS07 Definition 2.1: S(h) <= e^beta S(h') for all neighbours (checked exhaustively).
    teachers, m, sigma, order = 30, 3, 5.0, 3.0
    hist = _all_histograms(teachers, m)
    smooth = {h: gnmax_smooth_sensitivity(h, sigma, order, beta) for h in hist}
    for h in hist:
        for g in _neighbours(h):
            assert smooth[h] <= math.exp(beta) * smooth[g] * (1 + 1e-12)


def test_gnss_rdp_formula():
    beta, sigma_ss, order = 0.01, 10.0, 5.0
    expected = (order * math.exp(2 * beta) / sigma_ss**2
                + (beta * order - 0.5 * math.log(1 - 2 * order * beta)) / (order - 1))
    assert gnss_rdp(beta, sigma_ss, order) == pytest.approx(expected, rel=1e-14)
    # Never below the Gaussian mechanism with sensitivity S and noise S sigma_ss.
    assert gnss_rdp(1e-9, sigma_ss, order) >= order / (2 * sigma_ss**2)
    assert gnss_rdp(beta, 20.0, order) < gnss_rdp(beta, 10.0, order)


def _mixed_events():
    rng = np.random.default_rng(7)
    events = [gn_event([250] + [0] * 9)] * 20
    for _ in range(30):
        events.append(gn_event(rng.multinomial(250, rng.dirichlet(np.full(10, 0.2)))))
    return events


def test_release_cost_is_consistent():
    events = _mixed_events()
    order = 10.0
    rel = smooth_sensitivity_release_cost(events, order)
    acc = PATEAccountant(orders=[order])
    for e in events:
        acc.compose(e)
    # The released value is the accountant's data-dependent RDP at that order.
    assert rel.rdp == pytest.approx(float(acc.rdp()[0]), rel=1e-12)
    assert rel.num_queries == 50
    assert 0 < rel.beta < 0.5 / order and rel.sigma_ss > 0
    assert rel.release_rdp == pytest.approx(gnss_rdp(rel.beta, rel.sigma_ss, order), rel=1e-14)
    assert rel.noise_std == pytest.approx(rel.smooth_sensitivity * rel.sigma_ss)
    # Smooth sensitivity of the sum: discounted max of the summed A^(d) of every query.
    summed = np.zeros(251)
    for e in events:
        summed += gnmax_local_sensitivity_bounds(e.votes, SIGMA, order)
    expected = np.max(np.exp(-rel.beta * np.arange(251)) * summed)
    assert rel.smooth_sensitivity == pytest.approx(expected, rel=1e-12)
    alone, total = rel.epsilon(DELTA)
    assert total - alone == pytest.approx(rel.release_rdp, rel=1e-9)
    # Fixed parameters are used as given; a count mapping equals repeated events.
    fixed = smooth_sensitivity_release_cost({e: 1 for e in events[20:]} | {events[0]: 20},
                                            order, beta=0.02, sigma_ss=5.0)
    assert (fixed.beta, fixed.sigma_ss) == (0.02, 5.0)
    assert fixed.rdp == pytest.approx(rel.rdp, rel=1e-12)
    # The paper's choice of (beta, sigma_ss) minimises rdp + release + 2 noise std.
    assert (rel.rdp + rel.release_rdp + 2 * rel.noise_std
            <= fixed.rdp + fixed.release_rdp + 2 * fixed.noise_std)


def test_release_sample_is_centred():
    # 4000 draws; the mean is within 6 standard errors (false failure ~2e-9, fixed seed).
    rel = smooth_sensitivity_release_cost(_mixed_events(), 10.0)
    rng = np.random.default_rng(123)
    draws = np.array([rel.sample(rng) for _ in range(4000)])
    assert abs(draws.mean() - rel.rdp) < 6 * rel.noise_std / math.sqrt(draws.size)
    with pytest.raises(ValueError, match="rng"):
        rel.sample(np.random.RandomState(0))


def test_release_refuses_orders_where_c5_c6_fail():
    # sigma = 5, order 10: beta(BU(q)) - beta(q) decreases somewhere below q1 (C6 fails).
    with pytest.raises(ValueError, match="order"):
        smooth_sensitivity_release_cost([gn_event([40, 0, 0], 5.0)], 10.0)


# --------------------------------------------------------------------------- accountant


def test_composition_identities():
    ev = gn_event([180, 40, 30] + [0] * 7)
    one = PATEAccountant()
    for _ in range(40):
        one.compose(ev)
    folded = PATEAccountant().compose(_dp.SelfComposedDpEvent(ev, 40))
    counted = PATEAccountant().compose(ev, count=40)
    nested = PATEAccountant().compose(_dp.ComposedDpEvent([_dp.SelfComposedDpEvent(ev, 19),
                                                           ev, _dp.NoOpDpEvent()]), count=2)
    ref = float(counted.get_epsilon(DELTA))
    for acc in (one, folded, nested):
        assert float(acc.get_epsilon(DELTA)) == pytest.approx(ref, rel=1e-12)


def test_batched_curves_equal_single_query_functions():
    rng = np.random.default_rng(11)
    events = []
    for i in range(60):
        votes = rng.multinomial(250, rng.dirichlet(np.full(10, 0.1)))
        events.append(gn_event(votes) if i % 2 else ln_event(votes, 20.0))
    acc = PATEAccountant()
    for e in events:
        acc.compose(e)
    orders = acc.orders
    total = np.zeros_like(orders)
    for e in events:
        if isinstance(e, GaussianNoisyMaxDpEvent):
            total += gnmax_rdp(e.votes, e.sigma, orders)
        else:
            total += lnmax_rdp(e.votes, e.noise_scale, orders)
    np.testing.assert_allclose(acc.rdp(), total, rtol=1e-12)
    eps, _ = epsilon_from_rdp(orders, total, DELTA)
    assert float(acc.get_epsilon(DELTA)) == pytest.approx(eps, rel=1e-12)
    assert acc.get_epsilon(DELTA).method == pate.METHOD_DATA_DEPENDENT_MIXED


def test_data_independent_matches_dp_accounting_and_rdp_accountant():
    # GNMax = Gaussian with L2 sensitivity sqrt(2): noise multiplier sigma / sqrt(2). Same
    # orders and the same conversion as dp_accounting: agreement to 1e-9.
    orders = list(DEFAULT_ORDERS)
    for k in (1, 100, 1000):
        ours = PATEAccountant().compose(GN.event, k).get_epsilon(DELTA)
        theirs = dp_rdp.RdpAccountant(orders=orders).compose(
            dp_accounting.GaussianDpEvent(SIGMA / math.sqrt(2)), k).get_epsilon(DELTA)
        assert float(ours) == pytest.approx(theirs, rel=1e-9)
        assert ours.kind is BoundKind.UPPER_BOUND
    # LNMax: exactly the RDP accountant's curve on our orders; its own order search differs,
    # so its epsilon agrees to 0.2%.
    ev = LaplaceNoisyMaxDpEvent(noise_scale=40.0, num_classes=10)
    for k in (27, 400, 1300):
        ours = float(PATEAccountant().compose(ev, k).get_epsilon(DELTA))
        same_curve, _ = epsilon_from_rdp(DEFAULT_ORDERS, k * rdp_curve(ev, DEFAULT_ORDERS), DELTA)
        assert ours == pytest.approx(same_curve, rel=1e-12)
        rdp_acc = float(RDPAccountant().compose(ev, k).get_epsilon(DELTA))
        assert ours == pytest.approx(rdp_acc, rel=2e-3)


def test_votes_switches_and_kinds():
    votes = [240] + [0] * 9
    ev = gn_event(votes)
    dep = PATEAccountant().compose(ev, 100).get_epsilon(DELTA)
    assert isinstance(dep, Epsilon) and dep.kind is BoundKind.DATA_DEPENDENT
    assert dep.method == "PATE data-dependent RDP (Papernot et al. 2018)"
    off = PATEAccountant(data_dependent=False).compose(ev, 100)
    plain = PATEAccountant().compose(GN.event, 100)
    assert off.get_epsilon(DELTA).kind is BoundKind.UPPER_BOUND
    assert float(off.get_epsilon(DELTA)) == float(plain.get_epsilon(DELTA))
    assert float(dep) < float(plain.get_epsilon(DELTA))
    np.testing.assert_array_equal(off.rdp(data_dependent=True),
                                  PATEAccountant().compose(ev, 100).rdp())
    ln = PATEAccountant().compose(ln_event([40, 1, 0], 1.0), 10).get_epsilon(DELTA)
    assert ln.kind is BoundKind.DATA_DEPENDENT and "2017" in ln.method
    acc = PATEAccountant().compose(ev, 100)
    assert acc.data_independent_epsilon(DELTA).kind is BoundKind.UPPER_BOUND
    assert float(acc.data_independent_epsilon(DELTA)) == float(plain.get_epsilon(DELTA))


def test_delta_and_pure_composition():
    ev = gn_event([230, 10, 10] + [0] * 7)
    acc = PATEAccountant().compose(ev, 300)
    eps = float(acc.get_epsilon(DELTA))
    assert acc.get_delta(eps) <= DELTA * (1 + 1e-6)
    assert acc.get_delta(0.5 * eps) > DELTA
    # LNMax alone is pure DP: basic composition bounds it at any delta, including 0.
    ln = PATEAccountant().compose(LaplaceNoisyMaxDpEvent(noise_scale=40.0, num_classes=10), 20)
    assert float(ln.get_epsilon(0.0)) == pytest.approx(20 * 2 / 40.0)
    assert float(ln.get_epsilon(DELTA)) <= 1.0
    assert ln.get_delta(1.0) == 0.0
    gn_only = PATEAccountant().compose(GN.event, 3)
    assert math.isinf(gn_only.get_epsilon(0.0))


def test_empty_non_private_and_refusals():
    acc = PATEAccountant()
    assert float(acc.get_epsilon(DELTA)) == 0.0 and acc.get_delta(1.0) == 0.0
    acc.compose(gn_event([200] + [0] * 9))
    before = float(acc.get_epsilon(DELTA))
    with pytest.raises(UnsupportedEventError, match="PureDpEvent"):
        acc.compose(_dp.ComposedDpEvent([gn_event([100] * 2 + [0] * 8), PureDpEvent(1.0)]))
    with pytest.raises(UnsupportedEventError, match="GaussianDpEvent"):
        acc.compose(dp_accounting.GaussianDpEvent(1.0))
    with pytest.raises(ValueError, match="votes"):  # refused by the event itself now
        LaplaceNoisyMaxDpEvent(noise_scale=1.0, num_classes=2, votes=(3, -1))
    assert float(acc.get_epsilon(DELTA)) == before
    assert not acc.supports(PureDpEvent(1.0))
    copy = acc.copy().compose(_dp.NonPrivateDpEvent())
    assert math.isinf(copy.get_epsilon(DELTA)) and copy.get_delta(5.0) == 1.0
    assert float(acc.get_epsilon(DELTA)) == before
    # Copies share the (immutable) curve caches but not the history.
    twin = acc.copy()
    twin.compose(gn_event([10, 20] + [0] * 8))
    assert float(acc.get_epsilon(DELTA)) == before
    assert float(twin.get_epsilon(DELTA)) > before
    assert twin.get_epsilon(DELTA) == PATEAccountant().compose(
        gn_event([200] + [0] * 9)).compose(gn_event([10, 20] + [0] * 8)).get_epsilon(DELTA)
    add_remove = PATEAccountant(neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
    assert add_remove.neighboring_relation is NeighboringRelation.ADD_OR_REMOVE_ONE


def test_a_thousand_distinct_queries_are_fast():
    rng = np.random.default_rng(3)
    events = [gn_event(rng.multinomial(250, rng.dirichlet(np.full(10, 0.3))))
              for _ in range(1000)]
    acc = PATEAccountant()
    for e in events:
        acc.compose(e)
    (eps, report), peak = peak_bytes(lambda: (acc.get_epsilon(DELTA), acc.report(DELTA)))
    assert peak < 128 * MB  # one (queries x orders) table, measured 18 MB
    assert float(eps) <= float(acc.data_independent_epsilon(DELTA))
    assert report.release is not None and report.release.num_queries == 1000


def test_report_shows_both_line_items():
    acc = PATEAccountant()
    for e in _mixed_events():
        acc.compose(e)
    report = acc.reports(DELTA)
    text = str(report)
    assert "data-dependent epsilon" in text
    assert "cost of releasing it (smooth sensitivity)" in text
    assert "data-independent epsilon" in text
    rel = report.release
    assert rel is not None and rel.release_rdp > 0
    assert _gnmax_thresholds(SIGMA, rel.order, 10).conditions_hold
    alone, total = rel.epsilon(DELTA)
    assert total > alone >= float(report.data_dependent_epsilon) * (1 - 1e-12)
    assert report.data_dependent_epsilon.kind is BoundKind.DATA_DEPENDENT
    # A given order and parameters are used verbatim; an order where C5-C6 fail is refused.
    fixed = acc.report(DELTA, order=8.0, beta=0.03, sigma_ss=6.0).release
    assert (fixed.order, fixed.beta, fixed.sigma_ss) == (8.0, 0.03, 6.0)
    small = PATEAccountant().compose(gn_event([40, 0, 0], 5.0))
    with pytest.raises(ValueError, match="order"):
        small.report(DELTA, order=10.0)
    # Without votes, or with LNMax votes, there is no release line, and the note says why.
    plain = PATEAccountant().compose(GN.event, 10).report(DELTA)
    assert plain.release is None and "data-independent" in plain.release_note
    assert "not available" in str(plain)
    ln = PATEAccountant().compose(ln_event([40, 1, 0], 1.0), 10).report(DELTA)
    assert ln.release is None and "LNMax" in ln.release_note


def test_pate_rdp_curve_registration_in_a_fresh_process():
    # Registration changes a process-wide registry, so it is exercised in a subprocess.
    code = (
        "from dpkd_audit.accountants import pate\n"
        "from dpkd_audit.accountants.rdp.accountant import RDPAccountant\n"
        "from dpkd_audit.mechanisms.pate import GaussianNoisyMax\n"
        "ev = GaussianNoisyMax.from_sigma(40.0, 10, 1e-5).event_with_votes([250] + [0] * 9)\n"
        "before = RDPAccountant().compose(ev, 100).get_epsilon(1e-5)\n"
        "pate.register_data_dependent_rdp_curves()\n"
        "after = RDPAccountant().compose(ev, 100).get_epsilon(1e-5)\n"
        "ref = pate.PATEAccountant().compose(ev, 100).get_epsilon(1e-5)\n"
        "assert before.kind.name == 'UPPER_BOUND', before\n"
        "assert after.kind.name == 'DATA_DEPENDENT', after\n"
        "assert float(after) < 0.2 * float(before), (after, before)\n"
        "assert abs(float(after) - float(ref)) <= 0.01 * float(ref), (after, ref)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr


def test_pate_rdp_curve_dispatch():
    orders = np.array([2.0, 10.0])
    ev = gn_event([250] + [0] * 9)
    np.testing.assert_array_equal(pate.pate_rdp_curve(ev, orders),
                                  gnmax_rdp(ev.votes, ev.sigma, orders))
    np.testing.assert_array_equal(pate.pate_rdp_curve(GN.event, orders),
                                  orders / GN.event.sigma**2)
    with_inf = pate.pate_rdp_curve(ln_event([40, 1, 0], 1.0), [2.0, math.inf])
    assert with_inf[1] == pytest.approx(2.0) and with_inf[0] < 1e-6  # pure 2/b at inf
    with pytest.raises(ValueError, match="orders"):
        pate.pate_rdp_curve(ev, [0.5])
    with pytest.raises(ValueError, match="event"):
        pate.data_independent_rdp(PureDpEvent(1.0), orders)
