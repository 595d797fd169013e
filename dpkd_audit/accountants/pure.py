"""Basic composition: the sum of the per-release (epsilon, delta) guarantees.

Dwork, McSherry, Nissim, Smith 2006 / Dwork-Roth 2014, Theorem 3.16: the k-fold composition of
(eps_i, delta_i)-DP mechanisms is (sum eps_i, sum delta_i)-DP. Always valid, never tight.
"""

from __future__ import annotations

import math

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


class PureAccountant(Accountant):
    """Basic (pure) composition of per-release guarantees; the only choice when delta = 0."""

    method = "basic composition"

    def _check_leaf(self, event: _dp.DpEvent) -> None:
        if event_guarantee(event) is None:
            raise self._unsupported(event, "no per-release (epsilon, delta) guarantee is known")

    def totals(self) -> tuple[float, float]:
        """The composed (sum of epsilons, sum of deltas); (inf, 0) after a non-private event."""
        if self._non_private:
            return (math.inf, 0.0)
        eps_terms, delta_terms = [], []
        for event, count in self._counts.items():
            eps, delta = event_guarantee(event)  # type: ignore[misc]
            eps_terms.append(count * eps)
            delta_terms.append(count * delta)
        return (math.fsum(eps_terms), math.fsum(delta_terms))

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
