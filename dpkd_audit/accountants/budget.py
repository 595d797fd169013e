"""Budget planning: the epsilon of a plan under every applicable accountant, and the inverse.

A :class:`Plan` describes a run before it happens ("Laplace noisy-max, scale 40, 1,300 queries",
"subsampled Gaussian q, sigma, steps", "local eps0 randomizer shuffled among n users", "DP-SGD
on N records, batch B, E epochs, noise sigma" as Opacus users write it), turns into privacy
events, and :func:`budget_table` evaluates it with each accountant that supports those events.
:func:`solve` inverts a plan for its noise or its number of queries (epochs for DP-SGD) with
:mod:`~dpkd_audit.accountants.calibration` (the answer never exceeds the target).

Every plan x every accountant x every inverse either gives a row (an epsilon, or "n/a" with the
reason) or raises a ``ValueError`` that names the plan's parameter (tests/test_budget_matrix.py).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit._math.privacy import analytic_gaussian_epsilon, smallest_satisfying
from dpkd_audit.accountants import calibration
from dpkd_audit.accountants.advanced import (
    AdvancedCompositionAccountant,
    OptimalCompositionAccountant,
)
from dpkd_audit.accountants.base import (
    Accountant,
    BoundKind,
    NeighboringRelation,
    UnsupportedEventError,
)
from dpkd_audit.accountants.dp_sgd import DpSgdSchedule
from dpkd_audit.accountants.dp_sgd_sampling import (
    RELATIONS,
    BatchRelation,
    DpSgdSampling,
    SamplingBound,
    gaussian_composition_epsilon,
    random_allocation_epsilon,
    sampling_epsilon,
)
from dpkd_audit.accountants.pure import PureAccountant
from dpkd_audit.events import (
    ApproxDpEvent,
    LaplaceNoisyMaxDpEvent,
    ShuffledLocalDpEvent,
)

__all__ = ["BudgetRow", "Plan", "PlanKind", "budget_table", "mixed_budget_table", "solve"]


class PlanKind(enum.Enum):
    """The kinds of plan ``dpkd budget`` understands."""

    LAPLACE = "laplace"
    LAPLACE_NOISY_MAX = "laplace-noisy-max"
    GAUSSIAN = "gaussian"
    SUBSAMPLED_GAUSSIAN = "subsampled-gaussian"
    RANDOMIZED_RESPONSE = "randomized-response"
    SHUFFLE = "shuffle"
    DP_SGD = "dp-sgd"


#: What the noise parameter of each plan kind is.
NOISE_MEANING = {
    PlanKind.LAPLACE: "Laplace scale / L1 sensitivity",
    PlanKind.LAPLACE_NOISY_MAX: "Laplace scale on each vote count",
    PlanKind.GAUSSIAN: "sigma / L2 sensitivity",
    PlanKind.SUBSAMPLED_GAUSSIAN: "noise multiplier sigma",
    PlanKind.RANDOMIZED_RESPONSE: "per-release epsilon of k-ary randomized response "
                                  "(smaller = more private)",
    PlanKind.SHUFFLE: "local epsilon0 of each user's randomizer",
    PlanKind.DP_SGD: "noise multiplier sigma (noise std / clipping norm)",
}

#: Plan kinds with Gaussian noise: never pure DP, so they need delta > 0.
_GAUSSIAN_KINDS = frozenset({PlanKind.GAUSSIAN, PlanKind.SUBSAMPLED_GAUSSIAN, PlanKind.DP_SGD})

#: Largest local epsilon of a randomized-response plan: e^epsilon0 must stay representable so
#: that the keep probability of k-ary randomized response is computed exactly.
MAX_LOCAL_EPSILON = 700.0
#: Smallest noise scale a plan accepts: below it ``1 / noise`` (a Laplace's epsilon per unit
#: sensitivity) overflows.
MIN_NOISE = 1.0 / sys.float_info.max


#: Plan kinds whose "noise" is a per-release epsilon (smaller = more private).
_EPSILON_PARAMETER = frozenset({PlanKind.RANDOMIZED_RESPONSE, PlanKind.SHUFFLE})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """A run's releases, before the run.

    Attributes:
        kind: What is released.
        noise: The noise parameter (see ``NOISE_MEANING``); None when it is to be solved for.
        queries: Number of releases (steps for SGD); None when it is to be solved for. For a
            DP-SGD plan it is derived from ``epochs`` (epochs x steps per epoch) and must not
            be given.
        sampling_probability: Poisson sampling rate q (subsampled Gaussian only; derived from
            the dataset and batch sizes for DP-SGD).
        num_classes: Classes of noisy-max / randomized response plans.
        num_users: Users n of a shuffle plan.
        dataset_size: Records N of a DP-SGD plan.
        batch_size: Expected batch size B of a DP-SGD plan (1 <= B <= N).
        epochs: Epochs of a DP-SGD plan; None when it is to be solved for.
        sampling: How a DP-SGD plan's batches are drawn (Poisson by default, as Opacus
            accounts; shuffled, sequential and balls-in-bins batches are bounded by
            :mod:`~dpkd_audit.accountants.dp_sgd_sampling`).
        relation: The neighbouring relation of a non-Poisson DP-SGD plan (default: the
            sampler's own, see :data:`~dpkd_audit.accountants.dp_sgd_sampling.RELATIONS`).
    """

    kind: PlanKind
    noise: float | None = None
    queries: int | None = None
    sampling_probability: float | None = None
    num_classes: int = 10
    num_users: int | None = None
    dataset_size: int | None = None
    batch_size: int | None = None
    epochs: int | None = None
    sampling: DpSgdSampling = DpSgdSampling.POISSON
    relation: BatchRelation | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, PlanKind):
            raise ValueError(f"kind must be a PlanKind ({', '.join(k.value for k in PlanKind)})"
                             f"; got {self.kind!r}")
        if self.noise is not None:
            _validate.check_positive("noise", self.noise)
            if self.kind is not PlanKind.RANDOMIZED_RESPONSE and not math.isfinite(
                    1.0 / self.noise):
                raise ValueError(
                    f"noise must be at least {MIN_NOISE:.2g} for a {self.kind.value} plan "
                    f"(below, 1 / noise, one release's epsilon, overflows to infinity); got "
                    f"{self.noise!r}")
            if self.kind is PlanKind.RANDOMIZED_RESPONSE and self.noise > MAX_LOCAL_EPSILON:
                raise ValueError(
                    f"noise (the local epsilon of randomized response) must be <= "
                    f"{MAX_LOCAL_EPSILON:g} (beyond it e^epsilon overflows and the keep "
                    f"probability is not exact); got {self.noise!r}")
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
        if self.kind is PlanKind.DP_SGD:
            self._check_dp_sgd()
        elif self.sampling is not DpSgdSampling.POISSON or self.relation is not None:
            raise ValueError(f"sampling and relation apply only to a dp-sgd plan; got "
                             f"{self.kind.value}")

    def _check_dp_sgd(self) -> None:
        for name in ("dataset_size", "batch_size"):
            if getattr(self, name) is None:
                raise ValueError(f"{name} is required for a dp-sgd plan (an integer >= 1)")
        schedule = DpSgdSchedule(dataset_size=self.dataset_size, batch_size=self.batch_size)
        if self.queries is not None:
            raise ValueError("queries is derived from epochs for a dp-sgd plan (epochs x "
                             f"ceil(dataset_size / batch_size) steps); got queries={self.queries}")
        if self.sampling_probability is not None:
            raise ValueError("sampling_probability is derived for a dp-sgd plan (1 / ceil("
                             "dataset_size / batch_size), Opacus's convention); got "
                             f"{self.sampling_probability!r}")
        if not isinstance(self.sampling, DpSgdSampling):
            raise ValueError(f"sampling must be a DpSgdSampling "
                             f"({', '.join(m.value for m in DpSgdSampling)}); got "
                             f"{self.sampling!r}")
        if self.relation is not None and self.relation not in RELATIONS[self.sampling]:
            allowed = ", ".join(r.value for r in RELATIONS[self.sampling])
            raise ValueError(f"relation must be one of {allowed} for {self.sampling.value} "
                             f"sampling (or None); got {self.relation!r}")
        if self.epochs is not None:
            object.__setattr__(self, "queries", schedule.steps(self.epochs))
        object.__setattr__(self, "sampling_probability", schedule.sampling_probability)

    @property
    def poisson(self) -> bool:
        """Whether the plan's epsilon comes from the accountants' events.

        Every plan but a DP-SGD plan with a non-Poisson sampler, whose epsilon comes from its
        sampler's bound (:mod:`~dpkd_audit.accountants.dp_sgd_sampling`) instead.
        """
        return self.kind is not PlanKind.DP_SGD or self.sampling is DpSgdSampling.POISSON

    @property
    def steps_per_epoch(self) -> int:
        """Releases per unit of the solved count: steps per epoch for DP-SGD, else 1."""
        if self.kind is PlanKind.DP_SGD:
            return -(-self.dataset_size // self.batch_size)
        return 1

    def event(self, noise: float | None = None) -> _dp.DpEvent:
        """The event of one release with the given (or the plan's) noise parameter."""
        if not self.poisson:
            raise ValueError(f"a dp-sgd plan with {self.sampling.value} batches has no "
                             "accountant event (it is not Poisson-subsampled): its epsilon is "
                             "its sampler's bound (budget_table)")
        noise = self.noise if noise is None else noise
        if noise is None:
            raise ValueError("noise is not set: give it, or solve for it with a target epsilon")
        if self.kind is PlanKind.LAPLACE:
            return _dp.LaplaceDpEvent(noise)
        if self.kind is PlanKind.LAPLACE_NOISY_MAX:
            return LaplaceNoisyMaxDpEvent(noise, self.num_classes)
        if self.kind is PlanKind.GAUSSIAN:
            return _dp.GaussianDpEvent(noise)
        if self.kind in (PlanKind.SUBSAMPLED_GAUSSIAN, PlanKind.DP_SGD):
            return _dp.PoissonSampledDpEvent(self.sampling_probability,
                                             _dp.GaussianDpEvent(noise))
        if self.kind is PlanKind.RANDOMIZED_RESPONSE:
            # p = k / (e^eps + k - 1), rounded so that the event never claims less than the
            # release; refused where a float p cannot carry the claim (huge k)
            from dpkd_audit._math.randomized_response import rr_noise_parameter

            return _dp.RandomizedResponseDpEvent(rr_noise_parameter(noise, self.num_classes),
                                                 self.num_classes)
        return ShuffledLocalDpEvent(noise, self.num_users)

    def neighboring_relation(self) -> NeighboringRelation:
        """Poisson subsampling is analysed under add/remove-one; everything else replace-one."""
        if self.kind in (PlanKind.SUBSAMPLED_GAUSSIAN, PlanKind.DP_SGD):
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


def tightest(rows: Sequence[BudgetRow], plan: Plan | None = None) -> BudgetRow | None:
    """The row with the tightest valid answer: what a user can claim from the table.

    Every accountant's upper bound is valid, so for an evaluation the smallest finite one is;
    for an inverse (``plan`` with its noise or count missing), the least noise (the largest
    local epsilon, or the most queries / epochs) among the rows that solved it.

    Args:
        rows: Rows of :func:`budget_table`, :func:`mixed_budget_table` or :func:`solve`.
        plan: The plan :func:`solve` solved, or None for an evaluation.

    Returns:
        That row, or None when no row has a finite upper bound.
    """
    valid = [r for r in rows if r.epsilon is not None and math.isfinite(r.epsilon)
             and r.kind == BoundKind.UPPER_BOUND.value]
    if plan is None or (plan.noise is not None and plan.queries is not None):
        return min(valid, key=lambda r: r.epsilon, default=None)
    valid = [r for r in valid if r.solved is not None]
    larger = plan.noise is not None or plan.kind in _EPSILON_PARAMETER
    return (max if larger else min)(valid, key=lambda r: r.solved, default=None)


class _NotApplicableError(Exception):
    """An accountant cannot evaluate this plan; the message is the row's note."""


def _accountant_factories(plan: Plan, delta: float) -> dict[str, Callable[..., Accountant]]:
    from dpkd_audit import accountants

    names = ["PureAccountant", "AdvancedCompositionAccountant", "OptimalCompositionAccountant",
             "RDPAccountant", "PLDAccountant"]
    out: dict[str, Callable[..., Accountant]] = {
        name: getattr(accountants, name) for name in names if hasattr(accountants, name)}
    if plan.kind is PlanKind.SHUFFLE and delta > 0:  # it accounts for shuffled releases only
        out["ShuffleAccountant"] = accountants.ShuffleAccountant
    return out


def _compose(factory: Callable[..., Accountant], plan: Plan, noise: float, queries: int,
             delta_budget: float) -> Accountant:
    """An accountant of ``factory`` with ``queries`` releases of ``plan`` at ``noise``.

    Raises:
        _NotApplicableError: When the accountant cannot evaluate the plan (the reason is the note).
        UnsupportedEventError: When it refuses the plan's event.
    """
    return _compose_into(_new_accountant(factory, plan.neighboring_relation(),
                                         delta_budget / queries),
                         plan, noise, queries, delta_budget)


def _new_accountant(factory: Callable[..., Accountant], relation: NeighboringRelation,
                    delta_per_release: float) -> Accountant:
    from dpkd_audit.accountants.shuffle import ShuffleAccountant

    if factory is ShuffleAccountant:
        # Shuffled releases compose by basic composition: the delta budget split over them.
        return ShuffleAccountant(delta_per_release=delta_per_release,
                                 neighboring_relation=relation)
    return factory(neighboring_relation=relation)


def _compose_into(acc: Accountant, plan: Plan, noise: float, queries: int,
                  delta_budget: float) -> Accountant:
    """Compose ``queries`` releases of ``plan`` at ``noise`` into ``acc`` (see :func:`_compose`).

    ``delta_budget`` is the share of delta the plan's per-release guarantees may spend.
    """
    event = plan.event(noise)
    if plan.kind is PlanKind.GAUSSIAN and isinstance(acc, (PureAccountant,
                                                           AdvancedCompositionAccountant,
                                                           OptimalCompositionAccountant)):
        # (eps, delta) accountants need a per-release guarantee: spend half the delta budget
        # evenly on the releases and use the exact analytic-Gaussian epsilon at that delta.
        per_delta = delta_budget / (2 * queries)
        per_epsilon = analytic_gaussian_epsilon(noise, per_delta)
        if not math.isfinite(per_epsilon):
            raise _NotApplicableError(
                f"the per-release epsilon of Gaussian noise {noise:g} at delta {per_delta:.3g} "
                "exceeds the floating-point range")
        event = ApproxDpEvent(per_epsilon, per_delta)
    return acc.compose(event, count=queries)


def _check_delta_for(plan: Plan, delta: float) -> float:
    delta = _validate.check_delta(delta)
    if plan.kind in _GAUSSIAN_KINDS and delta == 0:
        raise ValueError(f"delta must be in (0, 1) for a {plan.kind.value} plan (Gaussian noise "
                         "is never pure DP, so its epsilon at delta = 0 is infinite); got 0")
    return delta


def budget_table(plan: Plan, *, delta: float) -> list[BudgetRow]:
    """Epsilon of ``plan`` at ``delta`` under each accountant that supports it."""
    delta = _check_delta_for(plan, delta)
    if plan.noise is None or plan.queries is None:
        missing = "epochs" if plan.kind is PlanKind.DP_SGD else "queries"
        raise ValueError(f"budget_table needs both noise and {missing}; use solve() for the "
                         "inverse problem")
    if not plan.poisson:
        return _sampling_rows(plan, delta)
    rows = []
    for name, factory in _accountant_factories(plan, delta).items():
        try:
            acc = _compose(factory, plan, plan.noise, plan.queries, delta)
            eps = acc.get_epsilon(delta)
        except (UnsupportedEventError, _NotApplicableError) as exc:
            rows.append(_not_applicable_row(name, exc))
            continue
        rows.append(BudgetRow(accountant=name, method=eps.method, kind=eps.kind.value,
                              epsilon=float(eps)))
    return rows


def mixed_budget_table(plans: Sequence[Plan], *, delta: float) -> list[BudgetRow]:
    """Epsilon at ``delta`` of several plans released on the same records, composed.

    Every plan needs its noise and count. Under each accountant that supports every plan's
    events, all releases are composed in one accountant (RDP and PLD compose them exactly as
    curves / distributions; pure, advanced and optimal composition need an (epsilon, delta) per
    release: Gaussian releases get delta / (2 R) each, R the number of Gaussian releases of all
    plans, as for one plan). An accountant that cannot take one of the plans gets an n/a row.

    Raises:
        ValueError: For no plan, a plan without noise or count, plans under different
            neighbouring relations (they would not compose), or a bad delta.
    """
    from dpkd_audit.accountants.shuffle import ShuffleAccountant

    plans = tuple(plans)
    if not plans or not all(isinstance(p, Plan) for p in plans):
        raise ValueError(f"plans must be a non-empty sequence of Plan; got {plans!r}")
    for i, plan in enumerate(plans):
        _check_delta_for(plan, delta)
        if not plan.poisson:
            raise ValueError(f"plans[{i}] (dp-sgd with {plan.sampling.value} batches) has no "
                             "accountant event to compose with other releases: only its own "
                             "bound exists; price it alone (dpkd budget dp-sgd --sampling "
                             f"{plan.sampling.value})")
        if plan.noise is None or plan.queries is None:
            raise ValueError(f"plans[{i}] ({plan.kind.value}) needs its noise and its "
                             f"{'epochs' if plan.kind is PlanKind.DP_SGD else 'queries'}")
    delta = _validate.check_delta(delta)
    relations = {p.neighboring_relation() for p in plans}
    if len(relations) > 1:
        raise ValueError("the plans account under different neighbouring relations ("
                         + ", ".join(sorted(r.name for r in relations)) + "): releases on the "
                         "same records must share one (DP-SGD's add/remove-one, for instance)")
    (relation,) = relations
    factories: dict[str, Callable[..., Accountant]] = {}
    for plan in plans:
        factories.update(_accountant_factories(plan, delta))
    gaussian = sum(p.queries or 0 for p in plans if p.kind is PlanKind.GAUSSIAN)
    total = sum(p.queries or 0 for p in plans)
    rows = []
    for name, factory in factories.items():
        try:
            if factory is ShuffleAccountant and any(p.kind is not PlanKind.SHUFFLE
                                                    for p in plans):
                raise _NotApplicableError("accounts for shuffled releases only")
            acc = _new_accountant(factory, relation, delta / total)
            for plan in plans:
                share = (delta * plan.queries / gaussian if plan.kind is PlanKind.GAUSSIAN
                         else delta * plan.queries / total)  # type: ignore[operator]
                _compose_into(acc, plan, plan.noise, plan.queries, share)  # type: ignore[arg-type]
            eps = acc.get_epsilon(delta)
        except (UnsupportedEventError, _NotApplicableError) as exc:
            rows.append(_not_applicable_row(name, exc))
            continue
        rows.append(BudgetRow(accountant=name, method=eps.method, kind=eps.kind.value,
                              epsilon=float(eps)))
    return rows


def solve(plan: Plan, *, target_epsilon: float, delta: float,
          max_queries: int = 10**7) -> list[BudgetRow]:
    """Solve ``plan`` for its missing scalar (noise, or queries / epochs) under each accountant.

    Args:
        plan: The plan with exactly one of ``noise`` and ``queries`` (``epochs`` for DP-SGD).
        target_epsilon: The budget (> 0).
        delta: Target delta, in [0, 1) ((0, 1) for Gaussian plans).
        max_queries: Largest number of queries (steps for DP-SGD) considered.

    Returns:
        One row per accountant: the solved value (the largest count, or the noise with
        the smallest privacy cost's complement) and its epsilon, or "n/a" with the reason.
    """
    target_epsilon = _validate.check_epsilon(target_epsilon, "target_epsilon")
    delta = _check_delta_for(plan, delta)
    count = "epochs" if plan.kind is PlanKind.DP_SGD else "queries"
    if (plan.noise is None) == (plan.queries is None):
        raise ValueError(f"give exactly one of noise and {count}; the other is solved for")
    if not plan.poisson:
        return [_solve_sampling(plan, target_epsilon, delta, max_queries)]
    rows = []
    hint: float | None = None  # the smallest noise another accountant found (a search start)
    for name, factory in _accountant_factories(plan, delta).items():
        try:
            if plan.noise is None:
                value, eps = _solve_noise(factory, plan, target_epsilon, delta, hint)
                hint = value if hint is None else min(hint, value)
            else:
                value, eps = _solve_count(factory, plan, target_epsilon, delta, max_queries)
        except (UnsupportedEventError, _NotApplicableError) as exc:
            rows.append(_not_applicable_row(name, exc))
            continue
        except calibration.CalibrationError as exc:
            rows.append(BudgetRow(accountant=name, method="-", kind="-", epsilon=None,
                                  note=_short(str(exc))))
            continue
        if eps is None:
            rows.append(BudgetRow(accountant=name, method="-", kind="-", epsilon=None,
                                  solved=value, note=f"not even one of the {count} fits"))
            continue
        limit = plan.noise is not None and value * plan.steps_per_epoch >= max_queries - (
            plan.steps_per_epoch - 1)
        rows.append(BudgetRow(accountant=name, method=eps.method, kind=eps.kind.value,
                              epsilon=float(eps), solved=value,
                              note=f"the search stops at {max_queries:.0e} queries" if limit
                              else ""))
    return rows


#: Search range of the noise parameter (Laplace scale, sigma, ...) when solving for it.
NOISE_RANGE = (1e-4, 1e7)
#: Search range of the local epsilon (randomized response, shuffle) when solving for it.
LOCAL_EPSILON_RANGE = (1e-7, 100.0)


def _solve_noise(factory: Callable[..., Accountant], plan: Plan, target_epsilon: float,
                 delta: float, hint: float | None = None) -> tuple[float, Any]:
    """The smallest noise (largest local epsilon) meeting the target under one accountant.

    ``hint``, a noise another accountant solved for, starts the search where it meets the
    target here too (calibrate_noise returns the same value from any upper end above it,
    within its rtol); the walk down from the top of ``NOISE_RANGE`` is skipped.
    """
    queries = plan.queries
    # calibrate_noise wants "larger = more private": for plans whose parameter is a local
    # epsilon, calibrate its inverse and report the largest epsilon that fits.
    invert = plan.kind in _EPSILON_PARAMETER
    lower, upper = ((1.0 / LOCAL_EPSILON_RANGE[1], 1.0 / LOCAL_EPSILON_RANGE[0]) if invert
                    else NOISE_RANGE)

    def build(t: float) -> Accountant:
        return _compose(factory, plan, 1.0 / t if invert else t, queries, delta)

    build(upper)  # raises UnsupportedEventError / _NotApplicableError early
    try:
        t = None
        if hint is not None and not invert and lower < hint / 2.0 and hint < upper:
            start = hint * (1.0 + 1e-3)
            if float(build(start).get_epsilon(delta)) <= target_epsilon:
                # searched in [hint / 2, start]; an answer at the lower end means the least
                # noise may lie below it: then the whole range is searched
                t = calibration.calibrate_noise(build, target_epsilon=target_epsilon,
                                                target_delta=delta, lower=hint / 2.0,
                                                upper=start, rtol=1e-5)
                if t <= hint / 2.0:
                    t = None
        if t is None:
            t = calibration.calibrate_noise(build, target_epsilon=target_epsilon,
                                            target_delta=delta, lower=lower, upper=upper,
                                            rtol=1e-5)
    except calibration.CalibrationError:
        what = (f"no local epsilon >= {LOCAL_EPSILON_RANGE[0]:g}" if invert
                else f"no noise <= {NOISE_RANGE[1]:g}")
        raise _NotApplicableError(f"{what} reaches epsilon {target_epsilon:g} at delta {delta:g}"
                             ) from None
    return (1.0 / t if invert else t), build(t).get_epsilon(delta)


def _solve_count(factory: Callable[..., Accountant], plan: Plan, target_epsilon: float,
                 delta: float, max_queries: int) -> tuple[float, Any]:
    noise, unit = plan.noise, plan.steps_per_epoch

    def build(k: int) -> Accountant:
        return _compose(factory, plan, noise, k * unit, delta)

    build(1)  # raises UnsupportedEventError / _NotApplicableError early
    value = calibration.max_queries(build, target_epsilon=target_epsilon, target_delta=delta,
                                    upper=max(1, max_queries // unit))
    return value, (build(value).get_epsilon(delta) if value else None)


def _sampler_bound(plan: Plan, noise: float, epochs: int, delta: float) -> SamplingBound:
    schedule = DpSgdSchedule(dataset_size=plan.dataset_size, batch_size=plan.batch_size)
    return sampling_epsilon(schedule, sampling=plan.sampling, noise_multiplier=noise,
                            epochs=epochs, delta=delta, relation=plan.relation)


def _sampling_rows(plan: Plan, delta: float) -> list[BudgetRow]:
    """A non-Poisson DP-SGD plan: its sampler's bound, a lower bound, and Poisson's figure."""
    epochs = plan.queries // plan.steps_per_epoch  # type: ignore[operator]
    bound = _sampler_bound(plan, plan.noise, epochs, delta)  # type: ignore[arg-type]
    sampler = f"{bound.sampling.value} batches, {bound.relation.value}"
    rows = [BudgetRow(accountant=f"sampler bound ({sampler})", method=bound.method,
                      kind="upper bound" if bound.tight else "upper bound (loose)",
                      epsilon=bound.epsilon, note=bound.note)]
    if bound.epsilon_lower is not None:
        rows.append(BudgetRow(accountant=f"lower bound ({sampler})",
                              method=bound.lower_method or "-", kind="lower bound",
                              epsilon=bound.epsilon_lower,
                              note="no claim below it holds for this sampler"))
    rows.append(BudgetRow(accountant="Poisson accounting (what Opacus reports)",
                          method="Poisson-subsampled Gaussian, q = 1/t", kind="not a bound here",
                          epsilon=bound.epsilon_poisson,
                          note=f"holds for Poisson sampling only, not for {bound.sampling.value} "
                               "batches"))
    return rows


def _solve_sampling(plan: Plan, target_epsilon: float, delta: float,
                    max_queries: int) -> BudgetRow:
    """Solve a non-Poisson DP-SGD plan for sigma or epochs under its sampler's upper bound.

    Only the sampler's upper bound is inverted (the answer never exceeds the target). Balls-in-
    bins is inverted through its RDP bound and its no-amplification bound, as
    :func:`~dpkd_audit.accountants.dp_sgd_sampling.random_allocation_epsilon` combines them.
    """
    relation = plan.relation or RELATIONS[plan.sampling][0]
    t = plan.steps_per_epoch

    def epsilon(noise: float, epochs: int) -> float:
        if plan.sampling is DpSgdSampling.BALLS_IN_BINS:
            return random_allocation_epsilon(noise, t, epochs, delta)[0]
        return gaussian_composition_epsilon(noise, epochs, delta,
                                            sensitivity=relation.sensitivity)

    name = f"sampler bound ({plan.sampling.value} batches, {relation.value})"
    if plan.noise is None:
        epochs = plan.queries // t  # type: ignore[operator]
        lo, hi = NOISE_RANGE
        if epsilon(hi, epochs) > target_epsilon:
            return BudgetRow(accountant=name, method="-", kind="-", epsilon=None,
                             note=f"no noise <= {hi:g} reaches epsilon {target_epsilon:g}")
        sigma = smallest_satisfying(lambda s: epsilon(s, epochs), target_epsilon, lo, hi,
                                    rel_tol=1e-6)
        bound = _sampler_bound(plan, sigma, epochs, delta)
        return BudgetRow(accountant=name, method=bound.method,
                         kind="upper bound" if bound.tight else "upper bound (loose)",
                         epsilon=bound.epsilon, solved=sigma, note=bound.note)
    upper = max(1, max_queries // t)
    if epsilon(plan.noise, 1) > target_epsilon:
        return BudgetRow(accountant=name, method="-", kind="-", epsilon=None, solved=0,
                         note="not even one of the epochs fits")
    lo, hi = 1, upper
    if epsilon(plan.noise, hi) <= target_epsilon:
        lo = hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if epsilon(plan.noise, mid) <= target_epsilon:
            lo = mid
        else:
            hi = mid - 1
    bound = _sampler_bound(plan, plan.noise, lo, delta)
    return BudgetRow(accountant=name, method=bound.method,
                     kind="upper bound" if bound.tight else "upper bound (loose)",
                     epsilon=bound.epsilon, solved=lo,
                     note=(f"the search stops at {max_queries:.0e} queries" if lo == upper
                           else bound.note))


def _not_applicable_row(name: str, exc: Exception) -> BudgetRow:
    if isinstance(exc, UnsupportedEventError):
        event = type(exc.event).__name__ if exc.event is not None else "event"
        note = f"does not support {event}" + (f": {exc.reason}" if exc.reason else "")
    else:
        note = str(exc)
    return BudgetRow(accountant=name, method="-", kind="-", epsilon=None, note=_short(note))


def _short(text: str, limit: int = 110) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
