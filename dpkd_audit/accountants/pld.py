"""Privacy loss distributions (PLD): near-exact composition on dp_accounting's PLD classes.

The privacy loss distribution of a pair of output distributions (P, Q) is the law of
L = ln(P(o)/Q(o)) for o ~ P; composition convolves PLDs, and the hockey-stick divergence
delta(eps) = E[(1 - e^(eps - L))_+] (plus the mass at L = +inf) is the exact (eps, delta)
curve (Meiser-Mohammadi 2018; Sommer-Meiser-Mohammadi 2019; Koskela-Jalko-Honkela 2020). The
backend is ``dp_accounting.pld`` (Google) in its *pessimistic* mode, with four changes that keep
its numerical quirks from reaching users (each measured in tests/test_accountant_pld.py):

1. Finite PLDs (pure and (eps, delta) declarations, randomized response) are discretised here by
   pessimistic connect-the-dots (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, PETS 2022,
   Algorithm 1) on the exact curve. dp_accounting's constructors for them
   (``from_privacy_parameters``, ``from_randomized_response``) round every atom *up* to the
   grid, which drifts by up to one grid step per composition: 10^4 compositions of a
   0.05123-DP event come out 0.51 too large at delta = 1e-5.
2. k-fold compositions of a two-atom pair (every pure or (eps, delta) event) are computed
   exactly, as a binomial (Kairouz-Oh-Viswanath 2015, Thm 3.3), then discretised once: no FFT.
3. Other self-compositions use repeated squaring of dp_accounting's FFT convolution, 10-1000x
   more accurate in the tails than its one-shot FFT power ``self_compose``.
4. Epsilon and delta are evaluated here, in log space, from the pmf: dp_accounting's evaluation
   drifts along the grid by repeated float addition, underflows e^-L above L ~ 745, and sums the
   FFT's negative round-off, which put epsilon *below* the exact value at small deltas (by 0.1
   at delta = 1e-12 after 3000 compositions). Negative round-off is counted as zero here.

Additive noise (Laplace, Gaussian, discrete Laplace, discrete Gaussian, Poisson-subsampled
Laplace/Gaussian) uses dp_accounting's pessimistic connect-the-dots constructors.

Event -> PLD (one occurrence; replace-one neighbours unless stated):

- ``LaplaceDpEvent(b)``: Lap(0, b) vs Lap(1, b) (``from_laplace_mechanism(b, sensitivity=1)``).
- ``GaussianDpEvent(s)`` (and ``CalibratedGaussianDpEvent``): N(0, s^2) vs N(1, s^2). All
  Gaussian releases are merged exactly into one Gaussian with 1/s^2 = sum_i count_i / s_i^2
  (a composition of Gaussian mechanisms is a Gaussian mechanism whose shift is the Euclidean
  norm of the shifts: Dong-Roth-Su 2022, Cor. 3.3), so a million Gaussian queries cost one PLD.
- ``DiscreteLaplaceDpEvent(a, Delta)``: ``from_discrete_laplace_mechanism(a, Delta)``.
- ``DiscreteGaussianDpEvent(sigma, Delta)``: ``from_discrete_gaussian_mechanism(sigma, Delta)``,
  the exact 1-D curve of Canonne-Kamath-Steinke 2020, Thm 7 (the event's own scope).
- ``RandomizedResponseDpEvent(p, k)``: its exact three-atom PLD (REPLACE_ONE only).
- pure epsilon events of this package (``PureDpEvent``, ``CollisionDpEvent``,
  ``SelectiveRandomizedResponseDpEvent``, ``ShuffledLocalDpEvent`` *without* amplification):
  binary randomized response with that epsilon, which dominates every eps-DP pair
  (Kairouz-Oh-Viswanath 2015, Thm 2.2 / Murtagh-Vadhan 2016).
- ``ApproxDpEvent`` / ``ShuffledHistogramDpEvent`` (declared (eps, delta)): the dominating pair
  of (eps, delta)-DP: +inf w.p. delta, +-eps with (1 - delta) times the binary-RR weights
  (KOV 2015, Thm 2.2; dp_accounting ``from_privacy_parameters``).
- ``BitRandomizedResponseDpEvent``: ``bits_changed``-fold composition of binary RR with
  ``epsilon_per_bit`` (the other bits are identically distributed under both neighbours), which is
  tighter than the declared ``bits_changed * epsilon_per_bit``.
- ``LaplaceNoisyMaxDpEvent(b)``: the noisy vote histogram (of which the argmax is a
  post-processing) changes in two coordinates by 1 each: two Laplace(b) releases. This is the
  exact PLD of the histogram and is dominated by binary RR with the declared 2/b.
  Data-independent: ``votes`` are ignored.
- ``GaussianNoisyMaxDpEvent(sigma)``: the histogram shift (-1, +1) has L2 norm sqrt(2): one
  Gaussian release with noise multiplier sigma / sqrt(2). ``votes`` are ignored.
- ``PoissonSampledDpEvent(q, Laplace | Gaussian)``: subsampled PLDs for ADD_OR_REMOVE_ONE only
  (the add and remove directions, Zhu-Dong-Wang 2022); refused under REPLACE_ONE.
- any other event declaring an (eps, delta) through :class:`dpkd_audit.events.DeclaredGuarantee`
  goes through the (eps, delta) dominating pair.

Sensitivity convention: a noise multiplier is noise scale / sensitivity, the sensitivity being
measured *under the accountant's neighbouring relation*, so the two neighbouring outputs are
shifted by exactly one noise unit whatever the relation. This is the convention of this package's
mechanisms and of :mod:`dpkd_audit.accountants.pure` (Laplace: eps = 1/b), and of dp_accounting's
``RdpAccountant``. dp_accounting's own ``PLDAccountant`` under REPLACE_ONE instead doubles the
shift of a ``GaussianDpEvent`` (its ``AdjacencyType.REPLACE``) and refuses ``LaplaceDpEvent``.

Accuracy (value_discretization_interval h = 1e-4; tolerances asserted in
tests/test_accountant_pld.py against independent references): never below an exact epsilon by
more than 1e-8 (floating-point rounding); above it by at most 1e-8 for one Laplace or Gaussian
release (one grid step h in the last grid cell below the largest loss) and for k-fold binary RR
(binomial), by at most 2 k h^2 + 1e-6 for other k-fold compositions at delta >= 1e-8 (FFT
round-off grows at smaller deltas, always on the pessimistic side in the tests: ~1e-5 at
delta = 1e-10). ``target_delta = 0`` is answered exactly from the events
(:meth:`PLDAccountant.pure_epsilon`). Composing k copies one by one, as one k-fold
``SelfComposedDpEvent`` or with ``count=k`` gives identical results (the history is grouped
before anything is computed); dp_accounting's sequential and one-shot compositions agree with
them to 1e-8.
"""

