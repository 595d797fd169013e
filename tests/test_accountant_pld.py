"""PLD accountant: contract, mapping of every event, identities and exact references.

All checks are deterministic. References are independent of dp_accounting's PLD code: the
Laplace hockey-stick curve by mpmath quadrature, the Gaussian curve of Balle-Wang 2018 (Thm 8),
k-fold binary randomized response by an exact binomial sum (Kairouz-Oh-Viswanath 2015), the
discrete Laplace and randomized-response curves by direct sums over their outputs, and the
two-fold Laplace composition by mpmath integration over the privacy-loss law.

Tolerances (value_discretization_interval h = 1e-4): the pessimistic PLD never goes below an
exact delta by more than 1e-15, nor below an exact epsilon by more than 1e-9 (floating-point
rounding). It exceeds the exact epsilon by at most 1e-8 for one release (one grid step h in the
last grid cell below the largest loss) and for k-fold pure releases (exact binomial), by at
most h for k-fold randomized response and discrete Laplace (exact lattice powers; see
tests/test_accountant_pld_lattice.py), and by at most 2 k h^2 + 1e-6 for FFT compositions at
delta >= 1e-8 (1e-3 at delta = 1e-10, where FFT round-off dominates; it stays on the
pessimistic side).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting import dp_event as _dp
from dp_accounting.pld import pld_privacy_accountant as dp_pld
from dp_accounting.pld import privacy_loss_distribution as dp_pld_dist
from dp_accounting.rdp import rdp_privacy_accountant as dp_rdp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats
from work_bounds import MB, peak_bytes

from dpkd_audit._math.privacy import (
    analytic_gaussian_delta,
    discrete_gaussian_delta,
    smallest_satisfying,
)
from dpkd_audit.accountants import (
    BoundKind,
    Epsilon,
    NeighboringRelation,
    PureAccountant,
    UnsupportedEventError,
)
from dpkd_audit.accountants.pld import PLDAccountant, laplace_delta, laplace_epsilon
from dpkd_audit.accountants.pld import evaluation as pld_eval
from dpkd_audit.accountants.pld import specs as pld_specs
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

H = 1e-4
REPLACE = NeighboringRelation.REPLACE_ONE
ADD_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE


def eps_of(acc, delta: float) -> float:
    return float(acc.get_epsilon(delta))


# ============================================================================ references


def mp_laplace_delta(eps: float, b: float) -> mpmath.mpf:
    """Hockey-stick integral of Lap(0, b) against Lap(1, b) by quadrature."""
    with mpmath.workdps(30):
        p = lambda x: mpmath.exp(-abs(x) / b) / (2 * b)  # noqa: E731
        q = lambda x: mpmath.exp(-abs(x - 1) / b) / (2 * b)  # noqa: E731
        big = mpmath.exp(eps)
        kink = (1 - b * eps) / 2  # p = e^eps q there when it lies in (0, 1)
        points = sorted({0.0, 1.0, min(max(kink, -5.0), 6.0)})
        f = lambda x: max(0, p(x) - big * q(x))  # noqa: E731
        return mpmath.quad(f, [-mpmath.inf, *points, mpmath.inf])


def exact_delta_curve(losses, probs, eps: float) -> float:
    """delta(eps) = sum p (1 - e^(eps - L))_+ of a finite PLD (exact definition)."""
    losses, probs = np.asarray(losses, float), np.asarray(probs, float)
    mask = losses > eps
    return float(np.sum(probs[mask] * -np.expm1(eps - losses[mask])))


def exact_rr_composition_delta(eps: float, k: int, target: float) -> float:
    """k-fold binary RR at target epsilon: binomial sum over the number of -eps losses."""
    upper = 1.0 / (1.0 + math.exp(-eps))
    j = np.arange(k + 1)
    loss = (k - 2 * j) * eps
    log_p = stats.binom.logpmf(j, k, 1.0 - upper)
    mask = loss > target
    return float(np.sum(np.exp(log_p[mask]) * -np.expm1(target - loss[mask])))


def exact_epsilon(delta_fn, target_delta: float, hi: float) -> float:
    """Smallest eps with delta_fn(eps) <= target (bisection on a decreasing curve)."""
    return smallest_satisfying(delta_fn, target_delta, 0.0, hi, rel_tol=1e-13)


# ============================================================================ contract


def test_empty_and_type_of_results():
    acc = PLDAccountant()
    eps = acc.get_epsilon(1e-6)
    assert isinstance(eps, Epsilon) and float(eps) == 0.0
    assert eps.method == "PLD (dp_accounting)" and eps.kind is BoundKind.UPPER_BOUND
    assert acc.get_delta(0.0) == 0.0 and acc.pld() is None
    assert acc.neighboring_relation is REPLACE
    assert acc.value_discretization_interval == H


@pytest.mark.parametrize("event", [
    _dp.NonPrivateDpEvent(), _dp.GaussianDpEvent(0.0), _dp.LaplaceDpEvent(0),
    _dp.RandomizedResponseDpEvent(0.0, 4), _dp.DiscreteLaplaceDpEvent(0.0, 1),
])
def test_non_private_and_zero_noise_events_are_infinite(event):
    acc = PLDAccountant().compose(PureDpEvent(0.1)).compose(event)
    assert math.isinf(acc.get_epsilon(0.5)) and acc.get_delta(100.0) == 1.0


@pytest.mark.parametrize("event", [
    _dp.NoOpDpEvent(), _dp.RandomizedResponseDpEvent(1.0, 5),
    _dp.RandomizedResponseDpEvent(0.3, 1), _dp.SelfComposedDpEvent(PureDpEvent(1.0), 0),
])
def test_events_without_privacy_cost(event):
    assert eps_of(PLDAccountant().compose(event), 0.0) == 0.0


def test_poisson_with_zero_probability_costs_nothing():
    acc = PLDAccountant(ADD_REMOVE).compose(_dp.PoissonSampledDpEvent(0.0, _dp.GaussianDpEvent(1)))
    assert eps_of(acc, 0.0) == 0.0


@pytest.mark.parametrize(("event", "relation", "match"), [
    (_dp.UnsupportedDpEvent(), REPLACE, "UnsupportedDpEvent"),
    (_dp.ZCDpEvent(0.1), REPLACE, "ZCDpEvent"),
    (_dp.PoissonSampledDpEvent(0.1, _dp.GaussianDpEvent(1.0)), REPLACE, "ADD_OR_REMOVE_ONE"),
    (_dp.PoissonSampledDpEvent(0.1, PureDpEvent(1.0)), ADD_REMOVE, "PureDpEvent"),
    (_dp.RandomizedResponseDpEvent(0.5, 3), ADD_REMOVE, "REPLACE_ONE"),
    (_dp.GaussianDpEvent(-1.0), REPLACE, "noise_multiplier"),
    (_dp.LaplaceDpEvent(math.nan), REPLACE, "noise_multiplier"),
    (_dp.LaplaceDpEvent(math.inf), REPLACE, "noise_multiplier"),
    (_dp.DiscreteLaplaceDpEvent(0.5, 0), REPLACE, "sensitivity"),
    (_dp.RandomizedResponseDpEvent(1.5, 3), REPLACE, "noise_parameter"),
    (_dp.RandomizedResponseDpEvent(0.5, 0), REPLACE, "num_buckets"),
    (_dp.PoissonSampledDpEvent(1.5, _dp.LaplaceDpEvent(1.0)), ADD_REMOVE, "sampling_prob"),
])
def test_unsupported_events_are_named_and_leave_state_unchanged(event, relation, match):
    acc = PLDAccountant(relation).compose(PureDpEvent(0.5))
    before = eps_of(acc, 1e-6)
    with pytest.raises(UnsupportedEventError, match=match) as info:
        acc.compose(_dp.ComposedDpEvent([PureDpEvent(1.0), event]))
    assert "PLDAccountant" in str(info.value)
    assert eps_of(acc, 1e-6) == before
    assert not acc.supports(event)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"neighboring_relation": "REPLACE_ONE"}, "neighboring_relation"),
    ({"neighboring_relation": NeighboringRelation.REPLACE_SPECIAL}, "neighboring_relation"),
    ({"value_discretization_interval": 0.0}, "value_discretization_interval"),
    ({"value_discretization_interval": -1e-4}, "value_discretization_interval"),
    ({"value_discretization_interval": math.nan}, "value_discretization_interval"),
    ({"value_discretization_interval": math.inf}, "value_discretization_interval"),
    ({"value_discretization_interval": 2.0}, "value_discretization_interval"),
    ({"value_discretization_interval": "1e-4"}, "value_discretization_interval"),
])
def test_constructor_rejects_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PLDAccountant(**kwargs)


@pytest.mark.parametrize("delta", [-0.1, 1.5, math.nan, "0.1", None])
def test_get_epsilon_rejects_bad_delta(delta):
    with pytest.raises(ValueError, match="target_delta"):
        PLDAccountant().get_epsilon(delta)


@pytest.mark.parametrize("eps", [-0.1, math.nan, "1", None])
def test_get_delta_rejects_bad_epsilon(eps):
    with pytest.raises(ValueError, match="target_epsilon"):
        PLDAccountant().get_delta(eps)


# ============================================================================ Laplace


@pytest.mark.parametrize("b", [0.3, 1.0, 4.0, 50.0])
def test_laplace_closed_form_matches_quadrature(b):
    eps0 = 1.0 / b
    for frac in (-1.5, -0.5, 0.0, 0.3, 0.9, 1.2):
        eps = frac * eps0
        assert laplace_delta(eps, b) == pytest.approx(float(mp_laplace_delta(eps, b)),
                                                      rel=1e-12, abs=1e-15)
    for delta in (0.0, 1e-8, 1e-3, 0.2, 0.99, 1.0):
        eps = laplace_epsilon(delta, b)
        assert laplace_delta(eps, b) <= delta + 1e-15
        if eps > 0:  # and it is the smallest such epsilon
            assert laplace_delta(eps - 1e-9, b) > delta


def test_laplace_closed_form_rejects_bad_input():
    with pytest.raises(ValueError, match="noise_multiplier"):
        laplace_delta(0.1, 0.0)
    with pytest.raises(ValueError, match="epsilon"):
        laplace_delta(math.nan, 1.0)
    with pytest.raises(ValueError, match="delta"):
        laplace_epsilon(1.5, 1.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        laplace_epsilon(0.1, -2.0)


@pytest.mark.parametrize("b", [0.3, 1.0, 4.0, 50.0])
def test_single_laplace_is_exact_and_pessimistic(b):
    acc = PLDAccountant().compose(_dp.LaplaceDpEvent(b))
    for delta in (0.0, 1e-8, 1e-5, 1e-2, 0.2):
        exact = laplace_epsilon(delta, b)
        # within 1e-8, or one grid step in the last grid cell below the largest loss 1/b
        slack = H if exact > 1.0 / b - H else 1e-8
        assert exact - 1e-12 <= eps_of(acc, delta) <= exact + slack
    for frac in (0.0, 0.1, 0.5, 0.99):
        exact = laplace_delta(frac / b, b)
        got = acc.get_delta(frac / b)
        assert exact - 1e-15 <= got <= exact + 1e-9


def two_fold_laplace_delta(eps: float, b: float) -> mpmath.mpf:
    """Two Laplace releases: E over the first loss L1 of delta_1(eps - L1) (mpmath).

    The privacy-loss law of one release (derived from L(x) = (|x-1| - |x|)/b, x ~ Lap(0, b)):
    +eps0 w.p. 1/2, -eps0 w.p. e^-eps0/2, density e^(-(eps0 - l)/2)/4 on (-eps0, eps0).
    delta_1(t) is the one-release curve on the whole real line (checked by quadrature above).
    """
    eps0 = 1.0 / b

    def curve(t):
        if t >= eps0:
            return mpmath.mpf(0)
        if t <= -eps0:
            return -mpmath.expm1(t)
        return -mpmath.expm1((t - eps0) / 2)

    with mpmath.workdps(30):
        atoms = curve(eps - eps0) / 2 + mpmath.exp(-eps0) * curve(eps + eps0) / 2
        density = lambda loss: mpmath.exp(-(eps0 - loss) / 2) / 4 * curve(eps - loss)  # noqa: E731
        cuts = sorted({-eps0, eps0, *(x for x in (eps - eps0, eps + eps0) if -eps0 < x < eps0)})
        return atoms + mpmath.quad(density, cuts)


@pytest.mark.parametrize("b", [0.5, 2.0])
def test_two_fold_laplace_matches_mpmath(b):
    acc = PLDAccountant().compose(_dp.LaplaceDpEvent(b), count=2)
    for eps in (0.0, 0.3 / b, 1.0 / b, 1.7 / b):
        exact = float(two_fold_laplace_delta(eps, b))
        got = acc.get_delta(eps)
        assert exact - 1e-12 <= got <= exact + 1e-6


def test_k_fold_laplace_between_optimistic_and_pessimistic_backend():
    # Sandwich: dp_accounting's optimistic PLD lower-bounds the truth.
    b, k = 5.0, 300
    ours = eps_of(PLDAccountant().compose(_dp.LaplaceDpEvent(b), count=k), 1e-6)
    optimistic = dp_pld_dist.from_laplace_mechanism(
        b, pessimistic_estimate=False, value_discretization_interval=H,
        use_connect_dots=False).self_compose(k).get_epsilon_for_delta(1e-6)
    assert optimistic - 1e-9 <= ours <= optimistic + 2 * k * H + 1e-6


# ============================================================================ Gaussian


def gaussian_epsilon(sigma: float, delta: float) -> float:
    return exact_epsilon(lambda e: analytic_gaussian_delta(e, sigma), delta, 200.0)


@pytest.mark.parametrize("sigma", [0.7, 2.0, 10.0])
def test_single_gaussian_matches_balle_wang(sigma):
    # A Gaussian-only history is answered from the exact curve; the discretised PLD (used when
    # Gaussians are mixed with other releases) is checked against the same curve.
    acc = PLDAccountant().compose(_dp.GaussianDpEvent(sigma))
    pld = acc.event_pld(_dp.GaussianDpEvent(sigma))
    for delta in (1e-10, 1e-5, 1e-2):
        exact = gaussian_epsilon(sigma, delta)
        assert exact - 1e-12 <= eps_of(acc, delta) <= exact + 1e-9
        assert exact - 1e-9 <= pld_eval._pld_epsilon(pld, delta) <= exact + 1e-6
    for eps in (0.0, 0.5, 2.0):
        exact = analytic_gaussian_delta(eps, sigma)
        assert acc.get_delta(eps) == exact
        assert exact - 1e-15 <= pld_eval._pld_delta(pld, eps) <= exact + 1e-9


def test_gaussian_mixed_with_laplace_uses_the_pld_and_refuses_absurd_sizes():
    mixed = PLDAccountant().compose(_dp.GaussianDpEvent(3.0)).compose(_dp.LaplaceDpEvent(20.0))
    alone = eps_of(PLDAccountant().compose(_dp.GaussianDpEvent(3.0)), 1e-5)
    assert alone < eps_of(mixed, 1e-5) < alone + 1 / 20.0
    assert eps_of(PLDAccountant().compose(_dp.GaussianDpEvent(1e-3)), 1e-5) > 1e5  # exact curve
    huge = PLDAccountant().compose(_dp.GaussianDpEvent(1e-5)).compose(_dp.LaplaceDpEvent(1.0))
    with pytest.raises(UnsupportedEventError, match=r"GaussianDpEvent.*RDPAccountant"):
        huge.get_epsilon(1e-5)


def test_large_compositions_coarsen_the_grid_and_stay_upper_bounds():
    # 1000 Laplace releases of scale 0.5 would span ~7.6e6 points at h = 1e-4 (minutes of FFT
    # squaring); the grid step grows so that the composed PLD keeps ~4e6 points, and the
    # result stays above the exact optimal composition of the same pure releases.
    from dpkd_audit.accountants import OptimalCompositionAccountant

    acc = PLDAccountant().compose(_dp.LaplaceDpEvent(0.5), count=1000)
    assert acc.effective_interval() > acc.value_discretization_interval
    eps, peak = peak_bytes(lambda: eps_of(acc, 1e-5))
    assert peak < 256 * MB  # the coarser grid keeps ~4e6 points (measured peak 43 MB)
    small = PLDAccountant().compose(_dp.LaplaceDpEvent(0.5), count=10)
    assert small.effective_interval() == small.value_discretization_interval
    # the Laplace PLD is tighter than its eps-DP dominating pair, but never below the exact
    # k-fold Laplace epsilon, which is at least k * (mean privacy loss) ~ 1301 here
    optimal = float(OptimalCompositionAccountant().compose(_dp.LaplaceDpEvent(0.5), count=1000)
                    .get_epsilon(1e-5))
    assert 1200 < eps <= optimal


def test_gaussians_merge_exactly_into_one_gaussian():
    # k copies of sigma: sigma / sqrt(k); sigmas s_i: 1/sqrt(sum 1/s_i^2) (Dong-Roth-Su Cor. 3.3)
    acc = PLDAccountant().compose(_dp.GaussianDpEvent(20.0), count=400)
    assert eps_of(acc, 1e-5) == pytest.approx(gaussian_epsilon(1.0, 1e-5), abs=1e-6)
    mixed = PLDAccountant().compose(_dp.GaussianDpEvent(3.0)).compose(_dp.GaussianDpEvent(4.0))
    assert eps_of(mixed, 1e-5) == pytest.approx(gaussian_epsilon(2.4, 1e-5), abs=1e-6)
    assert len(mixed._grouped_specs()) == 1


def test_noise_multiplier_is_relative_to_the_accountants_relation():
    # Same PLD under both relations (shift of one noise unit), as dp_accounting's RDP and
    # ADD_OR_REMOVE_ONE PLD accountants; dp_accounting's REPLACE_ONE PLD doubles the shift.
    ours = [eps_of(PLDAccountant(rel).compose(_dp.GaussianDpEvent(2.0), 10), 1e-6)
            for rel in (REPLACE, ADD_REMOVE)]
    theirs = dp_pld.PLDAccountant(ADD_REMOVE).compose(
        _dp.GaussianDpEvent(2.0), 10).get_epsilon(1e-6)
    doubled = dp_pld.PLDAccountant(REPLACE).compose(
        _dp.GaussianDpEvent(2.0), 10).get_epsilon(1e-6)
    assert ours[0] == ours[1] == pytest.approx(theirs, abs=1e-6)
    assert doubled > 1.5 * ours[0]


# ============================================================================ discrete noise


def test_discrete_gaussian_event_matches_cks_theorem_7_and_its_declaration():
    event = DiscreteGaussianDpEvent(sigma=5.0, sensitivity=2, epsilon=1.0, delta=0.05)
    acc = PLDAccountant().compose(event)
    for eps in (0.1, 0.5, 1.0, 2.0):
        # discrete_gaussian_delta is certified: >= the exact delta, within ~1e-12 relative.
        exact = discrete_gaussian_delta(eps, 5.0, 2)
        assert exact * (1 - 1e-11) <= acc.get_delta(eps) <= exact + 1e-9
    assert eps_of(acc, 0.05) <= 1.0


@pytest.mark.parametrize(("a", "sens"), [(0.3, 1), (1.0, 2), (0.05, 3)])
def test_discrete_laplace_matches_direct_sum(a, sens):
    # pmf proportional to e^(-a|x|): direct hockey-stick sum over the integers
    x = np.arange(-4000, 4001)
    log_norm = math.log(math.tanh(a / 2))  # 1 / sum_x e^(-a|x|) = tanh(a/2)
    p, q = np.exp(-a * np.abs(x) + log_norm), np.exp(-a * np.abs(x - sens) + log_norm)
    acc = PLDAccountant().compose(_dp.DiscreteLaplaceDpEvent(a, sens))
    for frac in (0.0, 0.3, 0.8):
        eps = frac * a * sens
        exact = math.fsum(np.maximum(p - math.exp(eps) * q, 0.0))
        assert exact - 1e-14 <= acc.get_delta(eps) <= exact + 1e-6
    assert eps_of(acc, 0.0) == pytest.approx(a * sens, abs=H)


@pytest.mark.parametrize(("p", "k"), [(0.5, 2), (0.2, 4), (0.9, 10)])
def test_randomized_response_matches_its_exact_curve(p, k):
    keep, other = 1 - p + p / k, p / k
    loss = math.log(keep / other)
    losses, probs = [loss, -loss, 0.0], [keep, other, (k - 2) * other]
    acc = PLDAccountant().compose(_dp.RandomizedResponseDpEvent(p, k))
    for frac in (0.0, 0.2, 0.55, 0.999):
        exact = exact_delta_curve(losses, probs, frac * loss)
        assert exact - 1e-15 <= acc.get_delta(frac * loss) <= exact + 1e-6
    assert eps_of(acc, 0.0) == pytest.approx(loss, rel=1e-12)  # exact pure epsilon


# ============================================================================ pure events


@pytest.mark.parametrize(("eps", "k"), [(1.0, 1), (0.3, 7), (0.05123, 2000), (0.5, 400)])
def test_k_fold_pure_matches_exact_binomial_composition(eps, k):
    acc = PLDAccountant().compose(PureDpEvent(eps), count=k)
    for delta in (1e-8, 1e-5, 1e-2):
        exact = exact_epsilon(lambda t: exact_rr_composition_delta(eps, k, t), delta, k * eps)
        got = eps_of(acc, delta)
        assert exact - 1e-9 <= got <= exact + 1e-8  # binomial composition: no FFT


def test_connect_the_dots_avoids_grid_rounding_drift():
    # dp_accounting's from_privacy_parameters rounds +-eps up to the grid: 0.51 too large here.
    eps, k = 0.05123, 10_000
    exact = exact_epsilon(lambda t: exact_rr_composition_delta(eps, k, t), 1e-5, k * eps)
    ours = eps_of(PLDAccountant().compose(PureDpEvent(eps), count=k), 1e-5)
    assert exact - 1e-9 <= ours <= exact + 1e-8
    # (dp_accounting 0.6.0's rounded-up construction gives exact + 0.51 here; not asserted,
    # since it documents the backend, not this package.)


def exact_randomized_response_composition(p: float, k: int, n: int):
    """n-fold k-ary RR: loss m * L with m = #(report = x) - #(report = x'), exact (log space)."""
    keep, other = 1 - p + p / k, p / k
    loss = math.log(keep / other)
    a, b = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    rest = n - a - b
    valid = rest >= 0
    rest = np.where(valid, rest, 0)
    log_w = (special.gammaln(n + 1) - special.gammaln(a + 1) - special.gammaln(b + 1)
             - special.gammaln(rest + 1) + a * math.log(keep) + b * math.log(other)
             + rest * math.log((k - 2) * other))
    log_w = np.where(valid, log_w, -np.inf)
    m = (a - b).ravel()
    order = np.argsort(m, kind="stable")
    values, starts = np.unique(m[order], return_index=True)
    probs = np.exp([special.logsumexp(chunk) for chunk in np.split(log_w.ravel()[order],
                                                                   starts[1:])])
    return values * loss, probs


