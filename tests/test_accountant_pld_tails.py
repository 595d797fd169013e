"""PLD epsilons at tiny deltas (tilted composition) and zCDP-only releases in a PLD history.

References: exact enumeration of composed binary randomized response (a closed-form PLD),
prv-accountant 0.2.0's brackets (Gopi-Lee-Wutschitz 2021; values computed with
``DPSGDAccountant(noise_multiplier, sampling_probability, eps_error=0.01,
delta_error=delta/1000)`` and recorded here: the package is not a dependency), and this
package's RDP accountant (an independent upper bound). Deterministic: no sampling.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event as dpe
from scipy import special

from dpkd_audit._math.privacy import calibrate_zcdp_rho, zcdp_delta
from dpkd_audit.accountants.base import NeighboringRelation
from dpkd_audit.accountants.pld import PLDAccountant, tilted
from dpkd_audit.accountants.rdp import RDPAccountant
from dpkd_audit.events import DiscreteGaussianVectorDpEvent, PureDpEvent

ADD_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE


def _binary_rr_delta(parts: list[tuple[float, int]], epsilon: float) -> float:
    """Exact delta(eps) of composed binary-RR pairs, enumerating every count of +eps atoms."""
    grids = []
    for eps, n in parts:
        k = np.arange(n + 1)
        log_p = (special.gammaln(n + 1) - special.gammaln(k + 1) - special.gammaln(n - k + 1)
                 + k * -np.log1p(np.exp(-eps)) + (n - k) * -np.log1p(np.exp(eps)))
        grids.append((k * eps - (n - k) * eps, log_p))
    (l1, p1), (l2, p2) = grids
    loss = l1[:, None] + l2[None, :]
    log_p = p1[:, None] + p2[None, :]
    above = loss > epsilon
    return float(np.sum(np.exp(log_p[above]) * -np.expm1(epsilon - loss[above])))


def _exact_epsilon(parts: list[tuple[float, int]], delta: float) -> float:
    lo, hi = 0.0, sum(e * n for e, n in parts)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _binary_rr_delta(parts, mid) <= delta else (mid, hi)
    return hi


@pytest.mark.parametrize("delta", [1e-10, 1e-12, 1e-14])
def test_tilted_composition_matches_exact_enumeration_at_tiny_deltas(delta):
    # Two kinds of binary RR: the PLD composes them by FFT (the path that used to answer inf).
    parts = [(0.3, 400), (0.2, 600)]
    acc = PLDAccountant()
    acc.compose(PureDpEvent(0.3), 400).compose(PureDpEvent(0.2), 600)
    got = float(acc.get_epsilon(delta))
    exact = _exact_epsilon(parts, delta)
    assert exact - 1e-9 <= got <= exact + 2e-3, (got, exact)


@pytest.mark.parametrize(("q", "sigma", "steps", "delta", "low", "high"), [
    (0.004, 1.0, 10_000, 1e-12, 3.910229, 3.930417),
    (0.004, 1.0, 10_000, 1e-13, 4.127948, 4.148139),
    (0.01, 3.2, 2_000, 1e-12, 0.950154, 0.970198),
])
def test_subsampled_gaussian_within_the_prv_bracket(q, sigma, steps, delta, low, high):
    acc = PLDAccountant(ADD_REMOVE)
    acc.compose(dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(sigma)), steps)
    got = float(acc.get_epsilon(delta))
    # never below prv's lower end (an upper bound cannot be below a lower bound), and within
    # the 2% of its upper end (it is inside the bracket in fact)
    assert low <= got <= high * 1.02, got
    assert low <= got <= high, got


def test_tiny_deltas_are_finite_and_below_rdp():
    events = [(dpe.PoissonSampledDpEvent(0.004, dpe.GaussianDpEvent(1.0)), 10_000),
              (dpe.PoissonSampledDpEvent(0.02, dpe.GaussianDpEvent(2.0)), 300),
              (dpe.GaussianDpEvent(10.0), 3)]
    pld = PLDAccountant(ADD_REMOVE)
    rdp = RDPAccountant(neighboring_relation=ADD_REMOVE)
    for event, n in events:
        pld.compose(event, n)
        rdp.compose(event, n)
    for delta in (1e-13, 1e-14, 1e-15):
        got = float(pld.get_epsilon(delta))
        assert math.isfinite(got) and 0 < got < float(rdp.get_epsilon(delta)), (delta, got)
    # delta is monotone in epsilon and consistent with get_epsilon
    eps = float(pld.get_epsilon(1e-13))
    assert pld.get_delta(eps) <= 1e-13 * (1 + 1e-6)
    assert pld.get_delta(eps * 0.98) > 1e-13


def test_the_dropped_tail_is_charged():
    # The same composition with a much coarser truncation must not go below the exact value:
    # the dropped tilted mass is added back as a bound.
    releases = [tilted.Release(-1, np.array([1 / (1 + math.e), 0.0, math.e / (1 + math.e)]),
                               0.0, 300)]
    table = tilted.tilted_table(releases, 1.0, lam=0.5)
    exact = _binary_rr_delta([(1.0, 300), (1.0, 0)], 40.0)
    assert table.delta(40.0) >= exact * (1 - 1e-9)
    assert table.dropped_mass > 0


def test_vector_discrete_gaussian_is_priced_by_its_zcdp_bound():
    rho = calibrate_zcdp_rho(1.0, 1e-5)
    vector = DiscreteGaussianVectorDpEvent(sigma=1 / math.sqrt(2 * rho), sensitivity=1.0,
                                           epsilon=1.0, delta=1e-5)
    pld = PLDAccountant().compose(vector, 10)
    # ten releases: CKS's conversion of 10 rho (the declared pair composed gave inf here)
    assert float(pld.get_epsilon(1e-5)) == pytest.approx(
        float(RDPAccountant().compose(vector, 10).get_epsilon(1e-5)), rel=1e-9)
    assert pld.get_delta(3.0) == pytest.approx(zcdp_delta(3.0, 10 * rho), rel=1e-6)
    # with 100 Gaussians: finite, below RDP, above the Gaussians alone
    mixed = PLDAccountant().compose(vector, 10).compose(dpe.GaussianDpEvent(5.0), 100)
    rdp = RDPAccountant().compose(vector, 10).compose(dpe.GaussianDpEvent(5.0), 100)
    alone = PLDAccountant().compose(dpe.GaussianDpEvent(5.0), 100)
    got = float(mixed.get_epsilon(1e-5))
    assert float(alone.get_epsilon(1e-5)) < got < float(rdp.get_epsilon(1e-5))


def test_zcdp_g_is_the_zcdp_conversion():
    for c in (0.0, 0.5, 2.0, 7.0):
        for rho in (0.01, 0.5, 3.0):
            assert tilted.zcdp_g(np.array([c]), rho)[0] == pytest.approx(
                min(1.0, zcdp_delta(c, rho)), rel=1e-9)
    # negative arguments stay valid bounds (<= 1, >= the trivial 1 - e^c)
    assert 1 - math.exp(-1.0) <= tilted.zcdp_g(np.array([-1.0]), 0.1)[0] <= 1.0


@pytest.mark.parametrize("sigma", [0.3, 2.0, 50.0])
@pytest.mark.parametrize("q", [1.0, 0.5, 1e-2, 1e-5])
def test_vectorised_gaussian_curve_is_dp_accountings(sigma, q):
    from dp_accounting.pld import privacy_loss_mechanism as plm

    from dpkd_audit.accountants.pld.fast_gaussian import VectorGaussianPrivacyLoss

    adjacencies = [plm.AdjacencyType.REMOVE] + ([plm.AdjacencyType.ADD] if q < 1 else [])
    edges = [math.log1p(-q), -math.log1p(-q)] if q < 1 else []
    eps = np.concatenate([np.linspace(-5.0, 30.0, 701), edges, [0.0]])
    for adjacency in adjacencies:
        kwargs = dict(sensitivity=1.0, pessimistic_estimate=True, log_mass_truncation_bound=-50,
                      sampling_prob=q, adjacency_type=adjacency)
        ours = VectorGaussianPrivacyLoss(sigma, **kwargs).get_delta_for_epsilon(eps)
        theirs = np.asarray(plm.GaussianPrivacyLoss(sigma, **kwargs).get_delta_for_epsilon(eps))
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-300)


def test_vectorised_gaussian_pld_is_dp_accountings():
    from dp_accounting.pld import privacy_loss_distribution as pld

    from dpkd_audit.accountants.pld.fast_gaussian import gaussian_pld

    ours = gaussian_pld(0.8, 0.02, 1e-3, -50.0)
    theirs = pld.from_gaussian_mechanism(0.8, sensitivity=1, value_discretization_interval=1e-3,
                                         log_mass_truncation_bound=-50, sampling_prob=0.02)
    for name in ("_pmf_remove", "_pmf_add"):
        a, b = getattr(ours, name), getattr(theirs, name)
        assert a._lower_loss == b._lower_loss and a._infinity_mass == b._infinity_mass
        np.testing.assert_allclose(a._probs, b._probs, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("sigma", [1e6, 1e200, 1e308])
def test_a_huge_gaussian_beside_a_laplace_costs_almost_nothing(sigma):
    # sigma^2 overflowed in dp_accounting's construction (OverflowError): a huge sigma is
    # built at 1e6 (less noise: an upper bound)
    acc = PLDAccountant().compose(dpe.GaussianDpEvent(sigma)).compose(dpe.LaplaceDpEvent(1.0))
    alone = PLDAccountant().compose(dpe.LaplaceDpEvent(1.0))
    for delta in (1e-5, 1e-14):
        got = float(acc.get_epsilon(delta))
        assert float(alone.get_epsilon(delta)) <= got <= float(alone.get_epsilon(delta)) + 2e-4


def test_a_bounded_pld_at_a_moderate_delta_is_not_loosened_by_its_tilt():
    # 4 Laplace releases at delta 1e-3: the Chernoff optimum runs to the largest loss, where
    # the dropped-tail bound of that tilt is useless; the untilted table answers instead.
    from dpkd_audit.accountants import OptimalCompositionAccountant

    pld = float(PLDAccountant().compose(dpe.LaplaceDpEvent(2.0), count=4).get_epsilon(1e-3))
    optimal = float(OptimalCompositionAccountant().compose(dpe.LaplaceDpEvent(2.0), count=4)
                    .get_epsilon(1e-3))
    assert pld <= optimal and abs(pld - 1.98413) < 1e-3


def test_zcdp_g_is_never_nan():
    # alpha = 1 + e^-40 rounded to 1 made log1p(-1/alpha) -inf and 0 * -inf a NaN
    c = np.sort(np.concatenate([-np.logspace(-3, 6, 60), [0.0], np.logspace(-3, 6, 60)]))
    for rho in (1e-15, 1e-6, 1.0, 1e4):
        g = tilted.zcdp_g(c, rho)
        assert np.all(np.isfinite(g)) and np.all((0 <= g) & (g <= 1))
        assert np.all(np.diff(g) <= 1e-12)  # decreasing in c
