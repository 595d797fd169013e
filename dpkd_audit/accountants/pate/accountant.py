"""The PATE accountant and its report, with the release cost beside the epsilon.

Both line items (the data-dependent epsilon and the cost of releasing it) stand beside the
data-independent epsilon of a composition of noisy-argmax queries.

References: see :mod:`dpkd_audit.accountants.pate`.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.accountants.base import (
    Accountant,
    BoundKind,
    Epsilon,
    NeighboringRelation,
)
from dpkd_audit.accountants.pate._common import (
    _SAME_REL_TOL,
    DEFAULT_ORDERS,
    METHOD_DATA_DEPENDENT,
    METHOD_DATA_DEPENDENT_LNMAX,
    METHOD_DATA_DEPENDENT_MIXED,
    METHOD_DATA_INDEPENDENT,
    _check_orders,
    _fail,
)
from dpkd_audit.accountants.pate.curves import (
    _gnmax_logq_batch,
    _gnmax_theorem6,
    _lnmax_logq_batch,
    _lnmax_moments,
    data_independent_rdp,
)
from dpkd_audit.accountants.pate.smooth_sensitivity import (
    SmoothSensitivityRelease,
    _gnmax_thresholds,
    smooth_sensitivity_release_cost,
)
from dpkd_audit.accountants.rdp.accountant import (
    delta_from_rdp,
    epsilon_from_rdp,
)
from dpkd_audit.events import GaussianNoisyMaxDpEvent, LaplaceNoisyMaxDpEvent

# --------------------------------------------------------------------------- accountant


@dataclasses.dataclass(frozen=True)
class PATEReport:
    """Both line items of a PATE analysis at one delta, never merged.

    Attributes:
        target_delta: The delta of every epsilon below.
        data_dependent_epsilon: Epsilon of the data-dependent analysis (optimised over orders);
            kind DATA_DEPENDENT when the votes lowered it, otherwise the data-independent one.
        data_independent_epsilon: Epsilon of the data-independent analysis (upper bound).
        release: Cost of releasing the data-dependent value with smooth sensitivity, or None.
        release_note: Why ``release`` is None, or how it was parameterised.
    """

    target_delta: float
    data_dependent_epsilon: Epsilon
    data_independent_epsilon: Epsilon
    release: SmoothSensitivityRelease | None
    release_note: str

    def lines(self) -> list[str]:
        """Human-readable lines: data-dependent epsilon, release cost, data-independent."""
        d = self.target_delta
        out = [f"data-dependent epsilon: {float(self.data_dependent_epsilon):.6g} at delta={d:g} "
               f"({self.data_dependent_epsilon.method}; {self.data_dependent_epsilon.kind.value})"]
        if self.release is None:
            out.append(f"cost of releasing it (smooth sensitivity): not available: "
                       f"{self.release_note}")
        else:
            r = self.release
            alone, total = r.epsilon(d)
            out.append(
                f"cost of releasing it (smooth sensitivity): +{r.release_rdp:.6g} RDP at order "
                f"{r.order:g} (beta={r.beta:.4g}, sigma_ss={r.sigma_ss:.4g}, smooth sensitivity "
                f"{r.smooth_sensitivity:.4g}, noise std {r.noise_std:.4g}); epsilon at that "
                f"order {alone:.6g} without, {total:.6g} with the release ({self.release_note})")
        out.append(f"data-independent epsilon: {float(self.data_independent_epsilon):.6g} at "
                   f"delta={d:g} ({self.data_independent_epsilon.method})")
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


class PATEAccountant(Accountant):
    """RDP accountant for PATE noisy-argmax queries, data-dependent when votes are known.

    Composes :class:`~dpkd_audit.events.GaussianNoisyMaxDpEvent` and
    :class:`~dpkd_audit.events.LaplaceNoisyMaxDpEvent` (RDP adds up, [M17] Proposition 1). An
    event carrying ``votes`` is analysed data-dependently ([PATE18] Theorem 6 for GNMax,
    [PATE17] Theorem 3 for LNMax) when ``data_dependent`` is True; otherwise, or without votes,
    with the data-independent curve. Curves are cached per event and computed vectorised over all
    new events at the next query, so 10^3 distinct queries cost a few array operations.

    The epsilon is DATA_DEPENDENT (method "PATE data-dependent RDP (Papernot et al. 2018)")
    when the votes made it smaller than the data-independent epsilon, otherwise an UPPER_BOUND.
    A data-dependent epsilon is not itself private: :meth:`report` gives the cost of releasing
    it (smooth sensitivity) as a separate line.

    Args:
        orders: Renyi orders (> 1); default :data:`DEFAULT_ORDERS`.
        data_dependent: Whether to use the votes carried by events.
        neighboring_relation: REPLACE_ONE (default) or ADD_OR_REMOVE_ONE of a record; both
            change at most one teacher's vote, which is what the analysis assumes.
    """

    method = METHOD_DATA_INDEPENDENT

    def __init__(self, orders: Any = None, data_dependent: bool = True, *,
                 neighboring_relation: NeighboringRelation =
                 NeighboringRelation.REPLACE_ONE) -> None:
        super().__init__(neighboring_relation)
        if neighboring_relation not in (NeighboringRelation.REPLACE_ONE,
                                        NeighboringRelation.ADD_OR_REMOVE_ONE):
            raise ValueError("neighboring_relation must be REPLACE_ONE or ADD_OR_REMOVE_ONE; "
                             f"got {neighboring_relation!r}")
        if not isinstance(data_dependent, bool):
            raise _fail("data_dependent", "a bool", data_dependent)
        self._orders = np.unique(DEFAULT_ORDERS if orders is None else _check_orders(orders))
        self._orders.setflags(write=False)
        self._data_dependent = data_dependent
        self._dep_cache: dict[_dp.DpEvent, np.ndarray] = {}
        self._ind_cache: dict[tuple, np.ndarray] = {}

    def __deepcopy__(self, memo: dict) -> PATEAccountant:
        # The curve caches are shared, not copied: their arrays are read-only and a pure function
        # of (event, orders), and copies keep the same orders. A ledger that composes every
        # charge into a copy then pays for each distinct query's curve once.
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new._counts = Counter(self._counts)
        return new

    @property
    def orders(self) -> np.ndarray:
        """The Renyi orders of this accountant (read-only)."""
        return self._orders

    @property
    def data_dependent(self) -> bool:
        """Whether votes carried by events are used."""
        return self._data_dependent

    def _check_leaf(self, event: _dp.DpEvent) -> None:
        if not isinstance(event, (GaussianNoisyMaxDpEvent, LaplaceNoisyMaxDpEvent)):
            raise self._unsupported(
                event, "PATEAccountant composes GaussianNoisyMaxDpEvent and "
                       "LaplaceNoisyMaxDpEvent only (use RDPAccountant for other events)")
        if event.votes is not None and any(v < 0 for v in event.votes):
            raise self._unsupported(event, "votes must be non-negative counts")

    # ----------------------------------------------------------------------- curves

    def _uses_votes(self, event: _dp.DpEvent) -> bool:
        return self._data_dependent and getattr(event, "votes", None) is not None

    def _ind_curve(self, event: _dp.DpEvent) -> np.ndarray:
        key = ((type(event).__name__, float(event.sigma))
               if isinstance(event, GaussianNoisyMaxDpEvent)
               else (type(event).__name__, float(event.noise_scale)))
        curve = self._ind_cache.get(key)
        if curve is None:
            curve = data_independent_rdp(event, self._orders)
            self._ind_cache[key] = curve
        return curve

    def _fill_dep_cache(self) -> None:
        """Compute, vectorised, the data-dependent curves of events not seen yet."""
        todo = [e for e in self._counts
                if getattr(e, "votes", None) is not None and e not in self._dep_cache]
        groups: dict[tuple[type, int], list] = {}
        for e in todo:
            groups.setdefault((type(e), len(e.votes)), []).append(e)
        orders = self._orders[None, :]
        for (kind, _), group in groups.items():
            votes = np.array([e.votes for e in group], dtype=np.int64)
            if kind is GaussianNoisyMaxDpEvent:
                sigma = np.array([float(e.sigma) for e in group])
                logq = _gnmax_logq_batch(votes, sigma)
                dep, _ = _gnmax_theorem6(logq[:, None], sigma[:, None], orders)
                curves = np.minimum(np.stack([self._ind_curve(e) for e in group]), dep)
            else:
                scale = np.array([float(e.noise_scale) for e in group])
                logq = _lnmax_logq_batch(votes, scale)
                moments = orders - 1.0
                indep = np.stack([self._ind_curve(e) for e in group]) * moments
                curves = _lnmax_moments(logq[:, None], scale[:, None], moments, indep) / moments
            for e, curve in zip(group, curves, strict=True):
                curve.setflags(write=False)
                self._dep_cache[e] = curve

    def rdp(self, *, data_dependent: bool | None = None) -> np.ndarray:
        """Total RDP at :attr:`orders` of everything composed (inf after a non-private event).

        Args:
            data_dependent: Override the accountant's setting (False: data-independent curve).
        """
        use = self._data_dependent if data_dependent is None else bool(data_dependent)
        total = np.zeros_like(self._orders)
        if self._non_private:
            return np.full_like(self._orders, np.inf)
        if use:
            self._fill_dep_cache()
        for event, count in self._counts.items():
            if use and getattr(event, "votes", None) is not None:
                total = total + count * self._dep_cache[event]
            else:
                total = total + count * self._ind_curve(event)
        return total

    def _pure_epsilon(self) -> float:
        """Basic composition when every event is LNMax ((2/b)-DP each), else inf."""
        if all(isinstance(e, LaplaceNoisyMaxDpEvent) for e in self._counts):
            return math.fsum(c * 2.0 / float(e.noise_scale) for e, c in self._counts.items())
        return math.inf

    def _epsilon_pair(self, target_delta: float) -> tuple[float, float, float]:
        """(data-independent eps, data-dependent eps, order of the latter)."""
        pure = self._pure_epsilon()
        eps_ind, _ = epsilon_from_rdp(self._orders, self.rdp(data_dependent=False), target_delta)
        eps_ind = min(eps_ind, pure)
        if not self._has_votes():
            return eps_ind, eps_ind, math.nan
        eps_dep, order = epsilon_from_rdp(self._orders, self.rdp(data_dependent=True),
                                          target_delta)
        return eps_ind, min(eps_dep, eps_ind), order

    def _has_votes(self) -> bool:
        return any(self._uses_votes(e) for e in self._counts)

    def get_epsilon(self, target_delta: float) -> Epsilon:
        """Smallest epsilon at ``target_delta`` ([BBGHS20] Thm 21 over the orders).

        Returns:
            DATA_DEPENDENT epsilon when votes lowered it (by more than a relative 1e-9), else
            the data-independent UPPER_BOUND. It can be exactly 0: with strong consensus the
            data-dependent RDP rho is tiny at some order, and the Bretagnolle-Huber bound
            delta(0) = TV <= sqrt(1 - e^(-rho)) (see
            :func:`dpkd_audit.accountants.rdp.conversion.epsilon_from_rdp`) is then already
            below ``target_delta``, so epsilon = 0 is certified at that delta (not "no cost":
            the delta is spent).
        """
        target_delta = _validate.check_probability("target_delta", target_delta)
        trivial = self._trivial_epsilon()
        if trivial is not None:
            return trivial
        eps_ind, eps_dep, _ = self._epsilon_pair(target_delta)
        if eps_dep < eps_ind * (1.0 - _SAME_REL_TOL):
            return Epsilon(eps_dep, method=self._dependent_method(),
                           kind=BoundKind.DATA_DEPENDENT)
        return Epsilon(eps_ind, method=METHOD_DATA_INDEPENDENT, kind=BoundKind.UPPER_BOUND)

    def _trivial_epsilon(self) -> Epsilon | None:
        """Infinite after a non-private event, 0 with nothing composed, else None."""
        if self._non_private:
            return Epsilon(math.inf, method=METHOD_DATA_INDEPENDENT, kind=BoundKind.UPPER_BOUND)
        if not self._counts:
            return Epsilon(0.0, method=METHOD_DATA_INDEPENDENT, kind=BoundKind.UPPER_BOUND)
        return None

    def _dependent_method(self) -> str:
        kinds = {type(e) for e in self._counts if self._uses_votes(e)}
        if kinds == {LaplaceNoisyMaxDpEvent}:
            return METHOD_DATA_DEPENDENT_LNMAX
        if LaplaceNoisyMaxDpEvent in kinds:
            return METHOD_DATA_DEPENDENT_MIXED
        return METHOD_DATA_DEPENDENT

    def data_independent_epsilon(self, target_delta: float) -> Epsilon:
        """The epsilon ignoring every vote histogram (always an UPPER_BOUND)."""
        target_delta = _validate.check_probability("target_delta", target_delta)
        trivial = self._trivial_epsilon()
        if trivial is not None:
            return trivial
        eps_ind, _, _ = self._epsilon_pair(target_delta)
        return Epsilon(eps_ind, method=METHOD_DATA_INDEPENDENT, kind=BoundKind.UPPER_BOUND)

    def get_delta(self, target_epsilon: float) -> float:
        """Smallest delta at ``target_epsilon`` (data-dependent when votes are used)."""
        if not (isinstance(target_epsilon, (int, float)) and not isinstance(target_epsilon, bool)
                and target_epsilon >= 0):
            raise _fail("target_epsilon", "a real number >= 0", target_epsilon)
        if self._non_private:
            return 1.0
        if not self._counts:
            return 0.0
        if self._pure_epsilon() <= target_epsilon:
            return 0.0
        return delta_from_rdp(self._orders, self.rdp(), float(target_epsilon))[0]

    def _release_order(self, target_delta: float) -> float | None:
        """The order with the smallest data-dependent epsilon where C5-C6 hold, or None."""
        rdp = self.rdp(data_dependent=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            eps = (rdp + np.log1p(-1.0 / self._orders)
                   - (math.log(target_delta) + np.log(self._orders)) / (self._orders - 1))
        keys = {(float(e.sigma), len(e.votes)) for e in self._counts
                if isinstance(e, GaussianNoisyMaxDpEvent) and self._uses_votes(e)}
        for idx in np.argsort(np.where(np.isfinite(eps), eps, np.inf), kind="stable"):
            if not math.isfinite(eps[idx]):
                break
            lam = float(self._orders[idx])
            if all(_gnmax_thresholds(s, lam, m).conditions_hold for s, m in keys):
                return lam
        return None

    def report(self, target_delta: float, *, order: float | None = None,
               beta: float | None = None, sigma_ss: float | None = None) -> PATEReport:
        """Data-dependent epsilon and the cost of releasing it, as separate line items.

        Args:
            target_delta: Delta of every epsilon reported, in (0, 1).
            order: Order of the smooth-sensitivity release; None: among the orders where the
                conditions C5-C6 of [PATE18] hold, the one with the smallest data-dependent
                epsilon (itself a data-dependent choice, as in the paper's tables).
            beta: Smoothness of the release (see :func:`smooth_sensitivity_release_cost`).
            sigma_ss: Noise multiplier of the release (idem).

        Raises:
            ValueError: On bad input, or if ``order`` is given and C5-C6 fail there.
        """
        target_delta = _validate.check_delta(target_delta, "target_delta", allow_zero=False)
        eps = self.get_epsilon(target_delta)
        ind = self.data_independent_epsilon(target_delta)
        release, note = None, ""
        if self._non_private:
            note = "a non-private event was composed"
        elif not self._has_votes():
            note = ("no event carries votes (or data_dependent=False): the epsilon is "
                    "data-independent and can be published as is")
        elif any(isinstance(e, LaplaceNoisyMaxDpEvent) and self._uses_votes(e)
                 for e in self._counts):
            note = ("data-dependent LNMax queries (PATE 2017) have no smooth-sensitivity "
                    "analysis: the data-dependent epsilon must not be published")
        else:
            chosen = order if order is not None else self._release_order(target_delta)
            if chosen is None:
                note = ("the conditions C5-C6 of PATE 2018 Appendix B.4 fail at every order "
                        "of this accountant: the data-dependent epsilon must not be published")
            else:
                release = smooth_sensitivity_release_cost(self._counts, chosen, beta=beta,
                                                          sigma_ss=sigma_ss)
                how = "given" if beta is not None and sigma_ss is not None else (
                    "optimised as in the paper (a data-dependent choice)")
                note = (f"order {'given' if order is not None else 'chosen from the data'}"
                        f", beta and sigma_ss {how}")
        return PATEReport(target_delta=target_delta, data_dependent_epsilon=eps,
                          data_independent_epsilon=ind, release=release, release_note=note)

    # Alias used by the pipelines.
    reports = report
