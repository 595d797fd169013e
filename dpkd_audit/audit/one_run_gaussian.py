"""The one-run audit's Gaussian estimate: fit IN and OUT scores, no thresholding (issue 34).

Agrawal, Wei, Singh, Magdon-Ismail, Zikas, "Let's Ask Gauss: Improved One-Run Privacy Auditing"
(arXiv:2606.12733, 2026): in white-box DP-SGD each canary's gradient-aligned signal, summed
over the steps, is a sum of many small independent contributions and so asymptotically
Gaussian; instead of thresholding the scores into "in" / "out" guesses (Steinke-Nasr-Jagielski
2023, Mahloujifar-Melis-Chaudhuri 2025), model the scores of the inserted (IN) and the left-out
(OUT) canaries as two one-dimensional Gaussians and read epsilon at delta off the closed-form
hockey-stick divergence between them. (Checked against the paper's abstract and published
summaries; the confidence construction below is this module's own, stated in full.)

The estimate, at confidence 1 - alpha:

1. Fit ``N(m_in, s_in^2)`` to the IN scores and ``N(m_out, s_out^2)`` to the OUT scores.
2. Four one-sided intervals, each at level alpha / 4, union-bounded (all four hold together
   with probability >= 1 - alpha under the Gaussian model), each exact for Gaussian samples:
   Student-t lower bound on ``m_in`` and upper bound on ``m_out`` (``n - 1`` degrees of
   freedom); chi-square upper bounds on ``s_in`` and ``s_out``
   (``s_hi = s sqrt((n - 1) / chi2_{alpha/4}(n - 1))``).
3. ``mu_lower = max(0, m_in_lower - m_out_upper) / max(s_in_upper, s_out_upper)``: under the
   four events it is below ``mu* = (m_in - m_out) / max(s_in, s_out)``.
4. ``epsilon_lower`` = the epsilon at ``delta`` of mu_lower-GDP (Dong-Roth-Su 2022):
   ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``, solved for eps
   (:func:`gdp_epsilon`). It is the smallest epsilon at delta of any Gaussian pair whose
   parameters lie in the confidence region: the pair ``N(m_in, s_in^2)``, ``N(m_out,
   s_out^2)`` has epsilon(delta) >= that of mu*-GDP (with unequal variances the threshold test
   at the mu*-GDP optimum is at least as good, in the direction where the narrower
   distribution's tail is the one tested), and epsilon(delta) of mu-GDP grows with mu.

Assumptions (the estimate is valid at its confidence only under them): the IN scores are
independent draws of one Gaussian and the OUT scores of another (asymptotic Gaussianity of the
summed white-box score; canaries independent given the inclusion draw); the score's
orientation ("higher = more likely inserted") was fixed before the run; the scores were
computed without looking at the inclusion. It is therefore an *estimate of epsilon under the
Gaussian model*, not a distribution-free bound: heavy tails, a mixture (a canary sampled in
few steps), or dependence between canaries can make it exceed the true epsilon. Steinke's
bound (:func:`~dpkd_audit.audit.training.one_run_bound`) needs none of these; the f-DP bound
(:mod:`~dpkd_audit.audit.one_run_fdp`) needs only the Gaussian shape of the claim.

Validated by simulation (tests/test_audit_one_run_gaussian.py): IN scores N(mu, 1), OUT N(0,
1), 1,000 canaries, 1,000 trials per mu, delta 1e-5: the 95% estimate exceeded the true
epsilon in none of the trials (the union bound is conservative); its mean was 0.52 of the true
epsilon at 2 and 0.77 at 8.6 (6.65; an ideal attacker's guesses give about 3.0 with Steinke's
analysis and 4.8 with the f-DP one on that game).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from scipy import optimize, stats

from dpkd_audit import _validate
from dpkd_audit._math.privacy import analytic_gaussian_delta

__all__ = [
    "GAUSSIAN_MAX_EPSILON",
    "MIN_PER_SIDE",
    "OneRunGaussian",
    "gdp_delta",
    "gdp_epsilon",
    "one_run_gaussian",
]

#: Largest epsilon reported (a larger one is reported as this value, as the other analyses do).
GAUSSIAN_MAX_EPSILON = 50.0
#: Fewest scores on each side (a variance needs two).
MIN_PER_SIDE = 2
#: One-sided intervals union-bounded: two means, two standard deviations.
_INTERVALS = 4


def gdp_delta(epsilon: float, mu: float) -> float:
    """delta(epsilon) of mu-GDP: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2).

    The Gaussian mechanism with sensitivity 1 and sigma = 1 / mu (Balle-Wang 2018, Thm 8,
    evaluated without cancellation by :func:`dpkd_audit._math.privacy.analytic_gaussian_delta`).
    0 for mu = 0; 1 for mu = inf.
    """
    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    return analytic_gaussian_delta(epsilon, 1.0 / mu)


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon >= 0 at which mu-GDP is (epsilon, delta)-DP.

    0 when even epsilon = 0 meets ``delta`` (mu <= 2 Phi^-1((1 + delta) / 2));
    :data:`GAUSSIAN_MAX_EPSILON` when no epsilon up to it does.

    Raises:
        ValueError: If ``mu`` is negative or NaN, or ``delta`` is not in (0, 1).
    """
    if not (isinstance(mu, (int, float, np.floating, np.integer)) and mu >= 0.0):
        raise ValueError(f"mu must be a real number >= 0 (inf allowed); got {mu!r}")
    mu = float(mu)
    delta = _validate.check_probability("delta", delta, open_low=True, open_high=True)

    def excess(eps: float) -> float:  # decreasing in eps
        return gdp_delta(eps, mu) - delta

    if excess(0.0) <= 0.0:
        return 0.0
    if excess(GAUSSIAN_MAX_EPSILON) > 0.0:
        return GAUSSIAN_MAX_EPSILON
    return float(optimize.brentq(excess, 0.0, GAUSSIAN_MAX_EPSILON, xtol=1e-10, rtol=1e-12))


