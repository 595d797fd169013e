"""PATE noisy-argmax aggregators: LNMax (Laplace) and GNMax (Gaussian).

Statistical tests use fixed seeds; each states its false-failure rate (the probability, over
seeds, that a correct implementation fails it). Exact output probabilities come from
``output_pmf`` (quadrature over the value of the largest noisy count), itself checked against
closed forms for two classes and against symmetry. Those closed forms take the noise from the
published formulas computed in the tests (Laplace b = 2/eps; Balle-Wang sigma with sensitivity
sqrt(2), by brentq in ``reference_formulas``), never from ``mech.scale`` / ``mech.sigma``, so
a mechanism whose attribute and sampler are wrong by the same factor fails them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import reference_formulas as ref
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats
from stats_helpers import chi_square_pvalue

from dpkd_audit._math.privacy import analytic_gaussian_delta
from dpkd_audit.accountants.pure import PureAccountant, event_guarantee
from dpkd_audit.events import GaussianNoisyMaxDpEvent, LaplaceNoisyMaxDpEvent
from dpkd_audit.mechanisms import pate
from dpkd_audit.mechanisms.base import Norm
from dpkd_audit.mechanisms.pate import GaussianNoisyMax, LaplaceNoisyMax

ALPHA = 1e-4  # significance of every chi-square test below: false-failure rate 1e-4 per test


def laplace_difference_sf(x: float, b: float) -> float:
    """P[Z_0 - Z_1 > x] for iid Laplace(b), x >= 0: (1 + x/(2b)) e^{-x/b} / 2 (closed form)."""
    return 0.5 * (1.0 + x / (2.0 * b)) * math.exp(-x / b)


# ------------------------------------------------------------------------------- validation
BAD_EPSILONS = [0, 0.0, -1.0, math.nan, math.inf, "1", None, True]


@pytest.mark.parametrize("eps", BAD_EPSILONS)
def test_lnmax_rejects_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        LaplaceNoisyMax(epsilon=eps, num_classes=10)


@pytest.mark.parametrize("eps", BAD_EPSILONS)
def test_gnmax_rejects_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        GaussianNoisyMax(epsilon=eps, delta=1e-5, num_classes=10)


@pytest.mark.parametrize("delta", [0, 0.0, 1, 1.0, -1e-5, 1.5, math.nan, math.inf, "1e-5"])
def test_gnmax_rejects_bad_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        GaussianNoisyMax(epsilon=1.0, delta=delta, num_classes=10)


@pytest.mark.parametrize("k", [1, 0, -3, 2.0, 10.0, "10", None, True])
@pytest.mark.parametrize("cls", ["lnmax", "gnmax"])
def test_rejects_bad_num_classes(cls, k):
    with pytest.raises(ValueError, match="num_classes"):
        if cls == "lnmax":
            LaplaceNoisyMax(epsilon=1.0, num_classes=k)
        else:
            GaussianNoisyMax(epsilon=1.0, delta=1e-5, num_classes=k)


@pytest.mark.parametrize("scale", [0, -40.0, math.nan, math.inf, "40"])
def test_from_noise_scale_rejects_bad_scale(scale):
    with pytest.raises(ValueError, match="noise_scale"):
        LaplaceNoisyMax.from_noise_scale(scale, 10)


@pytest.mark.parametrize("sigma", [0, -1.0, math.nan, math.inf, "40"])
def test_from_sigma_rejects_bad_sigma(sigma):
    with pytest.raises(ValueError, match="sigma"):
        GaussianNoisyMax.from_sigma(sigma, 10, 1e-5)


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.1, math.nan])
def test_from_sigma_rejects_bad_delta(delta):
    with pytest.raises(ValueError, match="delta"):
        GaussianNoisyMax.from_sigma(40.0, 10, delta)


def test_from_sigma_rejects_noise_beyond_resolution():
    with pytest.raises(ValueError, match="sigma"):
        GaussianNoisyMax.from_sigma(1e9, 10, 0.5)


MECHS = [LaplaceNoisyMax(epsilon=1.0, num_classes=4),
         GaussianNoisyMax(epsilon=1.0, delta=1e-5, num_classes=4)]


@pytest.mark.parametrize("mech", MECHS, ids=["lnmax", "gnmax"])
@pytest.mark.parametrize("votes", [
    [1, 2, 3],                       # wrong length
    [1, 2, 3, 4, 5],
    [[1, 2, 3, 4]],                  # 2-d
    5,                               # scalar
    [1, -1, 3, 4],                   # negative
    [1.5, 2, 3, 4],                  # non-integral
    [math.nan, 2, 3, 4],
    [math.inf, 2, 3, 4],
    ["a", "b", "c", "d"],
    [True, False, True, False],      # booleans are not counts
])
def test_rejects_bad_votes(mech, votes):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="votes"):
        mech.sample(votes, 3, rng=rng)
    with pytest.raises(ValueError, match="votes"):
        mech.release(votes, rng=rng)
    with pytest.raises(ValueError, match="votes"):
        mech.event_with_votes(votes)
    with pytest.raises(ValueError, match="votes"):
        mech.output_pmf(votes)


@pytest.mark.parametrize("mech", MECHS, ids=["lnmax", "gnmax"])
@pytest.mark.parametrize("matrix", [
    [1, 2, 3, 4],                    # 1-d
    np.zeros((0, 4), dtype=int),     # no rows
    np.zeros((3, 5), dtype=int),     # wrong k
    np.zeros((2, 2, 4), dtype=int),  # 3-d
    [[1, 2, 3, -4]],
    [[1, 2, 3, 0.5]],
])
def test_aggregate_rejects_bad_vote_matrix(mech, matrix):
    with pytest.raises(ValueError, match="vote_matrix"):
        mech.aggregate(matrix, rng=np.random.default_rng(0))


@pytest.mark.parametrize("mech", MECHS, ids=["lnmax", "gnmax"])
def test_rejects_bad_rng_n_and_lead(mech):
    votes = [3, 2, 1, 0]
    with pytest.raises(ValueError, match="rng"):
        mech.sample(votes, 3, rng=np.random.RandomState(0))
    with pytest.raises(ValueError, match="rng"):
        mech.aggregate([votes], rng=0)
    for n in (0, -1, 2.0):
        with pytest.raises(ValueError, match="n must"):
            mech.sample(votes, n, rng=np.random.default_rng(0))
    for lead in (1, 0, 2.5, "3"):
        with pytest.raises(ValueError, match="lead"):
            mech.neighbours(lead=lead)


def test_accepts_integral_floats_and_numpy_integers():
    mech = LaplaceNoisyMax(epsilon=1.0, num_classes=3)
    rng = np.random.default_rng(1)
    assert mech.sample(np.array([3.0, 0.0, 1.0]), 2, rng=rng).shape == (2,)
    assert mech.sample(np.array([3, 0, 1], dtype=np.uint8), 2, rng=rng).shape == (2,)
    assert mech.event_with_votes(np.array([3.0, 0.0, 1.0])).votes == (3, 0, 1)


# --------------------------------------------------------------------- parameters and events
def test_lnmax_noise_scale_and_epsilon_relation():
    mech = LaplaceNoisyMax.from_noise_scale(40, 10)  # DGD: Lap(2/eps0) with 2/eps0 = 40
    assert mech.epsilon == pytest.approx(0.05, rel=1e-15)
    assert mech.scale == pytest.approx(40.0, rel=1e-15)
    assert mech.delta == 0.0 and mech.guarantee.is_pure
    event = mech.event
    assert isinstance(event, LaplaceNoisyMaxDpEvent)
    assert event.votes is None and event.num_classes == 10
    assert event.noise_scale == pytest.approx(40.0, rel=1e-15)
    assert event_guarantee(event) == pytest.approx((0.05, 0.0), rel=1e-15)
    assert LaplaceNoisyMax(epsilon=0.5, num_classes=3).scale == pytest.approx(4.0)
    assert mech.sensitivity.value == 2 and mech.sensitivity.norm is Norm.L1
    # 400 queries, basic composition: 20 (DGD states 5.80 with advanced composition).
    acc = PureAccountant().compose(event, count=400)
    assert acc.get_epsilon(0.0) == pytest.approx(20.0)


def test_lnmax_event_with_votes():
    mech = LaplaceNoisyMax(epsilon=0.05, num_classes=4)
    event = mech.event_with_votes([240, 5, 3, 2])
    assert event.votes == (240, 5, 3, 2)
    assert event.noise_scale == mech.scale and event.num_classes == 4
    assert event.guarantee() == mech.event.guarantee()


def test_gnmax_calibration_and_event():
    mech = GaussianNoisyMax(epsilon=1.0, delta=1e-5, num_classes=10)
    want = ref.analytic_gaussian_sigma(1.0, 1e-5, math.sqrt(2))  # Balle-Wang, by brentq
    assert want * (1 - 1e-12) <= mech.sigma <= want * (1 + 1e-9)
    # The claimed guarantee holds for sigma with L2 sensitivity sqrt(2) (Balle-Wang Thm 8) and is
    # tight: 0.1% less noise would violate it.
    assert analytic_gaussian_delta(1.0, mech.sigma, math.sqrt(2)) <= 1e-5 * (1 + 1e-9)
    assert analytic_gaussian_delta(1.0, 0.999 * mech.sigma, math.sqrt(2)) > 1e-5
    assert mech.sensitivity.value == pytest.approx(math.sqrt(2))
    assert mech.sensitivity.norm is Norm.L2
    event = mech.event
    assert isinstance(event, GaussianNoisyMaxDpEvent) and event.votes is None
    assert event.sigma == mech.sigma and event_guarantee(event) == (1.0, 1e-5)
    assert mech.event_with_votes([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]).votes == tuple(range(1, 11))
    assert str(mech.guarantee) == "(1, 1e-05)-DP"


@pytest.mark.parametrize("sigma", [0.5, 5.0, 40.0, 200.0])
def test_gnmax_from_sigma_round_trip(sigma):
    mech = GaussianNoisyMax.from_sigma(sigma, 10, 1e-5)
    assert mech.sigma == pytest.approx(sigma, rel=1e-9)
    # epsilon is the smallest at which sigma is enough: delta(eps) ~ target.
    assert analytic_gaussian_delta(mech.epsilon, sigma, math.sqrt(2)) <= 1e-5 * (1 + 1e-9)
    assert analytic_gaussian_delta(mech.epsilon * (1 - 1e-6), sigma, math.sqrt(2)) > 1e-5


# --------------------------------------------------------------------- exact output pmfs
@pytest.mark.parametrize("eps,gap", [(1.0, 0), (1.0, 3), (0.3, 7), (2.0, 11)])
def test_lnmax_pmf_two_classes_closed_form(eps, gap):
    mech = LaplaceNoisyMax(epsilon=eps, num_classes=2)
    pmf = mech.output_pmf([0, gap])
    b = 2.0 / eps
    assert pmf[0] == pytest.approx(laplace_difference_sf(gap, b), rel=1e-8)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("eps,gap", [(1.0, 0), (1.0, 3), (0.3, 20), (4.0, 2)])
def test_gnmax_pmf_two_classes_closed_form(eps, gap):
    mech = GaussianNoisyMax(epsilon=eps, delta=1e-5, num_classes=2)
    pmf = mech.output_pmf([gap, 0])
    sigma = ref.analytic_gaussian_sigma(eps, 1e-5, math.sqrt(2))  # not mech.sigma
    # Z_0 - Z_1 ~ N(0, 2 sigma^2): P[label 1] = P[Z_1 - Z_0 > gap].
    assert pmf[1] == pytest.approx(stats.norm.sf(gap / (math.sqrt(2) * sigma)), rel=1e-8)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("mech", [LaplaceNoisyMax(epsilon=0.7, num_classes=5),
                                  GaussianNoisyMax(epsilon=0.7, delta=1e-6, num_classes=5)],
                         ids=["lnmax", "gnmax"])
def test_pmf_symmetry_and_normalisation(mech):
    assert mech.output_pmf([4, 4, 4, 4, 4]) == pytest.approx(np.full(5, 0.2), abs=1e-9)
    pmf = mech.output_pmf([9, 2, 2, 0, 7])
    assert pmf.sum() == pytest.approx(1.0, abs=1e-9)
    assert pmf[1] == pytest.approx(pmf[2], rel=1e-9)
    assert pmf[0] > pmf[4] > pmf[1] > pmf[3] > 0


def test_pmf_dgd_scale_histogram():
    # 250 teachers, scale 40 (DGD): the exact pmf is normalised and favours the plurality.
    mech = LaplaceNoisyMax.from_noise_scale(40, 10)
    pmf = mech.output_pmf([200, 30, 10, 5, 5, 0, 0, 0, 0, 0])
    assert pmf.sum() == pytest.approx(1.0, abs=1e-9)
    assert 0.9 < pmf[0] < 1.0 and np.all(pmf > 0)


@pytest.mark.parametrize("mech,votes", [
    (LaplaceNoisyMax(epsilon=1.0, num_classes=4), [5, 3, 3, 0]),
    (LaplaceNoisyMax(epsilon=0.1, num_classes=4), [30, 20, 25, 0]),
    (GaussianNoisyMax(epsilon=1.0, delta=1e-5, num_classes=4), [12, 9, 9, 2]),
    (GaussianNoisyMax.from_sigma(3.0, 3, 1e-5), [5, 4, 0]),
], ids=["lnmax-eps1", "lnmax-eps0.1", "gnmax", "gnmax-sigma3"])
def test_sample_matches_exact_pmf(mech, votes):
    rng = np.random.default_rng(20240601)
    samples = mech.sample(votes, 200_000, rng=rng)
    assert samples.shape == (200_000,) and samples.dtype == np.int64
    # False-failure rate: ALPHA = 1e-4 (chi-square goodness of fit, fixed seed).
    assert chi_square_pvalue(samples, mech.output_pmf(votes)) > ALPHA


@pytest.mark.parametrize("mech", MECHS, ids=["lnmax", "gnmax"])
def test_aggregate_equals_sample_in_distribution(mech):
    rng = np.random.default_rng(7)
    a, b = np.array([5, 3, 3, 0]), np.array([0, 1, 6, 6])
    matrix = np.empty((200_000, 4), dtype=np.int64)
    matrix[0::2], matrix[1::2] = a, b  # interleaved rows: every row is its own query
    labels = mech.aggregate(matrix, rng=rng)
    assert labels.shape == (200_000,) and labels.dtype == np.int64
    # False-failure rate: 2 tests at ALPHA = 1e-4 each.
    assert chi_square_pvalue(labels[0::2], mech.output_pmf(a)) > ALPHA
    assert chi_square_pvalue(labels[1::2], mech.output_pmf(b)) > ALPHA


def test_blocked_sampling_is_still_exact(monkeypatch):
    monkeypatch.setattr(pate, "_BLOCK_ENTRIES", 1000)  # forces 200 blocks
    mech = LaplaceNoisyMax(epsilon=1.0, num_classes=4)
    votes = [5, 3, 3, 0]
    samples = mech.sample(votes, 50_000, rng=np.random.default_rng(3))
    labels = mech.aggregate(np.tile(votes, (50_000, 1)), rng=np.random.default_rng(4))
    # False-failure rate: 2 tests at ALPHA = 1e-4 each.
    assert chi_square_pvalue(samples, mech.output_pmf(votes)) > ALPHA
    assert chi_square_pvalue(labels, mech.output_pmf(votes)) > ALPHA


def test_release_returns_python_int():
    mech = LaplaceNoisyMax(epsilon=1.0, num_classes=3)
    out = mech.release([100, 0, 0], rng=np.random.default_rng(0))
    assert type(out) is int and out == 0  # a 100-vote lead at scale 2 never loses


# --------------------------------------------------------------------- privacy of the pmfs
def moved_vote(votes: list[int], src: int, dst: int) -> np.ndarray:
    out = np.array(votes)
    out[src] -= 1
    out[dst] += 1
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(votes=st.lists(st.integers(0, 12), min_size=3, max_size=3).filter(lambda v: sum(v) > 0),
       eps=st.floats(0.2, 3.0), data=st.data())
def test_lnmax_exact_ratio_bounded_by_exp_eps(votes, eps, data):
    src = data.draw(st.sampled_from([i for i, v in enumerate(votes) if v > 0]))
    dst = data.draw(st.sampled_from([i for i in range(3) if i != src]))
    mech = LaplaceNoisyMax(epsilon=eps, num_classes=3)
    p, q = mech.output_pmf(votes), mech.output_pmf(moved_vote(votes, src, dst))
    ratios = np.concatenate([p / q, q / p])
    assert ratios.max() <= math.exp(eps) * (1 + 1e-7)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(votes=st.lists(st.integers(0, 30), min_size=3, max_size=3).filter(lambda v: sum(v) > 0),
       eps=st.floats(0.2, 3.0), data=st.data())
def test_gnmax_exact_delta_bounded(votes, eps, data):
    src = data.draw(st.sampled_from([i for i, v in enumerate(votes) if v > 0]))
    dst = data.draw(st.sampled_from([i for i in range(3) if i != src]))
    mech = GaussianNoisyMax(epsilon=eps, delta=1e-3, num_classes=3)
    p, q = mech.output_pmf(votes), mech.output_pmf(moved_vote(votes, src, dst))
    # Exact delta of a discrete output at eps: sum_o max(0, P(o) - e^eps Q(o)), both directions.
    for x, y in ((p, q), (q, p)):
        assert np.maximum(0.0, x - math.exp(eps) * y).sum() <= 1e-3 * (1 + 1e-6) + 1e-12


@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 3.0, 4.0])
def test_lnmax_neighbours_loss(eps):
    mech = LaplaceNoisyMax(epsilon=eps, num_classes=2)
    h, h2 = mech.neighbours()
    b, lead = mech.scale, int(h[1])
    assert lead == max(2, math.ceil(4 * b))
    assert h.sum() == h2.sum() and np.abs(h - h2).sum() == 2  # one vote moved
    p, q = mech.output_pmf(h), mech.output_pmf(h2)
    loss = math.log(q[0] / p[0])
    assert loss == pytest.approx(eps + math.log((2 * b + lead - 2) / (2 * b + lead)), rel=1e-7)
    assert 0.72 * eps < loss <= eps
    assert 0.01 < p[0] < 0.05  # the distinguishing label is not rare


def test_lnmax_neighbours_many_classes_and_custom_lead():
    mech = LaplaceNoisyMax(epsilon=1.0, num_classes=6)
    h, h2 = mech.neighbours(lead=30)
    assert h.tolist() == [0, 30, 0, 0, 0, 0] and h2.tolist() == [1, 29, 0, 0, 0, 0]
    p, q = mech.output_pmf(h), mech.output_pmf(h2)
    loss = math.log(q[0] / p[0])
    assert 0.9 < loss <= 1.0  # larger lead: loss closer to epsilon, never above


@pytest.mark.parametrize("eps,delta", [(1.0, 1e-5), (0.5, 1e-3), (3.0, 1e-6)])
def test_gnmax_neighbours_attain_claimed_delta(eps, delta):
    mech = GaussianNoisyMax(epsilon=eps, delta=delta, num_classes=2)
    h, h2 = mech.neighbours()
    assert int(h[1]) == max(2, round(eps * mech.sigma**2 + 1))
    p, q = mech.output_pmf(h), mech.output_pmf(h2)
    attained = q[0] - math.exp(eps) * p[0]
    assert attained <= delta * (1 + 1e-6)
    assert attained >= 0.8 * delta  # the data-independent guarantee is tight for two classes