def test_fft_compositions_stay_pessimistic_at_small_deltas():
    # FFT repeated squaring (the path of continuous PLDs) on 200-fold 3-ary RR, whose exact
    # reference is a trinomial sum; the accountant itself composes RR exactly (lattice power,
    # tests/test_accountant_pld_lattice.py): within one grid step.
    losses, probs = exact_randomized_response_composition(0.3, 3, 200)
    event = _dp.RandomizedResponseDpEvent(0.3, 3)
    fft = pld_specs._self_compose(PLDAccountant().event_pld(event), 200)
    acc = PLDAccountant().compose(event, count=200)
    for delta, slack in ((1e-3, 1e-6), (1e-6, 1e-6), (1e-8, 2 * 200 * H * H + 1e-6),
                         (1e-10, 1e-3)):
        exact = exact_epsilon(lambda t: exact_delta_curve(losses, probs, t), delta,
                              float(losses.max()))
        assert exact - 1e-9 <= pld_eval._pld_epsilon(fft, delta) <= exact + slack
        assert exact - 1e-9 <= eps_of(acc, delta) <= exact + H


@pytest.mark.parametrize("event", [
    PureDpEvent(0.7), CollisionDpEvent(0.7, 100, 3, 8), ShuffledLocalDpEvent(0.7, 1000),
    SelectiveRandomizedResponseDpEvent(0.7, 10),
])
def test_pure_events_use_binary_randomized_response(event):
    acc = PLDAccountant().compose(event, count=3)
    exact = exact_epsilon(lambda t: exact_rr_composition_delta(0.7, 3, t), 1e-3, 2.1)
    assert exact - 1e-9 <= eps_of(acc, 1e-3) <= exact + 1e-6


