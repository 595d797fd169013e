"""Tests of the reverse k-NN mechanisms (dpkd_audit.mechanisms.rknn).

Statistical tests use fixed seeds; each states the false-failure rate it would have under fresh
randomness (1e-4 per goodness-of-fit test, about 3e-4 per unbiasedness check), so with the
fixed seeds a failure signals a real change in the code, not bad luck. Tests that compare with
a deliberately wrong distribution show that the statistical checks have power.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest
from dp_accounting import dp_event as dpe
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpkd_audit.accountants.pure import event_guarantee
from dpkd_audit.errors import BudgetExceededError
from dpkd_audit.events import BitRandomizedResponseDpEvent, CollisionDpEvent
from dpkd_audit.ledger import Ledger
from dpkd_audit.mechanisms import rknn
from dpkd_audit.mechanisms.base import Norm
from dpkd_audit.mechanisms.rknn import (
    COLLISION_REPORT_DTYPE,
    BitRandomizedResponse,
    Collision,
    ReverseKnnCountRelease,
    answer_to_index_set,
    collision_hash,
    index_set_to_answer,
    noisy_argmax,
    reverse_knn_answers,
    reverse_knn_counts,
)

ALPHA = 1e-4  # significance of every goodness-of-fit test below (false-failure rate 1e-4 each)


def chi2_pvalue(observed: np.ndarray, probs: np.ndarray) -> float:
    """Chi-square goodness of fit; cells with expected count < 5 are pooled into one cell."""
    observed = np.asarray(observed, dtype=np.float64)
    expected = np.asarray(probs, dtype=np.float64) * observed.sum()
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    exp *= obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


def random_population(rng, n, k, s, y, r=1):
    neighbours = np.argsort(rng.random((n, s)), axis=1)[:, :k]
    labels = np.argsort(rng.random((n, y)), axis=1)[:, :r] if r > 1 else rng.integers(0, y, n)
    return neighbours, labels


def z_scores_ok(errors: np.ndarray, variances: np.ndarray) -> None:
    """Unbiasedness check by simulation on m cells.

    max |z| < 5.5 (Bonferroni: false failure <= m * 3.8e-8) and sum z^2 inside the central
    1 - 2e-4 interval of chi2(m) (false failure 2e-4); the latter also checks the variance.
    """
    z = errors / np.sqrt(variances)
    m = z.size
    assert np.max(np.abs(z)) < 5.5, np.max(np.abs(z))
    ss = float(np.sum(z * z))
    assert stats.chi2.ppf(ALPHA, m) < ss < stats.chi2.isf(ALPHA, m), (ss, m)


# =========================================================================== helpers

def test_reverse_knn_answers_and_counts_agree():
    rng = np.random.default_rng(1)
    nb, lab = random_population(rng, 200, 3, 7, 4, r=2)
    answers = reverse_knn_answers(nb, lab, num_queries=7, num_classes=4)
    assert answers.shape == (200, 7, 4) and answers.dtype == np.uint8
    assert np.all(answers.reshape(200, -1).sum(axis=1) == 6)
    i = 17
    expected = np.zeros((7, 4), dtype=np.uint8)
    expected[np.ix_(nb[i], lab[i])] = 1
    np.testing.assert_array_equal(answers[i], expected)
    counts = reverse_knn_counts(nb, lab, num_queries=7, num_classes=4)
    np.testing.assert_array_equal(counts, answers.sum(axis=0))
    assert counts.dtype == np.int64


@pytest.mark.parametrize(("neighbours", "labels", "match"), [
    ([[0, 7]], [1], "neighbours"),
    ([[0, -1]], [1], "neighbours"),
    ([[2, 2]], [1], "neighbours"),
    ([[0, 1]], [3], "labels"),
    ([[0, 1]], [[1, 1]], "labels"),
    ([[0, 1]], [1, 2], "labels"),
    ([0, 1], [1], "neighbours"),
    ([[0.5, 1]], [1], "neighbours"),
])
def test_reverse_knn_answers_validation(neighbours, labels, match):
    with pytest.raises(ValueError, match=match):
        reverse_knn_answers(neighbours, labels, num_queries=5, num_classes=3)
    with pytest.raises(ValueError, match=match):
        reverse_knn_counts(neighbours, labels, num_queries=5, num_classes=3)


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_index_set_round_trip(data):
    s = data.draw(st.integers(1, 8))
    y = data.draw(st.integers(2, 6))
    m = data.draw(st.integers(1, s * y))
    idx = data.draw(st.lists(st.integers(0, s * y - 1), min_size=m, max_size=m, unique=True))
    answer = index_set_to_answer(idx, s, y)
    assert answer.shape == (s, y) and answer.sum() == m
    np.testing.assert_array_equal(answer_to_index_set(answer), np.sort(idx))
    np.testing.assert_array_equal(answer.ravel()[idx], 1)


def test_index_set_batched_and_validation():
    rng = np.random.default_rng(2)
    nb, lab = random_population(rng, 50, 2, 6, 5)
    answers = reverse_knn_answers(nb, lab, num_queries=6, num_classes=5)
    sets = answer_to_index_set(answers)
    assert sets.shape == (50, 2)
    np.testing.assert_array_equal(sets, np.sort(nb * 5 + lab[:, None], axis=1))
    np.testing.assert_array_equal(index_set_to_answer(sets, 6, 5), answers)
    ragged = answers.copy()
    ragged[0] = 0
    with pytest.raises(ValueError, match="same number of ones"):
        answer_to_index_set(ragged)
    with pytest.raises(ValueError, match="only 0 and 1"):
        answer_to_index_set(2 * answers[0])
    with pytest.raises(ValueError, match="answer"):
        answer_to_index_set(np.zeros(4))
    with pytest.raises(ValueError, match="index_set"):
        index_set_to_answer([0, 30], 6, 5)
    with pytest.raises(ValueError, match="index_set"):
        index_set_to_answer([3, 3], 6, 5)
    with pytest.raises(ValueError, match="num_queries"):
        index_set_to_answer([3], 0, 5)


def test_noisy_argmax_ties_and_validation():
    counts = np.array([[1, 5, 5], [7, 7, 7], [0, 0, 2]])
    np.testing.assert_array_equal(noisy_argmax(counts), [1, 0, 2])
    # Random tie-breaking: uniform among the tied classes (chi-square, alpha = 1e-4).
    rng = np.random.default_rng(3)
    picks = noisy_argmax(np.broadcast_to(counts[1], (30_000, 3)), rng=rng)
    assert chi2_pvalue(np.bincount(picks, minlength=3), np.full(3, 1 / 3)) > ALPHA
    picks = noisy_argmax(np.broadcast_to(counts[0], (30_000, 3)), rng=rng)
    assert set(np.unique(picks)) == {1, 2}
    assert noisy_argmax(counts[0]).shape == ()
    with pytest.raises(ValueError, match="noisy_counts"):
        noisy_argmax(np.array(3.0))
    with pytest.raises(ValueError, match="NaN"):
        noisy_argmax([[1.0, np.nan]])
    with pytest.raises(ValueError, match="rng"):
        noisy_argmax(counts, rng=3)


# =========================================================================== shared validation

RKNN_BASE = {"epsilon": 1.0, "k": 2, "num_queries": 5, "num_classes": 3}
RKNN_BAD = [
    ("epsilon", 0.0), ("epsilon", -1.0), ("epsilon", math.nan), ("epsilon", math.inf),
    ("epsilon", "1"), ("epsilon", True),
    ("k", 0), ("k", 6), ("k", 1.0), ("k", True),
    ("num_queries", 0), ("num_queries", 2.5),
    ("num_classes", 1), ("num_classes", 0),
    ("r", 0), ("r", 4), ("r", None),
]


@pytest.mark.parametrize("cls", [ReverseKnnCountRelease, BitRandomizedResponse])
@pytest.mark.parametrize(("name", "value"), RKNN_BAD)
def test_rknn_constructors_reject_bad_parameters(cls, name, value):
    with pytest.raises(ValueError, match=name):
        cls(**{**RKNN_BASE, name: value})


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_count_release_rejects_non_bool_discrete(value):
    with pytest.raises(ValueError, match="discrete"):
        ReverseKnnCountRelease(**RKNN_BASE, discrete=value)


def test_count_release_rejects_unusable_scale():
    with pytest.raises(ValueError, match="epsilon"):
        ReverseKnnCountRelease(epsilon=1e-13, k=1, num_queries=5, num_classes=3)
    with pytest.raises(ValueError, match="discrete=True"):
        _ = ReverseKnnCountRelease(**RKNN_BASE, discrete=False).scale_fraction


def test_k_above_num_queries_names_k():
    with pytest.raises(ValueError, match=r"k must be an integer >= 1 and <= 5; got 6"):
        ReverseKnnCountRelease(epsilon=1.0, k=6, num_queries=5, num_classes=3)


# =========================================================================== central release

@pytest.mark.parametrize("value", [
    np.zeros((5, 4), dtype=int),          # wrong shape
    np.zeros((3, 5), dtype=int),
    np.zeros((1, 5, 3), dtype=int),
    -np.ones((5, 3), dtype=int),          # negative count
    np.full((5, 3), 1.5),                 # not an integer
    np.full((5, 3), np.nan),
    np.full((5, 3), "a"),
])
def test_count_release_rejects_bad_values(value):
    mech = ReverseKnnCountRelease(**RKNN_BASE)
    with pytest.raises(ValueError, match="value"):
        mech.release(value, rng=np.random.default_rng(0))


@pytest.mark.parametrize(("eps", "k", "r"), [(1.0, 1, 1), (0.3, 2, 1), (0.1, 3, 2), (7.0, 1, 1)])
@pytest.mark.parametrize("discrete", [True, False])
def test_count_release_event_and_guarantee(eps, k, r, discrete):
    mech = ReverseKnnCountRelease(epsilon=eps, k=k, num_queries=6, num_classes=4, r=r,
                                  discrete=discrete)
    assert mech.sensitivity.value == 2 * k * r and mech.sensitivity.norm is Norm.L1
    assert mech.guarantee.epsilon == eps and mech.guarantee.is_pure
    ev = mech.event
    got_eps, got_delta = event_guarantee(ev)
    assert got_delta == 0.0
    # The discrete scale is rounded *up*, so the event's epsilon may be below the claim by the
    # rounding (< 1e-6 relative) but never above it (beyond one float ulp).
    assert got_eps == pytest.approx(eps, rel=1e-6)
    assert got_eps <= eps * (1 + 1e-15)
    if discrete:
        assert isinstance(ev, dpe.DiscreteLaplaceDpEvent)
        assert ev.sensitivity == 2 * k * r
        assert mech.scale >= 2 * k * r / eps
        # a = 1/b with b = 2kr/eps rounded up by the documented < 1e-6 relative (formula here)
        assert eps / (2 * k * r) * (1 - 1e-6) <= ev.noise_parameter <= eps / (2 * k * r)
    else:
        # the float-safe Laplace: a discrete Laplace on a grid g, one step more per changed cell
        assert isinstance(ev, dpe.DiscreteLaplaceDpEvent)
        assert ev.sensitivity == mech.noise.grid(2 * k * r).sensitivity
        b = 2 * k * r / eps
        assert b <= mech.scale <= b * (1 + 1 / 512 + 1e-6)


def discrete_laplace_pmf(scale: float, support: np.ndarray) -> np.ndarray:
    a = math.exp(-1.0 / scale)
    return (1 - a) / (1 + a) * a ** np.abs(support)


def discrete_noise_pvalue(noise: np.ndarray, scale: float) -> float:
    bound = int(np.abs(noise).max()) + 1
    support = np.arange(-bound, bound + 1)
    probs = discrete_laplace_pmf(scale, support)
    tail = math.exp(-(bound + 1) / scale) / (1 + math.exp(-1 / scale))  # P[X > bound]
    observed = np.append(np.bincount(noise + bound, minlength=2 * bound + 1), [0, 0])
    return chi2_pvalue(observed, np.append(probs, [tail, tail]))


@pytest.mark.parametrize(("eps", "k", "r"), [(1.0, 1, 1), (0.3, 2, 1), (2.0, 1, 2)])
def test_discrete_noise_matches_exact_pmf(eps, k, r):
    """Noise of every cell vs the exact discrete Laplace pmf of scale 2kr/eps computed here (the
    documented rounding up is < 1e-6 relative, invisible at this size), chi-square at
    alpha = 1e-4 (false-failure rate 1e-4), and a 10% larger scale is rejected (power)."""
    mech = ReverseKnnCountRelease(epsilon=eps, k=k, num_queries=5, num_classes=3, r=r)
    rng = np.random.default_rng(10)
    value = rng.integers(0, 1000, size=(5, 3))
    out = mech.sample(value, 4000, rng=rng)
    assert out.shape == (4000, 5, 3) and out.dtype == np.int64
    noise = (out - value).ravel()
    assert mech.scale_fraction >= 2 * k * r / eps
    b = 2 * k * r / eps  # not mech.scale
    assert discrete_noise_pvalue(noise, b) > ALPHA
    assert discrete_noise_pvalue(noise, 1.1 * b) < ALPHA
    # Cells are independent: correlation between two cells' noise is ~ 0 (|rho| < 4.5/sqrt(n)).
    cells = (out - value).reshape(4000, -1).astype(float)
    rho = np.corrcoef(cells[:, 0], cells[:, 7])[0, 1]
    assert abs(rho) < 4.5 / math.sqrt(4000)


def test_continuous_noise_matches_laplace():
    """KS test against Laplace(2kr/eps) at alpha = 1e-4."""
    mech = ReverseKnnCountRelease(epsilon=0.5, k=2, num_queries=4, num_classes=2,
                                  discrete=False)
    rng = np.random.default_rng(11)
    value = np.arange(8).reshape(4, 2)
    out = mech.sample(value, 5000, rng=rng)
    assert out.dtype == np.float64
    noise = (out - value).ravel()
    assert stats.kstest(noise, stats.laplace(scale=8.0).cdf).pvalue > ALPHA
    assert stats.kstest(noise, stats.laplace(scale=8.8).cdf).pvalue < ALPHA


@pytest.mark.parametrize(("k", "s", "y", "r"), [(1, 5, 3, 1), (3, 4, 3, 1), (2, 3, 4, 2),
                                                (4, 5, 2, 1)])
def test_count_release_neighbours(k, s, y, r):
    mech = ReverseKnnCountRelease(epsilon=1.0, k=k, num_queries=s, num_classes=y, r=r)
    a, b = mech.neighbours()
    assert a.shape == b.shape == (s, y)
    assert a.sum() == b.sum() == k * r
    assert np.abs(a - b).sum() == 2 * k * r  # attains the sensitivity
    mech.sample(a, 1, rng=np.random.default_rng(0))
    mech.sample(b, 1, rng=np.random.default_rng(0))


def test_count_release_with_ledger():
    mech = ReverseKnnCountRelease(epsilon=0.5, k=1, num_queries=4, num_classes=3)
    ledger = Ledger(epsilon=1.0)
    rng = np.random.default_rng(12)
    counts = np.full((4, 3), 10)
    out = mech.release(counts, rng=rng, ledger=ledger)
    assert out.shape == (4, 3) and out.dtype == np.int64
    mech.release(counts, rng=rng, ledger=ledger)
    with pytest.raises(BudgetExceededError):
        mech.release(counts, rng=rng, ledger=ledger)
    assert len(ledger.charges()) == 2
    assert ledger.charges()[0].event == mech.event


# =========================================================================== bit RR

@pytest.mark.parametrize(("value", "match"), [
    (np.full((5, 3), 2), "only 0 and 1"),
    (np.full((5, 3), 0.5), "value"),
    (np.ones((5, 3), dtype=int), "at most k\\*r=2 ones"),
    (np.zeros((5, 4), dtype=int), "shape"),
    (np.zeros((1, 5, 3), dtype=int), "shape"),
])
def test_bitrr_rejects_bad_values(value, match):
    mech = BitRandomizedResponse(**RKNN_BASE)
    with pytest.raises(ValueError, match=match):
        mech.release(value, rng=np.random.default_rng(0))


def test_bitrr_batched_validation():
    mech = BitRandomizedResponse(**RKNN_BASE)
    rng = np.random.default_rng(0)
    answers = np.zeros((6, 5, 3), dtype=np.uint8)
    answers[:, 0, 0] = 1
    answers[3, 1:3, 1] = 1  # client 3 has 3 > k*r = 2 ones
    with pytest.raises(ValueError, match="client 3"):
        mech.randomize_clients(answers, rng)
    with pytest.raises(ValueError, match="answers"):
        mech.randomize_clients(answers[0], rng)
    with pytest.raises(ValueError, match="answers"):
        mech.randomize_clients(answers[:0], rng)
    with pytest.raises(ValueError, match="rng"):
        mech.randomize_clients(answers[:3], rng=None)
    with pytest.raises(ValueError, match="reports"):
        mech.estimate_counts(np.zeros((4, 4, 3)))
    with pytest.raises(ValueError, match="only 0 and 1"):
        mech.estimate_counts(np.full((4, 5, 3), 2))


@pytest.mark.parametrize(("eps", "k", "r"), [(1.0, 1, 1), (0.4, 2, 1), (3.0, 2, 2)])
def test_bitrr_event_and_probabilities(eps, k, r):
    mech = BitRandomizedResponse(epsilon=eps, k=k, num_queries=5, num_classes=4, r=r)
    eb = eps / (2 * k * r)
    assert mech.flip_probability == pytest.approx(1 / (math.exp(eb) + 1), rel=1e-14)
    assert mech.keep_probability + mech.flip_probability == pytest.approx(1.0, rel=1e-15)
    ev = mech.event
    assert isinstance(ev, BitRandomizedResponseDpEvent)
    assert (ev.num_bits, ev.bits_changed) == (20, 2 * k * r)
    assert ev.epsilon_per_bit == pytest.approx(eb)
    assert event_guarantee(ev) == (pytest.approx(eps, rel=1e-14), 0.0)
    assert mech.sensitivity.value == 2 * k * r and mech.sensitivity.norm is Norm.RECORDS


@pytest.mark.parametrize(("s", "y", "k", "r"), [(2, 2, 1, 1), (3, 2, 1, 1), (2, 3, 1, 2)])
def test_bitrr_exact_ldp_by_enumeration(s, y, k, r):
    """Exact output probabilities of every report for every admissible answer (<= kr ones):
    the worst ratio over all pairs is e^eps, attained by the neighbours() pair."""
    eps = 0.8
    mech = BitRandomizedResponse(epsilon=eps, k=k, num_queries=s, num_classes=y, r=r)
    nbits = s * y
    outputs = np.array(list(itertools.product([0, 1], repeat=nbits)), dtype=np.uint8)
    inputs = [a for a in outputs if a.sum() <= k * r]
    q, p = mech.flip_probability, mech.keep_probability

    def pmf(answer):
        flips = (outputs != answer).sum(axis=1)
        return q ** flips * p ** (nbits - flips)

    table = np.array([pmf(a) for a in inputs])
    np.testing.assert_allclose(table.sum(axis=1), 1.0)
    worst = np.max(table[:, None, :] / table[None, :, :])
    assert worst <= math.exp(eps) * (1 + 1e-12)
    a, b = mech.neighbours()
    attained = np.max(pmf(a.ravel()) / pmf(b.ravel()))
    assert attained == pytest.approx(math.exp(eps), rel=1e-12)


def test_bitrr_sample_matches_exact_distribution():
    """Per-cell frequencies (chi2 with s|Y| dof) and the number of flipped bits per report
    (Binomial(s|Y|, q), chi-square) at alpha = 1e-4 each (false-failure rate <= 2e-4).

    q = 1/(e^(eps/(2kr)) + 1) is computed here (paper, Thm 1), not read from the mechanism.
    """
    mech = BitRandomizedResponse(epsilon=1.0, k=2, num_queries=4, num_classes=3)
    q = 1 / (math.exp(1.0 / (2 * 2 * 1)) + 1)
    value = np.zeros((4, 3), dtype=int)
    value[[0, 2], [1, 1]] = 1
    n = 20_000
    out = mech.sample(value, n, rng=np.random.default_rng(20))
    assert out.shape == (n, 4, 3) and out.dtype == np.uint8
    p_one = np.where(value == 1, 1 - q, q)
    ones = out.sum(axis=0)
    stat = float(np.sum((ones - n * p_one) ** 2 / (n * p_one * (1 - p_one))))
    assert stats.chi2.sf(stat, 12) > ALPHA
    flips = (out != value).reshape(n, -1).sum(axis=1)
    probs = stats.binom.pmf(np.arange(13), 12, q)
    assert chi2_pvalue(np.bincount(flips, minlength=13), probs) > ALPHA
    # Power: the same data rejects the flip probability of eps/kr (a factor-2 budget error).
    wrong = 1 / (math.exp(1.0 / 2) + 1)
    assert chi2_pvalue(np.bincount(flips, minlength=13),
                       stats.binom.pmf(np.arange(13), 12, wrong)) < ALPHA


def test_bitrr_randomize_clients_distribution_and_unbiasedness():
    """Per-client flip counts ~ Binomial(s|Y|, q) (chi-square, alpha = 1e-4) and the estimator
    is unbiased with the stated variance (see z_scores_ok: false failure < 3e-4)."""
    s, y, k = 10, 4, 2
    mech = BitRandomizedResponse(epsilon=1.0, k=k, num_queries=s, num_classes=y)
    rng = np.random.default_rng(21)
    nb, lab = random_population(rng, 5000, k, s, y)
    answers = reverse_knn_answers(nb, lab, num_queries=s, num_classes=y)
    reports = mech.randomize_clients(answers, rng)
    assert reports.shape == answers.shape and reports.dtype == np.uint8
    flips = (reports != answers).reshape(5000, -1).sum(axis=1)
    q = 1 / (math.exp(1.0 / (2 * k)) + 1)  # paper, Thm 1 (r = 1); not mech.flip_probability
    probs = stats.binom.pmf(np.arange(s * y + 1), s * y, q)
    assert chi2_pvalue(np.bincount(flips, minlength=s * y + 1), probs) > ALPHA
    truth = reverse_knn_counts(nb, lab, num_queries=s, num_classes=y)
    est = mech.estimate_counts(reports)
    assert est.shape == (s, y)
    z_scores_ok(est - truth, np.full((s, y), 5000 * mech.estimator_variance_per_client))
    # A single report is accepted too, and the estimate is linear in the reports.
    np.testing.assert_allclose(mech.estimate_counts(reports[0]) + mech.estimate_counts(
        reports[1:]), est)


def test_bitrr_estimator_formula():
    mech = BitRandomizedResponse(epsilon=0.9, k=1, num_queries=3, num_classes=2)
    reports = np.array([[[1, 0], [0, 0], [1, 1]], [[0, 0], [0, 1], [1, 0]]])
    p, q = math.exp(0.45) / (math.exp(0.45) + 1), 1 / (math.exp(0.45) + 1)
    np.testing.assert_allclose(mech.estimate_counts(reports),
                               ((reports - q) / (p - q)).sum(axis=0), rtol=1e-12)


def test_bitrr_neighbours_and_ledger():
    mech = BitRandomizedResponse(epsilon=0.8, k=2, num_queries=5, num_classes=3, r=1)
    a, b = mech.neighbours()
    assert a.sum() == b.sum() == 2 and np.sum(a != b) == 4
    ledger = Ledger(epsilon=1.0)
    out = mech.release(a, rng=np.random.default_rng(0), ledger=ledger)
    assert out.shape == (5, 3) and set(np.unique(out)) <= {0, 1}
    assert ledger.charges()[0].event == mech.event
    with pytest.raises(BudgetExceededError):
        mech.release(b, rng=np.random.default_rng(0), ledger=ledger)


def test_bitrr_speed():
    """60,000 clients, d = s|Y| = 400: randomize + estimate in well under a few seconds."""
    mech = BitRandomizedResponse(epsilon=1.0, k=1, num_queries=40, num_classes=10)
    rng = np.random.default_rng(22)
    nb, lab = random_population(rng, 60_000, 1, 40, 10)
    answers = reverse_knn_answers(nb, lab, num_queries=40, num_classes=10)
    start = time.perf_counter()
    est = mech.estimate_counts(mech.randomize_clients(answers, rng))
    elapsed = time.perf_counter() - start
    assert est.shape == (40, 10)
    assert elapsed < 3.0, elapsed


# =========================================================================== Collision

COLL_BASE = {"epsilon": 1.0, "domain_size": 10, "cardinality": 2}


@pytest.mark.parametrize(("name", "value"), [
    ("epsilon", 0.0), ("epsilon", -0.5), ("epsilon", math.nan), ("epsilon", math.inf),
    ("epsilon", "1"),
    ("domain_size", 0), ("domain_size", 3.0),
    ("cardinality", 0), ("cardinality", 11), ("cardinality", 2.0),
    ("bloom_length", 2), ("bloom_length", 0), ("bloom_length", 8.0),
    ("bloom_length", (1 << 62) + 1),
])
def test_collision_rejects_bad_parameters(name, value):
    with pytest.raises(ValueError, match=name):
        Collision(**{**COLL_BASE, name: value})


def test_collision_default_bloom_length():
    for eps, c in [(0.4, 1), (1.0, 2), (2.0, 3), (0.01, 5)]:
        mech = Collision(epsilon=eps, domain_size=50, cardinality=c)
        assert mech.bloom_length == max(round(2 * c - 1 + c * math.exp(eps)), c + 1)
        assert mech.bloom_length >= c + 1
    with pytest.raises(ValueError, match="bloom_length"):
        Collision(epsilon=50.0, domain_size=10, cardinality=1)
    assert Collision(epsilon=50.0, domain_size=10, cardinality=1, bloom_length=10**6)


def test_collision_for_reverse_knn_and_event():
    mech = Collision.for_reverse_knn(epsilon=0.4, k=2, num_queries=40, num_classes=10)
    assert (mech.domain_size, mech.cardinality) == (400, 2)
    ev = mech.event
    assert isinstance(ev, CollisionDpEvent)
    assert (ev.epsilon, ev.domain_size, ev.cardinality, ev.bloom_length) == (
        0.4, 400, 2, mech.bloom_length)
    assert event_guarantee(ev) == (0.4, 0.0)
    assert mech.guarantee.epsilon == 0.4 and mech.guarantee.is_pure
    with pytest.raises(ValueError, match="k"):
        Collision.for_reverse_knn(epsilon=0.4, k=41, num_queries=40, num_classes=10)


def test_collision_hash_reference_and_uniformity():
    # SplitMix64 with state 1234567 first returns 6457827717110365317 (reference C code).
    assert collision_hash(1234567, 0, 1 << 62) == 6457827717110365317 % (1 << 62)
    assert collision_hash(1234567 ^ 5, 5, 1 << 62) == 6457827717110365317 % (1 << 62)
    h = collision_hash(np.uint64(0xDEADBEEFCAFEBABE), np.arange(100_000), 10)
    assert h.dtype == np.int64 and h.min() >= 0 and h.max() < 10
    assert chi2_pvalue(np.bincount(h, minlength=10), np.full(10, 0.1)) > ALPHA  # alpha 1e-4


@pytest.mark.parametrize(("value", "match"), [
    ([1, 1], "distinct"),
    ([1, 10], "value"),
    ([-1, 3], "value"),
    ([1, 2, 3], "shape"),
    ([[1, 2]], "shape"),
    ([1.5, 2], "integers"),
])
def test_collision_rejects_bad_values(value, match):
    mech = Collision(**COLL_BASE)
    with pytest.raises(ValueError, match=match):
        mech.release(value, rng=np.random.default_rng(0))


def test_collision_batched_validation():
    mech = Collision(**COLL_BASE)
    rng = np.random.default_rng(0)
    sets = np.array([[0, 1], [2, 3], [4, 4]])
    with pytest.raises(ValueError, match="row 2"):
        mech.randomize_clients(sets, rng)
    with pytest.raises(ValueError, match="index_sets"):
        mech.randomize_clients(sets[:, :1], rng)
    with pytest.raises(ValueError, match="index_sets"):
        mech.randomize_clients(np.array([[0, 12]]), rng)
    with pytest.raises(ValueError, match="rng"):
        mech.randomize_clients(sets[:2], None)
    good = mech.randomize_clients(sets[:2], rng)
    bad = good.copy()
    bad["z"][0] = mech.bloom_length
    with pytest.raises(ValueError, match="bloom_length"):
        mech.estimate_counts(bad)
    with pytest.raises(ValueError, match="reports"):
        mech.estimate_counts(good[:0])
    with pytest.raises(ValueError, match="reports"):
        mech.estimate_counts([(1, 2, 3)])
    with pytest.raises(ValueError, match="chunk_size"):
        mech.estimate_counts(good, chunk_size=0)


@pytest.mark.parametrize(("eps", "length"), [(0.5, 3), (2.0, 3), (1.0, None), (0.1, 4)])
def test_collision_exact_ldp_over_all_inputs(eps, length):
    """For fixed seeds (hashes colliding or not), every output probability is within
    [1/Omega, e^eps/Omega] and the ratio over *all* pairs of input sets is <= e^eps."""
    mech = Collision(epsilon=eps, domain_size=6, cardinality=2, bloom_length=length)
    sets = list(itertools.combinations(range(6), 2))
    bound = math.exp(eps)
    worst = 0.0
    saw_collision = False
    for seed in range(40):
        table = np.array([mech.output_pmf(v, seed) for v in sets])
        np.testing.assert_allclose(table.sum(axis=1), 1.0, rtol=1e-12)
        assert table.min() >= (1 / mech.omega) * (1 - 1e-12)
        assert table.max() <= (bound / mech.omega) * (1 + 1e-12)
        worst = max(worst, float(np.max(table[:, None, :] / table[None, :, :])))
        hashes = collision_hash(np.uint64(seed), np.array(sets), mech.bloom_length)
        saw_collision |= bool(np.any(hashes[:, 0] == hashes[:, 1]))
    assert worst <= bound * (1 + 1e-12)
    assert worst == pytest.approx(bound, rel=1e-9)  # the bound is attained
    assert saw_collision  # the colliding case was exercised


def _find_seed(mech, value, want_collision):
    for seed in range(10_000):
        h = collision_hash(np.uint64(seed), value, mech.bloom_length)
        if (len(set(h.tolist())) < len(value)) == want_collision:
            return seed
    raise AssertionError("no seed found")


@pytest.mark.parametrize(("eps", "c", "length", "collide"), [
    (1.0, 2, 3, True), (1.0, 2, 3, False), (0.5, 3, 8, False), (0.5, 3, 8, True),
    (2.0, 1, None, False),
])
def test_collision_output_matches_exact_pmf(eps, c, length, collide):
    """z given (V, seed) vs Definition 5's pmf: chi-square at alpha = 1e-4."""
    mech = Collision(epsilon=eps, domain_size=12, cardinality=c, bloom_length=length)
    value = np.arange(3, 3 + c)
    seed = _find_seed(mech, value, collide)
    n = 30_000
    rng = np.random.default_rng(30)
    reports = mech._randomize(np.broadcast_to(value, (n, c)),
                              np.full(n, seed, dtype=np.uint64), rng)
    assert np.all(reports["seed"] == seed)
    pmf = mech.output_pmf(value, seed)
    counts = np.bincount(reports["z"], minlength=mech.bloom_length)
    assert counts.size == mech.bloom_length
    assert chi2_pvalue(counts, pmf) > ALPHA
    # Power: a uniform output (no privacy-utility signal) is rejected on the same data.
    assert chi2_pvalue(counts, np.full(mech.bloom_length, 1 / mech.bloom_length)) < ALPHA


