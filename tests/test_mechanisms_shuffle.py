"""Shuffle model: FMT21 closed form, shuffled local randomizer, multi-message shuffled histogram.

Statistical tests use fixed seeds; each states its false-failure rate (the probability, over
seeds, that a correct implementation fails it). Exact laws: the shuffled randomized-response
histogram is compared with the convolution of the users' categorical pmfs; the histogram's
noise with the discrete Laplace pmf; the full message view with the exact law of its sufficient
statistic, itself checked against a brute-force two-dimensional computation.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from dpkd_audit.accountants.pure import PureAccountant, event_guarantee
from dpkd_audit.accountants.shuffle import (
    closed_form_epsilon,
    closed_form_max_local_epsilon,
    numerical_epsilon,
)
from dpkd_audit.events import ShuffledHistogramDpEvent, ShuffledLocalDpEvent
from dpkd_audit.mechanisms.base import Norm
from dpkd_audit.mechanisms.continuous import Gaussian, Laplace
from dpkd_audit.mechanisms.randomized_response import RandomizedResponse
from dpkd_audit.mechanisms.shuffle import (
    ShuffledHistogram,
    ShuffledRandomizer,
    calibrate_shuffled_histogram,
    shuffled_histogram_delta,
)

ALPHA = 1e-4  # significance of every chi-square test below: false-failure rate 1e-4 per test


def chi_square_pvalue(counts: np.ndarray, pmf: np.ndarray, min_expected: float = 5.0) -> float:
    """Goodness of fit of observed ``counts`` to ``pmf``; adjacent cells are pooled to >= 5."""
    counts = np.asarray(counts, dtype=np.float64)
    pmf = np.asarray(pmf, dtype=np.float64)
    assert counts.shape == pmf.shape
    assert counts[pmf == 0].sum() == 0, "observation outside the support"
    total = counts.sum()
    pooled_obs, pooled_exp, acc_o, acc_e = [], [], 0.0, 0.0
    for o, p in zip(counts, pmf / pmf.sum(), strict=True):
        acc_o += o
        acc_e += p * total
        if acc_e >= min_expected:
            pooled_obs.append(acc_o)
            pooled_exp.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 or acc_o > 0:  # the remainder joins the last cell
        pooled_obs[-1] += acc_o
        pooled_exp[-1] += acc_e
    assert len(pooled_obs) >= 2, "test design: need at least two cells"
    return float(stats.chisquare(pooled_obs, pooled_exp).pvalue)


# ============================================================================ closed form


def fmt21_reference(eps0: float, n: int, delta: float) -> float:
    """FMT21 Theorem 3.1 evaluated literally with 50-digit arithmetic."""
    mpmath.mp.dps = 50
    e0 = mpmath.exp(mpmath.mpf(eps0))
    d = mpmath.mpf(delta)
    bracket = 8 * mpmath.sqrt(e0 * mpmath.log(4 / d)) / mpmath.sqrt(n) + 8 * e0 / n
    return float(mpmath.log(1 + (e0 - 1) / (e0 + 1) * bracket))


@pytest.mark.parametrize(("eps0", "n", "delta"), [
    (1.0, 10_000, 1e-6), (2.0, 60_000, 1e-5), (1e-8, 1_000, 1e-3), (0.3, 5_000, 1e-8),
    (8.0, 10**8, 1e-9),
])
def test_closed_form_matches_hand_computation(eps0, n, delta):
    assert closed_form_epsilon(eps0, n, delta) == pytest.approx(fmt21_reference(eps0, n, delta),
                                                                rel=1e-12)


def test_closed_form_reference_value():
    # eps0=1, n=10^4, delta=1e-6: tanh(1/2) * (8 sqrt(e ln(4e6) / 10^4) + 8e / 10^4), by hand.
    bracket = 8 * math.sqrt(math.e * math.log(4e6) / 1e4) + 8 * math.e / 1e4
    assert closed_form_epsilon(1.0, 10_000, 1e-6) == pytest.approx(
        math.log(1 + math.tanh(0.5) * bracket), rel=1e-14)
    assert closed_form_epsilon(1.0, 10_000, 1e-6) == pytest.approx(0.2140256519, rel=1e-9)


def test_closed_form_validity_condition_is_enforced():
    n, delta = 10_000, 1e-6
    limit = math.log(n / (16 * math.log(2 / delta)))
    assert closed_form_max_local_epsilon(n, delta) == pytest.approx(limit, rel=1e-14)
    closed_form_epsilon(limit * (1 - 1e-12), n, delta)  # just inside: fine
    with pytest.raises(ValueError, match=r"epsilon0 <= log\(n / \(16 log\(2/delta\)\)\)") as info:
        closed_form_epsilon(limit * 1.001, n, delta)
    message = str(info.value)
    assert "n=10000" in message and "delta=1e-06" in message and "numerical" in message
    # Too few users: no epsilon0 > 0 qualifies.
    with pytest.raises(ValueError, match="epsilon0"):
        closed_form_epsilon(0.01, 100, 1e-6)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"epsilon0": 0.0}, "epsilon0"), ({"epsilon0": -1.0}, "epsilon0"),
    ({"epsilon0": math.nan}, "epsilon0"), ({"epsilon0": math.inf}, "epsilon0"),
    ({"epsilon0": "1"}, "epsilon0"), ({"n": 0}, "n"), ({"n": 10.0}, "n"), ({"n": True}, "n"),
    ({"delta": 0.0}, "delta"), ({"delta": 1.0}, "delta"), ({"delta": -1e-6}, "delta"),
    ({"delta": math.nan}, "delta"),
])
def test_closed_form_rejects_bad_parameters(kwargs, name):
    args = {"epsilon0": 1.0, "n": 10_000, "delta": 1e-6} | kwargs
    with pytest.raises(ValueError, match=name):
        closed_form_epsilon(**args)


@settings(derandomize=True, max_examples=60)
@given(eps0=st.floats(1e-3, 6.0), n=st.integers(10**4, 10**9), factor=st.floats(1.01, 100.0),
       delta=st.sampled_from([1e-4, 1e-6, 1e-9]))
def test_closed_form_monotone_in_n_and_eps0(eps0, n, factor, delta):
    if eps0 > closed_form_max_local_epsilon(n, delta):
        return
    eps = closed_form_epsilon(eps0, n, delta)
    bigger_n = int(n * factor) + 1
    assert closed_form_epsilon(eps0, bigger_n, delta) < eps  # more users, more privacy
    smaller_eps0 = eps0 / factor
    assert closed_form_epsilon(smaller_eps0, n, delta) < eps  # weaker local noise, less privacy
    assert closed_form_epsilon(eps0, n, delta * 10) < eps  # larger delta, smaller epsilon


@pytest.mark.parametrize("eps0", [0.1, 1.0, 3.0])
def test_closed_form_amplifies_for_many_users(eps0):
    eps = closed_form_epsilon(eps0, 10**7, 1e-6)
    assert 0 < eps < eps0
    # Amplification by about sqrt(n): eps ~ 8 tanh(eps0/2) sqrt(e^eps0 log(4/delta) / n).
    approx = 8 * math.tanh(eps0 / 2) * math.sqrt(math.exp(eps0) * math.log(4e6) / 1e7)
    assert eps == pytest.approx(approx, rel=0.05)


# ============================================================================ single message


def rr(eps: float = 1.0, k: int = 3) -> RandomizedResponse:
    return RandomizedResponse(epsilon=eps, num_classes=k)


def rr_pmf(eps: float, k: int, label: int) -> np.ndarray:
    pmf = np.full(k, 1.0 / (math.exp(eps) + k - 1))
    pmf[label] = math.exp(eps) / (math.exp(eps) + k - 1)
    return pmf


def test_randomizer_claims_fmt21_numerical_bound_and_pure_otherwise():
    local = rr(2.0, 4)
    shuffled = ShuffledRandomizer(local=local, num_users=60_000, delta=1e-6)
    assert shuffled.amplified
    # the claim is FMT21's numerical bound, never above the Theorem 3.1 closed form
    assert shuffled.epsilon == numerical_epsilon(2.0, 60_000, 1e-6)
    assert shuffled.epsilon <= closed_form_epsilon(2.0, 60_000, 1e-6) < 2.0
    assert shuffled.delta == 1e-6
    assert shuffled.guarantee.epsilon == shuffled.epsilon
    # One user: nothing to hide among; only delta's slack lowers epsilon0, and barely.
    few = ShuffledRandomizer(local=local, num_users=1, delta=1e-6)
    assert 0.999 * 2.0 < few.epsilon <= 2.0
    # delta = 0 (default): pure epsilon0 by post-processing.
    pure = ShuffledRandomizer(local=local, num_users=60_000)
    assert not pure.amplified and pure.epsilon == 2.0 and pure.delta == 0.0


def test_randomizer_event_and_accounting():
    shuffled = ShuffledRandomizer(local=rr(1.5, 5), num_users=1000, delta=1e-6)
    assert shuffled.event == ShuffledLocalDpEvent(1.5, 1000)
    assert event_guarantee(shuffled.event) == (1.5, 0.0)
    assert PureAccountant().compose(shuffled.event, 4).get_epsilon(0.0) == pytest.approx(6.0)
    assert shuffled.sensitivity.norm is Norm.RECORDS and shuffled.sensitivity.value == 1
    assert shuffled.local_epsilon == 1.5


def test_randomizer_output_is_uniform_permutation_of_reports():
    # eps = 50: the local reports equal the inputs (flip probability 2^-53), so each output is
    # a permutation of the inputs; its law must be uniform over the 3! = 6 orders.
    shuffled = ShuffledRandomizer(local=rr(50.0, 3), num_users=3)
    out = shuffled.sample([0, 1, 2], 30_000, rng=np.random.default_rng(11))
    assert out.shape == (30_000, 3) and out.dtype.kind == "i"
    assert np.all(np.sort(out, axis=1) == [0, 1, 2])
    perms = list(itertools.permutations(range(3)))
    lookup = np.zeros(27, dtype=np.int64)
    for i, p in enumerate(perms):
        lookup[9 * p[0] + 3 * p[1] + p[2]] = i
    counts = np.bincount(lookup[out @ np.array([9, 3, 1])], minlength=6)
    assert chi_square_pvalue(counts, np.full(6, 1 / 6)) > ALPHA  # false-failure rate 1e-4


def test_randomizer_keeps_vector_reports_intact():
    # Vector inputs (one label pair per user; RR randomizes entries independently): the
    # shuffle permutes whole user reports, never entries within a report.
    shuffled = ShuffledRandomizer(local=rr(50.0, 6), num_users=3)
    users = np.array([[0, 1], [2, 3], [4, 5]])
    out = shuffled.sample(users, 500, rng=np.random.default_rng(3))
    assert out.shape == (500, 3, 2)
    for row in out:
        assert sorted(map(tuple, row)) == [(0, 1), (2, 3), (4, 5)]
    assert len({tuple(map(tuple, row)) for row in out}) == 6  # every order occurs


def test_randomizer_histogram_law_is_product_of_local_laws():
    # 3 users with labels (0, 0, 2) under 3-ary RR(eps=1): the histogram of the shuffled
    # multiset has the law of the sum of three independent categorical one-hots.
    eps, k, labels = 1.0, 3, [0, 0, 2]
    shuffled = ShuffledRandomizer(local=rr(eps, k), num_users=3)
    hist = shuffled.histogram(shuffled.sample(labels, 40_000, rng=np.random.default_rng(5)))
    assert hist.shape == (40_000, 3) and np.all(hist.sum(axis=1) == 3)
    outcomes = [h for h in itertools.product(range(4), repeat=3) if sum(h) == 3]
    exact = np.zeros(len(outcomes))
    for combo in itertools.product(range(k), repeat=3):
        prob = math.prod(rr_pmf(eps, k, lab)[c] for lab, c in zip(labels, combo, strict=True))
        exact[outcomes.index(tuple(np.bincount(combo, minlength=k)))] += prob
    observed = np.array([np.sum(np.all(hist == np.array(o), axis=1)) for o in outcomes])
    assert exact.sum() == pytest.approx(1.0)
    assert chi_square_pvalue(observed, exact) > ALPHA  # false-failure rate 1e-4


def test_randomizer_release_and_many_users_vectorised():
    shuffled = ShuffledRandomizer(local=rr(2.0, 4), num_users=20_000, delta=1e-6)
    labels = np.random.default_rng(0).integers(0, 4, 20_000)
    one = shuffled.release(labels, rng=np.random.default_rng(1))
    assert one.shape == (20_000,)
    hist = shuffled.histogram(one)
    assert hist.sum() == 20_000
    # RR's unbiased estimator on the shuffled reports recovers the true histogram roughly
    # (std of each estimate ~ 80 here; 8 std bound: false-failure rate < 1e-12).
    est = shuffled.local.estimate_counts(one)
    assert np.all(np.abs(est - np.bincount(labels, minlength=4)) < 700)


def test_randomizer_neighbours_differ_in_one_user():
    shuffled = ShuffledRandomizer(local=rr(1.0, 3), num_users=7)
    first, second = shuffled.neighbours()
    assert first.shape == second.shape == (7,)
    assert np.sum(first != second) == 1
    shuffled.sample(first, 2, rng=np.random.default_rng(0))
    shuffled.sample(second, 2, rng=np.random.default_rng(0))


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"local": "rr"}, "local"), ({"local": Laplace(epsilon=1.0)}, None),
    ({"local": Gaussian(epsilon=1.0, delta=1e-5)}, "local.delta"),
    ({"num_users": 0}, "num_users"), ({"num_users": 2.0}, "num_users"),
    ({"num_users": True}, "num_users"), ({"delta": -0.1}, "delta"), ({"delta": 1.0}, "delta"),
    ({"delta": math.nan}, "delta"), ({"delta": "0"}, "delta"),
])
def test_randomizer_rejects_bad_parameters(kwargs, name):
    args = {"local": rr(), "num_users": 10, "delta": 1e-6} | kwargs
    if name is None:  # a pure scalar mechanism is an acceptable local randomizer
        ShuffledRandomizer(**args)
        return
    with pytest.raises(ValueError, match=name):
        ShuffledRandomizer(**args)


def test_randomizer_rejects_bad_inputs():
    shuffled = ShuffledRandomizer(local=rr(1.0, 3), num_users=4)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="num_users=4"):
        shuffled.sample([0, 1, 2], 1, rng=rng)
    with pytest.raises(ValueError, match="sequence"):
        shuffled.sample(3, 1, rng=rng)
    with pytest.raises(ValueError, match=r"value\[2\]"):
        shuffled.sample([0, 1, 3, 0], 1, rng=rng)
    with pytest.raises(ValueError, match=r"value\[0\].*float"):
        shuffled.sample([0, 0.5, 1, 0], 1, rng=rng)
    with pytest.raises(ValueError, match="n"):
        shuffled.sample([0, 1, 2, 0], 0, rng=rng)
    with pytest.raises(ValueError, match="rng"):
        shuffled.sample([0, 1, 2, 0], 1, rng=None)
    # histogram validation
    with pytest.raises(ValueError, match="num_users=4"):
        shuffled.histogram(np.zeros((2, 3), dtype=int))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        shuffled.histogram(np.array([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="integer"):
        shuffled.histogram(np.zeros(4))
    with pytest.raises(ValueError, match="num_categories"):
        shuffled.histogram(np.zeros(4, dtype=int), num_categories=0)
    laplace = ShuffledRandomizer(local=Laplace(epsilon=1.0), num_users=4)
    with pytest.raises(ValueError, match="num_categories"):
        laplace.histogram(np.zeros(4, dtype=int))
    assert laplace.sample([0.0, 1.0, 2.0, 3.0], 3, rng=rng).shape == (3, 4)


# ============================================================================ multi message


def brute_force_delta(epsilon: float, a: float, r: float, b: float, size: int = 90) -> float:
    """delta(eps) of (Q1 x Q0 || Q0 x Q1) by summing over all pairs of raw (P, M) outcomes.

    Independent of the implementation: no sufficient statistic, no sorting; the laws of one
    bin's (P, M) are built by direct summation over the flooding count on a size x size grid.
    """
    k = np.arange(size)
    geo = (1 - a) * a**k
    flood = stats.nbinom.pmf(k, r, 1 - b)
    q0 = np.zeros((size, size))
    for f in range(size):  # Q0(p, m) = sum_f F(f) g(p - f) g(m - f)
        q0[f:, f:] += flood[f] * np.outer(geo[: size - f], geo[: size - f])
    q1 = np.zeros_like(q0)
    q1[1:] = q0[:-1]
    u_a, l_a = q1.ravel(), q0.ravel()  # the bin that gains the user
    u_b, l_b = q0.ravel(), q1.ravel()  # the bin that loses it
    total, e = 0.0, math.exp(epsilon)
    for start in range(0, u_a.size, 1000):
        block = slice(start, start + 1000)
        diff = np.outer(u_a[block], u_b) - e * np.outer(l_a[block], l_b)
        total += float(np.maximum(diff, 0.0).sum())
    return total


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 2.0])
def test_histogram_delta_matches_brute_force(epsilon):
    a, r, b = 0.5, 1.5, 0.6  # tails beyond the 90 x 90 grid are below 1e-19
    fast = shuffled_histogram_delta(epsilon, noise_parameter=-math.log(a), flood_shape=r,
                                    flood_probability=b, tail_bound=1e-15)
    slow = brute_force_delta(epsilon, a, r, b)
    assert fast == pytest.approx(slow, rel=1e-9, abs=1e-13)
    assert slow > 1e-3  # a non-trivial comparison


def test_histogram_delta_limits():
    eps_c = 0.5
    kwargs = {"noise_parameter": eps_c, "flood_probability": 0.9}
    # Without flooding the +1 counts betray the data: a large delta even at a large epsilon.
    assert shuffled_histogram_delta(3.0, flood_shape=1e-4, **kwargs) > 0.1
    # Heavy flooding: delta vanishes above 2 eps_c and not below (the central DLap part).
    heavy = shuffled_histogram_delta(2 * eps_c + 0.2, flood_shape=300.0, **kwargs)
    assert heavy < 1e-6
    assert shuffled_histogram_delta(2 * eps_c - 0.2, flood_shape=300.0, **kwargs) > 0.01
    # delta decreases with epsilon and with flooding.
    deltas = [shuffled_histogram_delta(e, flood_shape=20.0, **kwargs) for e in (0.5, 1, 1.5, 2)]
    assert all(x > y for x, y in itertools.pairwise(deltas))
    more = shuffled_histogram_delta(1.2, flood_shape=40.0, **kwargs)
    assert more < shuffled_histogram_delta(1.2, flood_shape=20.0, **kwargs)
    # Huge epsilon: only outcomes impossible under the neighbour remain (P(F = 0)-sized).
    huge = shuffled_histogram_delta(1e4, flood_shape=20.0, **kwargs)
    assert 0.0 < huge < 1e-6
    assert shuffled_histogram_delta(0.0, flood_shape=20.0, **kwargs) < 1.0


@settings(derandomize=True, max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(eps=st.floats(0.2, 8.0), log_delta=st.floats(-12.0, -3.0),
       fraction=st.floats(0.5, 0.95))
def test_histogram_calibration_meets_target(eps, log_delta, fraction):
    delta = 10.0**log_delta
    eps_c, r, b = calibrate_shuffled_histogram(eps, delta, fraction)
    assert eps_c == pytest.approx(fraction * eps / 2)
    achieved = shuffled_histogram_delta(eps, noise_parameter=eps_c, flood_shape=r,
                                        flood_probability=b, tail_bound=delta * 1e-4)
    assert achieved <= delta
    # The calibration is not wasteful: 1% less flooding no longer meets the target.
    less = shuffled_histogram_delta(eps, noise_parameter=eps_c, flood_shape=r / 1.01,
                                    flood_probability=b, tail_bound=delta * 1e-4)
    assert less > delta


def hist(eps: float = 1.0, delta: float = 1e-6, users: int = 40, bins: int = 5,
         **kw: float) -> ShuffledHistogram:
    return ShuffledHistogram(epsilon=eps, delta=delta, num_users=users, num_bins=bins, **kw)


def test_histogram_claim_event_and_accounting():
    mech = hist(1.0, 1e-6, 40, 5)
    assert mech.guarantee.epsilon == 1.0 and mech.guarantee.delta == 1e-6
    assert mech.delta_at(1.0) <= 1e-6
    assert mech.event == ShuffledHistogramDpEvent(1.0, 1e-6, 40, 5)
    assert event_guarantee(mech.event) == (1.0, 1e-6)
    acc = PureAccountant().compose(mech.event, 3)
    assert acc.get_epsilon(3e-6) == pytest.approx(3.0)
    assert mech.sensitivity.value == 2 and mech.sensitivity.norm is Norm.L1
    assert mech.noise_parameter == pytest.approx(0.45)
    assert mech.noise_variance == pytest.approx(2 * math.exp(-0.45) / (1 - math.exp(-0.45))**2)
    assert 1.0 < mech.expected_messages_per_user < 1e4


def test_histogram_noise_is_exact_discrete_laplace_and_unbiased():
    mech = hist(1.0, 1e-6, 40, 5)
    rng = np.random.default_rng(2024)
    data = rng.integers(0, 5, 40)
    views = mech.sample(data, 6_000, rng=rng)
    assert views.shape == (6_000, 5, 2) and views.dtype == np.int64
    counts = np.bincount(data, minlength=5)
    noise = (mech.estimate(views) - counts).ravel()
    a = math.exp(-mech.noise_parameter)
    support = np.arange(-60, 61)
    pmf = (1 - a) / (1 + a) * a ** np.abs(support)
    assert np.all(np.abs(noise) <= 60)  # P(|DLap| > 60) < 1e-10 per draw
    observed = np.bincount(noise + 60, minlength=support.size)
    assert chi_square_pvalue(observed, pmf) > ALPHA  # false-failure rate 1e-4
    # Unbiased: every bin's mean error is within 4.5 standard errors (two-sided 7e-6 per bin).
    err = mech.estimate(views).mean(axis=0) - counts
    assert np.all(np.abs(err) < 4.5 * math.sqrt(mech.noise_variance / 6_000))


def sufficient_statistic_pmf(mech: ShuffledHistogram, size: int) -> np.ndarray:
    """Exact law under Q0 of T = min-side statistic: cells 0..size-1, then 'T >= size', 'top'."""
    a = math.exp(-mech.noise_parameter)
    flood = stats.nbinom.pmf(np.arange(size), mech.flood_shape, 1 - mech.flood_probability)
    h = np.zeros(size)
    acc = 0.0
    for k in range(size):
        acc = a * a * acc + flood[k]
        h[k] = acc
    cells = (1 - a) * h
    top = a / (1 + a)
    return np.concatenate([cells, [1.0 - top - cells.sum(), top]])


def statistic_of(views: np.ndarray, counts: np.ndarray, size: int) -> np.ndarray:
    plus = views[..., 0] - counts
    minus = views[..., 1]
    t = np.where(plus <= minus, np.minimum(plus, size), size + 1)
    return t.ravel()


@pytest.mark.parametrize("method", ["sample", "protocol_sample"])
def test_histogram_full_view_follows_the_accounted_law(method):
    # The accounting treats T (= #plus - count when #plus - count <= #minus, else 'top') as a
    # sufficient statistic of each bin's view, with an exact law; the sampled views must follow
    # it (links the accounted model to the real per-user protocol).
    mech = hist(2.0, 1e-5, 30, 4)
    rng = np.random.default_rng(77)
    data = rng.integers(0, 4, 30)
    views = getattr(mech, method)(data, 5_000, rng=rng)
    size = int(stats.nbinom.ppf(0.999, mech.flood_shape, 1 - mech.flood_probability)) + 10
    t = statistic_of(views, np.bincount(data, minlength=4), size)
    observed = np.bincount(t, minlength=size + 2)
    assert chi_square_pvalue(observed, sufficient_statistic_pmf(mech, size)) > ALPHA  # 1e-4
    # The minus counts: M = Y + F, Y geometric, F negative binomial (convolution).
    a = math.exp(-mech.noise_parameter)
    grid = np.arange(size)
    m_pmf = np.convolve((1 - a) * a**grid, stats.nbinom.pmf(grid, mech.flood_shape,
                                                            1 - mech.flood_probability))[:size]
    m_pmf = np.concatenate([m_pmf, [1 - m_pmf.sum()]])
    m_obs = np.bincount(np.minimum(views[..., 1].ravel(), size), minlength=size + 1)
    assert chi_square_pvalue(m_obs, m_pmf) > ALPHA  # false-failure rate 1e-4


def test_histogram_protocol_messages():
    mech = hist(1.0, 1e-6, 10, 3)
    rng = np.random.default_rng(9)
    msgs = mech.user_messages(2, rng=rng)
    assert msgs.ndim == 2 and msgs.shape[1] == 2
    assert tuple(msgs[0]) == (2, 1)  # the data message
    assert set(np.unique(msgs[:, 1])) <= {-1, 1} and np.all((msgs[:, 0] >= 0) & (msgs[:, 0] < 3))
    # Summing many users' messages reproduces a view (per-(bin, sign) counts).
    data = np.array([0, 1, 2, 2, 1, 0, 0, 1, 2, 2])
    all_msgs = np.concatenate([mech.user_messages(int(x), rng=rng) for x in data])
    view = np.stack([np.bincount(all_msgs[all_msgs[:, 1] == s, 0], minlength=3)
                     for s in (1, -1)], axis=1)
    assert np.all(view[:, 0] - view[:, 1] - np.bincount(data, minlength=3)
                  == mech.estimate(view) - np.bincount(data, minlength=3))
    # shuffled_messages is the multiset of a view, in random order.
    one = mech.release(data, rng=rng)
    assert one.shape == (3, 2)
    shuffled = mech.shuffled_messages(one, rng=rng)
    assert shuffled.shape == (one.sum(), 2)
    for j in range(3):
        assert np.sum((shuffled[:, 0] == j) & (shuffled[:, 1] == 1)) == one[j, 0]
        assert np.sum((shuffled[:, 0] == j) & (shuffled[:, 1] == -1)) == one[j, 1]
    again = mech.shuffled_messages(one, rng=rng)
    assert shuffled.shape[0] < 3 or not np.array_equal(shuffled, again)


def test_histogram_sample_blocks_over_users():
    # More users x bins than one block: the per-user shares are drawn in user chunks.
    mech = hist(1.0, 1e-6, 2_000_000, 3)
    rng = np.random.default_rng(1)
    data = np.zeros(2_000_000, dtype=np.int64)
    view = mech.release(data, rng=rng)
    assert view.shape == (3, 2)
    est = mech.estimate(view)
    assert abs(est[0] - 2_000_000) < 60 and np.all(np.abs(est[1:]) < 60)  # P(|DLap|>60) < 1e-10


def test_histogram_neighbours():
    mech = hist(1.0, 1e-6, 6, 4)
    first, second = mech.neighbours()
    assert first.shape == second.shape == (6,)
    assert np.sum(first != second) == 1
    mech.sample(second, 2, rng=np.random.default_rng(0))


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": math.nan}, "epsilon"), ({"epsilon": math.inf}, "epsilon"),
    ({"epsilon": 1e-3}, "epsilon"), ({"epsilon": 500.0}, "epsilon"),
    ({"epsilon": "1"}, "epsilon"), ({"delta": 0.0}, "delta"), ({"delta": 1.0}, "delta"),
    ({"delta": -1e-6}, "delta"), ({"delta": math.nan}, "delta"), ({"delta": 1e-20}, "delta"),
    ({"num_users": 0}, "num_users"), ({"num_users": 3.0}, "num_users"),
    ({"num_users": True}, "num_users"), ({"num_bins": 1}, "num_bins"),
    ({"num_bins": 2.5}, "num_bins"), ({"central_fraction": 0.0}, "central_fraction"),
    ({"central_fraction": 1.0}, "central_fraction"),
    ({"central_fraction": math.nan}, "central_fraction"),
])
def test_histogram_rejects_bad_parameters(kwargs, name):
    args = {"epsilon": 1.0, "delta": 1e-6, "num_users": 10, "num_bins": 3} | kwargs
    with pytest.raises(ValueError, match=name):
        ShuffledHistogram(**args)


def test_histogram_rejects_bad_inputs():
    mech = hist(1.0, 1e-6, 4, 3)
    rng = np.random.default_rng(0)
    for bad, pattern in [([0, 1, 2], r"\(4,\)"), ([0, 1, 2, 3], r"\[0, 3\)"),
                         ([0, 1, -1, 0], r"\[0, 3\)"), ([0.0, 1.0, 2.0, 0.0], "integer"),
                         ([[0, 1, 2, 0]], r"\(4,\)"), ("abcd", "integer")]:
        with pytest.raises(ValueError, match=pattern):
            mech.sample(bad, 1, rng=rng)
        with pytest.raises(ValueError, match=pattern):
            mech.protocol_sample(bad, 1, rng=rng)
    with pytest.raises(ValueError, match="num_bins=3"):
        mech.estimate(np.zeros((4, 2), dtype=int))
    with pytest.raises(ValueError, match="integer"):
        mech.estimate(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="non-negative"):
        mech.estimate(-np.ones((3, 2), dtype=int))
    with pytest.raises(ValueError, match="bin_index"):
        mech.user_messages(3, rng=rng)
    with pytest.raises(ValueError, match="rng"):
        mech.user_messages(0, rng=1)
    with pytest.raises(ValueError, match="one view"):
        mech.shuffled_messages(np.zeros((2, 3, 2), dtype=int), rng=rng)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"epsilon": -1.0}, "epsilon"), ({"epsilon": math.nan}, "epsilon"),
    ({"noise_parameter": 0.0}, "noise_parameter"), ({"flood_shape": -1.0}, "flood_shape"),
    ({"flood_probability": 1.0}, "flood_probability"),
    ({"flood_probability": 0.0}, "flood_probability"), ({"tail_bound": 0.1}, "tail_bound"),
    ({"tail_bound": 0.0}, "tail_bound"),
])
def test_histogram_delta_rejects_bad_parameters(kwargs, name):
    args = {"epsilon": 1.0, "noise_parameter": 0.5, "flood_shape": 10.0,
            "flood_probability": 0.9} | kwargs
    eps = args.pop("epsilon")
    with pytest.raises(ValueError, match=name):
        shuffled_histogram_delta(eps, **args)


@pytest.mark.parametrize("delta", [0.01, 0.5, 0.999])
def test_shuffler_refuses_a_delta_of_one_over_the_users_or_more(delta):
    # (0, 1/n)-DP already allows publishing one user's input: an amplified claim of epsilon 0
    # at delta 0.5 (what 100 users used to get) means nothing
    with pytest.raises(ValueError, match=r"delta must be below 1/num_users = 0.01"):
        ShuffledRandomizer(local=RandomizedResponse(epsilon=1.0, num_classes=3),
                           num_users=100, delta=delta)
    ok = ShuffledRandomizer(local=RandomizedResponse(epsilon=1.0, num_classes=3),
                            num_users=100, delta=0.009)
    assert 0 < ok.epsilon < 1.0
