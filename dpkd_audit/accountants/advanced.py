"""Advanced and optimal composition of per-release (epsilon, delta) guarantees.

Both accountants only use what every leaf event promises per release, ``(eps_i, delta_i)`` from
:func:`dpkd_audit.accountants.pure.event_guarantee`, and bound the adaptive composition of *any*
mechanisms with those guarantees (so they are never tighter than a mechanism-aware analysis such
as RDP or PLD of the actual noise distribution):

- :class:`AdvancedCompositionAccountant`: the advanced composition theorem of Dwork, Rothblum
  and Vadhan, "Boosting and Differential Privacy", FOCS 2010, Theorem III.3 (Dwork-Roth 2014,
  "The Algorithmic Foundations of Differential Privacy", Theorem 3.20), in its heterogeneous
  form, capped by basic composition.
- :class:`OptimalCompositionAccountant` (in :mod:`.optimal`, re-exported here): the exact
  optimal composition of Kairouz, Oh and Viswanath, "The Composition Theorem for Differential
  Privacy", ICML 2015 (IEEE Trans. Inf. Theory 2017), Theorem 3.3.

The neighbouring relation is fixed at construction like every accountant's; both accountants
take the per-event guarantees as stated for that relation.

Also :func:`dgd_published_epsilon`, the composition formula printed in the DGD paper's Privacy
Analysis, kept so that the paper's figures can be reproduced and compared.
"""

from __future__ import annotations

import math

from dpkd_audit import _validate
from dpkd_audit.accountants.base import BoundKind, Epsilon
from dpkd_audit.accountants.guarantees import GuaranteeAccountant, check_target_epsilon
from dpkd_audit.accountants.optimal import (
    METHOD_OPTIMAL,
    METHOD_OPTIMAL_GRID,
    OptimalCompositionAccountant,
)

__all__ = [
    "METHOD_ADVANCED",
    "METHOD_OPTIMAL",
    "METHOD_OPTIMAL_GRID",
    "AdvancedCompositionAccountant",
    "OptimalCompositionAccountant",
    "dgd_published_epsilon",
]

METHOD_ADVANCED = "advanced composition (Dwork-Rothblum-Vadhan)"


def _expm1(x: float) -> float:
    """``math.expm1`` that returns inf instead of raising on overflow."""
    return math.expm1(x) if x < 700.0 else math.inf


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


class AdvancedCompositionAccountant(GuaranteeAccountant):
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
        target_epsilon = check_target_epsilon(target_epsilon)
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
