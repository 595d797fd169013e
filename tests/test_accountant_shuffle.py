"""Shuffle amplification: FMT21 numerical bound and the shuffle accountant.

Every check is deterministic (no sampling). The numerical bound is compared with three
independent implementations of the FMT21 dominating pair (an mpmath brute-force sum over every
outcome (a, c) of both distributions, a float64 sum of the positive terms only, which has no
cancellation, and an mpmath sum over the clone counts with exact recurrences, for n up to 10^6),
with the previous O(n) implementation (kept verbatim below), with the closed form at n = 1,
with the reference value printed by FMT21's own code, and with the closed form of Theorem 3.1
wherever that is valid.

Tolerances: against the mpmath sum, 1e-12 relative for deltas above 1e-10 (measured <= 1e-12),
1e-11 below (measured 3.4e-12 at delta = 4e-13, n = 10^6: rounding in the recurrences), on
either side. Against the previous implementation,
1e-12 relative at n <= 10^3; at n = 10^5 and 10^6 the previous implementation itself is off by
up to 1.2e-10 and 2.9e-8 (its binomial weights came from ``binom.logpmf``, a difference of
log-gammas, and its cdfs from Cephes' ``bdtr``; both measured against mpmath below), so there
the comparison is with that measured error.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from dp_accounting import dp_event as _dp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats
from shuffle_reference import old_numerical_delta, old_numerical_epsilon
from work_bounds import MB, peak_bytes

from dpkd_audit._math import shuffle as _shuffle_math
from dpkd_audit._math.shuffle import _numerical_epsilon, _window
from dpkd_audit.accountants import NeighboringRelation, PureAccountant, UnsupportedEventError
from dpkd_audit.accountants.base import BoundKind, Epsilon
from dpkd_audit.accountants.shuffle import (
    ShuffleAccountant,
    ShuffleBound,
    closed_form_epsilon,
    closed_form_max_local_epsilon,
    numerical_delta,
    numerical_epsilon,
)
from dpkd_audit.events import PureDpEvent, ShuffledLocalDpEvent

# ============================================================================ references


def mp_pair_delta(eps0: float, n: int, eps: float, dps: int = 40) -> mpmath.mpf:
    """Brute force: max of both hockey-stick divergences of FMT21's (P0, P1), all outcomes."""
    with mpmath.workdps(dps):
        e0, big = mpmath.exp(eps0), mpmath.exp(eps)
        alpha = e0 / (e0 + 1)
        p = mpmath.exp(-eps0)
        forward = backward = mpmath.mpf(0)
        for c in range(n):
            pc = mpmath.binomial(n - 1, c) * p**c * (1 - p) ** (n - 1 - c)

            def b(j: int, c: int = c) -> mpmath.mpf:
                return mpmath.binomial(c, j) / mpmath.mpf(2) ** c if 0 <= j <= c else 0

            for a in range(c + 2):  # first coordinate A + Delta (or A + 1 - Delta)
                p0 = alpha * b(a) + (1 - alpha) * b(a - 1)
                p1 = (1 - alpha) * b(a) + alpha * b(a - 1)
                forward += pc * max(0, p0 - big * p1)
                backward += pc * max(0, p1 - big * p0)
        return max(forward, backward)


def float_positive_terms_delta(eps0: float, n: int, eps: float) -> float:
    """Independent float64 evaluation: sum only the positive terms (no cdf differences)."""
    alpha = 1.0 / (1.0 + math.exp(-eps0))
    total = 0.0
    c_all = np.arange(n)
    log_pc = stats.binom.logpmf(c_all, n - 1, math.exp(-eps0))
    for c in c_all[log_pc > -700]:
        a = np.arange(c + 2)
        with np.errstate(divide="ignore"):
            log_b = stats.binom.logpmf(a, c, 0.5)
            log_b_prev = stats.binom.logpmf(a - 1, c, 0.5)
        b, b_prev = np.exp(log_b), np.exp(log_b_prev)
        diff = alpha * b + (1 - alpha) * b_prev - math.exp(eps) * ((1 - alpha) * b
                                                                 + alpha * b_prev)
        total += math.exp(log_pc[c]) * math.fsum(diff[diff > 0])
    return total


# ============================================================================ numerical delta


