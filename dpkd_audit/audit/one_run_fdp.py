"""The one-run audit analysed through a Gaussian trade-off curve (f-DP), beside Steinke's.

Mahloujifar, Melis, Chaudhuri, "Auditing f-Differential Privacy in One Run", ICML 2025: the same
game as Steinke-Nasr-Jagielski 2023 (m canaries, each inserted independently with probability
1/2; after one run the auditor makes k guesses, "in" or "out", and abstains on the rest; c of
them are right), but the null hypothesis is that the algorithm is f-DP for the trade-off curve
of the Gaussian mechanism that meets the claimed (epsilon, delta), i.e. mu-GDP with mu = 1 /
sigma(epsilon, delta) (Dong-Roth-Su 2022; sigma by Balle-Wang 2018, Thm 8). Their recursive
bound on the mass of "c correct out of k" under an f-DP algorithm (the algorithm with abstention
and a cap, Section 4: ``audit_rh_with_cap`` in their notation; google-deepmind/jax_privacy's
``auditing`` module implements the same recursion) is much tighter than Steinke's binomial
bound when most guesses are right: with 1,000 canaries and 99 of 100 guesses right, about 4.8
instead of 3.0 at delta 1e-5 (tests/test_audit_one_run_fdp.py).

Reconstruction-style games (the paper's reconstruction game; ``k`` in
facebookresearch/PrivacyGuard's ``FDPAnalysisNode``): each canary takes one of ``choices``
values, drawn uniformly and independently, and each guess names one value. Neighbouring inputs
then differ in one canary's value (replace-one), a wrong guess has ``choices - 1`` ways to
happen, and the recursion's lower bound on the wrong mass carries that factor: h' = max(h,
(choices - 1) Phi(Phi^-1(r) - mu)). ``choices = 2`` is the membership game above (in / out).
Validity on the idealised k-ary Gaussian game is tested like the membership one
(tests/test_audit_one_run_fdp.py).

What a bound means: it refutes "the algorithm is at least as private as the Gaussian mechanism
calibrated to (epsilon, delta)" at the stated confidence. That hypothesis implies (epsilon,
delta)-DP but is stronger, and it is **not** implied by a DP-SGD claim: DP-SGD's accounting is
the privacy-loss distribution of the Poisson-subsampled Gaussian, whose delta(epsilon) lies above
that Gaussian curve for epsilon a little above the claim (measured by
``benchmarks/one_run_design.py``: the MNIST teachers' schedules cross it at 8.75 / 7.25 for claims
8.62 / 7.24, by 4x at epsilon 10), so a figure above the claim would refute the Gaussian
hypothesis, not (epsilon, delta)-DP. The crossing is at false-positive rates below 1e-7, out of
reach of any game with a realistic number of canaries. A bound below the claim is not evidence
of privacy. Assumptions as for
:func:`~dpkd_audit.audit.training.one_run_bound` (independent inclusion with probability 1/2,
scores computed without looking at the inclusion, guess counts fixed in advance).
"""

from __future__ import annotations

import math

from scipy import optimize, special

from dpkd_audit import _validate
from dpkd_audit._math.privacy import calibrate_analytic_gaussian

__all__ = ["FDP_MAX_EPSILON", "gaussian_mu", "one_run_fdp_epsilon", "one_run_fdp_margin"]

#: Largest epsilon the f-DP bound searches (reported as this value when even it is refuted).
FDP_MAX_EPSILON = 50.0
#: Smallest epsilon searched (the Gaussian calibration's sigma grows like 1 / epsilon).
_MIN_EPSILON = 1e-6


def gaussian_mu(epsilon: float, delta: float) -> float:
    """The mu of the Gaussian mechanism exactly (epsilon, delta)-DP: 1 / sigma (sensitivity 1).

    Balle-Wang 2018, Theorem 8 (:func:`dpkd_audit._math.privacy.calibrate_analytic_gaussian`);
    mu-GDP in the sense of Dong-Roth-Su 2022 (a shift of mu standard deviations).
    """
    return 1.0 / calibrate_analytic_gaussian(epsilon, delta, 1.0)


