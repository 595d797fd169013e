"""Fuzz every catalogued mechanism with extreme parameters and junk inputs (issue 10).

For every mechanism of :data:`dpkd_audit.mechanisms.CATALOGUE`, hypothesis (derandomized, so the
examples are fixed and the suite is deterministic) draws parameters from the extremes that broke
the package before: epsilon from subnormal (5e-324) to the largest double, delta from 1e-320 to
1 - 2^-53, sizes 1 to 2^63 - 1, sensitivities at the limits of the double range, and a few
non-numbers. It asserts that

1. construction either raises ``ValueError`` naming one of the parameters, or gives a mechanism
   whose declared guarantee is verified against an independent exact computation written in
   this file (Balle-Wang Theorem 8 at 450 digits in mpmath, the discrete Gaussian's
   hockey-stick divergence summed point by point, exact rational probabilities of the
   floating-point coins ``Generator.random() < t``, exact rational Laplace scales, the FMT21
   dominating pair summed directly), and
2. ``sample(x, 3, rng)`` on its neighbour input returns 3 finite outputs of the right shape and
   dtype, raising nothing but ``ValueError``.

A second fuzz feeds junk to ``release`` of every catalogue example with a ledger: it returns an
output and charges once, or raises ``ValueError`` having charged nothing and drawn no randomness.

These would have caught every case of the issue: ``Gaussian(1e-12, 1e-300)`` (check 1),
``Gaussian(2^62, 1e-5)`` (check 1), ``Laplace(1e-310)`` (check 2: +-inf), the OverflowErrors of
DiscreteGaussian, Gaussian, BitRandomizedResponse, Collision, LaplaceNoisyMax and
RandomizedResponse (any exception other than ValueError fails), ``ShuffledRandomizer`` with
2^63 - 1 users (check 1; larger than 10^8 is refused), the petabyte ``ShuffledHistogram``
(``central_fraction`` is fuzzed down to 5e-324 and every example must finish), and the string,
bytes, datetime, complex and wrapping ``uint64`` inputs (fuzz 2).

Outputs of more than 10^6 values are not sampled here (the neighbour inputs alone would take
gigabytes); the 10^8 cap itself is tested in ``tests/test_mechanisms_limits.py``. The float
references (discrete Gaussian, FMT21 pair) are accurate to ~1e-13 and are compared with a
relative allowance of 1e-9. No assertion is statistical: the false-failure rate is 0.
Runtime: about half a minute on two cores (``max_examples`` below).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, NamedTuple

import mpmath
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from dpkd_audit import Ledger
from dpkd_audit.accountants import event_guarantee
from dpkd_audit.mechanisms import (
    CATALOGUE,
    BitRandomizedResponse,
    Collision,
    DiscreteGaussian,
    DiscreteLaplace,
    Gaussian,
    GaussianNoisyMax,
    Laplace,
    LaplaceNoisyMax,
    LatentCodeLaplace,
    Mechanism,
    RandomizedResponse,
    ReverseKnnCountRelease,
    SelectiveRandomizedResponse,
    ShuffledHistogram,
    ShuffledRandomizer,
    TextbookGaussian,
)

FUZZ = settings(derandomize=True, max_examples=200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])
#: Neighbour inputs / outputs above this many values are not sampled (memory of the CI).
SAMPLED_VALUES = 10**6

# ----------------------------------------------------------------------------- strategies
# Each parameter mixes values the mechanisms accept (drawn twice as often) with values they must
# refuse, so that about half of the constructions succeed and get their claim verified.
EPS_OK = [2.2250738585072014e-308, 1e-300, 1e-200, 1e-17, 1e-15, 1e-12, 1e-9, 1e-3, 0.05, 0.5,
          1.0, 3.0, 50.0, 700.0, 1e4, 1e12]
EPS_BAD = [5e-324, 1e-310, 1.0000001e12, 2.0**62, 1e300, 1.7976931348623157e308, 0.0, -1.0,
           math.nan, math.inf, -math.inf, True, "1", None, 1j]
DELTA_OK = [1e-300, 1e-100, 1e-14, 1e-5, 0.5, 0.999999, 1 - 2.0**-53]
DELTA_BAD = [1e-320, 1e-301, 0.0, 1.0, -1e-5, math.nan, 1.5, True, "0.1"]
SIZE_OK = [1, 2, 3, 7, 10, 1000, 2**20, 10**8]
SIZE_BAD = [10**8 + 1, 2**31, 2**63 - 1, 0, -1, 2.0, True, "3", None, 2**64]
SENS_OK = [2.2250738585072014e-308, 1e-300, 1e-10, 0.5, 1.0, 3, 1e10, 1e300, 2**62, 2**63 - 1]
SENS_BAD = [5e-324, 1.7976931348623157e308, 2**1100, 0, -1, math.nan, math.inf, "1"]


class Param(NamedTuple):
    """Values a mechanism accepts (``ok``) and values it must refuse (``bad``)."""

    ok: st.SearchStrategy[Any]
    bad: list[Any]


def _mix(ok: st.SearchStrategy[Any], bad: list[Any]) -> Param:
    return Param(ok, bad)


def _strategy(param: Param | st.SearchStrategy[Any], valid: bool) -> st.SearchStrategy[Any]:
    """Only accepted values when ``valid``; else accepted values three times out of four."""
    if not isinstance(param, Param):
        return param
    return param.ok if valid else st.one_of(param.ok, param.ok, param.ok,
                                            st.sampled_from(param.bad))


def epsilons() -> Param:
    return _mix(st.one_of(st.sampled_from(EPS_OK), st.floats(min_value=1e-300, max_value=1e12)),
                [*EPS_BAD, 1e-305, 1000000000000000.0, 1e+200])


def deltas() -> Param:
    return _mix(st.one_of(st.sampled_from(DELTA_OK),
                          st.floats(min_value=1e-300, max_value=1.0, exclude_max=True)),
                DELTA_BAD)


def sizes(small: int = 50) -> Param:
    return _mix(st.one_of(st.sampled_from(SIZE_OK), st.integers(min_value=1, max_value=small)),
                SIZE_BAD)


def sensitivities(integer: bool = False) -> Param:
    ok = SENS_OK + ([1, 2, 7, 100] if integer else [])
    return _mix(st.sampled_from(ok), SENS_BAD)


# ----------------------------------------------------------------------------- exact references
def exact_gaussian_delta(epsilon: float, sigma: float, sensitivity: Any) -> mpmath.mpf:
    """Balle-Wang 2018, Thm 8, textbook form, at 450 digits (exact for these double inputs)."""
    with mpmath.workdps(450):
        eps, sig, sens = mpmath.mpf(epsilon), mpmath.mpf(sigma), mpmath.mpf(sensitivity)
        a, b = sens / (2 * sig), eps * sig / sens
        return +(mpmath.ncdf(a - b) - mpmath.exp(eps) * mpmath.ncdf(-a - b))


def hockey_stick_discrete_gaussian(epsilon: float, variance: Fraction, shift: int) -> float:
    """sum_x max(0, P(x) - e^eps P(x - shift)), P = N_Z(0, variance): the definition, point by
    point, as P(x)(1 - e^(eps - L(x))) over {L(x) > eps}, L(x) = (shift^2 - 2 x shift)/(2 var)."""
    var = float(variance)
    half = math.ceil(40 * math.sqrt(var)) + 2  # P(x) < e^-800 beyond: only P's support counts
    x = np.arange(-half, half + 1, dtype=np.float64)
    log_p = -(x * x) / (2 * var)
    log_p -= np.logaddexp.reduce(log_p)
    loss = (shift * shift - 2 * x * shift) / (2 * var)
    keep = loss > epsilon
    return math.fsum(np.exp(log_p[keep]) * -np.expm1(epsilon - loss[keep]))


def coin(threshold: float) -> Fraction:
    """P[Generator.random() < t]: random() is k 2^-53, k uniform in [0, 2^53)."""
    return Fraction(math.ceil(Fraction(threshold) * 2**53), 2**53)


def ln_ratio(a: Fraction, b: Fraction) -> mpmath.mpf:
    with mpmath.workdps(60):
        return mpmath.log(mpmath.mpf(a.numerator) * b.denominator) - mpmath.log(
            mpmath.mpf(a.denominator) * b.numerator)


def within(a: Fraction, b: Fraction, epsilon: float) -> bool:
    """a / b <= e^epsilon, decided in 60-digit arithmetic on exact rationals."""
    if b == 0:
        return a == 0
    with mpmath.workdps(60):
        return ln_ratio(a, b) <= mpmath.mpf(epsilon) if a > 0 else True


def fmt21_delta(epsilon0: float, n: int, epsilon: float) -> float:
    """The FMT21 dominating pair's hockey-stick divergence, summed directly over (c, a).

    C ~ Bin(n-1, e^-eps0); given C = c, the first coordinate is A + Delta under P0 and
    A + 1 - Delta under P1, A ~ Bin(c, 1/2), Delta ~ Bernoulli(e^eps0/(e^eps0 + 1))
    (Feldman-McMillan-Talwar 2021, Thm 3.2). O(n^2); for n <= 2000.
    """
    alpha = 1.0 / (1.0 + math.exp(-epsilon0))
    beta = 1.0 / (1.0 + math.exp(epsilon0))  # 1 - alpha, without cancellation
    weights = stats.binom.pmf(np.arange(n), n - 1, math.exp(-epsilon0))
    total = []
    for c in range(n):
        if weights[c] == 0.0:
            continue
        b = stats.binom.pmf(np.arange(c + 2), c, 0.5)  # b_c(a), a = 0..c+1 (b_c(c+1) = 0)
        b_prev = np.concatenate([[0.0], b[:-1]])  # b_c(a - 1)
        p0 = alpha * b + beta * b_prev
        p1 = beta * b + alpha * b_prev
        with np.errstate(over="ignore"):
            scaled = np.where(p1 > 0, np.exp(epsilon) * p1, 0.0)
        total.append(weights[c] * math.fsum(np.maximum(0.0, p0 - scaled)))
    return math.fsum(total)


def fmt21_delta_exact(epsilon0: float, n: int, epsilon: float) -> mpmath.mpf:
    """:func:`fmt21_delta` in 60-digit arithmetic (the same sum; O(n^2), for small n)."""
    with mpmath.workdps(60):
        eps0, eps = mpmath.mpf(epsilon0), mpmath.mpf(epsilon)
        alpha, beta = 1 / (1 + mpmath.exp(-eps0)), 1 / (1 + mpmath.exp(eps0))
        q, scale, total = mpmath.exp(-eps0), mpmath.exp(eps), mpmath.mpf(0)
        for c in range(n):
            weight = mpmath.binomial(n - 1, c) * q**c * (1 - q) ** (n - 1 - c)
            b = [mpmath.binomial(c, a) / mpmath.mpf(2) ** c for a in range(c + 1)] + [0]
            for a in range(c + 2):
                b_prev = b[a - 1] if a > 0 else 0
                gap = alpha * b[a] + beta * b_prev - scale * (beta * b[a] + alpha * b_prev)
                if gap > 0:
                    total += weight * gap
        return +total


# ----------------------------------------------------------------------------- per mechanism
class Case:
    """How to fuzz one mechanism: parameter strategy, builder, exact check, output check."""

    def __init__(self, params: dict[str, Param | st.SearchStrategy[Any]],
                 build: Callable[[dict[str, Any]], Mechanism],
                 verify: Callable[[Mechanism], None],
                 values: Callable[[Mechanism], int],
                 check_output: Callable[[Mechanism, Any, Any], None]) -> None:
        self.params, self.build, self.verify = params, build, verify
        self.values, self.check_output = values, check_output


def _floats_out(mech: Mechanism, x: Any, out: Any) -> None:
    assert isinstance(out, np.ndarray) and out.dtype == np.float64
    assert out.shape == (3, *np.shape(x)) and np.all(np.isfinite(out))


def _ints_out(mech: Mechanism, x: Any, out: Any) -> None:
    assert isinstance(out, np.ndarray) and out.dtype == np.int64
    assert out.shape == (3, *np.shape(x))


def _labels_out(bound: Callable[[Mechanism], int]) -> Callable[[Mechanism, Any, Any], None]:
    def check(mech: Mechanism, x: Any, out: Any) -> None:
        assert isinstance(out, np.ndarray) and out.dtype == np.int64 and out.shape == (3,)
        assert out.min() >= 0 and out.max() < bound(mech)
    return check


def _rknn_out(mech: ReverseKnnCountRelease, x: Any, out: Any) -> None:
    (_ints_out if mech.discrete else _floats_out)(mech, x, out)


def _bits_out(mech: BitRandomizedResponse, x: Any, out: Any) -> None:
    assert out.dtype == np.uint8 and out.shape == (3, *x.shape)
    assert set(np.unique(out).tolist()) <= {0, 1}


def _reports_out(mech: Collision, x: Any, out: Any) -> None:
    assert out.shape == (3,) and out.dtype.names == ("seed", "z")
    assert out["z"].min() >= 0 and out["z"].max() < mech.bloom_length


def _shuffled_out(mech: ShuffledRandomizer, x: Any, out: Any) -> None:
    assert out.shape == (3, mech.num_users) and out.dtype == np.int64
    assert out.min() >= 0 and out.max() < mech.local.num_classes


def _view_out(mech: ShuffledHistogram, x: Any, out: Any) -> None:
    assert out.shape == (3, mech.num_bins, 2) and out.dtype == np.int64 and out.min() >= 0


def _verify_laplace_scale(sensitivity: Fraction, epsilon: float, scale: float) -> None:
    assert 1e-300 <= scale <= 1e300
    assert sensitivity <= Fraction(epsilon) * Fraction(scale)  # real epsilon <= the claim


def verify_laplace(mech: Laplace) -> None:
    _verify_laplace_scale(Fraction(mech.sensitivity.value), mech.epsilon, mech.scale)


def verify_float_safe_gaussian(mech: Gaussian) -> None:
    # a discrete Gaussian on the grid, CKS Thm 7 at the rounded query's integer sensitivity
    # floor(Delta / g) + 1, checked here point by point on the sampler's exact variance
    grid = mech.grid(1)
    steps = Fraction(mech.sensitivity.value) / Fraction(grid.granularity)
    assert grid.sensitivity == math.floor(steps) + 1
    exact = hockey_stick_discrete_gaussian(mech.epsilon, grid.variance, int(grid.sensitivity))
    assert exact <= mech.delta * (1 + 1e-9)


def verify_gaussian(mech: TextbookGaussian) -> None:
    assert 1e-300 <= mech.sigma <= 1e300
    assert exact_gaussian_delta(mech.epsilon, mech.sigma, mech.sensitivity.value) \
        <= mpmath.mpf(mech.delta)


def verify_gnmax(mech: GaussianNoisyMax) -> None:
    with mpmath.workdps(450):
        root2 = mpmath.sqrt(2)  # the true L2 sensitivity, not its double
        assert exact_gaussian_delta(mech.epsilon, mech.sigma, root2) <= mpmath.mpf(mech.delta)


def verify_discrete_laplace(mech: DiscreteLaplace) -> None:
    # pure (Delta s / t)-DP with t/s the exact rational scale (GRS 2012; CKS 2020 Sec. 2)
    sens = int(mech.sensitivity.value)
    assert Fraction(sens) / mech.scale_fraction <= Fraction(mech.epsilon)
    # Two-sided event: a = 1/b with Delta/eps <= b <= ceil(D Delta/eps)/D (the documented
    # rounding up: D = 2^20, or 1 above 2^20), computed here from eps and Delta; the charge
    # a Delta is the claim, less only by that rounding (float slack 1e-14 relative).
    exact = Fraction(sens) / Fraction(mech.epsilon)
    grid = 1 << 20 if exact <= 1 << 20 else 1
    hi = Fraction(math.ceil(exact * grid), grid)
    a = mech.event.noise_parameter
    assert float(1 / hi) * (1 - 1e-14) <= a <= float(1 / exact) * (1 + 1e-14)
    g_eps, g_delta = event_guarantee(mech.event)
    assert g_delta == 0.0 and float(sens / hi) * (1 - 1e-14) <= g_eps <= mech.epsilon * (1 + 1e-12)


def verify_discrete_gaussian(mech: DiscreteGaussian) -> None:
    exact = hockey_stick_discrete_gaussian(mech.epsilon, mech.variance,
                                           int(mech.sensitivity.value))
    assert exact <= mech.delta * (1 + 1e-9)


def verify_rr(mech: RandomizedResponse) -> None:
    flip = coin(mech._flip_threshold)
    keep, other = 1 - flip, flip / (mech.num_classes - 1)
    assert keep > 0 and other > 0
    assert within(keep, other, mech.epsilon) and within(other, keep, mech.epsilon)
    # Two-sided: the charge never under-counts, and exceeds the claim only by the float
    # resolution of the event's noise parameter k/(e^eps + k - 1) (16 ulps, propagated).
    g_eps = event_guarantee(mech.event)[0]
    m = math.expm1(mech.epsilon)
    k = mech.num_classes
    assert mech.epsilon <= g_eps <= mech.epsilon + 16 * 2.0**-52 * (k + m) / m * max(
        mech.epsilon, 1.0)


def verify_bit_rr(mech: BitRandomizedResponse) -> None:
    bits = 2 * mech.k * mech.r
    assert Fraction(mech.epsilon_per_bit) * bits <= Fraction(mech.epsilon)
    flip = coin(mech._flip_threshold)
    assert 0 < flip < 1
    assert within(1 - flip, flip, mech.epsilon_per_bit)
    assert within(flip, 1 - flip, mech.epsilon_per_bit)


def verify_collision(mech: Collision) -> None:
    c, length = mech.cardinality, mech.bloom_length
    probs = []
    for h in sorted({*range(1, min(c, 64) + 1), c}):
        inside = coin(float(mech._inside_threshold(h, mech.design_epsilon)))
        probs += [inside / h, (1 - inside) / (length - h)]
    assert min(probs) > 0 and within(max(probs), min(probs), mech.epsilon)


def verify_selective_rr(mech: SelectiveRandomizedResponse) -> None:
    for m in sorted({2, min(3, mech.num_classes), mech.num_classes}):
        keep = Fraction(float(mech._keep_threshold(m)))
        other = (1 - keep) / (m - 1)
        uniform = Fraction(1, m)
        for a, b in [(keep, other), (other, keep), (keep, uniform), (uniform, keep),
                     (other, uniform), (uniform, other)]:
            assert within(a, b, mech.epsilon), (m, a, b)


def verify_lnmax(mech: LaplaceNoisyMax) -> None:
    _verify_laplace_scale(Fraction(2), mech.epsilon, mech.scale)


def verify_latent(mech: LatentCodeLaplace) -> None:
    _verify_laplace_scale(2 * Fraction(mech.clip) * mech.latent_dim, mech.epsilon, mech.scale)


def verify_rknn(mech: ReverseKnnCountRelease) -> None:
    sens = 2 * mech.k * mech.r
    if mech.discrete:
        assert Fraction(sens) / mech.scale_fraction <= Fraction(mech.epsilon)
    else:
        _verify_laplace_scale(Fraction(sens), mech.epsilon, mech.scale)


def verify_shuffled(mech: ShuffledRandomizer) -> None:
    assert 0.0 <= mech.epsilon <= mech.local_epsilon
    if not mech.amplified:
        assert mech.delta == 0.0 and mech.epsilon == mech.local_epsilon
    elif mech.num_users <= 2000:
        approx = fmt21_delta(mech.local_epsilon, mech.num_users, mech.epsilon)
        if approx > mech.delta * (1 + 1e-9) and mech.num_users <= 300:
            # float64 cancels in p0 - e^eps p1 when eps0 is tiny (1e-12: ~0.5% error); decide
            # on the exact sum in 60-digit arithmetic instead
            approx = float(fmt21_delta_exact(mech.local_epsilon, mech.num_users, mech.epsilon))
        assert approx <= mech.delta * (1 + 1e-9)


def verify_histogram(mech: ShuffledHistogram) -> None:
    assert mech.delta_at(mech.epsilon) <= mech.delta


def _rr_local(p: dict[str, Any]) -> RandomizedResponse:
    return RandomizedResponse(epsilon=p["local_epsilon"], num_classes=p["local_classes"])


CASES: dict[str, Case] = {
    "Laplace": Case(
        {"epsilon": epsilons(), "sensitivity": sensitivities()},
        lambda p: Laplace(**p), verify_laplace, lambda m: 1, _floats_out),
    "Gaussian": Case(
        {"epsilon": epsilons(), "delta": deltas(), "sensitivity": sensitivities()},
        lambda p: Gaussian(**p), verify_float_safe_gaussian, lambda m: 1, _floats_out),
    "TextbookGaussian": Case(
        {"epsilon": epsilons(), "delta": deltas(), "sensitivity": sensitivities()},
        lambda p: TextbookGaussian(**p), verify_gaussian, lambda m: 1, _floats_out),
    "DiscreteLaplace": Case(
        {"epsilon": epsilons(), "sensitivity": sensitivities(integer=True)},
        lambda p: DiscreteLaplace(**p), verify_discrete_laplace, lambda m: 1, _ints_out),
    "DiscreteGaussian": Case(
        {"epsilon": epsilons(), "delta": deltas(), "sensitivity": sensitivities(integer=True)},
        lambda p: DiscreteGaussian(**p), verify_discrete_gaussian, lambda m: 1, _ints_out),
    "RandomizedResponse": Case(
        {"epsilon": epsilons(), "num_classes": sizes()},
        lambda p: RandomizedResponse(**p), verify_rr, lambda m: 1,
        _labels_out(lambda m: m.num_classes)),
    "ReverseKnnCountRelease": Case(
        {"epsilon": epsilons(), "k": sizes(4), "num_queries": sizes(), "num_classes": sizes(),
         "r": sizes(3), "discrete": st.booleans()},
        lambda p: ReverseKnnCountRelease(**p), verify_rknn,
        lambda m: m.num_queries * m.num_classes, _rknn_out),
    "BitRandomizedResponse": Case(
        {"epsilon": epsilons(), "k": sizes(4), "num_queries": sizes(), "num_classes": sizes(),
         "r": sizes(3)},
        lambda p: BitRandomizedResponse(**p), verify_bit_rr,
        lambda m: m.num_queries * m.num_classes, _bits_out),
    "Collision": Case(
        {"epsilon": epsilons(), "domain_size": sizes(), "cardinality": sizes(5),
         "bloom_length": Param(st.one_of(st.none(), sizes().ok), sizes().bad)},
        lambda p: Collision(**p), verify_collision, lambda m: 2 * m.cardinality, _reports_out),
    "ShuffledRandomizer": Case(
        {"local_epsilon": epsilons(), "local_classes": sizes(6), "num_users": sizes(3000),
         "delta": Param(st.one_of(st.just(0.0), deltas().ok), deltas().bad)},
        lambda p: ShuffledRandomizer(local=_rr_local(p), num_users=p["num_users"],
                                     delta=p["delta"]),
        verify_shuffled, lambda m: m.num_users * 10,  # plus a Python list of the inputs
        _shuffled_out),
    "ShuffledHistogram": Case(
        # epsilon below ~0.3 with delta ~1e-14 takes seconds to calibrate: kept to [0.3, 100]
        # plus refused extremes so that the suite stays within its time.
        # A central_fraction near 1 is refused only after ~10 s of calibration (no flooding
        # fits): not drawn here either.
        {"epsilon": Param(st.sampled_from([0.3, 1.0, 3.0, 50.0, 100.0]),
                          [5e-324, 1e-9, 100.5, 1e300, math.nan]),
         "delta": Param(st.sampled_from([1e-14, 1e-6, 0.5, 1 - 2.0**-53]),
                        [1e-320, 1e-15, 1.0]),
         "num_users": sizes(), "num_bins": sizes(),
         "central_fraction": Param(st.sampled_from([5e-324, 1e-9, 0.5, 0.9]), [0.0, 1.0])},
        lambda p: ShuffledHistogram(**p), verify_histogram,
        lambda m: max(m.num_users, 3 * m.num_bins), _view_out),
    "LaplaceNoisyMax": Case(
        {"epsilon": epsilons(), "num_classes": sizes()},
        lambda p: LaplaceNoisyMax(**p), verify_lnmax, lambda m: m.num_classes,
        _labels_out(lambda m: m.num_classes)),
    "GaussianNoisyMax": Case(
        {"epsilon": epsilons(), "delta": deltas(), "num_classes": sizes()},
        lambda p: GaussianNoisyMax(**p), verify_gnmax, lambda m: m.num_classes,
        _labels_out(lambda m: m.num_classes)),
    "SelectiveRandomizedResponse": Case(
        {"epsilon": epsilons(), "num_classes": sizes()},
        lambda p: SelectiveRandomizedResponse(**p), verify_selective_rr,
        lambda m: m.num_classes, _labels_out(lambda m: 2)),  # neighbours: I = {0, 1}
    "LatentCodeLaplace": Case(
        {"epsilon": epsilons(), "latent_dim": sizes(),
         "clip": st.sampled_from([5e-324, 1e-300, 1.0, 1e300, 1e301, 0.0, math.inf])},
        lambda p: LatentCodeLaplace(**p), verify_latent, lambda m: m.latent_dim, _floats_out),
}

NAMES = [type(entry.example()).__name__ for entry in CATALOGUE] + ["TextbookGaussian"]


def test_every_catalogued_mechanism_is_fuzzed():
    assert set(NAMES) == set(CASES)


def _names_in(message: str, params: dict[str, Any]) -> bool:
    names = set(params) | {"epsilon", "delta", "sensitivity", "num_classes"}
    return any(name.removeprefix("local_") in message for name in names)


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.data())
def test_extreme_parameters_give_an_exact_claim_or_a_named_refusal(name, data):
    case = CASES[name]
    # Half of the examples draw only accepted values, so that many claims get verified.
    valid = data.draw(st.booleans(), label="only accepted values")
    params = data.draw(st.fixed_dictionaries(
        {key: _strategy(value, valid) for key, value in case.params.items()}), label="parameters")
    try:
        mech = case.build(params)
    except ValueError as exc:
        assert _names_in(str(exc), params), f"the error names no parameter: {exc}"
        return
    case.verify(mech)  # the declared guarantee against an independent exact computation
    print("OK", name, params)
    if case.values(mech) > SAMPLED_VALUES:
        return
    x, _ = mech.neighbours()
    try:
        out = mech.sample(x, 3, rng=np.random.default_rng(0))
    except ValueError as exc:  # only the documented refusals are allowed
        assert "n must be" in str(exc), exc
        return
    case.check_output(mech, x, out)


# ----------------------------------------------------------------------------- junk inputs
_uint64 = np.iinfo(np.uint64).max


def _cast(values: np.ndarray, dtype: Any) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore"):  # NaN or 2^64 - 1 into ints: junk
        return values.astype(dtype, casting="unsafe")


def junk() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.text(max_size=5), st.binary(max_size=5), st.datetimes(), st.dates(),
        st.complex_numbers(allow_nan=False, allow_infinity=False), st.booleans(),
        st.integers(min_value=-(2**80), max_value=2**80), st.floats(), st.none(),
        st.sampled_from([np.uint64(_uint64), np.datetime64("2021-01-01"), np.float16(1.0),
                         np.longdouble(2.0), np.timedelta64(1, "D"), object(), {"a": 1}]))
    lists = st.lists(st.one_of(st.integers(min_value=-3, max_value=12),
                               st.floats(allow_nan=True), st.booleans()), max_size=12)
    arrays = st.builds(
        lambda dtype, shape, fill: _cast(np.full(shape, fill), dtype),
        st.sampled_from([np.uint64, np.int64, np.float64, np.bool_, np.uint8, np.float32,
                         np.complex64, "U2"]),
        st.sampled_from([(), (1,), (2,), (10,), (9,), (3, 2), (40, 10), (10, 10), (32,),
                         (1000,), (10_000,)]),
        st.sampled_from([0, 1, 2, -1, 0.5, 2**53 + 1, _uint64, math.nan, math.inf, 0.1]))
    ragged = st.just([[1], [1, 2]])
    return st.one_of(scalars, lists, arrays, ragged, st.tuples(scalars, lists))


EXAMPLES = {type(entry.example()).__name__: entry.example() for entry in CATALOGUE}
EXAMPLES["TextbookGaussian"] = TextbookGaussian(epsilon=1.0, delta=1e-5)


@pytest.mark.parametrize("name", NAMES)
@settings(derandomize=True, max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(value=junk())
def test_junk_inputs_are_refused_before_charging(name, value):
    mech = EXAMPLES[name]
    ledger = Ledger(epsilon=1e6, delta=0.5)
    rng = np.random.default_rng(1)
    state = rng.bit_generator.state
    try:
        out = mech.release(value, rng=rng, ledger=ledger)
    except ValueError:
        assert rng.bit_generator.state == state  # nothing drawn
        spent = ledger.spent()
        assert spent.charges == 0 and float(spent.epsilon) == 0.0  # nothing charged
        return
    assert ledger.spent().charges == 1  # a valid input: charged once, then released
    out = np.asarray(out)
    if out.dtype.kind == "f":
        assert np.all(np.isfinite(out))


def test_shuffled_checker_is_exact_at_tiny_local_epsilon():
    """Regression (found by the fuzz test): eps0 = 1e-12, two users, delta 1e-14. The claim
    holds (exact delta 9.99999e-15); float64 alone put it at 1.0048e-14 by cancellation."""
    mech = ShuffledRandomizer(local=RandomizedResponse(epsilon=1e-12, num_classes=2),
                              num_users=2, delta=1e-14)
    assert mech.amplified
    assert fmt21_delta(1e-12, 2, mech.epsilon) > mech.delta  # the float checker's error
    assert float(fmt21_delta_exact(1e-12, 2, mech.epsilon)) <= mech.delta
    verify_shuffled(mech)
