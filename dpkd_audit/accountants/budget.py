"""Budget planning: the epsilon of a plan under every applicable accountant, and the inverse.

A :class:`Plan` describes a run before it happens ("Laplace noisy-max, scale 40, 1,300 queries",
"subsampled Gaussian q, sigma, steps", "local eps0 randomizer shuffled among n users"), turns
into privacy events, and :func:`budget_table` evaluates it with each accountant that supports
those events. :func:`solve` inverts a plan for its noise or its number of queries with
:mod:`~dpkd_audit.accountants.calibration` (the answer never exceeds the target).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable

from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit._privacy_math import analytic_gaussian_delta, smallest_satisfying
from dpkd_audit.accountants import calibration
from dpkd_audit.accountants.advanced import (
    AdvancedCompositionAccountant,
    OptimalCompositionAccountant,
)
from dpkd_audit.accountants.base import Accountant, NeighboringRelation, UnsupportedEventError
from dpkd_audit.accountants.pure import PureAccountant
from dpkd_audit.events import (
    ApproxDpEvent,
    LaplaceNoisyMaxDpEvent,
    ShuffledLocalDpEvent,
)

__all__ = ["BudgetRow", "Plan", "PlanKind", "budget_table", "solve"]


class PlanKind(enum.Enum):
    """The kinds of plan ``dpkd budget`` understands."""

    LAPLACE = "laplace"
    LAPLACE_NOISY_MAX = "laplace-noisy-max"
    GAUSSIAN = "gaussian"
    SUBSAMPLED_GAUSSIAN = "subsampled-gaussian"
    RANDOMIZED_RESPONSE = "randomized-response"
    SHUFFLE = "shuffle"


#: What the noise parameter of each plan kind is.
NOISE_MEANING = {
    PlanKind.LAPLACE: "Laplace scale / L1 sensitivity",
    PlanKind.LAPLACE_NOISY_MAX: "Laplace scale on each vote count",
    PlanKind.GAUSSIAN: "sigma / L2 sensitivity",
    PlanKind.SUBSAMPLED_GAUSSIAN: "noise multiplier sigma",
    PlanKind.RANDOMIZED_RESPONSE: "per-release epsilon of k-ary randomized response "
                                  "(smaller = more private)",
    PlanKind.SHUFFLE: "local epsilon0 of each user's randomizer",
}


#: Plan kinds whose "noise" is a per-release epsilon (smaller = more private).
_EPSILON_PARAMETER = frozenset({PlanKind.RANDOMIZED_RESPONSE, PlanKind.SHUFFLE})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """A run's releases, before the run.

    Attributes:
        kind: What is released.
        noise: The noise parameter (see ``NOISE_MEANING``); None when it is to be solved for.
        queries: Number of releases (steps for SGD); None when it is to be solved for.
        sampling_probability: Poisson sampling rate q (subsampled Gaussian only).
        num_classes: Classes of noisy-max / randomized response plans.
        num_users: Users n of a shuffle plan.
    """

    kind: PlanKind
    noise: float | None = None
    queries: int | None = None
    sampling_probability: float | None = None
    num_classes: int = 10
    num_users: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, PlanKind):
            raise ValueError(f"kind must be a PlanKind ({', '.join(k.value for k in PlanKind)})"
                             f"; got {self.kind!r}")
        if self.noise is not None:
            _validate.check_positive("noise", self.noise)
        if self.queries is not None:
            _validate.check_int("queries", self.queries, minimum=1)
        _validate.check_int("num_classes", self.num_classes, minimum=2)
        if self.kind is PlanKind.SUBSAMPLED_GAUSSIAN:
            if self.sampling_probability is None:
                raise ValueError("sampling_probability is required for a subsampled-gaussian "
                                 "plan (a rate q in (0, 1])")
            _validate.check_probability("sampling_probability", self.sampling_probability,
                                        open_low=True)
        if self.kind is PlanKind.SHUFFLE:
            if self.num_users is None:
                raise ValueError("num_users is required for a shuffle plan (an integer >= 1)")
            _validate.check_int("num_users", self.num_users, minimum=1)

    def event(self, noise: float | None = None) -> _dp.DpEvent:
        """The event of one release with the given (or the plan's) noise parameter."""
        noise = self.noise if noise is None else noise
        if noise is None:
            raise ValueError("noise is not set: give it, or solve for it with a target epsilon")
        if self.kind is PlanKind.LAPLACE:
            return _dp.LaplaceDpEvent(noise)
        if self.kind is PlanKind.LAPLACE_NOISY_MAX:
            return LaplaceNoisyMaxDpEvent(noise, self.num_classes)
        if self.kind is PlanKind.GAUSSIAN:
            return _dp.GaussianDpEvent(noise)
        if self.kind is PlanKind.SUBSAMPLED_GAUSSIAN:
            return _dp.PoissonSampledDpEvent(self.sampling_probability,
                                             _dp.GaussianDpEvent(noise))
        if self.kind is PlanKind.RANDOMIZED_RESPONSE:
            k = self.num_classes
            return _dp.RandomizedResponseDpEvent(k / (math.exp(noise) + k - 1), k)
        return ShuffledLocalDpEvent(noise, self.num_users)

    def neighboring_relation(self) -> NeighboringRelation:
        """Poisson subsampling is analysed under add/remove-one; everything else replace-one."""
        if self.kind is PlanKind.SUBSAMPLED_GAUSSIAN:
            return NeighboringRelation.ADD_OR_REMOVE_ONE
        return NeighboringRelation.REPLACE_ONE


@dataclasses.dataclass(frozen=True, kw_only=True)
class BudgetRow:
    """One accountant's answer for a plan."""

    accountant: str
    method: str
    kind: str
    epsilon: float | None
    note: str = ""
    solved: float | None = None


def _accountant_factories(plan: Plan, delta: float) -> dict[str, Callable[..., Accountant]]:
    from dpkd_audit import accountants

    names = ["PureAccountant", "AdvancedCompositionAccountant", "OptimalCompositionAccountant",
             "RDPAccountant", "PLDAccountant"]
    out: dict[str, Callable[..., Accountant]] = {
        name: getattr(accountants, name) for name in names if hasattr(accountants, name)}
    if plan.kind is PlanKind.SHUFFLE and delta > 0:  # it accounts for shuffled releases only
        shuffle_cls = accountants.ShuffleAccountant
        out["ShuffleAccountant"] = (
            lambda neighboring_relation=NeighboringRelation.REPLACE_ONE:
            shuffle_cls(delta_per_release=delta / 2, neighboring_relation=neighboring_relation))
    return out


def _compose(factory: Callable[..., Accountant], plan: Plan, noise: float, queries: int,
             delta_budget: float) -> Accountant:
    acc = factory(neighboring_relation=plan.neighboring_relation())
    event = plan.event(noise)
    if plan.kind is PlanKind.GAUSSIAN and isinstance(acc, (PureAccountant,
                                                           AdvancedCompositionAccountant,
                                                           OptimalCompositionAccountant)):
        # (eps, delta) accountants need a per-release guarantee: spend half the delta budget
        # evenly on the releases and use the exact analytic-Gaussian epsilon at that delta.
        per_delta = delta_budget / (2 * queries)
        event = ApproxDpEvent(_gaussian_epsilon(noise, per_delta), per_delta)
    return acc.compose(event, count=queries)


def _gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Smallest epsilon of the exact analytic-Gaussian curve (Balle-Wang Thm 8) at ``delta``."""
    if delta <= 0:
        return math.inf
    hi = 1.0
    while analytic_gaussian_delta(hi, noise_multiplier) > delta:
        hi *= 2
    return smallest_satisfying(lambda e: analytic_gaussian_delta(e, noise_multiplier), delta,
                               0.0, hi)


def budget_table(plan: Plan, *, delta: float) -> list[BudgetRow]:
    """Epsilon of ``plan`` at ``delta`` under each accountant that supports it."""
    delta = _validate.check_delta(delta)
    if plan.noise is None or plan.queries is None:
        raise ValueError("budget_table needs both noise and queries; use solve() for the "
                         "inverse problem")
    rows = []
    for name, factory in _accountant_factories(plan, delta).items():
        try:
            acc = _compose(factory, plan, plan.noise, plan.queries, delta)
            eps = acc.get_epsilon(delta)
        except UnsupportedEventError as exc:
            rows.append(BudgetRow(accountant=name, method="-", kind="-", epsilon=None,
                                  note=_unsupported_note(exc)))
            continue
        rows.append(BudgetRow(accountant=name, method=eps.method, kind=eps.kind.value,
                              epsilon=float(eps)))
    return rows


def solve(plan: Plan, *, target_epsilon: float, delta: float,
          max_queries: int = 10**7) -> list[BudgetRow]:
    """Solve ``plan`` for its missing scalar (noise or queries) under each accountant."""
    target_epsilon = _validate.check_epsilon(target_epsilon, "target_epsilon")
    delta = _validate.check_delta(delta)
    if (plan.noise is None) == (plan.queries is None):
        raise ValueError("give exactly one of noise and queries; the other is solved for")
    rows = []
    for name, factory in _accountant_factories(plan, delta).items():
        try:
            if plan.noise is None:
                queries = plan.queries
                # calibrate_noise wants "larger = more private": for plans whose parameter is a
                # local epsilon, calibrate its inverse and report the largest epsilon that fits
                invert = plan.kind in _EPSILON_PARAMETER

                def build(t: float, factory=factory, queries=queries,
                          invert=invert) -> Accountant:
                    return _compose(factory, plan, 1.0 / t if invert else t, queries, delta)

                build(1.0)  # raises UnsupportedEventError early
                t = calibration.calibrate_noise(
                    build, target_epsilon=target_epsilon, target_delta=delta,
                    lower=1e-2 if invert else 1e-4, upper=1e7, rtol=1e-5)
                eps = build(t).get_epsilon(delta)
                value: float = 1.0 / t if invert else t
            else:
                noise = plan.noise

                def build_q(k: int, factory=factory, noise=noise) -> Accountant:
                    return _compose(factory, plan, noise, k, delta)

                build_q(1)
                value = calibration.max_queries(build_q, target_epsilon=target_epsilon,
                                                target_delta=delta, upper=max_queries)
                eps = build_q(max(1, int(value))).get_epsilon(delta)
        except UnsupportedEventError as exc:
            rows.append(BudgetRow(accountant=name, method="-", kind="-", epsilon=None,
                                  note=_unsupported_note(exc)))
            continue
        except calibration.CalibrationError as exc:
            rows.append(BudgetRow(accountant=name, method="-", kind="-", epsilon=None,
                                  note=_short(str(exc))))
            continue
        note = "" if value else "not even one query fits"
        rows.append(BudgetRow(accountant=name, method=eps.method, kind=eps.kind.value,
                              epsilon=float(eps) if value else None, solved=value, note=note))
    return rows


def _unsupported_note(exc: UnsupportedEventError) -> str:
    name = type(exc.event).__name__ if exc.event is not None else "event"
    return _short(f"does not support {name}" + (f": {exc.reason}" if exc.reason else ""))


def _short(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