def test_approx_dp_events_use_the_dominating_pair():
    for event in (ApproxDpEvent(1.0, 1e-3), ShuffledHistogramDpEvent(1.0, 1e-3, 100, 10)):
        acc = PLDAccountant().compose(event)
        assert math.isinf(acc.get_epsilon(5e-4))  # below the +inf mass
        assert 1.0 - 1e-9 <= eps_of(acc, 1e-3) <= 1.0 + 1e-6
        # delta(eps) = delta + (1 - delta) * binary-RR curve
        rr = exact_delta_curve([1.0, -1.0], [1 / (1 + math.exp(-1)), 1 / (1 + math.e)], 0.4)
        assert acc.get_delta(0.4) == pytest.approx(1e-3 + (1 - 1e-3) * rr, abs=1e-6)
    pure = PLDAccountant().compose(ApproxDpEvent(0.5, 0.0))
    assert eps_of(pure, 0.0) == pytest.approx(0.5, abs=H)


def test_bit_randomized_response_is_tighter_than_its_declared_total():
    event = BitRandomizedResponseDpEvent(epsilon_per_bit=0.1, num_bits=200, bits_changed=16)
    acc = PLDAccountant().compose(event, count=5)
    exact = exact_epsilon(lambda t: exact_rr_composition_delta(0.1, 80, t), 1e-5, 8.0)
    assert exact - 1e-9 <= eps_of(acc, 1e-5) <= exact + 1e-6
    assert eps_of(acc, 1e-5) < 0.5 * 8.0  # basic composition: 5 * 16 * 0.1
    assert eps_of(acc, 0.0) == pytest.approx(8.0, abs=80 * H)