@pytest.mark.parametrize("n", [1, 2, 5, 20, 50])
@pytest.mark.parametrize("eps0", [0.3, 1.0, 3.0])
def test_numerical_delta_matches_mpmath_brute_force(n, eps0):
    for frac in (0.0, 0.05, 0.2, 0.5, 0.9):
        eps = frac * eps0
        ours = numerical_delta(eps0, n, eps)
        ref = float(mp_pair_delta(eps0, n, eps))
        assert ours == pytest.approx(ref, rel=1e-10, abs=1e-15), (eps0, n, eps)


def test_numerical_delta_matches_positive_term_sum_at_moderate_n():
    # Small deltas (down to ~1e-9) are where cdf differences could lose digits.
    for eps0, n in ((1.0, 2000), (4.0, 3000)):
        for eps in (0.05, 0.1, 0.2, 0.4):
            ref = float_positive_terms_delta(eps0, n, eps)
            assert numerical_delta(eps0, n, eps) == pytest.approx(ref, rel=1e-9, abs=1e-18)


def test_numerical_delta_edges():
    assert numerical_delta(1.0, 100, 1.0) == 0.0  # eps >= eps0: the local guarantee
    assert numerical_delta(1.0, 100, 5.0) == 0.0
    # eps = 0: total variation of the pair, in (0, 1)
    assert 0.0 < numerical_delta(1.0, 100, 0.0) < 1.0
    # no amplification possible for huge eps0 (e^-eps0 underflows): randomized response
    assert numerical_delta(800.0, 10, 799.0) == pytest.approx(-math.expm1(-1.0), rel=1e-12)


def test_n_equal_one_is_randomized_response_exactly():
    # One user: the pair is binary randomized response, delta(eps) = (e^eps0 - e^eps)/(e^eps0+1)
    # numerical_epsilon aims at delta * (1 - 1e-6) (rounding margin), hence the upper end.
    def exact(eps0: float, delta: float) -> float:
        return max(0.0, math.log(math.exp(eps0) - delta * (1 + math.exp(eps0))))

    for eps0 in (0.1, 1.0, 5.0):
        for delta in (1e-9, 1e-4, 0.05):
            got = numerical_epsilon(eps0, 1, delta)
            assert exact(eps0, delta) <= got <= exact(eps0, delta * (1 - 1e-6)) + 1e-9 * eps0


def test_reference_value_of_fmt21_code():
    # apple/ml-shuffling-amplification README (FMT21's code): n = 10^5, eps0 = 4, delta = 1e-6
    # gives eps between 0.1675385583317841 (lower bound) and 0.172790550755978 (upper bound,
    # binned in steps of 100 and 10 bisection steps); the exact value lies in between.
    eps = numerical_epsilon(4.0, 100_000, 1e-6)
    assert 0.1675385583317841 <= eps <= 0.172790550755978
    assert eps == pytest.approx(0.16977, abs=5e-5)


# ============================================================================ numerical eps


@settings(derandomize=True, max_examples=60, deadline=None)
@given(eps0=st.floats(0.01, 10.0), n=st.integers(1, 5000),
       log_delta=st.floats(-10.0, -1.0))
def test_numerical_epsilon_is_at_most_eps0_and_solves_the_curve(eps0, n, log_delta):
    delta = 10.0**log_delta
    eps = numerical_epsilon(eps0, n, delta)
    assert 0.0 <= eps <= eps0
    assert numerical_delta(eps0, n, eps) <= delta  # never below the true epsilon
    if eps > 0:  # and not loose: slightly smaller epsilons miss the target
        assert numerical_delta(eps0, n, eps * (1 - 1e-7) - 1e-12) > delta * (1 - 2e-6)


def test_numerical_below_closed_form_where_valid_and_several_times_tighter():
    ratios = []
    for n in (10**3, 10**4, 10**5, 10**6):
        for delta in (1e-8, 1e-6, 1e-4):
            limit = closed_form_max_local_epsilon(n, delta)
            for eps0 in (0.05, 0.2, 0.5, 1.0, 2.0, 4.0, 8.0):
                if eps0 > limit:
                    continue
                closed = closed_form_epsilon(eps0, n, delta)
                numerical = numerical_epsilon(eps0, n, delta)
                assert numerical <= closed
                if numerical > 0:  # 0 when delta exceeds the pair's total variation
                    ratios.append(closed / numerical)
    assert len(ratios) > 40
    # NOTES.md: the numerical bound is 3-5x tighter. Measured on this grid: 1.95x (eps0 = 8 at
    # the edge of the closed form's validity) to 25x (tiny epsilons), median ~4.6x.
    assert min(ratios) > 1.5
    assert 3.0 < np.median(ratios) < 8.0