from __future__ import annotations

import copy
import functools
import math
import numbers
from collections import Counter
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as _pld
from scipy import special, stats

from dpkd_audit import _validate
from dpkd_audit._privacy_math import analytic_gaussian_delta, smallest_satisfying
from dpkd_audit.accountants.base import Accountant, BoundKind, Epsilon, NeighboringRelation
from dpkd_audit.events import (
    ApproxDpEvent,
    BitRandomizedResponseDpEvent,
    CollisionDpEvent,
    DeclaredGuarantee,
    DiscreteGaussianDpEvent,
    GaussianNoisyMaxDpEvent,
    LaplaceNoisyMaxDpEvent,
    PureDpEvent,
    SelectiveRandomizedResponseDpEvent,
    ShuffledHistogramDpEvent,
    ShuffledLocalDpEvent,
)

__all__ = [
    "DEFAULT_VALUE_DISCRETIZATION_INTERVAL",
    "PLDAccountant",
    "laplace_delta",
    "laplace_epsilon",
]

#: Default grid step of the privacy-loss values (dp_accounting's default).
DEFAULT_VALUE_DISCRETIZATION_INTERVAL = 1e-4

# Gaussian PLDs drop noise mass below e^-50 (~2e-22) into the +inf atom (pessimistic).
_LOG_MASS_TRUNCATION = -50.0

_Spec = tuple  # a hashable description of one PLD: ("kind", parameters...)
_NON_PRIVATE: _Spec = ("non-private",)


# =========================================================================== closed forms


def laplace_delta(epsilon: float, noise_multiplier: float) -> float:
    """Exact delta(epsilon) of one Laplace release: Lap(0, b) vs Lap(1, b), b = noise_multiplier.

    With eps0 = 1/b, the privacy loss at output x is L(x) = (|x - 1| - |x|)/b: +eps0 for x <= 0,
    -eps0 for x >= 1 and (1 - 2x)/b in between. The hockey-stick divergence (Barthe-Olmedo 2013;
    Balle-Barthe-Gaboardi 2018, Def. 2) delta(eps) = P[L > eps] - e^eps Q[L > eps] counts the
    outputs x < x* = (1 - b eps)/2; with P[X < x*] = 1 - e^(-x*/b)/2 and
    Q[X < x*] = e^((x* - 1)/b)/2 both terms are e^((eps - eps0)/2)/2, so

        delta(eps) = 1 - e^((eps - eps0)/2)   for |eps| < eps0,  0 for eps >= eps0,

    and 1 - e^eps for eps <= -eps0. (The same curve is dp_accounting's
    ``LaplacePrivacyLoss.get_delta_for_epsilon``; tests check it against mpmath quadrature.)

    Args:
        epsilon: Real epsilon (negative values are allowed: the curve is defined for all reals).
        noise_multiplier: Laplace scale / sensitivity, finite and > 0.

    Returns:
        The exact delta.
    """
    b = _validate.check_positive("noise_multiplier", noise_multiplier)
    if not (isinstance(epsilon, numbers.Real) and not math.isnan(epsilon)):
        raise ValueError(f"epsilon must be a real number; got {epsilon!r}")
    eps0 = 1.0 / b
    if epsilon >= eps0:
        return 0.0
    if epsilon <= -eps0:
        return float(-math.expm1(epsilon))
    return float(-math.expm1(0.5 * (epsilon - eps0)))