# ============================================================================ PATE


def test_laplace_noisy_max_is_two_laplace_releases():
    event = LaplaceNoisyMaxDpEvent(noise_scale=40.0, num_classes=10, votes=[5] * 10)
    acc = PLDAccountant().compose(event, count=50)
    twice = PLDAccountant().compose(_dp.LaplaceDpEvent(40.0), count=100)
    assert eps_of(acc, 1e-5) == eps_of(twice, 1e-5)
    dominating = PLDAccountant().compose(PureDpEvent(2.0 / 40.0), count=50)
    assert eps_of(acc, 1e-5) <= eps_of(dominating, 1e-5) + 1e-9
    assert eps_of(acc, 0.0) == pytest.approx(50 * 2 / 40.0, abs=100 * H)


def test_gaussian_noisy_max_is_one_gaussian_with_sqrt2_sensitivity():
    event = GaussianNoisyMaxDpEvent(sigma=40.0, num_classes=10, epsilon=0.2, delta=1e-2)
    acc = PLDAccountant().compose(event)
    assert eps_of(acc, 1e-2) <= 0.2  # never above the declared guarantee
    assert eps_of(acc, 1e-5) == pytest.approx(gaussian_epsilon(40.0 / math.sqrt(2), 1e-5),
                                              abs=1e-6)


