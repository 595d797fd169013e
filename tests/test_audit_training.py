"""The training-audit estimators: many runs (Clopper-Pearson) and one run (Steinke et al. 2023).

References are independent: the one-run p-value against exact rational arithmetic
(``fractions``) of the formula of Steinke-Nasr-Jagielski 2023 (Theorem 3.1 / Algorithm 2), and
both estimators against simulated scores of mechanisms with a known epsilon.

False-failure rates (fixed seeds make every test deterministic; the rates say how likely a
correct estimator would have failed for an unlucky seed):
- validity tests: T trials of a bound at 95% confidence on an exactly eps-DP mechanism; a correct
  estimator exceeds eps in at most 5% of trials, and the test fails if more than the
  Binomial(T, 0.05) 0.999 quantile do (false-failure rate <= 1e-3);
- power tests compare a bound with a value far below its expectation (z > 5 at the stated
  sizes, false-failure rate < 1e-6).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dpkd_audit.audit import Attack, Verdict
from dpkd_audit.audit.training import (
    MIN_RUNS,
    canary_inclusion,
    many_run_bound,
    one_run_bound,
    one_run_guesses,
    one_run_p_value,
)

# --------------------------------------------------------------------------- canaries


def test_canary_inclusion_is_deterministic_and_fair():
    a = canary_inclusion(10_000, seed=3)
    assert a.dtype == np.bool_ and a.shape == (10_000,)
    assert np.array_equal(a, canary_inclusion(10_000, seed=3))
    assert not np.array_equal(a, canary_inclusion(10_000, seed=4))
    # Binomial(10^4, 1/2): |mean - 0.5| < 0.025 is z > 5
    assert abs(a.mean() - 0.5) < 0.025


@pytest.mark.parametrize("count", [0, 1, -3, 2.5, True])
def test_canary_inclusion_rejects_too_few(count):
    with pytest.raises(ValueError, match="count"):
        canary_inclusion(count, seed=0)


# --------------------------------------------------------------------------- one-run p-value


def _exact_binom_sf(v: int, r: int, q: Fraction) -> Fraction:
    """P[Binomial(r, q) >= v] exactly."""
    return sum((math.comb(r, j) * q**j * (1 - q)**(r - j) for j in range(v, r + 1)),
               Fraction(0))


@pytest.mark.parametrize("m, r, v, q, delta", [
    (50, 20, 15, Fraction(3, 4), Fraction(0)),
    (50, 20, 15, Fraction(3, 4), Fraction(1, 10**4)),
    (200, 60, 50, Fraction(7, 10), Fraction(1, 10**5)),
    (10, 10, 10, Fraction(9, 10), Fraction(1, 100)),
    (1000, 100, 55, Fraction(1, 2), Fraction(1, 10**6)),
])
def test_one_run_p_value_matches_exact_rational_formula(m, r, v, q, delta):
    eps = math.log(q / (1 - q))
    beta = _exact_binom_sf(v, r, q)
    alpha = max((_exact_binom_sf(v - i, r, q) - beta) / i for i in range(1, v + 1))
    expected = min(Fraction(1), beta + 2 * m * delta * alpha)
    got = one_run_p_value(m, r, v, eps, float(delta))
    assert got == pytest.approx(float(expected), rel=1e-9, abs=1e-300)


def test_one_run_p_value_pure_is_the_binomial_tail_and_grows_with_epsilon():
    assert one_run_p_value(100, 40, 30, 1.0) == pytest.approx(
        stats.binom.sf(29, 40, math.exp(1) / (1 + math.exp(1))), rel=1e-12)
    values = [one_run_p_value(100, 40, 30, e, 1e-5) for e in np.linspace(0, 4, 30)]
    assert all(b >= a for a, b in itertools.pairwise(values))
    assert one_run_p_value(100, 40, 0, 1.0) == 1.0


@pytest.mark.parametrize("kwargs, name", [
    ({"canaries": 0, "guesses": 0, "correct": 0, "epsilon": 1.0}, "canaries"),
    ({"canaries": 5, "guesses": 6, "correct": 0, "epsilon": 1.0}, "guesses"),
    ({"canaries": 5, "guesses": 3, "correct": 4, "epsilon": 1.0}, "correct"),
    ({"canaries": 5, "guesses": 3, "correct": 2, "epsilon": -1.0}, "epsilon"),
    ({"canaries": 5, "guesses": 3, "correct": 2, "epsilon": math.nan}, "epsilon"),
    ({"canaries": 5, "guesses": 3, "correct": 2, "epsilon": 1.0, "delta": 1.5}, "delta"),
])
def test_one_run_p_value_rejects_bad_input(kwargs, name):
    with pytest.raises(ValueError, match=name):
        one_run_p_value(**kwargs)


# --------------------------------------------------------------------------- one-run bound


def _rr_scores(included: np.ndarray, eps: float, rng: np.random.Generator) -> np.ndarray:
    """Scores of an exactly eps-DP release per canary: randomized response of its bit.

    Each canary's score is its bit (+1 in, -1 out) flipped with probability 1/(1 + e^eps),
    plus a tiny public jitter (independent of the bits) that orders the guesses.
    """
    keep = rng.random(included.size) < 1.0 / (1.0 + math.exp(-eps))
    bit = np.where(included, 1.0, -1.0)
    return np.where(keep, bit, -bit) + 0.01 * rng.random(included.size)


def test_one_run_bound_is_valid_on_randomized_response():
    """An exactly eps-DP release: the bound exceeds eps in at most 5% of trials."""
    eps, trials, m = 1.0, 400, 1000
    rng = np.random.default_rng(20261125)
    above = 0
    for t in range(trials):
        inc = canary_inclusion(m, seed=t)
        res = one_run_bound(_rr_scores(inc, eps, rng), inc, epsilon=eps,
                            guesses_in=300, guesses_out=300)
        above += res.epsilon_lower > eps
    assert above <= stats.binom.ppf(0.999, trials, 0.05)


def test_one_run_bound_has_power_and_catches_a_false_claim():
    eps_true, m = 3.0, 4000
    inc = canary_inclusion(m, seed=1)
    scores = _rr_scores(inc, eps_true, np.random.default_rng(7))
    res = one_run_bound(scores, inc, epsilon=1.0, guesses_in=1000, guesses_out=1000)
    # 2000 guesses at accuracy 0.953: the 95% bound sits near 2.8 (z > 5 above 2.0)
    assert 2.0 < res.epsilon_lower <= 3.3
    assert res.verdict == Verdict.VIOLATION.value and res.p_value_at_claim < 0.05
    assert res.guesses == 2000 and res.canaries == m and res.included == int(inc.sum())
    # delta > 0 weakens the bound, never strengthens it
    weaker = one_run_bound(scores, inc, epsilon=1.0, delta=1e-5, guesses_in=1000,
                           guesses_out=1000)
    assert weaker.epsilon_lower <= res.epsilon_lower


def test_one_run_bound_with_delta_is_valid_on_an_eps_delta_release():
    """With probability delta the bit is revealed, else randomized response at eps."""
    eps, delta, trials, m = 1.0, 1e-3, 300, 1000
    rng = np.random.default_rng(11)
    above = 0
    for t in range(trials):
        inc = canary_inclusion(m, seed=10_000 + t)
        scores = _rr_scores(inc, eps, rng)
        reveal = rng.random(m) < delta
        scores = np.where(reveal, np.where(inc, 5.0, -5.0), scores)
        res = one_run_bound(scores, inc, epsilon=eps, delta=delta, guesses_in=200,
                            guesses_out=200)
        above += res.epsilon_lower > eps
    assert above <= stats.binom.ppf(0.999, trials, 0.05)


def test_one_run_guesses_pick_the_extremes():
    g = one_run_guesses([0.1, 5.0, -3.0, 2.0, 0.0], guesses_in=2, guesses_out=1)
    assert g.tolist() == [0, 1, -1, 1, 0]


@pytest.mark.parametrize("scores, gin, gout, name", [
    ([1.0], 1, 0, "scores"),
    ([1.0, np.nan], 1, 0, "scores"),
    ([1.0, 2.0], 2, 1, "guesses_in"),
    ([1.0, 2.0], 0, 0, "guesses_in"),
    ([1.0, 2.0], -1, 1, "guesses_in"),
])
def test_one_run_guesses_reject_bad_input(scores, gin, gout, name):
    with pytest.raises(ValueError, match=name):
        one_run_guesses(scores, guesses_in=gin, guesses_out=gout)


def test_one_run_bound_rejects_mismatched_inclusion():
    with pytest.raises(ValueError, match="included"):
        one_run_bound([1.0, 2.0, 3.0], [True, False], epsilon=1.0, guesses_in=1,
                      guesses_out=1)
    with pytest.raises(ValueError, match="included"):
        one_run_bound([1.0, 2.0], [1, 0], epsilon=1.0, guesses_in=1, guesses_out=1)


# --------------------------------------------------------------------------- many runs


def test_many_run_bound_is_valid_on_laplace_scores():
    """Runs of an exactly eps-DP release (Laplace, sensitivity 1): false alarms <= 5%."""
    eps, trials, runs = 1.0, 200, 2000
    rng = np.random.default_rng(5)
    above = 0
    for _ in range(trials):
        x = rng.laplace(1.0, 1.0 / eps, runs)
        xp = rng.laplace(0.0, 1.0 / eps, runs)
        above += many_run_bound(x, xp, epsilon=eps, rng=rng).epsilon_lower > eps
    assert above <= stats.binom.ppf(0.999, trials, 0.05)


def test_many_run_bound_power_and_violation():
    rng = np.random.default_rng(6)
    x = rng.laplace(1.0, 0.5, 50_000)  # true epsilon 2
    xp = rng.laplace(0.0, 0.5, 50_000)
    res = many_run_bound(x, xp, epsilon=1.0, rng=rng, name="laplace eps 2")
    assert res.violation and res.verdict is Verdict.VIOLATION
    assert 1.6 < res.epsilon_lower <= 2.0
    assert res.samples_per_side == 50_000 and res.bound_samples == 25_000
    assert res.mechanism == "laplace eps 2"


def test_many_run_bound_on_vector_outputs_finds_the_changed_coordinate():
    rng = np.random.default_rng(8)
    noise = rng.laplace(0.0, 2.0, size=(2, 20_000, 6))
    shift = np.zeros(6)
    shift[[2, 4]] = [1.0, -1.0]  # one vote moves between two cells: L1 2, scale 2 -> eps 1
    # AUTO_REAL: noise + shift also leaks through its float bits (the default reads them)
    res = many_run_bound(noise[0] + shift, noise[1], epsilon=1.0, rng=rng,
                         attack=Attack.AUTO_REAL)
    assert res.attack.value == "coordinate"
    assert 0.75 < res.epsilon_lower <= 1.0


def test_many_run_bound_unequal_run_counts():
    rng = np.random.default_rng(9)
    res = many_run_bound(rng.laplace(1, 1, 3000), rng.laplace(0, 1, 5000), epsilon=1.0,
                         rng=rng)
    assert res.samples_per_side == 3000
    assert 0.0 <= res.epsilon_lower <= 1.0


@pytest.mark.parametrize("x, xp, name", [
    (np.zeros(MIN_RUNS - 1), np.zeros(MIN_RUNS), "scores_x"),
    (np.zeros(MIN_RUNS), np.zeros(3), "scores_x_prime"),
    (np.r_[np.zeros(MIN_RUNS - 1), np.nan], np.zeros(MIN_RUNS), "scores_x"),
    (np.zeros(MIN_RUNS), np.full(MIN_RUNS, np.inf), "scores_x_prime"),
    (np.array(["a"] * MIN_RUNS), np.zeros(MIN_RUNS), "scores_x"),
    (np.zeros((MIN_RUNS, 2)), np.zeros(MIN_RUNS), "one kind and shape"),
])
def test_many_run_bound_rejects_bad_input(x, xp, name):
    with pytest.raises(ValueError, match=name):
        many_run_bound(x, xp, epsilon=1.0, rng=np.random.default_rng(0))


@pytest.mark.parametrize("kwargs, name", [
    ({"epsilon": 0.0}, "epsilon"),
    ({"epsilon": 1.0, "confidence": 1.0}, "confidence"),
    ({"epsilon": 1.0, "selection_fraction": 0.0}, "selection_fraction"),
    ({"epsilon": 1.0, "delta": -0.1}, "delta"),
])
def test_many_run_bound_rejects_bad_parameters(kwargs, name):
    z = np.zeros(MIN_RUNS)
    with pytest.raises(ValueError, match=name):
        many_run_bound(z, z, rng=np.random.default_rng(0), **kwargs)
