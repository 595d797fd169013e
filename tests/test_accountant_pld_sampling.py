"""PLD accountant: dp_accounting's mixture-of-Gaussians and sampling-without-replacement events.

``MixtureOfGaussiansDpEvent(s, c_i, p_i)`` (one neighbour gives N(0, s^2), the other
sum_i p_i N(c_i, s^2); Choquette-Choo, Ganesh, Steinke, Thakurta 2023) is supported under
ADD_OR_REMOVE_ONE through dp_accounting's ``from_mixture_gaussian_mechanism``. Its backend PLD
is checked here against an independent reference: both hockey-stick divergences
D_{e^eps}(mixture || N(0, s^2)) and D_{e^eps}(N(0, s^2) || mixture), by mpmath quadrature
split at the likelihood-ratio crossing, and in closed form from normal cdfs (the two agree to
1e-20). dp_accounting builds this PLD slowly (its inverse privacy loss is a bisection): ~30 s
at h = 1e-4, ~3 s at h = 1e-3, so the tests use h = 1e-3. Tolerances (h = 1e-3): delta within
[exact - 1e-13, exact + 1e-9], epsilon within [exact - 1e-9, exact + h] for one release;
k-fold compositions between dp_accounting's optimistic PLD (a lower bound at any grid; built
at 2h) and the Gaussian with the largest sensitivity (by joint convexity of the hockey-stick
divergence, a mixture of shifted Gaussians is dominated by its worst component, also after
composition), and equal to dp_accounting's own accountant to 1e-6.

``SampledWithoutReplacementDpEvent`` is refused: dp_accounting has no PLD for it (its
PLDAccountant refuses it too, checked here).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting import dp_event as _dp
from dp_accounting.pld import pld_privacy_accountant as dp_pld
from dp_accounting.pld import privacy_loss_distribution as dp_pld_dist

from dpkd_audit._math.privacy import smallest_satisfying
from dpkd_audit.accountants import NeighboringRelation, UnsupportedEventError
from dpkd_audit.accountants.pld import PLDAccountant
from dpkd_audit.events import PureDpEvent

H = 1e-3  # dp_accounting's mixture PLD takes ~30 s to build at 1e-4
REPLACE = NeighboringRelation.REPLACE_ONE
ADD_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE

MIXTURES = [
    (1.0, (0.0, 1.0, 2.0), (0.5, 0.3, 0.2)),  # subsampling that can pick the record twice
    (2.0, (0.5, 1.5, 3.0), (0.2, 0.5, 0.3)),  # no zero component: both directions matter
    (0.8, (0.0, 1.0), (0.7, 0.3)),  # Poisson-subsampled Gaussian
]


def eps_of(acc, delta: float) -> float:
    return float(acc.get_epsilon(delta))


# ============================================================================ references


def _crossing(ratio, level, scale) -> mpmath.mpf:
    """The x with ratio(x) = level for an increasing ratio (bisection, 100 steps).

    100 halvings of the 120-scale bracket leave it below 1e-28 scale, the 30-digit working
    precision; and the divergences below move only to second order with the crossing (their
    integrand vanishes there).
    """
    lo, hi = -60 * scale, 60 * scale
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ratio(mid) < level else (lo, mid)
    return (lo + hi) / 2


def mp_mixture_deltas(sigma, sens, probs, eps, quadrature=False):
    """(remove, add): D_{e^eps}(mixture || N(0, s^2)) and D_{e^eps}(N(0, s^2) || mixture).

    The likelihood ratio mixture/N(0) = sum_i p_i exp((c_i x - c_i^2/2)/s^2) increases in x
    (c_i >= 0), so the first integrand is positive exactly above x1 (ratio = e^eps) and the
    second exactly below x2 (ratio = e^-eps; none when e^-eps <= P[c = 0], the ratio's infimum).
    Closed form: sum_i p_i P[N(c_i, s^2) > x1] - e^eps P[N(0, s^2) > x1], and
    P[N(0, s^2) < x2] - e^eps sum_i p_i P[N(c_i, s^2) < x2]; or mpmath quadrature of the
    positive parts (``quadrature=True``).
    """
    with mpmath.workdps(30):
        s = mpmath.mpf(sigma)
        cs, ps = [mpmath.mpf(c) for c in sens], [mpmath.mpf(p) for p in probs]
        big = mpmath.exp(mpmath.mpf(eps))

        def ratio(x):
            return mpmath.fsum(p * mpmath.exp((c * x - c * c / 2) / s**2)
                               for p, c in zip(ps, cs, strict=True))

        def mix(x):
            return mpmath.fsum(p * mpmath.npdf(x, c, s) for p, c in zip(ps, cs, strict=True))

        x1 = _crossing(ratio, big, s)
        has_add = ratio(-60 * s) < 1 / big
        x2 = _crossing(ratio, 1 / big, s) if has_add else None
        if quadrature:
            remove = mpmath.quad(lambda x: max(0, mix(x) - big * mpmath.npdf(x, 0, s)),
                                 [x1, x1 + 40 * s, mpmath.inf])
            add = (mpmath.quad(lambda x: max(0, mpmath.npdf(x, 0, s) - big * mix(x)),
                               [-mpmath.inf, x2 - 40 * s, x2]) if has_add else mpmath.mpf(0))
            return remove, add
        remove = (mpmath.fsum(p * (1 - mpmath.ncdf(x1, c, s)) for p, c in zip(ps, cs, strict=True))
                  - big * (1 - mpmath.ncdf(x1, 0, s)))
        add = mpmath.mpf(0)
        if has_add:
            add = mpmath.ncdf(x2, 0, s) - big * mpmath.fsum(p * mpmath.ncdf(x2, c, s)
                                                            for p, c in zip(ps, cs, strict=True))
        return remove, add


def exact_delta(sigma, sens, probs, eps) -> float:
    return float(max(mp_mixture_deltas(sigma, sens, probs, eps)))


# ============================================================================ mixtures


def test_closed_form_reference_matches_quadrature():
    for sigma, sens, probs in MIXTURES:
        for eps in (0.0, 0.5, 2.0):
            closed = mp_mixture_deltas(sigma, sens, probs, eps)
            quad = mp_mixture_deltas(sigma, sens, probs, eps, quadrature=True)
            for a, b in zip(closed, quad, strict=True):
                assert abs(a - b) <= 1e-20 + 1e-15 * abs(b)


@pytest.mark.parametrize(("sigma", "sens", "probs"), MIXTURES)
def test_single_mixture_release_matches_the_exact_divergences(sigma, sens, probs):
    event = _dp.MixtureOfGaussiansDpEvent(sigma, list(sens), list(probs))
    acc = PLDAccountant(ADD_REMOVE, value_discretization_interval=H).compose(event)
    for eps in (0.0, 0.3, 1.0, 2.0, 4.0):
        exact = exact_delta(sigma, sens, probs, eps)
        assert exact - 1e-13 <= acc.get_delta(eps) <= exact + 1e-9, eps
    for delta in (1e-3, 1e-6, 1e-9):
        exact = smallest_satisfying(lambda e: exact_delta(sigma, sens, probs, e), delta,
                                    0.0, 60.0, rel_tol=1e-11)
        assert exact - 1e-9 <= eps_of(acc, delta) <= exact + H, delta


@pytest.mark.parametrize(("sigma", "sens", "probs"), MIXTURES[1:2])
def test_composed_mixtures_between_lower_and_upper_bounds(sigma, sens, probs):
    k = 20
    event = _dp.MixtureOfGaussiansDpEvent(sigma, list(sens), list(probs))
    ours = eps_of(PLDAccountant(ADD_REMOVE, value_discretization_interval=H).compose(
        event, count=k), 1e-6)
    # the optimistic PLD is a lower bound at any grid: at 2h it builds in ~6 s (~16 s at h,
    # whose bound is 0.01 higher here, at epsilon ~30)
    optimistic = dp_pld_dist.from_mixture_gaussian_mechanism(
        sigma, list(sens), list(probs), pessimistic_estimate=False, use_connect_dots=False,
        value_discretization_interval=2 * H).self_compose(k).get_epsilon_for_delta(1e-6)
    worst = eps_of(PLDAccountant(ADD_REMOVE).compose(
        _dp.GaussianDpEvent(sigma / max(sens)), count=k), 1e-6)  # exact Gaussian curve
    backend = dp_pld.PLDAccountant(ADD_REMOVE, value_discretization_interval=H).compose(
        event, k).get_epsilon(1e-6)
    assert optimistic - 1e-9 <= ours < worst
    assert ours == pytest.approx(backend, abs=1e-6)


def test_mixture_special_cases_map_to_exact_equivalents():
    single = _dp.MixtureOfGaussiansDpEvent(3.0, [2.0], [1.0])
    assert eps_of(PLDAccountant(ADD_REMOVE).compose(single, count=5), 1e-6) == eps_of(
        PLDAccountant(ADD_REMOVE).compose(_dp.GaussianDpEvent(1.5), count=5), 1e-6)
    poisson = _dp.MixtureOfGaussiansDpEvent(2.0, [0.0, 2.0], [0.9, 0.1])
    assert eps_of(PLDAccountant(ADD_REMOVE).compose(poisson, count=30), 1e-6) == eps_of(
        PLDAccountant(ADD_REMOVE).compose(
            _dp.PoissonSampledDpEvent(0.1, _dp.GaussianDpEvent(1.0)), count=30), 1e-6)
    # zero-probability components are dropped, equal sensitivities merged, any sequence type
    variants = [_dp.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0, 2.0, 5.0], [0.5, 0.3, 0.2, 0.0]),
                _dp.MixtureOfGaussiansDpEvent(1.0, (2.0, 0.0, 1.0, 1.0), (0.2, 0.5, 0.1, 0.2)),
                _dp.MixtureOfGaussiansDpEvent(1.0, np.array([0.0, 1.0, 2.0]),
                                              np.array([0.5, 0.3, 0.2]))]
    values = [eps_of(PLDAccountant(ADD_REMOVE, value_discretization_interval=H).compose(
        v, count=3), 1e-6) for v in variants]
    assert values == pytest.approx([values[0]] * 3, rel=1e-9)  # 0.1 + 0.2 != 0.3 in floats
    nothing = _dp.MixtureOfGaussiansDpEvent(1.0, [0.0, 3.0], [1.0, 0.0])
    assert eps_of(PLDAccountant(ADD_REMOVE).compose(nothing), 0.0) == 0.0
    no_noise = _dp.MixtureOfGaussiansDpEvent(0.0, [0.0, 1.0], [0.5, 0.5])
    assert math.isinf(PLDAccountant(ADD_REMOVE).compose(no_noise).get_epsilon(0.1))


def test_mixture_events_built_from_lists_compose_like_any_event():
    event = _dp.MixtureOfGaussiansDpEvent(1.5, [0.0, 1.0, 2.0], [0.6, 0.3, 0.1])
    one = PLDAccountant(ADD_REMOVE, value_discretization_interval=H)
    for _ in range(6):
        one.compose(event)
    counted = PLDAccountant(ADD_REMOVE, value_discretization_interval=H).compose(event, count=6)
    folded = PLDAccountant(ADD_REMOVE, value_discretization_interval=H).compose(
        _dp.SelfComposedDpEvent(event, 6))
    assert len(one._counts) == 1
    assert eps_of(one, 1e-6) == eps_of(counted, 1e-6) == eps_of(folded, 1e-6)
    assert one.supports(event)


@pytest.mark.parametrize(("event", "match"), [
    (_dp.MixtureOfGaussiansDpEvent(-1.0, [1.0], [1.0]), "standard_deviation"),
    (_dp.MixtureOfGaussiansDpEvent(math.nan, [1.0], [1.0]), "standard_deviation"),
    (_dp.MixtureOfGaussiansDpEvent(1.0, [1.0, -1.0], [0.5, 0.5]), "sensitivities"),
    (_dp.MixtureOfGaussiansDpEvent(1.0, [1.0, math.inf], [0.5, 0.5]), "sensitivities"),
    (_dp.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.5, 0.4]), "sum to 1"),
    (_dp.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [1.5, -0.5]), "sampling_probs"),
    (_dp.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [1.0]), "equal length"),
    (_dp.MixtureOfGaussiansDpEvent(1.0, [], []), "non-empty"),
    (_dp.MixtureOfGaussiansDpEvent(1.0, 3.0, 1.0), "sequences"),
])
def test_invalid_mixtures_are_refused_by_name(event, match):
    acc = PLDAccountant(ADD_REMOVE).compose(PureDpEvent(0.5))
    before = eps_of(acc, 1e-6)
    with pytest.raises(UnsupportedEventError, match=match) as info:
        acc.compose(_dp.ComposedDpEvent([PureDpEvent(1.0), event]))
    assert "MixtureOfGaussiansDpEvent" in str(info.value)
    assert eps_of(acc, 1e-6) == before and not acc.supports(event)


def test_mixture_is_refused_under_replace_one():
    event = _dp.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.5, 0.5])
    acc = PLDAccountant(REPLACE).compose(PureDpEvent(0.5))
    with pytest.raises(UnsupportedEventError, match="ADD_OR_REMOVE_ONE") as info:
        acc.compose(event)
    assert "MixtureOfGaussiansDpEvent" in str(info.value) and "add/remove" in str(info.value)
    assert not dp_pld.PLDAccountant(REPLACE).supports(event)  # the backend agrees


# ============================================================================ without replacement


@pytest.mark.parametrize("relation", [REPLACE, ADD_REMOVE])
def test_sampling_without_replacement_is_refused_with_the_reason(relation):
    event = _dp.SampledWithoutReplacementDpEvent(1000, 10, _dp.GaussianDpEvent(1.0))
    acc = PLDAccountant(relation).compose(PureDpEvent(0.5))
    before = eps_of(acc, 1e-6)
    with pytest.raises(UnsupportedEventError, match="SampledWithoutReplacementDpEvent") as info:
        acc.compose(_dp.ComposedDpEvent([PureDpEvent(1.0), event]))
    assert "sampling without replacement" in str(info.value)
    assert "dp_accounting" in str(info.value)
    assert eps_of(acc, 1e-6) == before and not acc.supports(event)
    assert not dp_pld.PLDAccountant(relation).supports(event)  # the stated reason holds