def laplace_epsilon(delta: float, noise_multiplier: float) -> float:
    """Exact smallest epsilon >= 0 of one Laplace release at ``delta`` (inverse of laplace_delta).

    eps(delta) = max(0, 1/b + 2 ln(1 - delta)), from delta = 1 - e^((eps - 1/b)/2).

    Args:
        delta: Target delta in [0, 1].
        noise_multiplier: Laplace scale / sensitivity, finite and > 0.
    """
    delta = _validate.check_probability("delta", delta)
    b = _validate.check_positive("noise_multiplier", noise_multiplier)
    if delta == 1.0:
        return 0.0
    return max(0.0, 1.0 / b + 2.0 * math.log1p(-delta))


# =========================================================================== PLD building


#: Same threshold as dp_accounting's sparse/dense switch (pld_pmf._MAX_PMF_SPARSE_SIZE).
_MAX_SPARSE_POINTS = 1000


def _connect_dots(grid: np.ndarray, deltas: np.ndarray, interval: float) -> Any:
    """Dense pessimistic PLD pmf supported on ``grid * interval`` (and +inf).

    Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, "Connect the Dots", PETS 2022, Algorithm 1:
    with eps_i = grid_i * interval and delta_i the exact hockey-stick divergence at eps_i, put
    y_{i-1} + z_i on eps_i and delta_m on +inf, where y_0 = 1 - delta_1,
    y_i = (delta_{i+1} - delta_i)/(e^(eps_i - eps_{i+1}) - 1) and
    z_i = (delta_{i+1} - delta_i)/(e^(eps_{i+1} - eps_i) - 1) (z_m = 0). Its hockey-stick curve
    interpolates the exact one linearly in e^eps between grid points; the exact curve is convex
    in e^eps (a mean of hinge functions), so the result dominates the original pair (and keeps
    its mean loss: no per-composition drift). Same formula as dp_accounting's
    ``create_pmf_pessimistic_connect_dots``, written with numpy (no dict of the whole range).
    """
    deltas = np.minimum.accumulate(np.clip(deltas, 0.0, 1.0))
    gaps = np.diff(grid) * interval
    steps = np.diff(deltas)
    probs = np.concatenate([[1.0 - deltas[0]], steps / np.expm1(-gaps)])  # y_{i-1}
    probs[:-1] += steps / np.expm1(gaps)  # z_i
    probs = np.maximum(probs, 0.0)
    span = int(grid[-1] - grid[0]) + 1
    if grid.size <= _MAX_SPARSE_POINTS or span > 16 * grid.size:
        # few or far-apart atoms (e.g. a binomial composition of large epsilons): keep sparse
        return pld_pmf.SparsePLDPmf(dict(zip(grid.tolist(), probs.tolist(), strict=True)),
                                    interval, float(deltas[-1]), True)
    dense = np.zeros(span)
    dense[grid - grid[0]] = probs
    return pld_pmf.DensePLDPmf(interval, int(grid[0]), dense, float(deltas[-1]), True)


def _finite_pld(losses: np.ndarray, probs: np.ndarray, infinity_mass: float,
                interval: float) -> _pld.PrivacyLossDistribution:
    """Pessimistic connect-the-dots PLD of a finite symmetric privacy-loss distribution.

    The grid is the two grid points bracketing every atom, so the discretised curve is exact
    at every grid point and between atoms. delta(eps) = inf_mass + sum_{L > eps} p (1 - e^(eps-L))
    is evaluated for all grid points at once from suffix sums (p and p e^-L, the latter in log
    space so that losses in the thousands do not underflow).
    """
    order = np.argsort(losses)
    losses = np.asarray(losses, dtype=np.float64)[order]
    probs = np.asarray(probs, dtype=np.float64)[order]
    grid = np.unique(np.concatenate([np.floor(losses / interval),
                                     np.ceil(losses / interval)])).astype(np.int64)
    points = grid * interval
    above = np.searchsorted(losses, points, side="right")  # first atom strictly above
    mass_above = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])
    with np.errstate(divide="ignore"):
        log_terms = np.log(probs) - losses
    log_lower = np.concatenate([np.logaddexp.accumulate(log_terms[::-1])[::-1], [-np.inf]])
    deltas = infinity_mass + mass_above[above] - np.exp(points + log_lower[above])
    return _pld.PrivacyLossDistribution(_connect_dots(grid, deltas, interval))


#: Atoms of an exact binomial composition below this probability are merged (pessimistically).
_LOG_ATOM_FLOOR = math.log(1e-30)


@functools.lru_cache(maxsize=16)
def _binomial_pld(epsilon: float, delta: float, count: int,
                  interval: float) -> _pld.PrivacyLossDistribution:
    """``count``-fold composition of the (eps, delta) dominating pair, without FFT.

    One release: +inf w.p. delta, +-eps with (1 - delta) times the binary-RR weights
    (Kairouz-Oh-Viswanath 2015, Thm 2.2). Composed: +inf w.p. 1 - (1 - delta)^count, else loss
    (count - 2j) eps with J ~ Bin(count, 1/(1 + e^eps)) (the exact optimal composition,
    KOV 2015, Thm 3.3). Atoms below 1e-30 are dropped pessimistically: the high-loss side to
    +inf, the low-loss side onto the lowest kept atom. Then discretised once by connect-the-dots.
    """
    j = np.arange(count + 1)
    log_p = stats.binom.logpmf(j, count, special.expit(-epsilon))  # P[loss -eps] = 1/(1+e^eps)
    keep = np.flatnonzero(log_p >= _LOG_ATOM_FLOOR)
    first, last = int(keep[0]), int(keep[-1])
    probs = np.exp(log_p[first:last + 1])
    high_tail = float(np.exp(log_p[:first]).sum())  # j < first: largest losses -> +inf
    probs[-1] += float(np.exp(log_p[last + 1:]).sum())  # smallest losses -> up onto the last
    # P[no +inf in count releases] = (1 - delta)^count; one release keeps delta bit for bit.
    lost = delta if count == 1 else -math.expm1(count * math.log1p(-delta))
    survive = 1.0 - lost
    losses = (count - 2.0 * j[first:last + 1]) * epsilon
    infinity = lost + survive * high_tail
    return _finite_pld(losses, survive * probs, infinity, interval)


