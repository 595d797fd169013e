"""Basic composition: the sum of the per-release (epsilon, delta) guarantees.

Dwork, McSherry, Nissim, Smith 2006 / Dwork-Roth 2014, Theorem 3.16: the k-fold composition of
(eps_i, delta_i)-DP mechanisms is (sum eps_i, sum delta_i)-DP. Always valid, never tight.
"""

from __future__ import annotations

import copy as _copy
import math
from collections import Counter
from typing import Any

from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.accountants.base import Accountant, BoundKind, Epsilon
from dpkd_audit.events import DeclaredGuarantee

__all__ = ["PureAccountant", "event_guarantee"]


def event_guarantee(event: _dp.DpEvent) -> tuple[float, float] | None:
    """The (epsilon, delta) that one occurrence of a leaf event satisfies, or None if unknown.

    - ``LaplaceDpEvent``: noise scale b = noise_multiplier * Delta_1 gives eps = 1/noise_multiplier
      (Dwork-Roth 2014, Thm 3.6).
    - ``DiscreteLaplaceDpEvent``: pmf proportional to exp(-a|x|) with integer sensitivity Delta
      gives eps = a * Delta (Ghosh-Roughgarden-Sundararajan 2012; CKS 2020, Sec. 2).
    - ``RandomizedResponseDpEvent``: keep w.p. 1-p+p/k, any other bucket w.p. p/k gives
      eps = ln(1 + k(1-p)/p) (Warner 1965; Kairouz-Oh-Viswanath 2016).
    - our events: their declared guarantee (see :mod:`dpkd_audit.events`).
    """
    if isinstance(event, DeclaredGuarantee):
        return event.guarantee()
    if isinstance(event, _dp.LaplaceDpEvent):
        if not event.noise_multiplier > 0:
            return None
        return (1.0 / event.noise_multiplier, 0.0)
    if isinstance(event, _dp.DiscreteLaplaceDpEvent):
        if not (event.noise_parameter > 0 and event.sensitivity >= 1):
            return None
        return (float(event.noise_parameter) * event.sensitivity, 0.0)
    if isinstance(event, _dp.RandomizedResponseDpEvent):
        p, k = event.noise_parameter, event.num_buckets
        if not (0 < p <= 1 and k >= 2):
            return None
        return (math.log1p(k * (1.0 - p) / p), 0.0)
    return None


def _add_exact(partials: list[float], x: float) -> None:
    """Add ``x`` to the exact sum held by ``partials`` (non-overlapping doubles, finite).

    Shewchuk, "Adaptive precision floating-point arithmetic", 1997 (the algorithm behind
    ``math.fsum``): the partials represent the sum of every ``x`` added exactly, so
    ``math.fsum(partials)`` is its correctly rounded value, the same as ``math.fsum`` over the
    terms themselves.
    """
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        if not math.isfinite(hi):
            raise OverflowError("the exact sum left the doubles")
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


class PureAccountant(Accountant):
    """Basic (pure) composition of per-release guarantees; the only choice when delta = 0.

    The sums are kept exactly and updated per composed event (issue 33: recomputing them over
    every distinct event made a ledger's charge cost grow with its history, 37 ms per charge
    after 3,000 distinct ones): ``totals`` equals ``math.fsum`` of ``count * epsilon`` over the
    distinct events, at O(1) per charge, and ``copy`` is shallow (events are immutable).
    """

    method = "basic composition"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._eps_partials: list[float] = []
        self._delta_partials: list[float] = []
        self._infinite = False  # a term of +inf (counts only grow: it stays)

    def _check_leaf(self, event: _dp.DpEvent) -> None:
        if event_guarantee(event) is None:
            raise self._unsupported(event, "no per-release (epsilon, delta) guarantee is known")

    def _on_compose(self, leaves: Counter[_dp.DpEvent]) -> None:
        for leaf, n in leaves.items():
            if isinstance(leaf, _dp.NonPrivateDpEvent):
                continue
            eps, delta = event_guarantee(leaf)  # type: ignore[misc]
            new = self._counts[leaf]
            old = new - n
            for partials, value in ((self._eps_partials, eps), (self._delta_partials, delta)):
                before, after = old * value, new * value
                if not (math.isfinite(before) and math.isfinite(after)):
                    self._infinite = self._infinite or after == math.inf
                    continue
                try:
                    _add_exact(partials, -before)  # replace the event's term, exactly
                    _add_exact(partials, after)
                except OverflowError:  # a total beyond the doubles: inf, an upper bound
                    self._infinite = True

    def copy(self) -> PureAccountant:
        """An independent copy: the multiset and the exact sums (events are immutable)."""
        new = _copy.copy(self)
        new._counts = self._counts.copy()
        new._eps_partials = list(self._eps_partials)
        new._delta_partials = list(self._delta_partials)
        return new

    def totals(self) -> tuple[float, float]:
        """The composed (sum of epsilons, sum of deltas); (inf, 0) after a non-private event."""
        if self._non_private:
            return (math.inf, 0.0)
        eps = math.inf if self._infinite else math.fsum(self._eps_partials)
        return (eps, min(math.fsum(self._delta_partials), math.inf))

    def get_epsilon(self, target_delta: float) -> Epsilon:
        """Sum of epsilons if the summed delta fits ``target_delta``, else infinity."""
        target_delta = _validate.check_probability("target_delta", target_delta)
        eps, delta = self.totals()
        value = eps if delta <= target_delta else math.inf
        return Epsilon(value, method=self.method, kind=BoundKind.UPPER_BOUND)

    def get_delta(self, target_epsilon: float) -> float:
        """Sum of deltas if the summed epsilon fits ``target_epsilon``, else 1."""
        if not (isinstance(target_epsilon, (int, float)) and target_epsilon >= 0):
            raise ValueError(f"target_epsilon must be a real number >= 0; got {target_epsilon!r}")
        eps, delta = self.totals()
        return delta if eps <= target_epsilon else 1.0