def test_numerical_epsilon_monotone_in_parameters():
    base = numerical_epsilon(1.0, 10_000, 1e-6)
    assert numerical_epsilon(1.0, 20_000, 1e-6) < base  # more users: more privacy
    assert numerical_epsilon(1.5, 10_000, 1e-6) > base  # weaker local noise: less privacy
    assert numerical_epsilon(1.0, 10_000, 1e-5) < base  # larger delta: smaller epsilon


def test_large_delta_gives_zero_epsilon():
    # delta above the total variation of the pair: epsilon 0
    tv = numerical_delta(0.5, 1000, 0.0)
    assert numerical_epsilon(0.5, 1000, min(0.999, tv * 1.01)) == 0.0


def test_fast_at_n_1e5():
    _numerical_epsilon.cache_clear()
    _window.cache_clear()
    from dpkd_audit._math import shuffle as shuffle_math

    calls = [0]
    original = shuffle_math._delta_bound

    def counted(*args):
        calls[0] += 1
        return original(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shuffle_math, "_delta_bound", counted)
        for eps0 in (0.5, 4.0):
            calls[0] = 0
            _, peak = peak_bytes(lambda eps0=eps0: numerical_epsilon(eps0, 100_000, 1e-6))
            # a bisection on one window: tens of O(window) evaluations, never O(n) memory
            assert calls[0] <= 80 and peak < 16 * MB


@pytest.mark.parametrize(("args", "name"), [
    ((0.0, 100, 1e-6), "epsilon0"), ((-1.0, 100, 1e-6), "epsilon0"),
    ((math.nan, 100, 1e-6), "epsilon0"), ((math.inf, 100, 1e-6), "epsilon0"),
    ((1.0, 0, 1e-6), "n"), ((1.0, 10.0, 1e-6), "n"), ((1.0, True, 1e-6), "n"),
    ((1.0, 100, 0.0), "delta"), ((1.0, 100, 1.0), "delta"), ((1.0, 100, math.nan), "delta"),
])
def test_numerical_epsilon_rejects_bad_input(args, name):
    with pytest.raises(ValueError, match=name):
        numerical_epsilon(*args)


@pytest.mark.parametrize("eps", [-0.1, math.nan, "1", True])
def test_numerical_delta_rejects_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        numerical_delta(1.0, 100, eps)


# ============================================================================ O(sqrt n) bound


