"""The one-run audit's Gaussian estimate (Agrawal et al. 2026): IN and OUT scores fitted.

Validity by simulation of the idealised Gaussian mechanism at known mu: each canary is
inserted with probability 1/2, its score is N(mu, 1) if inserted and N(0, 1) if not (a mu-GDP
algorithm per canary), so the true epsilon at delta is that of mu-GDP. Over 1,000 trials per
mu (1,000 canaries each, seed fixed), the 95% estimate may exceed the true epsilon in a
Binomial(1,000, 0.05) number of trials at most if it is valid; the test allows the 1 - 1e-6
quantile of that Binomial (86), i.e. a false-failure rate below 1e-6 for a valid estimate
(and 0 with the fixed seed). A positive control (the plug-in estimate, no confidence bounds)
must exceed it in a third to a half of the trials, so the check can fail.

Measured (this file's seeds; 1,000 canaries, delta 1e-5, 95%; the estimate's mean over the
1,000 trials, its 5-95% range, mean / true epsilon = power, and the trials where it exceeds
the true epsilon, beside the plug-in value's):

======  ============  =============  =========  =====  ===========  ==================
mu      true epsilon  mean estimate  5-95%      power  exceedances  plug-in exceedances
======  ============  =============  =========  =====  ===========  ==================
0.5016  2.00          1.03           0.66-1.43  0.52   0 / 1,000    449 / 1,000
1.7685  8.60          6.65           6.04-7.30  0.77   0 / 1,000    325 / 1,000
======  ============  =============  =========  =====  ===========  ==================

(For comparison on the same game at the claim 8.6 and an ideal attacker, the issue's
figures: Steinke's analysis about 3.0, the f-DP analysis about 4.8.) No exceedance at all: the
union of four intervals at 1.25% each is conservative (the two standard-deviation bounds enter
through their maximum).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from dpkd_audit.audit.one_run_fdp import gaussian_mu
from dpkd_audit.audit.one_run_gaussian import (
    GAUSSIAN_MAX_EPSILON,
    gdp_delta,
    gdp_epsilon,
    one_run_gaussian,
)
from dpkd_audit.audit.training import one_run_bound

TRIALS = 1000
CANARIES = 1000
DELTA = 1e-5
CONFIDENCE = 0.95
#: A valid estimate's exceedance count is stochastically below Binomial(TRIALS, 0.05).
ALLOWED = int(stats.binom.ppf(1.0 - 1e-6, TRIALS, 1.0 - CONFIDENCE))


def _simulate(mu: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lower, plug_in = np.empty(TRIALS), np.empty(TRIALS)
    for t in range(TRIALS):
        included = rng.random(CANARIES) < 0.5
        scores = mu * included + rng.standard_normal(CANARIES)
        fit = one_run_gaussian(scores, included, delta=DELTA, confidence=CONFIDENCE)
        lower[t], plug_in[t] = fit.epsilon_lower, fit.epsilon_estimate
    return lower, plug_in


@pytest.mark.parametrize("true_eps, seed, power", [(2.0, 341, 0.45), (8.6, 342, 0.72)])
def test_valid_on_the_idealised_gaussian_mechanism_with_power(true_eps, seed, power):
    mu = gaussian_mu(true_eps, DELTA)
    truth = gdp_epsilon(mu, DELTA)
    assert truth == pytest.approx(true_eps, rel=1e-9)
    lower, plug_in = _simulate(mu, seed)
    exceed = int(np.count_nonzero(lower > truth))
    assert ALLOWED == 86
    assert exceed <= ALLOWED, (exceed, lower.mean())
    # positive control: without the confidence bounds a third to a half of the trials exceed
    # (measured 449 / 325; below half: the max of two fitted deviations is biased up)
    assert np.count_nonzero(plug_in > truth) > 250
    assert lower.mean() / truth > power, lower.mean()  # measured 0.52 / 0.77


def test_gdp_curve_and_its_inverse():
    mu = gaussian_mu(3.0, 1e-6)
    # the textbook formula where it does not cancel
    eps = 3.0
    textbook = (stats.norm.cdf(-eps / mu + mu / 2)
                - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))
    assert gdp_delta(eps, mu) == pytest.approx(textbook, rel=1e-6)
    assert gdp_delta(eps, mu) == pytest.approx(1e-6, rel=1e-6)
    assert gdp_epsilon(mu, 1e-6) == pytest.approx(3.0, rel=1e-9)
    assert gdp_epsilon(0.0, 1e-5) == 0.0
    assert gdp_epsilon(1e-7, 1e-5) == 0.0  # (0, delta)-DP already
    assert gdp_epsilon(math.inf, 1e-5) == GAUSSIAN_MAX_EPSILON
    assert gdp_epsilon(40.0, 1e-5) == GAUSSIAN_MAX_EPSILON
    assert [gdp_epsilon(m, 1e-5) for m in (0.5, 1.0, 2.0)] == sorted(
        gdp_epsilon(m, 1e-5) for m in (0.5, 1.0, 2.0))
    with pytest.raises(ValueError, match="mu"):
        gdp_epsilon(-1.0, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        gdp_epsilon(1.0, 0.0)


def test_fit_fields_intervals_and_edges():
    rng = np.random.default_rng(5)
    included = np.arange(400) % 2 == 0
    scores = 2.0 * included + rng.standard_normal(400) * np.where(included, 1.0, 1.5)
    fit = one_run_gaussian(scores, included, delta=1e-5)
    assert (fit.n_in, fit.n_out) == (200, 200)
    assert fit.mean_in_lower < fit.mean_in and fit.mean_out_upper > fit.mean_out
    assert fit.std_in_upper > fit.std_in and fit.std_out_upper > fit.std_out
    assert fit.std_out > fit.std_in  # unequal variances: the larger one is the scale
    assert fit.mu_estimate == pytest.approx((fit.mean_in - fit.mean_out) / fit.std_out)
    assert 0.0 < fit.mu_lower < fit.mu_estimate
    assert 0.0 < fit.epsilon_lower < fit.epsilon_estimate
    json.dumps(fit.to_dict(), allow_nan=False)
    # no shift (or the wrong way round): 0, never negative
    assert one_run_gaussian(-scores, included, delta=1e-5).epsilon_lower == 0.0
    # scores without spread: infinite mu, the epsilon cap, a JSON-safe record
    flat = one_run_gaussian(included * 1.0, included, delta=1e-5)
    assert flat.epsilon_lower == GAUSSIAN_MAX_EPSILON and flat.to_dict()["mu_lower"] is None
    json.dumps(flat.to_dict(), allow_nan=False)


@pytest.mark.parametrize("kwargs, name", [
    ({"scores": [1.0, np.nan, 0.0, 0.5]}, "scores"),
    ({"included": np.array([True, False, False, False])}, "included"),
    ({"included": [1, 0, 1, 0]}, "included"),
    ({"delta": 0.0}, "delta"),
    ({"confidence": 1.0}, "confidence"),
])
def test_bad_input_is_refused_by_name(kwargs, name):
    args = {"scores": [1.0, 2.0, 0.0, 0.5], "included": np.array([True, True, False, False]),
            "delta": 1e-5}
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        one_run_gaussian(args.pop("scores"), args.pop("included"), **args)


def test_one_run_bound_carries_the_estimate_beside_the_other_analyses():
    rng = np.random.default_rng(9)
    included = rng.random(1000) < 0.5
    scores = gaussian_mu(8.6, 1e-5) * included + rng.standard_normal(1000)
    bound = one_run_bound(scores, included, epsilon=8.6, delta=1e-5, guesses_in=50,
                          guesses_out=50)
    assert bound.gaussian is not None
    assert bound.epsilon_lower_gaussian == bound.gaussian.epsilon_lower
    assert bound.epsilon_lower < bound.epsilon_lower_fdp < bound.epsilon_lower_gaussian < 8.6
    record = bound.to_dict()
    assert record["gaussian"]["epsilon_lower"] == bound.epsilon_lower_gaussian
    json.dumps(record, allow_nan=False)
    # delta = 0: a Gaussian pair is never (epsilon, 0)-DP, no estimate
    assert one_run_bound(scores, included, epsilon=8.6, guesses_in=50,
                         guesses_out=50).gaussian is None


def test_each_interval_is_at_a_quarter_of_the_level():
    # The four one-sided intervals are union-bounded: each at (1 - confidence) / 4, recomputed
    # here from scipy's Student-t and chi-square quantiles (one interval at the full level
    # would raise the bound: 0.633 -> 0.964 in an earlier mutation check).
    rng = np.random.default_rng(11)
    n = 300
    scores = np.concatenate([rng.normal(0.8, 1.0, n), rng.normal(0.0, 1.3, n)])
    included = np.arange(2 * n) < n
    fit = one_run_gaussian(scores, included, delta=1e-5, confidence=0.9)
    level = 0.1 / 4
    x_in, x_out = scores[:n], scores[n:]
    t = stats.t.ppf(1 - level, n - 1)
    chi = stats.chi2.ppf(level, n - 1)
    assert fit.mean_in_lower == pytest.approx(
        x_in.mean() - t * x_in.std(ddof=1) / np.sqrt(n), rel=1e-12)
    assert fit.mean_out_upper == pytest.approx(
        x_out.mean() + t * x_out.std(ddof=1) / np.sqrt(n), rel=1e-12)
    assert fit.std_in_upper == pytest.approx(x_in.std(ddof=1) * np.sqrt((n - 1) / chi),
                                             rel=1e-12)
    assert fit.std_out_upper == pytest.approx(x_out.std(ddof=1) * np.sqrt((n - 1) / chi),
                                              rel=1e-12)
    assert fit.mu_lower == pytest.approx(
        (fit.mean_in_lower - fit.mean_out_upper) / max(fit.std_in_upper, fit.std_out_upper),
        rel=1e-12)
