"""Exact optimal composition of per-release (epsilon, delta) guarantees (Kairouz-Oh-Viswanath).

Kairouz, Oh, Viswanath, "The Composition Theorem for Differential Privacy", ICML 2015 (IEEE
Trans. Inf. Theory 2017), Theorem 3.3: the adaptive k-fold composition of (eps, delta)-DP
mechanisms is ((k - 2i) eps, delta_i)-DP for i = 0..floor(k/2) with

    delta_i = 1 - (1 - delta)^k (1 - delta_(i)),
    delta_(i) = sum_{l=0}^{i-1} C(k, l) (e^{(k-l) eps} - e^{(k-2i+l) eps}) / (1 + e^eps)^k,

and no better (epsilon, delta) holds for all such mechanisms. The region is that of the k-fold
product of the dominating pair P = (delta, (1-delta) e^eps/(1+e^eps), (1-delta)/(1+e^eps), 0),
Q = the same reversed (KOV 2015, Theorem 2.2), so at *any* epsilon' the optimal delta is the
hockey-stick divergence of the product,

    delta(eps') = 1 - prod_i (1 - delta_i)^{k_i} (1 - delta_pure(eps')),
    delta_pure(eps') = E_P[(1 - e^{eps' - L})_+],

where L is the privacy loss of the composed binary randomized responses: for a group of k
releases at eps, L = (k - 2J) eps with J ~ Binomial(k, 1/(1 + e^eps)). The same factorisation
holds for heterogeneous histories (several (eps_i, delta_i) groups, each with a count); the exact
heterogeneous optimum is #P-hard in general (Murtagh and Vadhan, "The Complexity of Computing
the Optimal Composition of Differential Privacy", TCC 2016), so it is computed as follows.

Evaluation (all in floating point with explicit error margins, so every value is an upper bound):

1. Every group's loss atoms are its binomial atoms, computed in log space from
   log C(k, j) - j eps - k log(1 + e^-eps) (no cancellation, even for eps = 1e20). Groups whose
   full support exceeds the size limits keep a window of atoms; the mass outside (<= 1e-30,
   from scipy's binomial tails) is moved to an infinite loss, i.e. added to delta.
2. The group with the most atoms is the *inner* group. The others are convolved exactly into
   *outer* atoms (equal losses merged, the merged atom keeping the largest loss) while their
   number stays <= ``max_atoms``; past that, the outer losses are rounded *up* onto a grid of
   ``max_atoms`` cells (raising a loss can only raise E_P[(1 - e^{eps' - L})_+], so the result
   stays an upper bound, within (number of rounded groups) x (grid step) in epsilon) and
   convolved there with positive sums only (no FFT, no cancellation). The epsilon then carries
   the label "optimal composition (pessimistic loss grid)".
3. delta_pure(eps') = sum_a P(a) g(eps' - L_a), where g(t) = E[(1 - e^{t - L_inner})_+] is read
   off the inner group's sorted atoms through suffix sums (O(log n) per outer atom). So three
   groups of 5000, 200 and 300 releases cost about 10^5 evaluations, where the full product has
   3 x 10^8 atoms.

Rounding: the log-probabilities carry a relative margin of 8 u M (u = 2^-53, M the magnitude of
the terms summed, which stays below 4 ln k! + 750 per group for every atom whose probability is
representable), and every outer term carries an absolute margin for the cancellation in
g(t) = U - e^t W and for the rounding of the losses. ``get_epsilon`` returns the upper end of its
bisection bracket. The dp_accounting fallback of earlier versions (``from_privacy_parameters`` /
``self_compose`` / ``get_epsilon_for_delta``, which drifts *below* the exact value at small
deltas) is gone.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
from scipy import special

from dpkd_audit import _validate
from dpkd_audit.accountants.base import BoundKind, Epsilon, NeighboringRelation
from dpkd_audit.accountants.binomial import MAX_EXACT_COUNT, binomial_window
from dpkd_audit.accountants.guarantees import GuaranteeAccountant, check_target_epsilon
from dpkd_audit.accountants.pure import event_guarantee

__all__ = [
    "METHOD_OPTIMAL",
    "METHOD_OPTIMAL_GRID",
    "OptimalCompositionAccountant",
]

METHOD_OPTIMAL = "optimal composition (Kairouz-Oh-Viswanath)"
METHOD_OPTIMAL_GRID = "optimal composition (pessimistic loss grid)"

_UNIT_ROUNDOFF = 2.0 ** -53
#: P-mass that a group, or a partial composition, may move to an infinite privacy loss when its
#: exact support is too large (added to delta, so the result stays an upper bound).
_TAIL_BUDGET = 1e-30
#: Groups with more atoms than this are windowed with scipy's binomial tails.
_WINDOW_ABOVE = 1 << 20
#: Largest number of atom pairs formed at once by an exact convolution step.
_MAX_PAIRS = 1 << 21


@dataclass(frozen=True)
class _Atoms:
    """Atoms of a discrete privacy-loss distribution: losses and their log-probabilities under P.

    Attributes:
        losses: Privacy losses (any order unless stated).
        log_probs: Natural logarithms of their probabilities.
        dropped: P-mass removed by truncation (counted as an infinite loss).
        shift: Largest amount by which any loss was rounded up (0 when exact).
    """

    losses: np.ndarray
    log_probs: np.ndarray
    dropped: float = 0.0
    shift: float = 0.0


#: Largest total pure epsilon (sum of k eps) composed exactly; beyond it the losses leave the
#: doubles and the accountant reports epsilon inf (delta 1 at every finite epsilon).
_MAX_TOTAL_LOSS = 1e307


def _group_atoms(eps: float, k: int, budget: float) -> _Atoms:
    """Atoms of the k-fold binary randomized response at ``eps`` (KOV 2015, proof of Thm 3.3).

    Output j = number of coordinates that took their less likely value under P:
    P(j) = C(k, j) e^{-j eps} / (1 + e^-eps)^k and the privacy loss is (k - 2j) eps. With
    ``budget`` > 0, atoms of total mass <= ``budget`` may be dropped (returned as ``dropped``).
    """
    if budget > 0 and k + 1 > _WINDOW_ABOVE:
        lo, hi, below, above = binomial_window(k, eps, budget / 4)
        j = np.arange(lo, hi + 1, dtype=np.float64)
        dropped = below + above
    else:
        j = np.arange(k + 1, dtype=np.float64)
        dropped = 0.0
    log_probs = (special.gammaln(k + 1.0) - special.gammaln(j + 1.0)
                 - special.gammaln(k - j + 1.0) - j * eps - k * np.log1p(np.exp(-eps)))
    losses = (k - 2.0 * j) * eps
    atoms = _Atoms(losses, log_probs, dropped)
    if budget > 0 and dropped == 0.0:
        atoms = _truncate(atoms, budget)
    return atoms


def _log_margin(groups: tuple[tuple[float, int], ...], n_atoms: int) -> float:
    """Relative safety margin (log space) for the rounding of the log-probabilities.

    log P(j) = log C(k, j) - j eps - k log1p(e^-eps) sums terms whose magnitude is at most
    M = 2 ln k! + j eps + k log1p(e^-eps); for an atom with a representable probability
    (log P >= -745), j eps <= 745 + ln C(k, j), so M <= 4 ln k! + k log1p(e^-eps) + 745 per
    group. Its absolute rounding error is a few units of roundoff u times M (measured against
    50-digit mpmath: about 2 u ln k! at k = 1e5); 8 u M per group, plus the summation error of
    the convolution and of the logsumexp, is added.
    """
    magnitude = sum(4.0 * float(special.gammaln(k + 1.0)) + k * math.log1p(math.exp(-eps))
                    + 750.0 for eps, k in groups)
    return 8.0 * _UNIT_ROUNDOFF * (magnitude + math.log2(n_atoms + 2) + 8.0)


def _merge_equal_losses(atoms: _Atoms) -> _Atoms:
    """Merge atoms whose losses agree to 1e-12 (relative); a merged atom keeps the largest loss.

    Raising a loss can only raise E_P[(1 - e^{epsilon - L})_+], so merging is pessimistic.
    """
    order = np.argsort(atoms.losses, kind="stable")
    losses, log_probs = atoms.losses[order], atoms.log_probs[order]
    tol = 1e-12 * max(1.0, float(np.abs(losses).max()))
    starts = np.flatnonzero(np.concatenate(([True], np.diff(losses) > tol)))
    return _Atoms(np.maximum.reduceat(losses, starts), np.logaddexp.reduceat(log_probs, starts),
                  atoms.dropped, atoms.shift)


def _truncate(atoms: _Atoms, budget: float) -> _Atoms:
    """Drop the least likely atoms with total P-mass <= ``budget``; add that mass to dropped."""
    order = np.argsort(atoms.log_probs, kind="stable")
    cumulative = np.cumsum(np.exp(atoms.log_probs[order]))
    n_drop = int(np.searchsorted(cumulative, budget, side="right"))
    if n_drop == 0:
        return atoms
    keep = np.sort(order[n_drop:])
    mass = float(cumulative[n_drop - 1]) * (1.0 + 1e-9)
    return _Atoms(atoms.losses[keep], atoms.log_probs[keep], atoms.dropped + mass, atoms.shift)


def _convolve_exact(a: _Atoms, b: _Atoms) -> _Atoms:
    """Exact convolution (sum of independent losses), equal losses merged."""
    losses = (a.losses[:, None] + b.losses[None, :]).ravel()
    log_probs = (a.log_probs[:, None] + b.log_probs[None, :]).ravel()
    return _merge_equal_losses(_Atoms(losses, log_probs, a.dropped + b.dropped,
                                      a.shift + b.shift))


@dataclass
class _Grid:
    """Losses rounded up onto the grid step ``h``: cell c has loss (offset + c) h."""

    h: float
    offset: int
    probs: np.ndarray
    dropped: float
    shift: float

    @classmethod
    def from_atoms(cls, atoms: _Atoms, h: float) -> _Grid:
        cells, probs = _cells(atoms, h)
        offset = int(cells.min())
        dense = np.bincount(cells - offset, weights=probs)
        return cls(h, offset, dense, atoms.dropped, atoms.shift + h)

    def convolve(self, atoms: _Atoms) -> None:
        """Add independent losses ``atoms`` (rounded up onto the grid), positive sums only."""
        cells, probs = _cells(atoms, self.h)
        low = int(cells.min())
        weights = np.bincount(cells - low, weights=probs)
        out = np.zeros(self.probs.size + weights.size - 1)
        n = self.probs.size
        for shift in np.flatnonzero(weights):
            out[shift:shift + n] += weights[shift] * self.probs
        self.probs, self.offset = out, self.offset + low
        self.dropped += atoms.dropped
        self.shift += atoms.shift + self.h

    def trim(self, budget: float) -> None:
        """Drop end cells of total mass <= ``budget`` (added to ``dropped``)."""
        cumulative = np.cumsum(self.probs)
        first = int(np.searchsorted(cumulative, budget / 2, side="right"))
        reverse = np.cumsum(self.probs[::-1])
        last = self.probs.size - int(np.searchsorted(reverse, budget / 2, side="right"))
        if first >= last:
            return
        mass = (cumulative[first - 1] if first else 0.0) + (
            reverse[self.probs.size - last - 1] if last < self.probs.size else 0.0)
        self.dropped += float(mass) * (1.0 + 1e-9)
        self.probs, self.offset = self.probs[first:last], self.offset + first

    def atoms(self) -> _Atoms:
        nonzero = np.flatnonzero(self.probs > 0)
        return _Atoms((self.offset + nonzero) * self.h, np.log(self.probs[nonzero]),
                      self.dropped, self.shift)


def _cells(atoms: _Atoms, h: float) -> tuple[np.ndarray, np.ndarray]:
    """Grid cells (losses rounded up to multiples of h) and linear probabilities of atoms."""
    cells = np.ceil(atoms.losses / h).astype(np.int64)
    return cells, np.exp(atoms.log_probs)


def _span(atoms: _Atoms) -> float:
    return float(atoms.losses.max() - atoms.losses.min()) if atoms.losses.size else 0.0


def _compose_outer(parts: list[_Atoms], max_atoms: int) -> _Atoms:
    """Convolve the outer groups: exactly while small enough, then on a pessimistic grid."""
    result = _Atoms(np.zeros(1), np.zeros(1))
    total_span = sum(_span(p) for p in parts)
    for i, part in enumerate(parts):
        if result.losses.size * part.losses.size <= _MAX_PAIRS:
            candidate = _convolve_exact(result, part)
            if candidate.losses.size > max_atoms:
                candidate = _truncate(candidate, _TAIL_BUDGET)
            if candidate.losses.size <= max_atoms:
                result = candidate
                continue
        # pessimistic grid from here on: one cell per max_atoms-th of the remaining span
        h = max(total_span, 1e-300) / max_atoms
        grid = _Grid.from_atoms(result, h)
        for rest in parts[i:]:
            grid.convolve(rest)
            grid.trim(_TAIL_BUDGET)
        return grid.atoms()
    return result


@dataclass(frozen=True)
class _Composition:
    """The composed pure part: outer atoms, inner sorted atoms with suffix sums, margins."""

    outer_losses: np.ndarray
    outer_probs: np.ndarray
    inner_losses: np.ndarray  # ascending
    inner_upper: np.ndarray  # U_i = sum_{b >= i} P_b (one extra 0 at the end)
    inner_log_lower: np.ndarray  # log W_i = log sum_{b >= i} P_b e^{-L_b} (extra -inf)
    inner_scale: float  # max |inner loss|
    dropped: float
    shift: float
    log_margin: float
    max_loss: float

    def delta_pure(self, epsilon: float) -> float:
        """Upper bound on E_P[(1 - e^{epsilon - L})_+] (without the dropped mass)."""
        if epsilon >= self.max_loss:
            return 0.0
        t = epsilon - self.outer_losses
        i = np.searchsorted(self.inner_losses, t, side="right")
        upper = self.inner_upper[i]
        exponent = t + self.inner_log_lower[i]
        with np.errstate(over="ignore"):
            lower = np.exp(exponent)
        terms = np.maximum(0.0, upper - lower)
        # Cancellation in U - e^t W, misclassified atoms at L = t, and rounding of the losses.
        lower = np.minimum(lower, upper)
        magnitude = np.where(lower > 0, np.abs(np.where(lower > 0, exponent, 0.0)), 0.0)
        slack = (_UNIT_ROUNDOFF * (8.0 + 2.0 * math.log2(self.inner_losses.size + 2))
                 * self.inner_upper[np.maximum(i - 1, 0)]
                 + 8.0 * _UNIT_ROUNDOFF * (abs(epsilon) + np.abs(self.outer_losses)
                                           + self.inner_scale + magnitude + 1.0) * lower)
        value = float(np.dot(self.outer_probs, terms + slack))
        return min(1.0, value * math.exp(self.log_margin))


def _inner_tables(atoms: _Atoms) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    order = np.argsort(atoms.losses, kind="stable")
    losses, log_probs = atoms.losses[order], atoms.log_probs[order]
    probs = np.exp(log_probs)
    upper = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])
    log_terms = log_probs - losses
    log_lower = np.concatenate([np.logaddexp.accumulate(log_terms[::-1])[::-1], [-np.inf]])
    return losses, upper, log_lower


@functools.lru_cache(maxsize=32)
def _composition(groups: tuple[tuple[float, int], ...], max_atoms: int) -> _Composition:
    """The composed pure groups ((eps, count), ...), exact or pessimistically gridded."""
    # The group with the largest support is the inner one; its atoms are never convolved.
    sizes = [k + 1 for _, k in groups]
    inner_index = int(np.argmax(sizes))
    inner_eps, inner_k = groups[inner_index]
    outer_groups = [g for i, g in enumerate(groups) if i != inner_index]
    full_outer = math.prod(k + 1 for _, k in outer_groups)
    budget = 0.0 if full_outer <= max_atoms else _TAIL_BUDGET / (2 * len(groups))
    inner_budget = 0.0 if inner_k + 1 <= 4 * max_atoms else _TAIL_BUDGET / (2 * len(groups))
    inner = _group_atoms(inner_eps, inner_k, inner_budget)
    if inner.losses.size > 4 * max_atoms:  # still too wide: merge neighbours (pessimistic)
        inner = _Grid.from_atoms(inner, _span(inner) / (4 * max_atoms)).atoms()
    parts = sorted((_group_atoms(eps, k, budget) for eps, k in outer_groups),
                   key=lambda a: -a.losses.size)
    outer = _compose_outer(parts, max_atoms)
    losses, upper, log_lower = _inner_tables(inner)
    n_atoms = outer.losses.size * losses.size
    return _Composition(
        outer_losses=outer.losses, outer_probs=np.exp(outer.log_probs), inner_losses=losses,
        inner_upper=upper, inner_log_lower=log_lower,
        inner_scale=float(np.abs(losses).max()), dropped=outer.dropped + inner.dropped,
        shift=outer.shift + inner.shift, log_margin=_log_margin(groups, n_atoms),
        max_loss=float(outer.losses.max() + losses.max()))


class OptimalCompositionAccountant(GuaranteeAccountant):
    """Exact optimal composition of (eps_i, delta_i)-DP mechanisms (Kairouz-Oh-Viswanath).

    See the module docstring for the theorem and how it is evaluated. Events are grouped by
    guarantee, so k copies of an event cost one group, and composed curves are cached. All
    values are upper bounds: the log-probabilities carry a floating-point margin (about 32 u ln k!
    relative in delta: 1.5e-10 at k = 10^4, 5e-7 at 10^7, 7e-5 at 10^9, so the epsilon of huge
    compositions sits slightly above the PLD accountant's), truncated mass is added to delta,
    and ``get_epsilon`` returns the upper end of its bisection bracket. At most
    ``MAX_EXACT_COUNT`` (10^12) releases per guarantee are accepted. Histories too large for
    the exact computation are evaluated on a pessimistic loss grid and labelled
    ``METHOD_OPTIMAL_GRID``.
    """

    method = METHOD_OPTIMAL

    def __init__(self, neighboring_relation: NeighboringRelation =
                 NeighboringRelation.REPLACE_ONE, *, max_atoms: int = 2 ** 20) -> None:
        """Create an empty accountant.

        Args:
            neighboring_relation: The neighbouring relation (fixed).
            max_atoms: Largest number of outer privacy-loss atoms handled exactly (an integer
                >= 2); also the number of cells of the pessimistic grid past that.
        """
        super().__init__(neighboring_relation)
        self._max_atoms = _validate.check_int("max_atoms", max_atoms, minimum=2)

    def _check_totals(self, leaves: Counter) -> None:
        """Refuse histories with more than ``MAX_EXACT_COUNT`` releases of one guarantee."""
        totals: dict[float, int] = {}
        for eps, _, k in self._groups():
            totals[eps] = totals.get(eps, 0) + k
        for leaf, n in leaves.items():
            guarantee = event_guarantee(leaf)
            if guarantee is None:
                continue
            eps = float(guarantee[0])
            totals[eps] = totals.get(eps, 0) + n
            if totals[eps] > MAX_EXACT_COUNT and eps > 0:
                raise self._unsupported(
                    leaf, f"{totals[eps]} releases with epsilon {eps:g} exceed the "
                          f"{MAX_EXACT_COUNT:.0e} whose binomial the exact computation holds; "
                          "AdvancedCompositionAccountant and RDPAccountant take any count")

    def _overflows(self) -> bool:
        """Whether the composed pure losses reach the top of the doubles (sum of k eps > 1e307).

        The atoms' losses (k - 2j) eps would overflow to +-inf (and inf - inf to NaN); the
        epsilon of such a history is beyond any double, so it is reported as inf (an upper
        bound) without building them.
        """
        total = 0.0
        for eps, _, k in self._groups():
            total += k * eps
            if not total <= _MAX_TOTAL_LOSS:
                return True
        return False

    def _state_keep(self) -> float:
        return math.fsum(k * math.log1p(-delta) for _, delta, k in self._groups())

    def _state(self) -> tuple[float, _Composition | None]:
        """(log prod (1 - delta_i)^{k_i}, composed pure part or None if there is none)."""
        groups = self._groups()
        log_keep = math.fsum(k * math.log1p(-delta) for _, delta, k in groups)
        pure: dict[float, int] = {}
        for eps, _, k in groups:
            if eps > 0:
                pure[eps] = pure.get(eps, 0) + k
        if not pure:
            return log_keep, None
        return log_keep, _composition(tuple(sorted(pure.items())), self._max_atoms)

    @property
    def backend(self) -> str:
        """The method label the current history's epsilon will carry."""
        if self._non_private or not self._counts:
            return self.method
        composition = self._state()[1]
        return self._label(composition)

    def _label(self, composition: _Composition | None) -> str:
        if composition is not None and composition.shift > 0:
            return METHOD_OPTIMAL_GRID
        return self.method

    @staticmethod
    def _delta(log_keep: float, composition: _Composition | None, epsilon: float) -> float:
        """1 - prod (1 - delta_i)^{k_i} (1 - delta_pure(eps')) + dropped mass, capped at 1."""
        if composition is None:
            return min(1.0, 0.0 - math.expm1(log_keep))
        pure = composition.delta_pure(epsilon) if math.isfinite(epsilon) else 0.0
        log_rest = log_keep + (math.log1p(-pure) if pure < 1.0 else -math.inf)
        return min(1.0, 0.0 - math.expm1(log_rest) + composition.dropped)

    def get_delta(self, target_epsilon: float) -> float:
        """The optimal delta at ``target_epsilon`` (an upper bound on it).

        Args:
            target_epsilon: Total epsilon, a real number >= 0 (inf allowed).

        Raises:
            ValueError: If ``target_epsilon`` is negative, NaN or not a number.
        """
        target_epsilon = check_target_epsilon(target_epsilon)
        if self._non_private:
            return 1.0
        if not self._counts:
            return 0.0
        if self._overflows():  # every finite epsilon is below the composed losses' range
            if math.isfinite(target_epsilon):
                return 1.0
            return self._delta(self._state_keep(), None, target_epsilon)
        log_keep, composition = self._state()
        return self._delta(log_keep, composition, target_epsilon)

    def get_epsilon(self, target_delta: float) -> Epsilon:
        """Smallest epsilon whose optimal delta is <= ``target_delta`` (bisection, upper end).

        Args:
            target_delta: Total delta, in [0, 1].

        Returns:
            The epsilon (inf when ``target_delta`` < 1 - prod (1 - delta_i)^{k_i} plus the
            truncated mass, or after a non-private event).

        Raises:
            ValueError: If ``target_delta`` is not in [0, 1].
        """
        target_delta = _validate.check_probability("target_delta", target_delta)
        if self._non_private:
            return Epsilon(math.inf, method=self.method, kind=BoundKind.UPPER_BOUND)
        if not self._counts:
            return Epsilon(0.0, method=self.method, kind=BoundKind.UPPER_BOUND)
        if self._overflows():
            return Epsilon(0.0 if target_delta >= 1.0 else math.inf, method=self.method,
                           kind=BoundKind.UPPER_BOUND)
        log_keep, composition = self._state()
        return Epsilon(self._bisect(log_keep, composition, target_delta),
                       method=self._label(composition), kind=BoundKind.UPPER_BOUND)

    def _bisect(self, log_keep: float, composition: _Composition | None,
                target_delta: float) -> float:
        def delta(eps: float) -> float:
            return self._delta(log_keep, composition, eps)

        if delta(0.0) <= target_delta:
            return 0.0
        hi = composition.max_loss if composition is not None else 0.0  # delta_pure(hi) = 0
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
