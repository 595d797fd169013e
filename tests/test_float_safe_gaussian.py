"""The float-safe Gaussian (issue 32): a discrete Gaussian on a power-of-two grid.

Checked against independent references: the grid and the rounded query's sensitivity from
their definitions, the scalar claim on the test's own CKS Thm 7 curve
(``reference_formulas``), the vector claim on an mpmath evaluation of the zCDP conversion
(CKS 2020 Prop. 12) and on the accountants' RDP conversion, and the output distribution by a
chi-square test against the exact discrete Gaussian pmf (fixed seed, ALPHA = 1e-4: a correct
sampler fails with probability 1e-4).
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import reference_formulas as ref
from test_mechanisms_basic import ALPHA, chi2_pvalue

from dpkd_audit import Ledger
from dpkd_audit._math.privacy import calibrate_zcdp_rho, zcdp_delta
from dpkd_audit.accountants import PLDAccountant, RDPAccountant
from dpkd_audit.accountants.rdp.conversion import delta_from_rdp
from dpkd_audit.audit import Attack, audit_mechanism
from dpkd_audit.events import (
    DiscreteGaussianDpEvent,
    DiscreteGaussianVectorDpEvent,
    event_from_json,
    event_to_json,
)
from dpkd_audit.mechanisms import Gaussian, TextbookGaussian


def rng_(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def mp_zcdp_delta(epsilon: float, rho: float) -> float:
    """inf over alpha of e^{(a-1)(a rho - eps)} (1 - 1/a)^(a-1) / a, in mpmath (60 digits)."""
    mpmath.mp.dps = 60
    eps, r = mpmath.mpf(epsilon), mpmath.mpf(rho)

    def log_d(log_t):
        t = mpmath.e ** log_t
        a = 1 + t
        return t * (a * r - eps) + t * mpmath.log(t / a) - mpmath.log(a)

    best = min((log_d(mpmath.mpf(x)), x) for x in np.linspace(-20, 27, 2000))
    x = mpmath.findroot(lambda u: mpmath.diff(log_d, u), best[1])
    return float(mpmath.e ** min(best[0], log_d(x)))


@pytest.mark.parametrize("epsilon, rho", [(1.0, 0.01), (1.0, 0.0306), (0.1, 1e-4),
                                          (3.0, 0.3), (10.0, 1.0), (0.01, 2e-6)])
def test_zcdp_delta_is_the_conversion_and_never_below_it(epsilon, rho):
    want = mp_zcdp_delta(epsilon, rho)
    got = zcdp_delta(epsilon, rho)
    assert want <= got <= want * (1 + 1e-9)
    orders = 1.0 + np.geomspace(1e-9, 1e12, 100_000)
    assert got <= delta_from_rdp(orders, rho * orders, epsilon)[0] * (1 + 1e-9)


@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-5), (0.05, 1e-14), (8.0, 1e-10),
                                            (1e-3, 0.5)])
def test_zcdp_calibration_is_the_largest_rho_meeting_the_target(epsilon, delta):
    rho = calibrate_zcdp_rho(epsilon, delta)
    # never above the target, not even by the float slack (the bisection's lower end):
    # the upper end of its bracket is above it by ~1e-12 relative
    assert zcdp_delta(epsilon, rho) <= delta
    assert mp_zcdp_delta(epsilon, rho) <= delta * (1 + 1e-9)
    assert zcdp_delta(epsilon, rho * (1 + 1e-9)) > delta * (1 - 1e-12) or \
        zcdp_delta(epsilon, rho * (1 + 1e-6)) > delta


SCALAR_CASES = [(1.0, 1e-5, 1.0), (0.3, 1e-8, 2.5), (8.0, 1e-10, 3.5), (0.02, 1e-5, 1.0)]


@pytest.mark.parametrize("eps, delta, sens", SCALAR_CASES)
def test_scalar_grid_sensitivity_and_exact_claim(eps, delta, sens):
    mech = Gaussian(epsilon=eps, delta=delta, sensitivity=sens)
    grid = mech.grid(1)
    g = grid.granularity
    assert math.frexp(g)[0] == 0.5  # a power of two
    steps = Fraction(sens) / Fraction(g)
    ratio = ref.analytic_gaussian_sigma(eps, delta, sens) / sens
    if ratio * 1025 <= 8192:  # the fine grid fits: at most 1/512 of rounding
        assert 512 <= steps < 1024
    assert grid.sensitivity == math.floor(steps) + 1
    event = mech.event
    assert isinstance(event, DiscreteGaussianDpEvent) and event.sensitivity == grid.sensitivity
    assert event.sigma == pytest.approx(math.sqrt(grid.variance), rel=1e-15)
    # the claim on the test's own Thm 7 curve, at the sampler's sigma
    assert ref.discrete_gaussian_delta(eps, math.sqrt(grid.variance),
                                       int(grid.sensitivity)) <= delta * (1 + 1e-9)
    # the noise is within the rounding's share of the continuous mechanism's
    textbook = TextbookGaussian(epsilon=eps, delta=delta, sensitivity=sens).sigma
    assert mech.sigma <= textbook * (1 + 1.01 / float(steps)) * (1 + 1e-3)


def test_rounding_moves_neighbours_by_at_most_the_grid_sensitivity():
    mech = Gaussian(epsilon=1.0, delta=1e-5, sensitivity=0.37)
    grid = mech.grid(1)
    rng = rng_(3)
    x = rng.uniform(-1e3, 1e3, 200_000)
    x_prime = x + rng.uniform(-0.37, 0.37, x.size)
    shift = np.abs(np.rint(x / grid.granularity) - np.rint(x_prime / grid.granularity))
    assert shift.max() <= grid.sensitivity


@pytest.mark.parametrize("coords", [2, 7, 3000])
def test_vector_release_is_zcdp_at_the_rounded_l2_sensitivity(coords):
    eps, delta, sens = 1.0, 1e-5, 2.0
    mech = Gaussian(epsilon=eps, delta=delta, sensitivity=sens)
    value = np.linspace(-3.0, 3.0, coords)
    event = mech.release_event(value)
    grid = mech.grid(coords)
    assert isinstance(event, DiscreteGaussianVectorDpEvent)
    g = grid.granularity
    assert event.sensitivity >= sens / g + math.sqrt(coords)
    assert event.sensitivity <= (sens / g + math.sqrt(coords)) * (1 + 1e-15)
    assert event.sigma ** 2 <= grid.variance * (1 + 1e-15)
    rho = event.sensitivity ** 2 / (2 * float(grid.variance))
    assert mp_zcdp_delta(eps, rho) <= delta * (1 + 1e-9)
    # the accountants compose it as that zCDP curve (RDP) and the declared pair (PLD)
    assert RDPAccountant().compose(event).get_epsilon(delta) <= eps * (1 + 1e-9)
    assert PLDAccountant().compose(event).get_epsilon(delta) <= eps * (1 + 1e-6)
    assert event_from_json(event_to_json(event)) == event
    # one changed coordinate, declared: back to the exact scalar curve
    assert isinstance(Gaussian(epsilon=eps, delta=delta, sensitivity=sens,
                               coordinates=1).release_event(value), DiscreteGaussianDpEvent)


@pytest.mark.parametrize("eps", [0.01, 0.03, 0.1, 0.3, 1.0, 3.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-6, 1e-10])
@pytest.mark.parametrize("coords", [2, 1601, 20_000])
def test_vector_grid_is_refused_only_when_no_grid_fits_the_sampler(eps, delta, coords):
    """A refusal means even the coarsest grid (one step = Delta) needs more than the sampler's
    30,000 steps; otherwise the grid found keeps its claim (was: eps 0.3, delta 1e-6, d = 2,000
    refused although a twice coarser grid fits, the zCDP noise being above the estimate)."""
    sens = 16.49
    rho = calibrate_zcdp_rho(eps, delta)
    coarsest = (1.0 + math.sqrt(coords)) / math.sqrt(2 * rho)
    try:
        grid = Gaussian(epsilon=eps, delta=delta, sensitivity=sens, coordinates=coords).grid(coords)
    except ValueError as exc:
        assert "exact sampler" in str(exc)
        assert coarsest > 30_000 * 0.999
        return
    event = grid.event
    assert event.sigma <= 30_000
    assert event.sensitivity >= sens / grid.granularity + math.sqrt(coords)
    assert mp_zcdp_delta(eps, event.sensitivity ** 2 / (2 * float(grid.variance))) \
        <= delta * (1 + 1e-9)


def test_vector_event_refuses_a_sigma_that_misses_its_claim():
    rho = calibrate_zcdp_rho(1.0, 1e-5)
    sigma = 10.0 / math.sqrt(2 * rho)
    DiscreteGaussianVectorDpEvent(sigma=sigma * (1 + 1e-6), sensitivity=10.0, epsilon=1.0,
                                  delta=1e-5)
    with pytest.raises(ValueError, match="does not give"):
        DiscreteGaussianVectorDpEvent(sigma=sigma * 0.99, sensitivity=10.0, epsilon=1.0,
                                      delta=1e-5)


@pytest.mark.parametrize("value", [0.3, -1234.5678, np.array([0.1, 2.0, -7.3])])
def test_outputs_are_the_grid_index_plus_exact_discrete_gaussian_noise(value):
    mech = Gaussian(epsilon=1.0, delta=1e-5, sensitivity=1.0)
    value = np.asarray(value, dtype=np.float64)
    grid = mech.grid(max(1, value.size))
    g = grid.granularity
    out = mech.sample(value, 100_000 // value.size, rng=rng_(4))
    steps = out / g
    assert np.all(steps == np.rint(steps))  # every output on the grid: no float artefact
    noise = (steps - np.rint(value / g)).astype(np.int64).ravel()
    sigma_g = math.sqrt(grid.variance)
    half = math.ceil(10 * sigma_g) + 5
    support = np.arange(-half, half + 1)
    assert chi2_pvalue(noise, support, ref.discrete_gaussian_pmf(sigma_g, support)) > ALPHA


def test_float_bits_audit_finds_nothing_and_the_textbook_sampler_is_flagged():
    for mech in (Gaussian(epsilon=1.0, delta=1e-5), Gaussian(epsilon=1.0, delta=1e-5,
                                                             sensitivity=1e-3)):
        result = audit_mechanism(mech, n=50_000, rng=rng_(5), attack=Attack.FLOAT_BITS)
        assert not result.violation, str(result)
    flagged = audit_mechanism(TextbookGaussian(epsilon=1.0, delta=1e-5), n=50_000, rng=rng_(5))
    assert flagged.violation and flagged.attack is Attack.FLOAT_BITS


def test_out_of_range_requests_are_refused_by_name_before_any_charge(tmp_path):
    with pytest.raises(ValueError, match="exact sampler"):
        Gaussian(epsilon=1e-4, delta=1e-5, coordinates=100)
    mech = Gaussian(epsilon=1.0, delta=1e-5)
    limit = 2.0 ** 61 * mech.grid(1).granularity
    ledger = Ledger(epsilon=10.0, delta=1e-3, path=tmp_path / "l.json")
    with pytest.raises(ValueError, match=r"\|value\| <= "):
        mech.release(2 * limit, rng=rng_(0), ledger=ledger)
    assert ledger.spent().epsilon == 0.0
    with pytest.raises(ValueError, match="coordinates"):
        Gaussian(epsilon=1.0, delta=1e-5, coordinates=0)