def _self_compose(single: _pld.PrivacyLossDistribution,
                  count: int) -> _pld.PrivacyLossDistribution:
    """``count``-fold composition by repeated squaring (log2(count) FFT convolutions).

    dp_accounting's ``compose`` (FFT convolution; its tail truncation moves at most 1e-15 per
    step to +inf or onto the lowest loss, both pessimistic) applied by repeated squaring is one
    to three orders of magnitude more accurate in the tails than its one-shot FFT power
    ``self_compose``, at about twice the cost. Measured on 3000-fold binary RR against the exact
    binomial: +4e-9 against +6e-7 at delta = 1e-6, +4e-5 against +5e-3 at delta = 1e-10.
    """
    result = None
    base = single
    while count:
        if count & 1:
            result = base if result is None else result.compose(base)
        count >>= 1
        if count:
            base = base.compose(base)
    return result


#: Largest dense grid one event's PLD may need (8 bytes a point: 400 MB).
_MAX_GRID_POINTS = 5e7


def _grid_points(spec: _Spec, interval: float) -> float:
    """Rough number of grid points of one event's PLD (losses spanned / interval).

    Laplace with scale b spans [-1/b, 1/b]; the discrete Laplace a * sensitivity on each side.
    Gaussians are not counted here: a history of Gaussians alone is answered from the exact
    curve, and mixed histories are size-checked when the composed PLD is built. Finite
    (randomized-response-like) PLDs are small by construction.
    """
    kind = spec[0]
    if kind in ("laplace", "poisson-laplace"):
        b = spec[1] if kind == "laplace" else spec[2]
        return 2.0 / (b * interval) if b > 0 else math.inf
    if kind == "discrete-laplace":
        return 2.0 * spec[1] * spec[2] / interval
    return 0.0


@functools.lru_cache(maxsize=64)
def _spec_pld(spec: _Spec, interval: float) -> _pld.PrivacyLossDistribution:
    """The PLD of one occurrence of ``spec``, cached (PLD objects are never mutated)."""
    return _build_spec_pld(spec, interval)