def test_distinct_vote_histograms_share_one_pld():
    acc = PLDAccountant()
    for i in range(200):
        acc.compose(GaussianNoisyMaxDpEvent(sigma=40.0, num_classes=3, epsilon=0.2, delta=1e-2,
                                            votes=(i, 2 * i, 3)))
    assert len(acc._counts) == 200 and len(acc._grouped_specs()) == 1
    assert eps_of(acc, 1e-5) == pytest.approx(
        gaussian_epsilon(40.0 / math.sqrt(2) / math.sqrt(200), 1e-5), abs=1e-6)


def test_calibrated_gaussian_within_its_declaration():
    event = CalibratedGaussianDpEvent(4.0, epsilon=1.0, delta=1e-2)
    assert eps_of(PLDAccountant().compose(event), 1e-2) <= 1.0


# ============================================================================ subsampling


@pytest.mark.parametrize("inner", [_dp.GaussianDpEvent(1.0), _dp.LaplaceDpEvent(2.0)])
def test_poisson_subsampling_matches_dp_accounting_and_is_below_rdp(inner):
    event = _dp.PoissonSampledDpEvent(0.02, inner)
    acc = PLDAccountant(ADD_REMOVE).compose(event, count=200)
    theirs = dp_pld.PLDAccountant(ADD_REMOVE).compose(event, 200).get_epsilon(1e-6)
    assert eps_of(acc, 1e-6) == pytest.approx(theirs, abs=1e-6)
    if isinstance(inner, _dp.GaussianDpEvent):
        rdp = dp_rdp.RdpAccountant(neighboring_relation=ADD_REMOVE).compose(event, 200)
        assert eps_of(acc, 1e-6) <= rdp.get_epsilon(1e-6)
    full = PLDAccountant(ADD_REMOVE).compose(inner, count=200)
    assert eps_of(acc, 1e-6) < eps_of(full, 1e-6)