def mp_clone_sum(eps0: float, n: int, eps: float, dps: int = 40) -> mpmath.mpf:
    """sum_c P[C = c] D_c(eps) in mpmath: exact recurrences in c, no float cdf or pmf.

    Every c for small n, else the c within 14 standard deviations of the mean (the rest weighs
    < 1e-40). q is the float e^-eps0 of the implementation, exactly. F_lo(k_lo) is a direct tail
    sum, then one more clone at a time: F_{c+1}(k) = F_c(k) - b_c(k)/2, b_{c+1}(k) =
    b_c(k)(c+1)/(2(c+1-k)), b(k+1) = b(k)(c+1-k)/(k+1), F(k+1) = F(k) + b(k+1).
    """
    with mpmath.workdps(dps):
        trials = n - 1
        q = mpmath.mpf(math.exp(-eps0))
        e0, big = mpmath.exp(mpmath.mpf(eps0)), mpmath.exp(mpmath.mpf(eps))
        upper, lower, norm = 1 - big / e0, 1 / e0 - big, 1 + 1 / e0
        slope = (e0 - big) / ((e0 - 1) * (big + 1))
        mean, sd = trials * q, mpmath.sqrt(trials * q * (1 - q))
        lo, hi = 0, trials
        if trials > 20_000:
            lo = max(0, int(mpmath.floor(mean - 14 * sd)))
            hi = min(trials, int(mpmath.ceil(mean + 14 * sd)))
        weight = mpmath.exp(mpmath.loggamma(trials + 1) - mpmath.loggamma(lo + 1)
                            - mpmath.loggamma(trials - lo + 1) + lo * mpmath.log(q)
                            + (trials - lo) * mpmath.log(1 - q))

        def threshold(c: int) -> int:
            return min(int(mpmath.floor((c + 1) * slope)), c)

        k = threshold(lo)
        pmf = mpmath.binomial(lo, k) / mpmath.mpf(2) ** lo
        cdf, term = pmf, pmf
        for j in range(k, 0, -1):
            term = term * j / (lo - j + 1)
            cdf += term
            if term < cdf * mpmath.mpf(10) ** (3 - dps):
                break
        total = mpmath.mpf(0)
        for c in range(lo, hi + 1):
            below = cdf - pmf if k >= 1 else 0
            total += weight * max(0, upper * cdf + lower * below) / norm
            if c == hi:
                return total
            cdf -= pmf / 2
            pmf = pmf * (c + 1) / (2 * (c + 1 - k))
            weight = weight * (trials - c) / (c + 1) * q / (1 - q)
            while k < threshold(c + 1):
                pmf = pmf * (c + 1 - k) / (k + 1)
                k += 1
                cdf += pmf
        return total  # pragma: no cover - the loop returns


def test_mpmath_clone_sum_matches_the_brute_force_reference():
    for eps0, n, eps in ((1.0, 20, 0.1), (3.0, 50, 0.5)):
        assert float(mp_clone_sum(eps0, n, eps)) == pytest.approx(
            float(mp_pair_delta(eps0, n, eps)), rel=1e-14)


@pytest.mark.parametrize("n", [10**5, 10**6])
def test_numerical_delta_matches_mpmath_clone_sum_at_large_n(n):
    # Points with delta from ~1e-3 down to ~1e-15; the bound adds tail charges < 1e-14 relative.
    for eps0 in (0.3, 1.0, 4.0):
        for x in (0.1, 1.0, 3.0, 6.0):
            eps = x * eps0 / math.sqrt(n)
            ref = float(mp_clone_sum(eps0, n, eps))
            got = numerical_delta(eps0, n, eps)
            tol = 1e-12 if ref > 1e-10 else 1e-11  # measured <= 1e-12 (3e-12 at 4e-13)
            assert ref * (1 - tol) <= got <= ref * (1 + tol), (eps0, n, eps)


def test_cdf_and_pmf_sources_are_accurate_where_the_old_ones_were_not():
    # F_c(k) of Bin(c, 1/2) near the median at c = 10^7: Boost's incomplete beta (used now)
    # against mpmath, and Cephes' bdtr (used before), which is off by ~3e-4 relative.
    c, k = 10**7, 4_999_900
    with mpmath.workdps(30):
        term = mpmath.binomial(c, k) / mpmath.mpf(2) ** c
        exact, j = term, k
        while term > exact * mpmath.mpf(10) ** -25:
            term, j = term * j / (c - j + 1), j - 1
            exact += term
    assert float(_shuffle_math._half_cdf(np.array([float(k)]), np.array([c]))[0]) == \
        pytest.approx(float(exact), rel=1e-13)
    assert abs(special.bdtr(k, c, 0.5) / float(exact) - 1) > 1e-5
    # binomial weights at n = 10^6: Boost's pmf (used now) vs the log-gamma logpmf (before)
    trials, q, c = 10**6 - 1, math.exp(-1.0), 367_879
    with mpmath.workdps(30):
        exact = float(mpmath.binomial(trials, c) * mpmath.mpf(q) ** c
                      * (1 - mpmath.mpf(q)) ** (trials - c))
    assert stats.binom.pmf(c, trials, q) == pytest.approx(exact, rel=1e-13)
    assert abs(math.exp(stats.binom.logpmf(c, trials, q)) / exact - 1) > 1e-10