def _build_spec_pld(spec: _Spec, interval: float) -> _pld.PrivacyLossDistribution:
    """The PLD of one occurrence of ``spec``."""
    kind = spec[0]
    if kind == "binary-rr":
        return _binomial_pld(spec[1], 0.0, 1, interval)
    if kind == "approx-dp":
        return _binomial_pld(spec[1], spec[2], 1, interval)
    if kind == "randomized-response":
        p, k = spec[1], spec[2]
        keep = 1.0 - p + p / k  # P[report = input]; any other bucket has p/k
        loss = math.log1p(k * (1.0 - p) / p)  # ln(keep / (p/k))
        losses = [loss, -loss] + ([0.0] if k > 2 else [])
        probs = [keep, p / k] + ([(k - 2) * p / k] if k > 2 else [])
        return _finite_pld(np.array(losses), np.array(probs), 0.0, interval)
    if kind == "laplace":
        return _pld.from_laplace_mechanism(
            spec[1], sensitivity=1, pessimistic_estimate=True,
            value_discretization_interval=interval, use_connect_dots=True)
    if kind == "gaussian":
        return _pld.from_gaussian_mechanism(
            spec[1], sensitivity=1, pessimistic_estimate=True,
            value_discretization_interval=interval,
            log_mass_truncation_bound=_LOG_MASS_TRUNCATION, use_connect_dots=True,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)  # q = 1: shift by 1
    if kind == "discrete-laplace":
        return _pld.from_discrete_laplace_mechanism(
            spec[1], sensitivity=spec[2], pessimistic_estimate=True,
            value_discretization_interval=interval, use_connect_dots=True)
    if kind == "discrete-gaussian":
        return _pld.from_discrete_gaussian_mechanism(
            spec[1], sensitivity=spec[2], pessimistic_estimate=True,
            value_discretization_interval=interval, use_connect_dots=True)
    if kind == "poisson-laplace":
        return _pld.from_laplace_mechanism(
            spec[2], sensitivity=1, pessimistic_estimate=True,
            value_discretization_interval=interval, sampling_prob=spec[1],
            use_connect_dots=True)
    if kind == "poisson-gaussian":
        return _pld.from_gaussian_mechanism(
            spec[2], sensitivity=1, pessimistic_estimate=True,
            value_discretization_interval=interval,
            log_mass_truncation_bound=_LOG_MASS_TRUNCATION, sampling_prob=spec[1],
            use_connect_dots=True, neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
    raise AssertionError(f"unknown PLD spec {spec!r}")  # pragma: no cover - internal


@functools.lru_cache(maxsize=4)  # keyed by pmf identity: the composed history's pmfs
def _suffix_sums(pmf: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Losses L_i, suffix masses U_i = sum_{j>=i} p_j, log W_i = log sum_{j>=i} p_j e^-L_j."""
    if isinstance(pmf, pld_pmf.SparsePLDPmf):
        keys = np.array(sorted(pmf._loss_probs), dtype=np.int64)
        probs = np.array([pmf._loss_probs[k] for k in keys.tolist()], dtype=np.float64)
        index = keys
    else:
        probs = np.asarray(pmf._probs, dtype=np.float64)
        index = pmf._lower_loss + np.arange(probs.size)
    probs = np.maximum(probs, 0.0)
    losses = index * pmf._discretization
    upper = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])
    with np.errstate(divide="ignore"):
        log_terms = np.log(probs) - losses
    log_lower = np.concatenate([np.logaddexp.accumulate(log_terms[::-1])[::-1], [-np.inf]])
    return losses, upper, log_lower, float(pmf._infinity_mass)


def _pmf_delta(pmf: Any, epsilon: float) -> float:
    """delta(eps) = inf_mass + sum_{L > eps} p (1 - e^(eps - L)) of one PLD pmf.

    Evaluated in log space from suffix sums, with loss values computed as integer * interval
    and negative FFT round-off entries counted as 0 (more mass: pessimistic). dp_accounting's own
    evaluation walks the grid by repeated float addition (drift ~1e-8 over 10^6 steps), sums
    the negative round-off (which pulled epsilon *below* the exact value at small deltas, e.g.
    by 0.1 at delta = 1e-12 for 3000 compositions) and underflows e^-L for losses above ~745.
    """
    losses, upper, log_lower, infinity = _suffix_sums(pmf)
    i = int(np.searchsorted(losses, epsilon, side="right"))
    return infinity + max(0.0, float(upper[i] - np.exp(epsilon + log_lower[i])))


def _pmf_epsilon(pmf: Any, delta: float) -> float:
    """Smallest eps >= 0 with delta(eps) <= ``delta`` for one PLD pmf (inf if none).

    On (L_{i-1}, L_i] the curve is inf_mass + U_i - e^eps W_i, so with i the first index whose
    delta(L_i) fits, eps = log(inf_mass + U_i - delta) - log W_i (clipped to the interval).
    """
    losses, upper, log_lower, infinity = _suffix_sums(pmf)
    if infinity > delta:
        return math.inf
    at_losses = infinity + upper[1:] - np.exp(losses + log_lower[1:])  # delta(L_i)
    fits = np.flatnonzero(at_losses <= delta)
    i = int(fits[0])  # delta(L_last) = inf_mass <= delta, so fits is never empty
    if upper[i] + infinity - delta <= 0.0:
        return max(0.0, float(losses[i - 1])) if i > 0 else 0.0
    eps = math.log(upper[i] + infinity - delta) - float(log_lower[i])
    low = float(losses[i - 1]) if i > 0 else -math.inf
    return max(0.0, min(float(losses[i]), max(low, eps)))


def _pld_pmfs(pld: _pld.PrivacyLossDistribution) -> list[Any]:
    return [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]


def _pld_epsilon(pld: _pld.PrivacyLossDistribution, delta: float) -> float:
    """Epsilon at ``delta`` of a PLD: the larger over its add/remove directions."""
    return max(_pmf_epsilon(pmf, delta) for pmf in _pld_pmfs(pld))


def _pld_delta(pld: _pld.PrivacyLossDistribution, epsilon: float) -> float:
    """Delta at ``epsilon`` of a PLD: the larger over its add/remove directions."""
    return max(_pmf_delta(pmf, epsilon) for pmf in _pld_pmfs(pld))


#: Largest PLD (number of grid bins) the accountant will build.
_MAX_BINS = 1e8


def _gaussian_epsilon(sigma: float, delta: float) -> float:
    """Exact epsilon of N(0, sigma^2) vs N(1, sigma^2) at ``delta`` (Balle-Wang 2018, Thm 8).

    Bisection on the exact curve; the upper end of the final bracket is returned, so the
    curve at the returned epsilon is <= ``delta`` (never below the exact epsilon).
    """
    if analytic_gaussian_delta(0.0, sigma) <= delta:
        return 0.0
    hi = 1.0
    while analytic_gaussian_delta(hi, sigma) > delta:
        hi *= 2.0
    return smallest_satisfying(lambda e: analytic_gaussian_delta(e, sigma), delta, 0.0, hi,
                               rel_tol=1e-13)


def _max_loss(spec: _Spec) -> float:
    """Largest finite privacy loss of one occurrence of ``spec``; inf if it is not pure DP.

    A k-fold composition of pure releases has delta(eps) = 0 exactly for eps >= the sum of
    their largest losses (and > 0 below it), so this sum is the exact epsilon at delta = 0.
    """
    kind = spec[0]
    if kind == "binary-rr":
        return spec[1]
    if kind == "randomized-response":
        p, k = spec[1], spec[2]
        return math.log1p(k * (1.0 - p) / p)
    if kind == "laplace":
        return 1.0 / spec[1]
    if kind == "discrete-laplace":
        return spec[1] * spec[2]
    if kind == "poisson-laplace":
        q, eps0 = spec[1], 1.0 / spec[2]
        # remove direction log(1 + q(e^eps0 - 1)), add direction -log(1 - q(1 - e^-eps0))
        return max(math.log1p(q * math.expm1(eps0)), -math.log1p(q * math.expm1(-eps0)))
    return math.inf


def _spec_power(spec: _Spec, count: int, interval: float) -> _pld.PrivacyLossDistribution:
    """PLD of ``count`` occurrences of ``spec`` (exact binomial for the two-atom pairs)."""
    if spec[0] == "binary-rr":
        return _binomial_pld(spec[1], 0.0, count, interval)
    if spec[0] == "approx-dp":
        return _binomial_pld(spec[1], spec[2], count, interval)
    if spec[0] == "gaussian":  # the merged Gaussian changes with every compose: not cached
        return _build_spec_pld(spec, interval)
    single = _spec_pld(spec, interval)
    return single if count == 1 else _self_compose(single, count)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# =========================================================================== accountant


class PLDAccountant(Accountant):
    """Privacy-loss-distribution accountant (pessimistic dp_accounting PLDs; see module doc).

    Identical releases are grouped: each distinct PLD is built once (cached) and raised to its
    total count (an exact binomial for pure and (eps, delta) releases, repeated FFT squaring
    otherwise), then the distinct ones are convolved. Gaussian releases are merged exactly into
    one Gaussian; a history of Gaussians only is answered from its exact curve (Balle-Wang
    2018, Thm 8) without discretisation. The composed PLD is kept until the history changes, so
    queries after a compose cost one evaluation.

    Args:
        neighboring_relation: ``REPLACE_ONE`` (default, the package's relation) or
            ``ADD_OR_REMOVE_ONE`` (needed for ``PoissonSampledDpEvent``).
        value_discretization_interval: Grid step of the privacy-loss values (> 0, at most 1).
            Smaller is tighter and slower; the error of a k-fold composition is roughly
            k * interval^2 plus floating-point noise.
    """

    method = "PLD (dp_accounting)"

    def __init__(self, neighboring_relation: NeighboringRelation =
                 NeighboringRelation.REPLACE_ONE,
                 value_discretization_interval: float =
                 DEFAULT_VALUE_DISCRETIZATION_INTERVAL) -> None:
        super().__init__(neighboring_relation)
        if neighboring_relation not in (NeighboringRelation.REPLACE_ONE,
                                        NeighboringRelation.ADD_OR_REMOVE_ONE):
            raise ValueError(
                "neighboring_relation must be NeighboringRelation.REPLACE_ONE or "
                f"ADD_OR_REMOVE_ONE for PLDAccountant; got {neighboring_relation!r}")
        interval = _validate.check_positive("value_discretization_interval",
                                            value_discretization_interval)
        if interval > 1.0:
            raise ValueError("value_discretization_interval must be a real number in (0, 1]; "
                             f"got {value_discretization_interval!r}")
        self._interval = interval
        self._powers: dict[tuple[_Spec, int], _pld.PrivacyLossDistribution] = {}
        self._composed: tuple[frozenset, _pld.PrivacyLossDistribution | None] | None = None

    @property
    def value_discretization_interval(self) -> float:
        """Grid step of the privacy-loss values."""
        return self._interval

    def __deepcopy__(self, memo: dict) -> PLDAccountant:
        # PLD objects are immutable (every operation returns a new one): share them, copy state.
        new = copy.copy(self)
        new._counts = Counter(self._counts)
        new._powers = dict(self._powers)
        return new

    # ------------------------------------------------------------------ event -> PLD specs
    def _check_leaf(self, event: _dp.DpEvent) -> None:
        for spec, _ in self._specs(event):
            points = _grid_points(spec, self._interval)
            if points > _MAX_GRID_POINTS:
                raise self._unsupported(
                    event, f"its privacy losses span about {points:.2g} grid points at "
                           f"value_discretization_interval={self._interval:g} (limit "
                           f"{_MAX_GRID_POINTS:.0e}); use a coarser interval")

    def _nonnegative(self, event: _dp.DpEvent, name: str, value: Any) -> float:
        if not (_is_real(value) and math.isfinite(value) and value >= 0):
            raise self._unsupported(event, f"{name} must be a finite real number >= 0; got "
                                           f"{value!r}")
        return float(value)

    def _specs(self, event: _dp.DpEvent) -> list[tuple[_Spec, int]]:
        """The PLDs one occurrence of ``event`` composes, with multiplicities.

        Raises:
            UnsupportedEventError: naming ``event`` when it cannot be mapped.
        """
        if isinstance(event, GaussianNoisyMaxDpEvent):
            return [(("gaussian", float(event.sigma) / math.sqrt(2.0)), 1)]
        if isinstance(event, LaplaceNoisyMaxDpEvent):
            return [(("laplace", float(event.noise_scale)), 2)]
        if isinstance(event, DiscreteGaussianDpEvent):
            return [(("discrete-gaussian", float(event.sigma), int(event.sensitivity)), 1)]
        if isinstance(event, BitRandomizedResponseDpEvent):
            return [(("binary-rr", float(event.epsilon_per_bit)), int(event.bits_changed))]
        if isinstance(event, ShuffledLocalDpEvent):
            return [(("binary-rr", float(event.local_epsilon)), 1)]
        if isinstance(event, (PureDpEvent, CollisionDpEvent,
                              SelectiveRandomizedResponseDpEvent)):
            return [(("binary-rr", float(event.epsilon)), 1)]
        if isinstance(event, (ApproxDpEvent, ShuffledHistogramDpEvent)):
            return [self._declared_spec(float(event.epsilon), float(event.delta))]
        if isinstance(event, _dp.GaussianDpEvent):
            s = self._nonnegative(event, "noise_multiplier", event.noise_multiplier)
            return [(("gaussian", s) if s > 0 else _NON_PRIVATE, 1)]
        if isinstance(event, _dp.LaplaceDpEvent):
            b = self._nonnegative(event, "noise_multiplier", event.noise_multiplier)
            return [(("laplace", b) if b > 0 else _NON_PRIVATE, 1)]
        if isinstance(event, _dp.DiscreteLaplaceDpEvent):
            a = self._nonnegative(event, "noise_parameter", event.noise_parameter)
            sens = event.sensitivity
            if not (isinstance(sens, numbers.Integral) and not isinstance(sens, bool)
                    and sens >= 1):
                raise self._unsupported(event, f"sensitivity must be an integer >= 1; got "
                                               f"{sens!r}")
            return [(("discrete-laplace", a, int(sens)) if a > 0 else _NON_PRIVATE, 1)]
        if isinstance(event, _dp.RandomizedResponseDpEvent):
            return self._randomized_response_specs(event)
        if isinstance(event, _dp.PoissonSampledDpEvent):
            return self._poisson_specs(event)
        if isinstance(event, DeclaredGuarantee):
            eps, delta = event.guarantee()
            return [self._declared_spec(float(eps), float(delta))]
        raise self._unsupported(event, "no privacy loss distribution is known for this event")

    @staticmethod
    def _declared_spec(epsilon: float, delta: float) -> tuple[_Spec, int]:
        if delta == 0.0:
            return (("binary-rr", epsilon), 1)
        return (("approx-dp", epsilon, delta), 1)

    def _randomized_response_specs(self, event: _dp.RandomizedResponseDpEvent
                                   ) -> list[tuple[_Spec, int]]:
        if self.neighboring_relation is not NeighboringRelation.REPLACE_ONE:
            raise self._unsupported(
                event, "randomized response changes one record's bucket, so its PLD is defined "
                       "for REPLACE_ONE neighbours; this accountant uses "
                       f"{self.neighboring_relation.name}")
        k = event.num_buckets
        if not (isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= 1):
            raise self._unsupported(event, f"num_buckets must be an integer >= 1; got {k!r}")
        p = event.noise_parameter
        if not (_is_real(p) and 0 <= p <= 1):
            raise self._unsupported(event, f"noise_parameter must be in [0, 1]; got {p!r}")
        if k == 1 or p == 1:
            return []  # output independent of the input
        if p == 0:
            return [(_NON_PRIVATE, 1)]
        return [(("randomized-response", float(p), int(k)), 1)]

    def _poisson_specs(self, event: _dp.PoissonSampledDpEvent) -> list[tuple[_Spec, int]]:
        if self.neighboring_relation is not NeighboringRelation.ADD_OR_REMOVE_ONE:
            raise self._unsupported(
                event, "Poisson subsampling amplifies privacy for add/remove neighbours (a "
                       "record is in the batch with probability q); construct "
                       "PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE) to account for it "
                       f"(this accountant uses {self.neighboring_relation.name})")
        q = event.sampling_probability
        if not (_is_real(q) and 0 <= q <= 1):
            raise self._unsupported(event, f"sampling_probability must be in [0, 1]; got {q!r}")
        inner = event.event
        if isinstance(inner, _dp.GaussianDpEvent):
            kind = "gaussian"
        elif isinstance(inner, _dp.LaplaceDpEvent):
            kind = "laplace"
        else:
            raise self._unsupported(
                event, "the subsampled event must be a GaussianDpEvent or LaplaceDpEvent; got "
                       f"{type(inner).__name__}")
        noise = self._nonnegative(event, "event.noise_multiplier", inner.noise_multiplier)
        if q == 0:
            return []
        if noise == 0:
            return [(_NON_PRIVATE, 1)]
        if q == 1:
            return [((kind, noise), 1)]
        return [((f"poisson-{kind}", float(q), noise), 1)]

    # ------------------------------------------------------------------ composition
    def _grouped_specs(self) -> Counter:
        totals: Counter = Counter()
        for event, count in self._counts.items():
            for spec, multiplicity in self._specs(event):
                totals[spec] += count * multiplicity
        gaussian = [(spec, n) for spec, n in totals.items() if spec[0] == "gaussian"]
        if len(gaussian) > 1 or (gaussian and gaussian[0][1] > 1):
            # Dong-Roth-Su 2022, Cor. 3.3: composing Gaussian mechanisms with shifts 1/s_i is
            # the Gaussian mechanism with shift sqrt(sum 1/s_i^2) (exact).
            inverse_square = math.fsum(n / spec[1] ** 2 for spec, n in gaussian)
            for spec, _ in gaussian:
                del totals[spec]
            totals[("gaussian", 1.0 / math.sqrt(inverse_square))] += 1
        return totals

    def _only_gaussian(self) -> float | None:
        """The merged noise multiplier if the history is Gaussian releases only, else None."""
        if self._non_private:
            return None
        totals = self._grouped_specs()
        if len(totals) == 1:
            (spec, n), = totals.items()
            if spec[0] == "gaussian" and n == 1:
                return float(spec[1])
        return None

    def pld(self) -> _pld.PrivacyLossDistribution | None:
        """The composed (pessimistic) PLD of the history; None while empty or non-private."""
        if self._non_private:
            return None
        key = frozenset(self._counts.items())
        if self._composed is not None and self._composed[0] == key:
            return self._composed[1]
        totals = self._grouped_specs()
        composed = None
        if _NON_PRIVATE not in totals:
            powers: dict[tuple[_Spec, int], _pld.PrivacyLossDistribution] = {}
            for spec, n in sorted(totals.items(), key=repr):
                if spec[0] == "gaussian" and 20.0 / (spec[1] * self._interval) > _MAX_BINS:
                    raise ValueError(
                        f"the composed Gaussian releases (noise multiplier {spec[1]:.3g}) need "
                        f"a PLD of ~{20.0 / (spec[1] * self._interval):.2g} bins with "
                        f"value_discretization_interval={self._interval!r}; their epsilon is "
                        "in the hundreds or more: use a larger value_discretization_interval")
                power = self._powers.get((spec, n))
                if power is None:
                    power = _spec_power(spec, n, self._interval)
                powers[(spec, n)] = power
                composed = power if composed is None else composed.compose(power)
            self._powers = powers  # keep only what the current history uses
        self._composed = (key, composed)
        return composed

    def event_pld(self, event: _dp.DpEvent, count: int = 1) -> _pld.PrivacyLossDistribution:
        """The pessimistic PLD of ``count`` occurrences of ``event`` alone (for inspection).

        Raises:
            UnsupportedEventError: If the event cannot be accounted (the message names it).
            ValueError: If the event is non-private (no PLD) or has no privacy cost.
        """
        scratch = PLDAccountant(self.neighboring_relation, self._interval)
        scratch.compose(event, count)
        result = scratch.pld()
        if result is None:
            raise ValueError(f"{type(event).__name__} has no finite PLD (non-private or no-op): "
                             f"{event!r}")
        return result

    def _is_infinite(self) -> bool:
        if self._non_private:
            return True
        return any(spec == _NON_PRIVATE for event in self._counts
                   for spec, _ in self._specs(event))

    def pure_epsilon(self) -> float:
        """Exact epsilon at delta = 0: sum of the largest losses; inf unless all are pure DP.

        Computed from the events, not from the discretised PLD: dp_accounting's PLDs carry a
        spurious mass at +inf of order 1e-15 (tail truncation of the FFT convolutions,
        rounding at the top of the connect-the-dots grid), which would turn every delta = 0
        query into infinity.
        """
        if self._is_infinite():
            return math.inf
        return math.fsum(n * _max_loss(spec) for spec, n in self._grouped_specs().items())

    # ------------------------------------------------------------------ queries
    def get_epsilon(self, target_delta: float) -> Epsilon:
        """Smallest epsilon whose (pessimistic) hockey-stick divergence is <= ``target_delta``.

        ``target_delta = 0`` gives the exact pure epsilon (:meth:`pure_epsilon`). Returns
        infinity after a non-private event or when ``target_delta`` is below the mass the PLD
        puts at +inf (a declared delta, Gaussian tails below e^-50, or the backend's 1e-15
        tail-truncation mass: deltas below ~1e-15 are not resolved).
        """
        target_delta = _validate.check_probability("target_delta", target_delta)
        pure = self.pure_epsilon()
        sigma = self._only_gaussian()
        if target_delta == 0.0 or self._is_infinite():
            value = pure
        elif sigma is not None:
            value = _gaussian_epsilon(sigma, target_delta)
        else:
            composed = self.pld()
            value = 0.0 if composed is None else min(pure, _pld_epsilon(composed, target_delta))
        return Epsilon(value, method=self.method, kind=BoundKind.UPPER_BOUND)

    def get_delta(self, target_epsilon: float) -> float:
        """Pessimistic hockey-stick divergence at ``target_epsilon`` (1 if non-private)."""
        if not (_is_real(target_epsilon) and target_epsilon >= 0):
            raise ValueError(f"target_epsilon must be a real number >= 0; got {target_epsilon!r}")
        if self._is_infinite():
            return 1.0
        sigma = self._only_gaussian()
        if sigma is not None:
            return analytic_gaussian_delta(float(target_epsilon), sigma)
        composed = self.pld()
        if composed is None or target_epsilon >= self.pure_epsilon():
            return 0.0
        return min(1.0, _pld_delta(composed, float(target_epsilon)))