# ============================================================================ identities


def compose_one_by_one(single, k):
    total = single
    for _ in range(k - 1):
        total = total.compose(single)
    return total


def backend_epsilon(pld, delta):
    return max(pld_eval._pmf_epsilon(pmf, delta) for pmf in pld_eval._pld_pmfs(pld))


@pytest.mark.parametrize("event", [
    _dp.LaplaceDpEvent(3.0), PureDpEvent(0.3), _dp.DiscreteLaplaceDpEvent(0.2, 1),
    _dp.RandomizedResponseDpEvent(0.6, 5), ApproxDpEvent(0.2, 1e-7),
])
def test_one_by_one_fold_and_count_agree(event):
    # Our grouped paths are identical; the backend's k sequential convolutions and its one-shot
    # FFT power agree with them to 1e-8 (floating-point noise of the convolutions).
    k = 25
    single = PLDAccountant().event_pld(event)
    backend_sequential = backend_epsilon(compose_one_by_one(single, k), 1e-6)
    backend_fft = backend_epsilon(single.self_compose(k), 1e-6)
    one = PLDAccountant()
    for _ in range(k):
        one.compose(event)
    folded = PLDAccountant().compose(_dp.SelfComposedDpEvent(event, k))
    counted = PLDAccountant().compose(event, count=k)
    values = [eps_of(a, 1e-6) for a in (one, folded, counted)]
    assert values[0] == values[1] == values[2]
    assert values[0] == pytest.approx(backend_sequential, abs=1e-8)
    assert values[0] == pytest.approx(backend_fft, abs=1e-8)