def one_run_fdp_margin(canaries: int, guesses: int, correct: int, mu: float,
                       significance: float, choices: int = 2) -> float:
    """Positive when ``correct`` of ``guesses`` right is too many for a mu-GDP algorithm.

    The recursion of Mahloujifar-Melis-Chaudhuri 2025 (Section 4, abstention with a cap): start
    from the masses r = alpha c / m (right guesses) and h = alpha (k - c) / m (wrong ones); for
    i = c - 1 down to 0, the wrong mass must be at least the Gaussian blow-up inverse of the
    right one, h' = max(h, (choices - 1) Phi(Phi^-1(r) - mu)), and the right mass grows with it,
    r' = min(1, r + i / (k - i) (h' - h)). A mu-GDP algorithm cannot give c right guesses with
    probability alpha when the final r + h exceeds the k / m the guesses can hold.

    Args:
        canaries: m (>= 1).
        guesses: k, in [1, m].
        correct: c, in [0, k].
        mu: The hypothesised GDP parameter (>= 0; inf: no privacy, never refuted).
        significance: alpha = 1 - confidence, in (0, 1).
        choices: Values a canary can take (2: the membership game; more: reconstruction).
    """
    m, k, c = canaries, guesses, correct
    if c == 0 or math.isinf(mu):
        return -1.0
    wrong_ways = choices - 1
    r = significance * c / m
    h = significance * (k - c) / m
    for i in range(c - 1, -1, -1):
        h_new = max(h, wrong_ways * float(special.ndtr(special.ndtri(r) - mu)))
        if h_new == h:  # nothing moves any more
            break
        r = min(r + i / (k - i) * (h_new - h), 1.0)
        h = h_new
    return r + h - k / m


def one_run_fdp_epsilon(canaries: int, guesses: int, correct: int, *, delta: float,
                        confidence: float = 0.95, choices: int = 2) -> float:
    """Largest epsilon whose Gaussian f-DP claim ``correct`` of ``guesses`` right refutes.

    The claim at epsilon is mu(epsilon, delta)-GDP (:func:`gaussian_mu`); its margin
    (:func:`one_run_fdp_margin`) falls as epsilon grows, and the root is found by bisection.

    Args:
        canaries: m (an integer >= 1).
        guesses: k, guesses made (abstentions excluded), in [0, m].
        correct: c, correct guesses, in [0, k].
        delta: The claim's delta, in (0, 1) (a Gaussian curve is never (epsilon, 0)-DP).
        confidence: In (0, 1).
        choices: Values each canary takes, uniformly at random (an integer >= 2): 2 is the
            membership game ("in" / "out" guesses); more is a reconstruction game, each guess
            naming one value, the claim then under replace-one neighbours.

    Returns:
        The lower bound (0 when no claim is refuted; :data:`FDP_MAX_EPSILON` when every
        searched claim is).

    Raises:
        ValueError: If an argument is out of range (the message names it).
    """
    m = _validate.check_int("canaries", canaries, minimum=1)
    k = _validate.check_int("guesses", guesses, minimum=0, maximum=m)
    c = _validate.check_int("correct", correct, minimum=0, maximum=k)
    delta = _validate.check_probability("delta", delta, open_low=True, open_high=True)
    confidence = _validate.check_probability("confidence", confidence, open_low=True,
                                             open_high=True)
    choices = _validate.check_int("choices", choices, minimum=2)
    significance = 1.0 - confidence
    if c == 0:
        return 0.0

    def margin(epsilon: float) -> float:
        return one_run_fdp_margin(m, k, c, gaussian_mu(epsilon, delta), significance, choices)

    if margin(_MIN_EPSILON) <= 0.0:
        return 0.0
    if margin(FDP_MAX_EPSILON) > 0.0:
        return FDP_MAX_EPSILON
    return float(optimize.brentq(margin, _MIN_EPSILON, FDP_MAX_EPSILON, xtol=1e-6,
                                 rtol=1e-9))