def test_collision_estimator_formula():
    """The estimate equals the paper's formula evaluated report by report."""
    mech = Collision(epsilon=1.3, domain_size=9, cardinality=2)
    reports = mech.sample([2, 6], 50, rng=np.random.default_rng(34))
    length = mech.bloom_length
    omega = 2 * math.exp(1.3) + length - 2
    manual = np.zeros(9)
    for seed, z in reports:
        hit = collision_hash(seed, np.arange(9), length) == z
        manual += (hit - 1 / length) / (math.exp(1.3) / omega - 1 / length)
    np.testing.assert_allclose(mech.estimate_counts(reports), manual, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize(("eps", "d", "c", "skewed"), [(1.0, 30, 2, False), (4.0, 20, 2, True),
                                                       (0.5, 12, 1, True)])
def test_collision_estimator_unbiased(eps, d, c, skewed):
    """Unbiasedness of the estimator by simulation (random seeds = random hash functions);
    z_scores_ok: false failure < 3e-4 per case. The skewed high-epsilon case (half the
    clients hold the same set) detects a 10% error in the estimator's scale."""
    mech = Collision(epsilon=eps, domain_size=d, cardinality=c)
    rng = np.random.default_rng(31)
    n = 20_000
    sets = np.argsort(rng.random((n, d)), axis=1)[:, :c]
    if skewed:
        sets[: n // 2] = np.arange(c)
    reports = mech.randomize_clients(sets, rng)
    assert reports.dtype == COLLISION_REPORT_DTYPE and reports.shape == (n,)
    assert reports["z"].min() >= 0 and reports["z"].max() < mech.bloom_length
    truth = np.bincount(sets.ravel(), minlength=d)
    est = mech.estimate_counts(reports, chunk_size=777)
    np.testing.assert_allclose(est, mech.estimate_counts(reports))
    var = (truth * mech.estimator_variance_per_client(True)
           + (n - truth) * mech.estimator_variance_per_client(False))
    z_scores_ok(est - truth, var)


def test_collision_sample_release_and_ledger():
    mech = Collision(epsilon=0.7, domain_size=10, cardinality=3)
    rng = np.random.default_rng(32)
    batch = mech.sample([1, 5, 7], 100, rng=rng)
    assert batch.shape == (100,) and batch.dtype == COLLISION_REPORT_DTYPE
    assert len(np.unique(batch["seed"])) == 100  # a fresh seed per report
    ledger = Ledger(epsilon=1.0)
    seed, z = mech.release([1, 5, 7], rng=rng, ledger=ledger)
    assert isinstance(seed, int) and isinstance(z, int) and 0 <= z < mech.bloom_length
    assert ledger.charges()[0].event == mech.event
    with pytest.raises(BudgetExceededError):
        mech.release([1, 5, 7], rng=rng, ledger=ledger)
    # A list of (seed, z) pairs estimates the same as the structured array, and fields are
    # read by name (not position).
    pairs = [(int(s), int(zz)) for s, zz in batch]
    np.testing.assert_allclose(mech.estimate_counts(pairs), mech.estimate_counts(batch))
    swapped = np.empty(100, dtype=[("z", np.int32), ("seed", np.uint64)])
    swapped["z"], swapped["seed"] = batch["z"], batch["seed"]
    np.testing.assert_allclose(mech.estimate_counts(swapped), mech.estimate_counts(batch))
    bad = np.zeros(3, dtype=[("seed", np.float64), ("z", np.int64)])
    with pytest.raises(ValueError, match="seed"):
        mech.estimate_counts(bad)
    a, b = mech.neighbours()
    assert a.shape == b.shape == (3,) and not set(a) & set(b)
    assert max(a.max(), b.max()) < 10
    mech.sample(a, 1, rng=rng)
    mech.sample(b, 1, rng=rng)


def test_collision_speed():
    """60,000 clients, d = 400 (s = 40, |Y| = 10, k = r = 1): randomize + estimate well under
    a few seconds."""
    mech = Collision.for_reverse_knn(epsilon=0.4, k=1, num_queries=40, num_classes=10)
    rng = np.random.default_rng(33)
    nb, lab = random_population(rng, 60_000, 1, 40, 10)
    sets = answer_to_index_set(reverse_knn_answers(nb, lab, num_queries=40, num_classes=10))
    start = time.perf_counter()
    est = mech.estimate_counts(mech.randomize_clients(sets, rng))
    elapsed = time.perf_counter() - start
    assert est.shape == (400,)
    assert elapsed < 3.0, elapsed


def test_module_exports():
    for name in rknn.__all__:
        assert hasattr(rknn, name)