MIXES = [PureDpEvent(0.2), _dp.LaplaceDpEvent(5.0),
         CalibratedGaussianDpEvent(8.0, epsilon=1.0, delta=1e-6),
         BitRandomizedResponseDpEvent(0.05, 50, 4), ApproxDpEvent(0.1, 1e-8),
         LaplaceNoisyMaxDpEvent(20.0, 5), _dp.RandomizedResponseDpEvent(0.5, 3)]


@settings(derandomize=True, max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(len(MIXES))), st.integers(1, 30)),
                min_size=1, max_size=4))
def test_never_above_basic_composition_and_order_free(plan):
    acc, pure, reverse = PLDAccountant(), PureAccountant(), PLDAccountant()
    for index, count in plan:
        acc.compose(MIXES[index], count=count)
        pure.compose(MIXES[index], count=count)
    for index, count in reversed(plan):
        reverse.compose(MIXES[index], count=count)
    basic_eps, basic_delta = pure.totals()
    target = max(1e-6, 2 * basic_delta)
    assert eps_of(acc, target) <= basic_eps + 1e-9
    assert eps_of(acc, target) == eps_of(reverse, target)
    # composing one more release never lowers epsilon
    assert eps_of(acc.copy().compose(PureDpEvent(0.01)), target) >= eps_of(acc, target) - 1e-12