@dataclasses.dataclass(frozen=True, kw_only=True)
class OneRunGaussian:
    """The Gaussian fit of a one-run audit's scores and the epsilon it gives.

    Attributes:
        epsilon_lower: Epsilon at ``delta`` of mu_lower-GDP: the estimate at ``confidence``
            under the Gaussian model (module docstring); 0 when the fit shows no shift.
        epsilon_estimate: The plug-in value (mu_estimate-GDP): no confidence, for comparison.
        mu_lower: Lower confidence bound on ``(m_in - m_out) / max(s_in, s_out)``.
        mu_estimate: Its plug-in value.
        delta: The delta at which epsilon is read.
        confidence: Joint confidence of the four intervals.
        n_in, n_out: Scores on each side.
        mean_in, mean_out, std_in, std_out: The fitted parameters (std: n - 1 denominator).
        mean_in_lower, mean_out_upper: Student-t bounds, each at level (1 - confidence) / 4.
        std_in_upper, std_out_upper: Chi-square bounds, each at level (1 - confidence) / 4.
        method: The construction in words (for records).
    """

    epsilon_lower: float
    epsilon_estimate: float
    mu_lower: float
    mu_estimate: float
    delta: float
    confidence: float
    n_in: int
    n_out: int
    mean_in: float
    mean_out: float
    std_in: float
    std_out: float
    mean_in_lower: float
    mean_out_upper: float
    std_in_upper: float
    std_out_upper: float
    method: str = ("Gaussian fit of IN and OUT scores (Agrawal et al. 2026); one-sided "
                   "Student-t bounds on the two means and chi-square bounds on the two "
                   "standard deviations, each at (1 - confidence) / 4, union-bounded; "
                   "mu_lower = (mean_in_lower - mean_out_upper) / max(std upper bounds); "
                   "epsilon of mu_lower-GDP at delta. An estimate under the Gaussian model, "
                   "not a distribution-free bound")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly record (an infinite mu, from scores without spread, as None)."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in dataclasses.asdict(self).items()}