@pytest.mark.parametrize(("n", "tol"), [(10, 1e-12), (1000, 2e-12)])
def test_equals_the_previous_implementation_at_small_n(n, tol):
    # tol: 1e-12, or the previous implementation's own error where larger (n = 1000: up to
    # 1.0e-12 against mpmath, from its log-gamma weights and Cephes cdfs)
    for eps0 in (0.3, 1.0, 4.0):
        for frac in (0.0, 0.01, 0.1, 0.5, 0.9):
            eps = frac * eps0 * min(1.0, 10 / math.sqrt(n))
            old = old_numerical_delta(eps0, n, eps)
            new = numerical_delta(eps0, n, eps)
            assert old * (1 - tol) <= new <= old * (1 + tol), (eps0, n, eps)
        for delta in (1e-3, 1e-6, 1e-10):
            old = old_numerical_epsilon(eps0, n, delta)
            new = numerical_epsilon(eps0, n, delta)
            assert old * (1 - tol) <= new <= old * (1 + tol), (eps0, n, delta)


@pytest.mark.parametrize(("n", "old_error"), [(10**5, 1.2e-10), (10**6, 3e-8)])
def test_close_to_the_previous_implementation_at_large_n(n, old_error):
    # The previous implementation is off by up to old_error (see the module doc; the accurate
    # reference is mp_clone_sum, checked above); epsilon moves by at most ~old_error plus the
    # 1e-10 (relative) tolerance of the root finder. (Few points at 10^6: it is O(n).)
    for eps0 in (0.3, 1.0, 4.0):
        for x in (0.1, 1.0, 3.0, 6.0):
            eps = x * eps0 / math.sqrt(n)
            old, new = old_numerical_delta(eps0, n, eps), numerical_delta(eps0, n, eps)
            assert new == pytest.approx(old, rel=old_error), (eps0, n, eps)
        for delta in (1e-3, 1e-6, 1e-10) if n < 10**6 else (1e-6,):
            old, new = old_numerical_epsilon(eps0, n, delta), numerical_epsilon(eps0, n, delta)
            assert new == pytest.approx(old, rel=old_error + 3e-10), (eps0, n, delta)


def test_numerical_epsilon_solves_the_exact_curve_at_large_n():
    for eps0, n, delta in ((1.0, 10**6, 1e-6), (4.0, 10**5, 1e-9), (0.3, 10**6, 1e-4)):
        eps = numerical_epsilon(eps0, n, delta)
        assert float(mp_clone_sum(eps0, n, eps)) <= delta * (1 - 1e-6)  # never below
        assert float(mp_clone_sum(eps0, n, eps * (1 - 1e-8))) > delta * (1 - 2e-6)  # tight


@pytest.mark.parametrize(("eps0", "n"), [(1.0, 10**4), (0.05, 10**6), (6.0, 10**7),
                                         (1.0, 10**9)])
def test_window_tails_are_rigorous_bounds(eps0, n):
    window = _window(eps0, n, 1e-20, 1e-14)
    lo = int(window.c.min())
    q = math.exp(-eps0)
    exact_below = stats.binom.cdf(lo - 1, n - 1, q) if lo > 0 else 0.0
    exact_above = stats.binom.sf(window.hi, n - 1, q)
    assert exact_below <= window.below <= 1e-20
    assert exact_above <= window.above <= 1e-14
    # and the window is not needlessly wide: the Chernoff bound is within ~sqrt(n) of the tail
    assert window.hi - lo < 20 * math.sqrt(n * q * (1 - q)) + 60


def test_clone_divergence_is_non_increasing_in_c():
    # D_{c+1} <= D_c (one more clone is a post-processing): what makes the tail charges valid.
    c = np.arange(0, 3000)
    for eps0, eps in ((1.0, 0.05), (4.0, 0.5), (0.3, 0.01)):
        terms = _shuffle_math._clone_terms(eps, eps0, c, c + 1.0)
        assert np.all(np.diff(terms) <= 1e-15 * terms[:-1])
        assert terms[0] == pytest.approx((math.exp(eps0) - math.exp(eps)) / (math.exp(eps0) + 1),
                                         rel=1e-14)


