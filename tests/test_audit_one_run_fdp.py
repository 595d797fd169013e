"""The one-run audit's f-DP analysis (Mahloujifar-Melis-Chaudhuri 2025), beside Steinke's.

References: the figures computed outside the project for issue 34 from the two papers'
formulas (1,000 canaries, 100 guesses, delta 1e-5, 95%: 99 right -> Steinke about 3.0, f-DP
about 4.8; 70 right -> f-DP 0.65, Steinke 0.47), and a simulation of the idealised game: each
canary's score is mu0 b + N(0, 1) (b = 1 if inserted), a mu0-GDP algorithm per canary, whose
true epsilon at delta is known; the bound must exceed it in at most a 1 - confidence share of
the trials (checked at the Binomial tail: false-failure rate < 1e-3 with these fixed seeds).
"""

from __future__ import annotations

import numpy as np
import pytest

from dpkd_audit.audit.one_run_fdp import (
    FDP_MAX_EPSILON,
    gaussian_mu,
    one_run_fdp_epsilon,
    one_run_fdp_margin,
)
from dpkd_audit.audit.training import canary_inclusion, one_run_bound, one_run_guesses


@pytest.mark.parametrize("correct, fdp, steinke", [(99, 4.8, 3.0), (70, 0.65, 0.47)])
def test_the_figures_computed_from_the_papers(correct, fdp, steinke):
    scores = np.concatenate([np.arange(100, 0, -1), np.zeros(900)]).astype(float)
    included = np.zeros(1000, dtype=bool)
    included[:correct] = True  # the 100 guessed "in": `correct` of them inserted
    included[100 + np.arange(0, 900, 2)] = True
    bound = one_run_bound(scores, included, epsilon=8.6, delta=1e-5, guesses_in=100,
                          guesses_out=0)
    assert (bound.guesses, bound.correct) == (100, correct)
    assert bound.epsilon_lower == pytest.approx(steinke, abs=0.02)
    assert bound.epsilon_lower_fdp == pytest.approx(fdp, abs=0.1)
    assert bound.epsilon_lower_fdp > bound.epsilon_lower


def test_margin_falls_as_the_claim_grows_and_edges():
    margins = [one_run_fdp_margin(1000, 100, 95, gaussian_mu(e, 1e-5), 0.05)
               for e in (0.5, 1.0, 2.0, 4.0, 8.0)]
    assert margins == sorted(margins, reverse=True)
    assert one_run_fdp_epsilon(1000, 100, 0, delta=1e-5) == 0.0
    assert one_run_fdp_epsilon(1000, 100, 50, delta=1e-5) == 0.0  # chance level
    assert 0.0 < one_run_fdp_epsilon(1000, 1000, 1000, delta=1e-5) <= FDP_MAX_EPSILON
    with pytest.raises(ValueError, match="delta"):
        one_run_fdp_epsilon(1000, 100, 90, delta=0.0)
    with pytest.raises(ValueError, match="correct"):
        one_run_fdp_epsilon(1000, 100, 101, delta=1e-5)


def test_the_bound_is_valid_on_the_idealised_gaussian_game():
    """120 one-run games of a mu0-GDP algorithm (true epsilon 2 at delta 1e-5): the 95% bound
    exceeds 2 in at most 6 expected; more than 16 has probability < 1e-3. Power: the median
    bound is reported by the assertion message."""
    delta, true_eps, trials, m = 1e-5, 2.0, 120, 1000
    mu0 = gaussian_mu(true_eps, delta)
    rng = np.random.default_rng(34)
    bounds = []
    for t in range(trials):
        included = canary_inclusion(m, seed=1000 + t)
        scores = mu0 * included + rng.standard_normal(m)
        guesses = one_run_guesses(scores, guesses_in=50, guesses_out=50)
        right = int(np.count_nonzero(guesses == np.where(included, 1, -1)))
        bounds.append(one_run_fdp_epsilon(m, 100, right, delta=delta))
    bounds = np.array(bounds)
    assert np.count_nonzero(bounds > true_eps) <= 16, np.median(bounds)
    assert np.median(bounds) > 0.5  # the analysis has power on this game


def test_reconstruction_game_bound_is_valid_and_has_power():
    """k-ary reconstruction (Mahloujifar-Melis-Chaudhuri's reconstruction game): each of 1,000
    canaries takes one of 10 values uniformly; the output per canary is (mu0 / sqrt 2) e_value +
    N(0, I_10), mu0-GDP under replace-one (two values' means are mu0 apart). The auditor names
    the argmax on the 100 canaries with the widest top-two gap and abstains on the rest. 120
    games at true epsilon 2 (delta 1e-5): the 95% bound exceeds 2 in at most 6 expected; more
    than 16 has probability < 1e-3. Measured: median 22 of 100 right (chance 10), median bound
    0.57, no exceedance; the same counts analysed as a 40-ary game (a wrong analysis) exceed 2
    in 107 of the 120 games, so the test fails on an over-reporting bound."""
    delta, true_eps, trials, m, choices = 1e-5, 2.0, 120, 1000, 10
    mu0 = gaussian_mu(true_eps, delta)
    rng = np.random.default_rng(35)
    bounds, rights = [], []
    for _ in range(trials):
        values = rng.integers(0, choices, size=m)
        scores = rng.standard_normal((m, choices))
        scores[np.arange(m), values] += mu0 / np.sqrt(2.0)
        top_two = np.sort(scores, axis=1)[:, -2:]
        guessed = np.argsort(top_two[:, 1] - top_two[:, 0])[-100:]
        right = int(np.count_nonzero(scores[guessed].argmax(axis=1) == values[guessed]))
        rights.append(right)
        bounds.append(one_run_fdp_epsilon(m, 100, right, delta=delta, choices=choices))
    bounds = np.array(bounds)
    assert np.count_nonzero(bounds > true_eps) <= 16, np.median(bounds)
    assert np.median(bounds) > 0.4, (np.median(bounds), np.median(rights))


def test_more_choices_make_the_same_counts_more_surprising():
    figures = [one_run_fdp_epsilon(1000, 100, 60, delta=1e-5, choices=k) for k in (2, 4, 10)]
    assert figures[0] == one_run_fdp_epsilon(1000, 100, 60, delta=1e-5)
    assert figures == sorted(figures) and figures[0] < figures[2]
    # 10 right of 100 is chance in a 10-ary game, far below chance in the membership game
    assert one_run_fdp_epsilon(1000, 100, 10, delta=1e-5, choices=10) == 0.0
    with pytest.raises(ValueError, match="choices"):
        one_run_fdp_epsilon(1000, 100, 60, delta=1e-5, choices=1)