def _side(values: np.ndarray, level: float, upper_mean: bool) -> tuple[float, float, float,
                                                                         float]:
    n = values.size
    mean = float(values.mean())
    std = float(values.std(ddof=1))
    t = float(stats.t.ppf(1.0 - level, n - 1))
    half = t * std / math.sqrt(n)
    mean_bound = mean + half if upper_mean else mean - half
    std_upper = std * math.sqrt((n - 1) / float(stats.chi2.ppf(level, n - 1)))
    return mean, std, mean_bound, std_upper


def one_run_gaussian(scores: Any, included: Any, *, delta: float,
                     confidence: float = 0.95) -> OneRunGaussian:
    """Epsilon at ``delta`` estimated from Gaussian fits of the IN and OUT canaries' scores.

    The construction and its assumptions are in the module docstring: an estimate valid at
    ``confidence`` if the scores of each side are independent Gaussian draws, not a
    distribution-free bound.

    Args:
        scores: ``(m,)`` canary scores, higher meaning "more likely inserted" (finite).
        included: ``(m,)`` booleans, which canaries were inserted (at least
            :data:`MIN_PER_SIDE` on each side).
        delta: The delta at which epsilon is read, in (0, 1).
        confidence: Joint confidence of the parameter bounds, in (0, 1).

    Returns:
        The :class:`OneRunGaussian`.

    Raises:
        ValueError: If an argument is out of range (the message names it).
    """
    arr = np.asarray(scores, dtype=np.float64)
    if arr.ndim != 1 or not np.all(np.isfinite(arr)):
        raise ValueError(f"scores must be a finite 1-D array; got shape {arr.shape}")
    inc = np.asarray(included)
    if inc.shape != arr.shape or inc.dtype != np.bool_:
        raise ValueError(f"included must be a boolean array of the scores' shape {arr.shape}; "
                         f"got dtype {inc.dtype}, shape {inc.shape}")
    delta = _validate.check_probability("delta", delta, open_low=True, open_high=True)
    confidence = _validate.check_probability("confidence", confidence, open_low=True,
                                             open_high=True)
    x_in, x_out = arr[inc], arr[~inc]
    if min(x_in.size, x_out.size) < MIN_PER_SIDE:
        raise ValueError(f"included must mark at least {MIN_PER_SIDE} canaries inserted and "
                         f"{MIN_PER_SIDE} left out; got {x_in.size} and {x_out.size}")
    level = (1.0 - confidence) / _INTERVALS
    mean_in, std_in, mean_in_lower, std_in_upper = _side(x_in, level, upper_mean=False)
    mean_out, std_out, mean_out_upper, std_out_upper = _side(x_out, level, upper_mean=True)

    def ratio(shift: float, scale: float) -> float:
        if shift <= 0.0:
            return 0.0
        return math.inf if scale == 0.0 else shift / scale

    mu_lower = ratio(mean_in_lower - mean_out_upper, max(std_in_upper, std_out_upper))
    mu_estimate = ratio(mean_in - mean_out, max(std_in, std_out))
    return OneRunGaussian(
        epsilon_lower=gdp_epsilon(mu_lower, delta),
        epsilon_estimate=gdp_epsilon(mu_estimate, delta), mu_lower=mu_lower,
        mu_estimate=mu_estimate, delta=delta, confidence=confidence, n_in=int(x_in.size),
        n_out=int(x_out.size), mean_in=mean_in, mean_out=mean_out, std_in=std_in,
        std_out=std_out, mean_in_lower=mean_in_lower, mean_out_upper=mean_out_upper,
        std_in_upper=std_in_upper, std_out_upper=std_out_upper)