@pytest.mark.parametrize("n", [10**7, 10**9])
def test_anchored_recurrences_match_direct_evaluation(n):
    window = _window(1.0, n, 1e-20, 1e-14)
    assert window.c.ndim == 2  # the block layout
    # every 8th block at n = 10^9 (Boost's incomplete beta takes up to ~40 us at the median of
    # Bin(4e8, 1/2), so a full direct evaluation takes seconds)
    step = 8 if n > 10**8 else 1
    blocks, weights = window.c[:, ::step], window.weights[:, ::step]
    flat, flat_weights = blocks.T.ravel(), weights.T.ravel()
    for x in (0.0, 0.1, 1.0, 4.0, 7.0):  # delta from ~1e-4 down to ~1e-12
        eps = x / math.sqrt(n)
        recurrence = float(np.sum(weights * _shuffle_math._clone_terms(eps, 1.0, blocks,
                                                                       blocks + 1.0)))
        direct = float(np.sum(flat_weights * _shuffle_math._clone_terms(eps, 1.0, flat,
                                                                        flat + 1.0)))
        # measured <= 5e-12 (single D_c differ by up to 8e-10 at n = 10^9: each D_c is a
        # difference of two terms ~1e3 times larger, good to ~1e-13 (10^7) or ~1e-11 (10^9))
        assert recurrence == pytest.approx(direct, rel=1e-11), x


def test_n_1e9_in_small_memory():
    _numerical_epsilon.cache_clear()
    _window.cache_clear()
    eps, peak = peak_bytes(lambda: numerical_epsilon(1.0, 10**9, 1e-6))
    assert peak < 100e6  # measured 26 MB (the O(n) version: 0.9 GB measured at n = 10^7)
    assert 0.0 < eps < closed_form_epsilon(1.0, 10**9, 1e-6)
    assert numerical_delta(1.0, 10**9, eps) <= 1e-6
    assert numerical_delta(1.0, 10**9, eps * (1 - 1e-6)) > 1e-6 * (1 - 2e-6)


# ============================================================================ accountant


def test_accountant_charges_numerical_epsilon_per_release():
    event = ShuffledLocalDpEvent(1.0, 10_000)
    acc = ShuffleAccountant(1e-7).compose(event, count=10)
    per = numerical_epsilon(1.0, 10_000, 1e-7)
    eps = acc.get_epsilon(1e-6)
    assert isinstance(eps, Epsilon) and eps.kind is BoundKind.UPPER_BOUND
    assert "numerical" in eps.method and "Feldman-McMillan-Talwar" in eps.method
    assert float(eps) == pytest.approx(10 * per, rel=1e-12)
    assert acc.totals() == pytest.approx((10 * per, 1e-6), rel=1e-12)
    assert math.isinf(acc.get_epsilon(9e-7))  # summed delta 1e-6 does not fit


def test_closed_form_bound_and_its_fallback():
    acc = ShuffleAccountant(1e-6, bound=ShuffleBound.CLOSED_FORM)
    assert "closed form" in acc.method
    valid = ShuffledLocalDpEvent(1.0, 100_000)
    assert acc.amplified(valid) == (closed_form_epsilon(1.0, 100_000, 1e-6), 1e-6)
    invalid = ShuffledLocalDpEvent(8.0, 1000)  # eps0 above log(n / (16 log(2/delta)))
    assert acc.amplified(invalid) == (8.0, 0.0)  # no amplification claimed, no delta spent
    acc.compose(valid).compose(invalid)
    assert float(acc.get_epsilon(1e-6)) == pytest.approx(
        closed_form_epsilon(1.0, 100_000, 1e-6) + 8.0, rel=1e-12)
    numerical = ShuffleAccountant(1e-6).compose(valid).compose(invalid)
    assert numerical.amplified(invalid)[1] == 1e-6  # slightly amplified: delta is spent
    assert float(numerical.get_epsilon(2e-6)) < float(acc.get_epsilon(1e-6))


def test_accountant_identities_and_basic_composition_bound():
    event = ShuffledLocalDpEvent(2.0, 50_000)
    one = ShuffleAccountant(1e-8)
    for _ in range(30):
        one.compose(event)
    folded = ShuffleAccountant(1e-8).compose(_dp.SelfComposedDpEvent(event, 30))
    counted = ShuffleAccountant(1e-8).compose(event, count=30)
    values = [float(a.get_epsilon(1e-6)) for a in (one, folded, counted)]
    assert values[0] == values[1] == values[2]
    assert len(one._counts) == 1
    # never above the un-amplified basic composition (the event's declared epsilon0)
    assert values[0] <= float(PureAccountant().compose(event, count=30).get_epsilon(1e-6))