def test_below_dp_accounting_rdp_for_laplace_and_gaussian():
    rdp = dp_rdp.RdpAccountant(neighboring_relation=REPLACE)
    acc = PLDAccountant()
    for event, count in ((_dp.LaplaceDpEvent(10.0), 100), (_dp.GaussianDpEvent(5.0), 50)):
        rdp.compose(event, count)
        acc.compose(event, count=count)
    assert eps_of(acc, 1e-6) <= rdp.get_epsilon(1e-6)


def test_coarser_grid_stays_pessimistic():
    exact = exact_epsilon(lambda t: exact_rr_composition_delta(0.3, 100, t), 1e-6, 30.0)
    coarse = PLDAccountant(value_discretization_interval=1e-2).compose(PureDpEvent(0.3), 100)
    assert exact - 1e-9 <= eps_of(coarse, 1e-6) <= exact + 2 * 100 * 1e-4 + 1e-6


# ============================================================================ laziness and caching


def test_ten_thousand_compositions_cost_one_evaluation():
    acc = PLDAccountant()
    event = LaplaceNoisyMaxDpEvent(40.0, 10)
    for _ in range(10_000):
        acc.compose(event)
    assert len(acc._counts) == 1
    first = eps_of(acc, 1e-5)  # one group: one self-composition
    composed = acc.pld()
    assert eps_of(acc, 1e-5) == first and acc.pld() is composed  # cached: no new work
    acc.compose(PureDpEvent(0.01))  # the state changed: recomputed
    assert acc.pld() is not composed and eps_of(acc, 1e-5) > first


def test_copy_is_independent():
    acc = PLDAccountant().compose(PureDpEvent(0.5), count=4)
    before = eps_of(acc, 1e-5)
    other = acc.copy().compose(PureDpEvent(0.5), count=4)
    assert eps_of(acc, 1e-5) == before
    assert eps_of(other, 1e-5) > before
    assert other.neighboring_relation is acc.neighboring_relation


def test_event_pld_refuses_events_without_a_pld():
    with pytest.raises(ValueError, match="no finite PLD"):
        PLDAccountant().event_pld(_dp.NonPrivateDpEvent())
    with pytest.raises(UnsupportedEventError, match="UnsupportedDpEvent"):
        PLDAccountant().event_pld(_dp.UnsupportedDpEvent())
