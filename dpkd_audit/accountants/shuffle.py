"""Shuffle accountant: composes shuffled local releases with the FMT21 bounds.

The bounds themselves (closed form, Theorem 3.1; numerical, Theorem 3.2 / Appendix E of
Feldman-McMillan-Talwar FOCS 2021) live in :mod:`dpkd_audit._math.shuffle` and are re-exported
here.
"""

from __future__ import annotations

import enum
import math

from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit._math.shuffle import (
    closed_form_epsilon,
    closed_form_max_local_epsilon,
    numerical_delta,
    numerical_epsilon,
)
from dpkd_audit.accountants.base import Accountant, BoundKind, Epsilon, NeighboringRelation
from dpkd_audit.events import ShuffledLocalDpEvent

__all__ = [
    "ShuffleAccountant",
    "ShuffleBound",
    "closed_form_epsilon",
    "closed_form_max_local_epsilon",
    "numerical_delta",
    "numerical_epsilon",
]


class ShuffleBound(enum.Enum):
    """Which FMT21 amplification bound the shuffle accountant uses per release."""

    NUMERICAL = "numerical"
    CLOSED_FORM = "closed form"


class ShuffleAccountant(Accountant):
    """Shuffle-model accountant: FMT21 amplification per release, then basic composition.

    Each ``ShuffledLocalDpEvent(local_epsilon, num_users)`` is one round of ``num_users``
    shuffled reports of an ``local_epsilon``-DP local randomizer. It is charged
    (eps_i, ``delta_per_release``) with eps_i from FMT21's numerical bound
    (:func:`numerical_epsilon`, default) or closed form (:func:`closed_form_epsilon`, Theorem
    3.1, used only where its validity condition holds), and (local_epsilon, 0) when the bound
    gives no amplification. Releases compose by basic composition (Dwork-Roth 2014, Thm 3.16):
    epsilon = sum eps_i, valid when sum of deltas <= target_delta. Other events are refused.

    Args:
        delta_per_release: Delta spent by each amplified release, in (0, 1).
        bound: ``ShuffleBound.NUMERICAL`` (default) or ``ShuffleBound.CLOSED_FORM``.
        neighboring_relation: Must be ``REPLACE_ONE`` (one user's input changes), the relation
            of FMT21.
    """

    def __init__(self, delta_per_release: float, *,
                 bound: ShuffleBound = ShuffleBound.NUMERICAL,
                 neighboring_relation: NeighboringRelation =
                 NeighboringRelation.REPLACE_ONE) -> None:
        super().__init__(neighboring_relation)
        if neighboring_relation is not NeighboringRelation.REPLACE_ONE:
            raise ValueError("neighboring_relation must be NeighboringRelation.REPLACE_ONE for "
                             "ShuffleAccountant (FMT21 amplification is for one user's input "
                             f"changing); got {neighboring_relation!r}")
        self._delta = _validate.check_delta(delta_per_release, "delta_per_release",
                                            allow_zero=False)
        if not isinstance(bound, ShuffleBound):
            raise ValueError("bound must be a ShuffleBound (NUMERICAL or CLOSED_FORM); got "
                             f"{bound!r}")
        self._bound = bound
        name = ("numerical bound" if bound is ShuffleBound.NUMERICAL
                else "closed form, Thm 3.1")
        self.method = (f"shuffle amplification (Feldman-McMillan-Talwar 2021, {name}) "
                       "+ basic composition")

    @property
    def delta_per_release(self) -> float:
        """Delta charged by each amplified release."""
        return self._delta

    @property
    def bound(self) -> ShuffleBound:
        """The amplification bound in use."""
        return self._bound

    def _check_leaf(self, event: _dp.DpEvent) -> None:
        if not isinstance(event, ShuffledLocalDpEvent):
            raise self._unsupported(
                event, "ShuffleAccountant composes only ShuffledLocalDpEvent (single-message "
                       "shuffling of a pure local randomizer); use another accountant")

    def amplified(self, event: ShuffledLocalDpEvent) -> tuple[float, float]:
        """The (epsilon, delta) charged for one occurrence of ``event``.

        Raises:
            UnsupportedEventError: If ``event`` is not a ``ShuffledLocalDpEvent``.
        """
        self._check_leaf(event)
        eps0, n = float(event.local_epsilon), int(event.num_users)
        if self._bound is ShuffleBound.NUMERICAL:
            eps = numerical_epsilon(eps0, n, self._delta)
        elif eps0 <= closed_form_max_local_epsilon(n, self._delta):
            eps = closed_form_epsilon(eps0, n, self._delta)
        else:
            eps = eps0  # Theorem 3.1 does not apply: no amplification claimed
        return (eps, self._delta) if eps < eps0 else (eps0, 0.0)

    def totals(self) -> tuple[float, float]:
        """Composed (sum of epsilons, sum of deltas); (inf, 0) after a non-private event."""
        if self._non_private:
            return (math.inf, 0.0)
        eps_terms, delta_terms = [], []
        for event, count in self._counts.items():
            eps, delta = self.amplified(event)
            eps_terms.append(count * eps)
            delta_terms.append(count * delta)
        return (math.fsum(eps_terms), math.fsum(delta_terms))

    def get_epsilon(self, target_delta: float) -> Epsilon:
        """Sum of the amplified epsilons if the summed delta fits ``target_delta``, else inf.

        The summed delta is compared with a relative slack of 1e-12 (rounding of the sum only).
        """
        target_delta = _validate.check_probability("target_delta", target_delta)
        eps, delta = self.totals()
        value = eps if delta <= target_delta * (1.0 + 1e-12) else math.inf
        return Epsilon(value, method=self.method, kind=BoundKind.UPPER_BOUND)

    def get_delta(self, target_epsilon: float) -> float:
        """Delta at ``target_epsilon``.

        One release with the numerical bound: the exact FMT21 curve :func:`numerical_delta`.
        Otherwise the summed delta if the summed epsilon fits ``target_epsilon``, else 1.
        """
        if not (isinstance(target_epsilon, (int, float)) and not isinstance(target_epsilon, bool)
                and target_epsilon >= 0):
            raise ValueError(f"target_epsilon must be a real number >= 0; got {target_epsilon!r}")
        if self._non_private:
            return 1.0
        if (self._bound is ShuffleBound.NUMERICAL and len(self._counts) == 1
                and next(iter(self._counts.values())) == 1):
            event = next(iter(self._counts))
            return numerical_delta(event.local_epsilon, event.num_users, float(target_epsilon))
        eps, delta = self.totals()
        return delta if eps <= target_epsilon else 1.0