def test_accountant_refuses_other_events_without_change():
    acc = ShuffleAccountant(1e-6).compose(ShuffledLocalDpEvent(1.0, 1000))
    before = float(acc.get_epsilon(1e-5))
    with pytest.raises(UnsupportedEventError, match="PureDpEvent"):
        acc.compose(_dp.ComposedDpEvent([ShuffledLocalDpEvent(1.0, 1000), PureDpEvent(0.1)]))
    assert float(acc.get_epsilon(1e-5)) == before
    assert not acc.supports(PureDpEvent(0.1))
    with pytest.raises(UnsupportedEventError, match="GaussianDpEvent"):
        acc.amplified(_dp.GaussianDpEvent(1.0))


def test_accountant_non_private_noop_and_empty():
    assert float(ShuffleAccountant(1e-6).get_epsilon(1e-6)) == 0.0
    assert ShuffleAccountant(1e-6).get_delta(0.5) == 0.0
    assert float(ShuffleAccountant(1e-6).compose(_dp.NoOpDpEvent()).get_epsilon(0.0)) == 0.0
    acc = ShuffleAccountant(1e-6).compose(_dp.NonPrivateDpEvent())
    assert math.isinf(acc.get_epsilon(0.5)) and acc.get_delta(10.0) == 1.0


def test_get_delta_single_release_is_the_exact_curve():
    event = ShuffledLocalDpEvent(1.0, 10_000)
    acc = ShuffleAccountant(1e-6).compose(event)
    assert acc.get_delta(0.05) == numerical_delta(1.0, 10_000, 0.05)
    eps = float(acc.get_epsilon(1e-6))
    assert acc.get_delta(eps) <= 1e-6
    two = ShuffleAccountant(1e-6).compose(event, count=2)
    assert two.get_delta(2 * eps) == pytest.approx(2e-6)
    assert two.get_delta(eps) == 1.0


def test_accountant_matches_the_mechanism_claim_and_beats_the_closed_form():
    from dpkd_audit.mechanisms.randomized_response import RandomizedResponse
    from dpkd_audit.mechanisms.shuffle import ShuffledRandomizer

    mech = ShuffledRandomizer(local=RandomizedResponse(epsilon=1.0, num_classes=10),
                              num_users=60_000, delta=1e-6)
    assert mech.amplified
    eps = float(ShuffleAccountant(1e-6).compose(mech.event).get_epsilon(1e-6))
    assert eps == pytest.approx(mech.epsilon, rel=1e-9)  # both use the numerical bound
    assert eps < closed_form_epsilon(1.0, 60_000, 1e-6) / 2


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-6, math.nan, "1e-6"])
def test_accountant_rejects_bad_delta_per_release(delta):
    with pytest.raises(ValueError, match="delta_per_release"):
        ShuffleAccountant(delta)


def test_accountant_rejects_bad_bound_and_relation():
    with pytest.raises(ValueError, match="bound"):
        ShuffleAccountant(1e-6, bound="numerical")
    with pytest.raises(ValueError, match="neighboring_relation"):
        ShuffleAccountant(1e-6, neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
    acc = ShuffleAccountant(1e-6)
    with pytest.raises(ValueError, match="target_delta"):
        acc.get_epsilon(2.0)
    with pytest.raises(ValueError, match="target_epsilon"):
        acc.get_delta(-1.0)


def test_beyond_the_numerical_range_the_closed_form_or_no_amplification():
    from dpkd_audit._math.shuffle import MAX_NUMERICAL_USERS

    n = 2**63
    assert n > MAX_NUMERICAL_USERS
    eps, peak = peak_bytes(lambda: numerical_epsilon(1.0, n, 1e-6))
    assert eps == closed_form_epsilon(1.0, n, 1e-6) and peak < MB  # no window at all
    # outside the closed form's validity: no amplification is claimed
    assert numerical_epsilon(60.0, MAX_NUMERICAL_USERS + 1, 1e-6) == 60.0
    with pytest.raises(ValueError, match="n must be"):
        numerical_delta(1.0, n, 0.5)
