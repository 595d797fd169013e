"""Advanced and optimal composition of per-release (epsilon, delta) guarantees.

Both accountants only use what every leaf event promises per release, ``(eps_i, delta_i)`` from
:func:`dpkd_audit.accountants.pure.event_guarantee`, and bound the adaptive composition of *any*
mechanisms with those guarantees (so they are never tighter than a mechanism-aware analysis such
as RDP or PLD of the actual noise distribution):

- :class:`AdvancedCompositionAccountant`: the advanced composition theorem of Dwork, Rothblum
  and Vadhan, "Boosting and Differential Privacy", FOCS 2010, Theorem III.3 (Dwork-Roth 2014,
  "The Algorithmic Foundations of Differential Privacy", Theorem 3.20), in its heterogeneous
  form, capped by basic composition.
- :class:`OptimalCompositionAccountant`: the exact optimal composition of Kairouz, Oh and
  Viswanath, "The Composition Theorem for Differential Privacy", ICML 2015 (IEEE Trans. Inf.
  Theory 2017), Theorem 3.3, evaluated at any epsilon as the hockey-stick divergence of the
  composed dominating pairs, with an exact heterogeneous extension and a dp_accounting PLD
  fallback (Murtagh and Vadhan, "The Complexity of Computing the Optimal Composition of
  Differential Privacy", TCC 2016: the heterogeneous optimum is #P-hard in general).

The neighbouring relation is fixed at construction like every accountant's; both accountants
take the per-event guarantees as stated for that relation.

Also :func:`dgd_published_epsilon`, the composition formula printed in the DGD paper's Privacy
Analysis, kept so that the paper's figures can be reproduced and compared.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from dp_accounting import dp_event as _dp
from dp_accounting.pld import common as _pld_common
from dp_accounting.pld import privacy_loss_distribution as _pld
from scipy import special

from dpkd_audit import _validate
from dpkd_audit.accountants.base import Accountant, BoundKind, Epsilon, NeighboringRelation
from dpkd_audit.accountants.pure import event_guarantee

__all__ = [
    "AdvancedCompositionAccountant",
    "OptimalCompositionAccountant",
    "dgd_published_epsilon",
]

METHOD_ADVANCED = "advanced composition (Dwork-Rothblum-Vadhan)"
METHOD_OPTIMAL = "optimal composition (Kairouz-Oh-Viswanath)"
METHOD_OPTIMAL_PLD = "optimal composition (PLD, pessimistic discretisation)"

_UNIT_ROUNDOFF = 2.0 ** -53
# P-mass that the exact heterogeneous computation may move to an infinite privacy loss (added to
# delta, so the result stays an upper bound) when the exact atom count is too large.
_TAIL_BUDGET = 1e-30


def _expm1(x: float) -> float:
    """``math.expm1`` that returns inf instead of raising on overflow."""
    return math.expm1(x) if x < 700.0 else math.inf


def _check_target_epsilon(value: object) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer))
            or math.isnan(value) or value < 0):
        raise ValueError(f"target_epsilon must be a real number >= 0; got {value!r}")
    return float(value)


class _GuaranteeAccountant(Accountant):
    """Shared part: every leaf must declare a per-release (epsilon, delta) guarantee."""

    def _check_leaf(self, event: _dp.DpEvent) -> None:
        guarantee = event_guarantee(event)
        if guarantee is None:
            raise self._unsupported(event, "no per-release (epsilon, delta) guarantee is known")
        eps, delta = guarantee
        if not (math.isfinite(eps) and eps >= 0 and 0 <= delta < 1):
            raise self._unsupported(
                event, f"its guarantee (epsilon={eps!r}, delta={delta!r}) is not a finite "
                "epsilon >= 0 with delta in [0, 1)")

    def _groups(self) -> list[tuple[float, float, int]]:
        """The history as sorted (epsilon, delta, count) triples, one per distinct guarantee."""
        merged: dict[tuple[float, float], int] = {}
        for event, count in self._counts.items():
            eps, delta = event_guarantee(event)  # type: ignore[misc]
            key = (float(eps), float(delta))
            merged[key] = merged.get(key, 0) + count
        return sorted((eps, delta, k) for (eps, delta), k in merged.items())


# --------------------------------------------------------------------------- advanced


def dgd_published_epsilon(epsilon0: float, queries: int, delta: float) -> float:
    """The total epsilon printed in the DGD paper: |D| eps0^2 + eps0 sqrt(-2 |D| log delta).

    DGD (papers/dgd-discriminative-generative-distillation.txt, "Privacy Analysis") states that
    |D| queries, each eps0-DP, are (|D| eps0^2 + eps0 sqrt(-2 |D| log delta), delta)-DP, citing
    Dwork-Roth. This is *not* Dwork-Roth Theorem 3.20, which has k eps0 (e^eps0 - 1) >= k eps0^2
    as first term (so the printed figures are slightly below the theorem's: 5.80 vs 5.82 at 400
    queries, 10.1 vs 10.15 at 1,000, for eps0 = 0.05 and delta = 1e-5). The formula is
    nevertheless a valid upper bound: by Bun and Steinke, "Concentrated Differential Privacy"
    (TCC 2016, arXiv:1605.02065), an eps0-DP mechanism is (eps0^2/2)-zCDP, zCDP composes
    additively, and rho-zCDP implies (rho + 2 sqrt(rho ln(1/delta)), delta)-DP (Props. 1.3-1.4
    and Lemma 3.5 there), which for rho = k eps0^2 / 2 gives
    k eps0^2 / 2 + eps0 sqrt(2 k ln(1/delta)) <= the DGD figure.

    Args:
        epsilon0: Pure epsilon of one query (finite, > 0).
        queries: Number of queries |D| (an integer >= 1).
        delta: Target delta, in (0, 1).

    Returns:
        The DGD formula's epsilon.

    Raises:
        ValueError: If a parameter is out of range (the message names it).
    """
    epsilon0 = _validate.check_epsilon(epsilon0, "epsilon0")
    queries = _validate.check_int("queries", queries, minimum=1)
    delta = _validate.check_delta(delta, allow_zero=False)
    return queries * epsilon0 ** 2 + epsilon0 * math.sqrt(-2.0 * queries * math.log(delta))


class AdvancedCompositionAccountant(_GuaranteeAccountant):
    """Advanced composition (Dwork-Rothblum-Vadhan), capped by basic composition.

    Dwork, Rothblum, Vadhan FOCS 2010, Theorem III.3 / Dwork-Roth 2014, Theorem 3.20: for every
    delta' > 0 the adaptive k-fold composition of (eps, delta)-DP mechanisms is
    (sqrt(2 k ln(1/delta')) eps + k eps (e^eps - 1), k delta + delta')-DP. The proof (Azuma's
    inequality applied to the privacy-loss martingale, whose i-th increment lies in an interval
    of length 2 eps_i and has conditional mean at most eps_i (e^eps_i - 1)) gives the
    heterogeneous form used here (Kairouz-Oh-Viswanath ICML 2015, Theorem 3.5, is a tighter
    heterogeneous bound; the optimal accountant below is tighter still):

        eps_total = sqrt(2 ln(1/delta') sum_i eps_i^2) + sum_i eps_i (e^eps_i - 1),
        delta_total = sum_i delta_i + delta'.

    Basic composition (sum eps_i, sum delta_i) (Dwork-Roth Theorem 3.16) is also valid and is
    smaller for few compositions; each query returns the better of the two valid bounds (the
    minimum of two valid epsilons at the same delta is valid, since the mechanism satisfies
    both statements). The result is never below the optimal composition.
    """

    method = METHOD_ADVANCED

    def _moments(self) -> tuple[float, float, float, float]:
        """(sum eps_i, sum delta_i, sum eps_i^2, sum eps_i (e^eps_i - 1)) over the history."""
        eps_sum, delta_sum, square_sum, drift = [], [], [], []
        for eps, delta, k in self._groups():
            eps_sum.append(k * eps)
            delta_sum.append(k * delta)
            square_sum.append(k * eps * eps)
            drift.append(k * eps * _expm1(eps) if eps > 0 else 0.0)
        return (math.fsum(eps_sum), math.fsum(delta_sum), math.fsum(square_sum),
                math.fsum(drift))

    def get_epsilon(self, target_delta: float) -> Epsilon:
        """min(DRV bound with delta' = target_delta - sum delta_i, sum eps_i); inf if neither.

        Args:
            target_delta: Total delta, in [0, 1].

        Returns:
            An upper bound on epsilon at ``target_delta`` (inf if ``target_delta`` is smaller
            than sum delta_i, or after a non-private event).

        Raises:
            ValueError: If ``target_delta`` is not in [0, 1].
        """
        target_delta = _validate.check_probability("target_delta", target_delta)
        return Epsilon(self._epsilon(target_delta), method=self.method,
                       kind=BoundKind.UPPER_BOUND)

    def _epsilon(self, target_delta: float) -> float:
        if self._non_private:
            return math.inf
        if not self._counts:
            return 0.0
        eps_sum, delta_sum, square_sum, drift = self._moments()
        value = eps_sum if delta_sum <= target_delta else math.inf  # basic composition
        slack = target_delta - delta_sum  # delta' of Theorem III.3
        if slack > 0:
            value = min(value, math.sqrt(2.0 * -math.log(slack) * square_sum) + drift)
        return value

    def get_delta(self, target_epsilon: float) -> float:
        """Smallest delta either bound certifies at ``target_epsilon`` (1 if none).

        Inverts Theorem III.3 in closed form: when target > sum eps_i (e^eps_i - 1),
        delta' = exp(-(target - sum eps_i (e^eps_i - 1))^2 / (2 sum eps_i^2)); basic composition
        gives sum delta_i when sum eps_i <= target.

        Args:
            target_epsilon: Total epsilon, a real number >= 0 (inf allowed).

        Raises:
            ValueError: If ``target_epsilon`` is negative, NaN or not a number.
        """
        target_epsilon = _check_target_epsilon(target_epsilon)
        if self._non_private:
            return 1.0
        if not self._counts:
            return 0.0
        eps_sum, delta_sum, square_sum, drift = self._moments()
        best = 1.0
        if eps_sum <= target_epsilon:
            best = min(best, delta_sum)
        if square_sum > 0 and target_epsilon > drift:
            gap = target_epsilon - drift
            best = min(best, delta_sum + math.exp(-gap * gap / (2.0 * square_sum)))
        return best


# --------------------------------------------------------------------------- optimal


@dataclass(frozen=True)
class _LossAtoms:
    """Positive-loss atoms of the composed randomized-response privacy loss distribution.

    ``losses`` (descending, > 0) and ``log_probs`` (their probabilities under P) describe
    L = sum_i (+-eps_i) for the composed binary randomized responses; ``log_margin`` is a
    relative floating-point safety margin applied to delta, and ``dropped`` is P-mass moved to an
    infinite loss by tail truncation (added to delta).
    """

    losses: np.ndarray
    log_probs: np.ndarray
    log_margin: float
    dropped: float

    def delta_pure(self, epsilon: float) -> float:
        """E_P[(1 - e^{epsilon - L})_+] (before the dropped mass), inflated by the margin."""
        n = int(np.searchsorted(-self.losses, -epsilon, side="left"))  # atoms with L > epsilon
        if n == 0:
            return 0.0
        terms = self.log_probs[:n] + np.log(-np.expm1(epsilon - self.losses[:n]))
        return min(1.0, math.exp(float(special.logsumexp(terms)) + self.log_margin))


def _binomial_atoms(eps: float, k: int, count: int | None = None) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """Loss atoms j = 0..count-1 (default all k + 1) of k-fold binary randomized response.

    Output j = number of coordinates that took their less likely value under P:
    P(j) = C(k, j) e^{(k - j) eps} / (1 + e^eps)^k and the privacy loss is (k - 2j) eps
    (Kairouz-Oh-Viswanath 2015, proof of Theorem 3.3). Returns (losses, log-probabilities).
    """
    j = np.arange(k + 1 if count is None else count, dtype=np.float64)
    log_probs = (special.gammaln(k + 1.0) - special.gammaln(j + 1.0) - special.gammaln(k - j + 1.0)
                 + (k - j) * eps - k * np.logaddexp(0.0, eps))
    losses = (k - 2.0 * j) * eps
    losses.flags.writeable = False
    log_probs.flags.writeable = False
    return losses, log_probs


def _log_margin(groups: tuple[tuple[float, int], ...], n_atoms: int) -> float:
    """Relative safety margin (in log space) for the rounding of the log-probabilities.

    log P(j) = gammaln(k+1) - gammaln(j+1) - gammaln(k-j+1) + (k-j) eps - k log(1 + e^eps) sums
    terms of total magnitude M <= 2 gammaln(k+1) + k (eps + log(1 + e^eps)) per group, so its
    absolute rounding error is a few units of roundoff u times M (measured against 50-digit
    mpmath: about 2 u gammaln(k+1) at k = 1e5). 8 u M, plus the summation error, is added.
    """
    magnitude = sum(2.0 * float(special.gammaln(k + 1.0)) + k * (eps + np.logaddexp(0.0, eps))
                    for eps, k in groups)
    return 8.0 * _UNIT_ROUNDOFF * (magnitude + math.log2(n_atoms + 2) + 8.0)


def _merge_equal_losses(losses: np.ndarray, log_probs: np.ndarray) -> tuple[np.ndarray,
                                                                            np.ndarray]:
    """Merge atoms whose losses agree to 1e-12 (relative); a merged atom keeps the largest loss.

    Raising a loss can only raise E_P[(1 - e^{epsilon - L})_+], so merging is pessimistic.
    """
    order = np.argsort(losses, kind="stable")
    losses, log_probs = losses[order], log_probs[order]
    tol = 1e-12 * max(1.0, float(np.abs(losses).max()))
    starts = np.flatnonzero(np.concatenate(([True], np.diff(losses) > tol)))
    return np.maximum.reduceat(losses, starts), np.logaddexp.reduceat(log_probs, starts)


def _truncate(losses: np.ndarray, log_probs: np.ndarray,
              budget: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Drop the least likely atoms with total P-mass <= budget; return the mass dropped."""
    order = np.argsort(log_probs, kind="stable")
    cumulative = np.cumsum(np.exp(log_probs[order]))
    n_drop = int(np.searchsorted(cumulative, budget, side="right"))
    if n_drop == 0:
        return losses, log_probs, 0.0
    keep = np.sort(order[n_drop:])
    return losses[keep], log_probs[keep], float(cumulative[n_drop - 1]) * (1.0 + 1e-9)


@functools.lru_cache(maxsize=32)
def _loss_atoms(groups: tuple[tuple[float, int], ...], max_atoms: int) -> _LossAtoms | None:
    """Exact composed loss atoms for pure groups ((eps, count), ...), or None if too large.

    One group: the k-fold binomial of Theorem 3.3, exact. Several groups: exact convolution of
    the per-group binomials while the atom count stays <= max_atoms; otherwise each group's and
    each partial composition's least likely atoms are truncated with total mass <= 1e-30 (moved
    to an infinite loss, i.e. added to delta); None if that is still too large.
    """
    if len(groups) == 1:
        eps, k = groups[0]
        if (k + 1) // 2 <= max_atoms:  # j < k/2: the atoms with loss (k - 2j) eps > 0
            losses, log_probs = _binomial_atoms(eps, k, (k + 1) // 2)
            return _LossAtoms(losses, log_probs, _log_margin(groups, losses.size), 0.0)
    full_size = math.prod(k + 1 for _, k in groups)
    budget = 0.0 if full_size <= max_atoms else _TAIL_BUDGET / (2 * len(groups))
    if max(k for _, k in groups) + 1 > 4 * max_atoms:
        return None
    dropped = 0.0
    ordered = sorted(groups, key=lambda g: -g[1])
    losses, log_probs = _binomial_atoms(*ordered[0])
    if budget:
        losses, log_probs, dropped = _truncate(losses, log_probs, budget)
    for eps, k in ordered[1:]:
        g_losses, g_log_probs = _binomial_atoms(eps, k)
        if budget:
            g_losses, g_log_probs, mass = _truncate(g_losses, g_log_probs, budget)
            dropped += mass
        if losses.size * g_losses.size > max_atoms:
            return None
        losses = (losses[:, None] + g_losses[None, :]).ravel()
        log_probs = (log_probs[:, None] + g_log_probs[None, :]).ravel()
        losses, log_probs = _merge_equal_losses(losses, log_probs)
        if budget:
            losses, log_probs, mass = _truncate(losses, log_probs, budget)
            dropped += mass
    positive = losses > 0
    order = np.argsort(-losses[positive], kind="stable")
    return _LossAtoms(losses[positive][order], log_probs[positive][order],
                      _log_margin(groups, losses.size), dropped)


@functools.lru_cache(maxsize=8)
def _pld_fallback(groups: tuple[tuple[float, float, int], ...],
                  interval: float) -> _pld.PrivacyLossDistribution:
    """dp_accounting's pessimistic PLD of the composed (eps_i, delta_i) dominating pairs."""
    result = None
    for eps, delta, k in groups:
        pld = _pld.from_privacy_parameters(
            _pld_common.DifferentialPrivacyParameters(eps, delta),
            value_discretization_interval=interval)
        if k > 1:
            pld = pld.self_compose(k)
        result = pld if result is None else result.compose(pld)
    return result


class OptimalCompositionAccountant(_GuaranteeAccountant):
    """Exact optimal composition of (eps_i, delta_i)-DP mechanisms (Kairouz-Oh-Viswanath).

    Kairouz, Oh, Viswanath ICML 2015, Theorem 3.3: the adaptive k-fold composition of
    (eps, delta)-DP mechanisms is ((k - 2i) eps, delta_i)-DP for i = 0..floor(k/2) with

        delta_i = 1 - (1 - delta)^k (1 - delta_(i)),
        delta_(i) = sum_{l=0}^{i-1} C(k, l) (e^{(k-l) eps} - e^{(k-2i+l) eps}) / (1 + e^eps)^k,

    and no better (epsilon, delta) holds for all such mechanisms. The region is that of the
    k-fold product of the dominating pair P = (delta, (1-delta) e^eps/(1+e^eps),
    (1-delta)/(1+e^eps), 0), Q = the same reversed, so at *any* epsilon' the optimal delta is its
    hockey-stick divergence

        delta(eps') = 1 - (1 - delta)^k (1 - delta_pure(eps')),
        delta_pure(eps') = sum_l C(k, l) max(0, e^{(k-l) eps} - e^{eps'} e^{l eps}) / (1+e^eps)^k,

    (k-fold binary randomized response; at eps' = (k - 2i) eps this is delta_i above). It is
    evaluated in log space (log-binomials, logsumexp), O(k) per evaluation, so k = 10^5 is cheap.

    Heterogeneous histories (several distinct (eps_i, delta_i), each with a count): the same
    factorisation holds for the product of the dominating pairs, 1 - prod_i (1 - delta_i)^{k_i}
    (1 - delta_pure(eps')), with delta_pure the hockey-stick divergence of the composed
    randomized responses, computed exactly from their privacy loss distribution (discrete, on
    sums of +-eps_i; atoms of equal loss merged) while its size stays <= ``max_atoms``; past that
    the least likely atoms (total mass <= 1e-30) are moved to infinite loss, and if it is still
    too large the accountant falls back to dp_accounting's pessimistic PLD of the same pairs
    (``PrivacyLossDistribution.from_privacy_parameters``), and the epsilon is labelled
    "optimal composition (PLD, pessimistic discretisation)" (Murtagh-Vadhan TCC 2016: the exact
    heterogeneous optimum is #P-hard in general). Events are grouped by guarantee, so k copies
    of an event cost one group, and composed curves are cached.

    All values are upper bounds: delta is inflated by a relative floating-point margin (about
    1.5e-10 at k = 10^4, 2e-9 at k = 10^5), truncated mass is added to delta, and
    ``get_epsilon`` returns the upper end of its bisection bracket.
    """

    method = METHOD_OPTIMAL

    def __init__(self, neighboring_relation: NeighboringRelation =
                 NeighboringRelation.REPLACE_ONE, *, max_atoms: int = 2 ** 21,
                 value_discretization_interval: float = 1e-4) -> None:
        """Create an empty accountant.

        Args:
            neighboring_relation: The neighbouring relation (fixed).
            max_atoms: Largest privacy-loss support handled exactly (an integer >= 2).
            value_discretization_interval: Loss grid of the PLD fallback (finite, > 0).
        """
        super().__init__(neighboring_relation)
        self._max_atoms = _validate.check_int("max_atoms", max_atoms, minimum=2)
        self._interval = _validate.check_positive("value_discretization_interval",
                                                  value_discretization_interval)

    def _state(self) -> tuple[float, _LossAtoms | None, _pld.PrivacyLossDistribution | None]:
        """(log prod (1 - delta_i)^{k_i}, exact atoms or None, PLD fallback or None)."""
        groups = self._groups()
        log_keep = math.fsum(k * math.log1p(-delta) for _, delta, k in groups)
        pure: dict[float, int] = {}
        for eps, _, k in groups:
            if eps > 0:
                pure[eps] = pure.get(eps, 0) + k
        if not pure:
            return log_keep, None, None
        atoms = _loss_atoms(tuple(sorted(pure.items())), self._max_atoms)
        if atoms is not None:
            return log_keep, atoms, None
        return log_keep, None, _pld_fallback(tuple(groups), self._interval)

    @property
    def backend(self) -> str:
        """The method label the current history's epsilon will carry."""
        if self._non_private or not self._counts:
            return self.method
        return self.method if self._state()[2] is None else METHOD_OPTIMAL_PLD

    @staticmethod
    def _delta(log_keep: float, atoms: _LossAtoms | None, epsilon: float) -> float:
        """1 - prod (1 - delta_i)^{k_i} (1 - delta_pure(eps')) + dropped mass, capped at 1."""
        if atoms is None:
            return min(1.0, 0.0 - math.expm1(log_keep))
        pure = atoms.delta_pure(epsilon) if math.isfinite(epsilon) else 0.0
        log_rest = log_keep + (math.log1p(-pure) if pure < 1.0 else -math.inf)
        return min(1.0, 0.0 - math.expm1(log_rest) + atoms.dropped)

    def get_delta(self, target_epsilon: float) -> float:
        """The optimal delta at ``target_epsilon`` (an upper bound on it in the PLD fallback).

        Args:
            target_epsilon: Total epsilon, a real number >= 0 (inf allowed).

        Raises:
            ValueError: If ``target_epsilon`` is negative, NaN or not a number.
        """
        target_epsilon = _check_target_epsilon(target_epsilon)
        if self._non_private:
            return 1.0
        if not self._counts:
            return 0.0
        log_keep, atoms, pld = self._state()
        if pld is not None:
            if math.isinf(target_epsilon):
                return min(1.0, 0.0 - math.expm1(log_keep))
            return min(1.0, max(0.0, float(pld.get_delta_for_epsilon(target_epsilon))))
        return self._delta(log_keep, atoms, target_epsilon)

    def get_epsilon(self, target_delta: float) -> Epsilon:
        """Smallest epsilon whose optimal delta is <= ``target_delta`` (bisection, upper end).

        Args:
            target_delta: Total delta, in [0, 1].

        Returns:
            The epsilon (inf when ``target_delta`` < 1 - prod (1 - delta_i)^{k_i}, or after a
            non-private event).

        Raises:
            ValueError: If ``target_delta`` is not in [0, 1].
        """
        target_delta = _validate.check_probability("target_delta", target_delta)
        if self._non_private:
            return Epsilon(math.inf, method=self.method, kind=BoundKind.UPPER_BOUND)
        if not self._counts:
            return Epsilon(0.0, method=self.method, kind=BoundKind.UPPER_BOUND)
        log_keep, atoms, pld = self._state()
        if pld is not None:
            value = float(pld.get_epsilon_for_delta(target_delta))
            return Epsilon(max(0.0, value), method=METHOD_OPTIMAL_PLD,
                           kind=BoundKind.UPPER_BOUND)
        return Epsilon(self._bisect(log_keep, atoms, target_delta), method=self.method,
                       kind=BoundKind.UPPER_BOUND)

    def _bisect(self, log_keep: float, atoms: _LossAtoms | None, target_delta: float) -> float:
        def delta(eps: float) -> float:
            return self._delta(log_keep, atoms, eps)

        if delta(0.0) <= target_delta:
            return 0.0
        hi = float(atoms.losses[0]) if atoms is not None else 0.0  # delta_pure(hi) = 0
        if delta(hi) > target_delta:
            return math.inf  # below 1 - prod (1 - delta_i)^{k_i} (+ dropped): unreachable
        lo = 0.0
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if not lo < mid < hi or hi - lo <= 1e-13 * hi:
                break
            if delta(mid) <= target_delta:
                hi = mid
            else:
                lo = mid
        return hi
