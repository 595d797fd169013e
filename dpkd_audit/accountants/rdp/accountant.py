"""Renyi differential privacy (RDP) accounting with exact per-event curves and a fine order search.

Mironov, "Renyi differential privacy", CSF 2017 (arXiv:1702.07476): a mechanism is
(alpha, rho)-RDP if the Renyi divergence of order alpha between its output distributions on any two
neighbouring inputs is at most rho (Definition 4); RDP curves add up under adaptive composition
(Proposition 1) and survive post-processing (Proposition 2). The accountant therefore keeps the
composed history as ``count x event`` (grouped lazily by the base class), evaluates one curve
rho_event(alpha) per *distinct* event and sums ``count * rho_event(alpha)``; 10^4 identical
events cost one curve evaluation.

Every curve can be evaluated at any real order alpha > 1 (and at alpha = inf, where it is the
pure-DP bound D_inf, or inf). Each one cites its source in its docstring:

====================================  ==========================================================
event                                 RDP curve rho(alpha)
====================================  ==========================================================
GaussianDpEvent (+ calibrated)        alpha / (2 s^2), s = noise_multiplier (Mironov 2017, Prop 7)
LaplaceDpEvent                        Mironov 2017, Prop 6, eps = 1 / noise_multiplier (exact)
DiscreteLaplaceDpEvent                exact Renyi divergence of two shifted discrete Laplace laws
                                      (closed form derived in :func:`discrete_laplace_rdp`)
RandomizedResponseDpEvent             exact k-ary RR divergence (Mironov 2017, Prop 5 for k = 2)
pure eps events (PureDpEvent, ...)    binary RR with parameter eps: the largest RDP curve of any
                                      eps-DP mechanism (see :func:`pure_dp_rdp`); also any other
                                      ``DeclaredGuarantee`` event that declares (eps, 0)
BitRandomizedResponseDpEvent          bits_changed * binary RR(eps_per_bit) (Prop 1 additivity)
LaplaceNoisyMaxDpEvent                min(RR(2/b), 2 * Laplace(1/b)) (post-processing of the
                                      Laplace-noised vote histogram; see ``_lnmax_curve``)
GaussianNoisyMaxDpEvent               alpha / sigma^2 (Papernot et al. 2018, Proposition 8)
DiscreteGaussianDpEvent               alpha Delta^2 / (2 sigma^2) (Canonne-Kamath-Steinke 2020)
DiscreteGaussianVectorDpEvent         alpha Delta^2 / (2 sigma^2) (CKS 2020, Thm 14; L2 shift)
ZCDpEvent                             xi + rho alpha (Bun-Steinke 2016, Definition 1.1)
PoissonSampledDpEvent(q, Gaussian)    Mironov-Talwar-Zhang 2019 (ADD_OR_REMOVE_ONE/REPLACE_SPECIAL),
                                      an upper bound (see :func:`subsampled_gaussian_rdp`)
====================================  ==========================================================

``ApproxDpEvent`` with delta > 0, ``ShuffledHistogramDpEvent``,
``SampledWithoutReplacementDpEvent``, ``MixtureOfGaussiansDpEvent`` and every other event are
refused with an ``UnsupportedEventError`` naming them and saying why. Other modules (e.g. the
PATE data-dependent analysis) add curves through :func:`register_rdp_curve`.

Conversion to (epsilon, delta) (:mod:`.conversion`): for every order, the improved
conversion of Balle, Barthe, Gaboardi, Hsu, Sato, "Hypothesis testing interpretations and Renyi
differential privacy", AISTATS 2020, Theorem 21 (= Canonne-Kamath-Steinke 2020, Proposition 12),
never above the classic Mironov 2017 Proposition 3, plus the order-free Bretagnolle-Huber bound
delta(eps) <= TV <= sqrt(1 - exp(-KL)) <= sqrt(1 - exp(-rho(alpha))) (KL <= D_alpha by van
Erven-Harremoes 2014, Theorem 3) that dp_accounting also uses; it can certify epsilon = 0 (see
:func:`.conversion._tv_bound`). The order is optimised on a dense log-scale grid (alpha - 1
from 1e-3 to 1e4, plus dp_accounting's default orders and alpha = inf), then refined on the
continuous curve between the best grid point's neighbours (Brent's method on exact values).
Every bound returned is computed from the exact total RDP at the order reported in
``last_order``; interpolation only chooses where to evaluate.

Speed (issues 3 and 9, "online" use: one compose per event, a query after each): the
accountant keeps running totals on the grid instead of re-summing every distinct event's curve
at each query; events whose curves form a family (Gaussian-like lines a + b alpha, Laplace,
binary and k-ary randomized response and the pure-DP events, discrete Laplace, LNMax) are
evaluated together, one vectorised expression per family (:mod:`.plans`); the refinement
keeps a few exact off-grid totals near its last optimum as running totals too, and steps to the
minimiser of a local interpolation model with an error term, so that an online query usually
needs one new exact evaluation (:mod:`.search`); the subsampled Gaussian, costly per order,
is evaluated only at the orders a quasi-convex search visits, with running sums on a window of
grid orders around the optimum (see ``RDPAccountant._optimise``). Beyond
``search._LAZY_POLISH_MAX`` (8) distinct subsampled Gaussians the answer is the best grid
order, not refined off the grid: each off-grid order would cost one quadrature or series per
such event. Query results are cached until the next compose. ``python
benchmarks/rdp_online.py`` compares the timings with dp_accounting's.

Sensitivity convention: an event's noise is normalised by the sensitivity *between neighbours
of the accountant's relation* (``GaussianDpEvent(s)`` is the pair N(0, s^2), N(1, s^2) under
every relation, as in dp_accounting's ``RdpAccountant`` and in the mechanisms of this package,
which declare replace-one sensitivities). dp_accounting's ``PLDAccountant`` instead shifts a
Gaussian by 2 under REPLACE_ONE (remove + add); compare with it under ADD_OR_REMOVE_ONE.

Layout: :mod:`.curves` (closed-form curves and their batched kernels),
:mod:`.subsampled` (subsampled Gaussian), :mod:`.registry` (event -> curve),
:mod:`.plans` (how the accountant groups events), :mod:`.search` (the order search),
:mod:`.conversion` (RDP -> (epsilon, delta)); this module holds the accountant (its state and
running totals) and re-exports the public names.
"""

from __future__ import annotations

import collections
import copy
import math
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.accountants.base import (
    Accountant,
    BoundKind,
    Epsilon,
    NeighboringRelation,
)
from dpkd_audit.accountants.rdp import registry as _registry
from dpkd_audit.accountants.rdp.conversion import (
    _check_target_epsilon,
    _tv_from_rho,
    delta_from_rdp,
    epsilon_from_rdp,
)
from dpkd_audit.accountants.rdp.curves import (
    _as_orders,
    discrete_laplace_rdp,
    gaussian_rdp,
    laplace_rdp,
    pure_dp_rdp,
    randomized_response_rdp,
)
from dpkd_audit.accountants.rdp.plans import _grid_for, _Group, _Kernel, _plan
from dpkd_audit.accountants.rdp.registry import (
    _CACHE_SIZE,
    _LAZY_MEMO,
    _LAZY_OFFGRID,
    _PROBE_ORDER,
    RdpCurveFn,
    _evaluate,
    is_data_dependent,
    rdp_curve,
    register_rdp_curve,
    unregister_rdp_curve,
)
from dpkd_audit.accountants.rdp.search import _OrderSearch, _Pool
from dpkd_audit.accountants.rdp.subsampled import _sgm_log_a_frac as _sgm_log_a_frac
from dpkd_audit.accountants.rdp.subsampled import _sgm_log_a_int as _sgm_log_a_int
from dpkd_audit.accountants.rdp.subsampled import _sgm_log_a_quad as _sgm_log_a_quad
from dpkd_audit.accountants.rdp.subsampled import _sgm_log_a_quads as _sgm_log_a_quads
from dpkd_audit.accountants.rdp.subsampled import subsampled_gaussian_rdp

__all__ = [
    "DEFAULT_ORDERS",
    "DP_ACCOUNTING_DEFAULT_ORDERS",
    "RDPAccountant",
    "RdpCurveFn",
    "delta_from_rdp",
    "discrete_laplace_rdp",
    "epsilon_from_rdp",
    "gaussian_rdp",
    "is_data_dependent",
    "laplace_rdp",
    "pure_dp_rdp",
    "randomized_response_rdp",
    "rdp_curve",
    "register_rdp_curve",
    "subsampled_gaussian_rdp",
    "unregister_rdp_curve",
]

#: dp_accounting's ``RdpAccountant`` default orders (kept in our grid, so that our bound is never
#: worse than dp_accounting's on the events both support).
DP_ACCOUNTING_DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + [float(x) for x in range(11, 64)]
    + [128.0, 256.0, 512.0, 1024.0])

#: Our default grid: alpha - 1 log-spaced from 1e-3 to 1e4 (ratio 1.06 between neighbours), the
#: dp_accounting orders, and alpha = inf (the pure-DP bound).
DEFAULT_ORDERS: np.ndarray = np.unique(np.concatenate([
    1.0 + np.logspace(-3.0, 4.0, 281), np.array(DP_ACCOUNTING_DEFAULT_ORDERS), [np.inf]]))
DEFAULT_ORDERS.setflags(write=False)

_OFFGRID_MEMO_SIZE = 1 << 16
#: Lazy (subsampled-Gaussian) curves: running sums kept on a window of grid orders around the
#: last optimum (see RDPAccountant._recentre_lazy).
_LAZY_BELOW, _LAZY_ABOVE = 16, 4


_NOT_LEAVES = (_dp.NoOpDpEvent, _dp.NonPrivateDpEvent, _dp.SelfComposedDpEvent,
               _dp.ComposedDpEvent)
_LEAF_TYPES: dict[type, bool] = {}


def _is_leaf_type(cls: type) -> bool:
    """Whether events of this class are leaves that the base class checks with _check_leaf."""
    leaf = _LEAF_TYPES.get(cls)
    if leaf is None:
        leaf = _LEAF_TYPES[cls] = issubclass(cls, _dp.DpEvent) and not issubclass(cls, _NOT_LEAVES)
    return leaf


def _add_to_pools(pools: list, increments: list[float]) -> None:
    """Add ``increments`` (the pools' orders, concatenated in order) to the pools' totals."""
    start = 0
    for pool in pools:
        stop = start + len(pool.orders)
        pool.totals = [t + v for t, v in zip(pool.totals, increments[start:stop], strict=True)]
        start = stop


class RDPAccountant(_OrderSearch, Accountant):
    """Renyi-DP accountant: exact per-event curves, improved conversion, fine order search.

    The composed history is kept as running totals, updated when an event is composed (lazily,
    at the next query, in one vectorised pass over the events composed since the last one), so
    a query costs about one pass over the order grid plus one vectorised pass per curve family
    and refinement step; results are cached until the next compose. See :meth:`_optimise` for
    the order search.

    Args:
        orders: RDP orders for the grid search (reals > 1, inf allowed); default
            :data:`DEFAULT_ORDERS` (alpha - 1 log-spaced over [1e-3, 1e4], dp_accounting's
            orders, and inf).
        neighboring_relation: The neighbouring relation, fixed here (default REPLACE_ONE, as for
            the other accountants of the package). ``PoissonSampledDpEvent`` needs
            ADD_OR_REMOVE_ONE (or REPLACE_SPECIAL); randomized response needs REPLACE_ONE or
            REPLACE_SPECIAL. Other events' curves are stated for the relation their sensitivity
            or declared guarantee refers to.
        refine: Refine the best order on the continuous curve (Brent's method on exact values
            between the best order's neighbours; see :meth:`_optimise`). With
            ``refine=False`` the answer is the best order of the grid, as it is with more than
            eight distinct subsampled-Gaussian events composed (their off-grid values cost one
            quadrature per event and order).

    Attributes:
        last_order: The order that gave the last ``get_epsilon``/``get_delta`` answer (inf for
            the pure-DP bound, nan when the order-free TV bound won or nothing was composed).
    """

    method = "RDP"

    def __init__(self, orders: Sequence[float] | np.ndarray | None = None,
                 neighboring_relation: NeighboringRelation = NeighboringRelation.REPLACE_ONE,
                 *, refine: bool = True) -> None:
        super().__init__(neighboring_relation)
        if orders is None:
            grid = DEFAULT_ORDERS
        else:
            grid = np.unique(_as_orders(orders))
            grid.setflags(write=False)
        if not isinstance(refine, bool):
            raise ValueError(f"refine must be a bool; got {refine!r}")
        self._orders = grid
        self._grid = _grid_for(grid)
        self._refine = refine
        self.last_order: float = math.nan
        self._pending: dict[_dp.DpEvent, int] = {}
        self._results: dict[tuple[str, float], tuple[Any, float]] = {}
        self._reset_totals()

    def _reset_totals(self) -> None:
        self._registry_version = _registry._REGISTRY_VERSION
        self._total = np.zeros(self._orders.shape)  # sum over non-lazy events, on the grid
        self._lin_a = 0.0  # sum of count * a over linear curves a + b alpha
        self._lin_b = 0.0
        self._groups: dict[_Kernel, _Group] = {}
        self._generic: dict[_dp.DpEvent, int] = {}
        self._lazy: dict[_dp.DpEvent, int] = {}
        self._pools: dict[tuple[bool, float], _Pool] = {}
        self._lazy_sum = np.zeros(self._orders.shape)  # see _lazy_at
        self._lazy_done = np.zeros(self._orders.shape, dtype=bool)
        self._lazy_best: dict[tuple[bool, float], int] = {}  # last best grid index per target
        self._lazy_window = (0, -1)  # grid indices with complete lazy sums (_recentre_lazy)
        self._convex = True  # every curve composed has (alpha - 1) rho(alpha) convex
        self._data_dependent = False

    @property
    def orders(self) -> np.ndarray:
        """The grid of orders (a read-only view)."""
        view = self._orders.view()
        view.setflags(write=False)
        return view

    def compose(self, event: _dp.DpEvent, count: int = 1) -> Self:
        """Compose ``count`` copies of ``event``; all-or-nothing (see :meth:`Accountant.compose`).

        A single leaf event (not a composition, ``NoOpDpEvent`` or ``NonPrivateDpEvent``) takes
        a short path with the same effect and the same checks as the base class's two phases.

        Raises:
            UnsupportedEventError: If any part of ``event`` is not supported (the message names
                it); the accountant is then unchanged.
            ValueError: If ``count`` is not an integer >= 1.
        """
        if (type(count) is int and count >= 1 and _is_leaf_type(type(event))
                and type(self)._check_leaf is RDPAccountant._check_leaf):
            self._check_leaf(event)  # raises UnsupportedEventError, state unchanged
            self._counts[event] += count
            self._pending[event] = self._pending.get(event, 0) + count
            self._results.clear()
            return self
        return super().compose(event, count)

    def _check_leaf(self, event: _dp.DpEvent) -> None:
        try:
            if (event, self._relation) in _registry._PLANS:
                return  # checked before (plans are cached only for accepted events)
        except TypeError:
            reason = "the event is not hashable"
            try:  # a curve that refuses the event says more
                _evaluate(event, _PROBE_ORDER, self._relation)
            except (ValueError, TypeError, AttributeError, ArithmeticError,
                    NotImplementedError) as err:
                reason = str(err) or reason
            raise self._unsupported(event, reason) from None
        try:
            _plan(event, self._relation)
        except (ValueError, TypeError, AttributeError, ArithmeticError,
                NotImplementedError) as err:
            raise self._unsupported(event, str(err) or type(err).__name__) from None

    def _on_compose(self, leaves: collections.Counter[_dp.DpEvent]) -> None:
        """Queue the new leaves for the running totals (added at the next query).

        Phase 1 (the base class's check, through ``_check_leaf``) gave every leaf a validated,
        cached plan, so this cannot fail.
        """
        for leaf, n in leaves.items():
            if not isinstance(leaf, _dp.NonPrivateDpEvent):
                self._pending[leaf] = self._pending.get(leaf, 0) + n
        self._results.clear()

    def copy(self) -> Self:
        """An independent copy of this accountant and its history (events are shared)."""
        new = copy.copy(self)
        own = {"_counts", "_pending", "_results", "_total", "_groups", "_generic", "_lazy",
               "_pools", "_orders", "_grid", "_lazy_sum", "_lazy_done", "_lazy_best"}
        for name, value in self.__dict__.items():  # attributes a subclass may have added
            if name not in own:
                setattr(new, name, copy.deepcopy(value))
        new._counts = collections.Counter(self._counts)
        new._pending = dict(self._pending)
        new._results = dict(self._results)
        new._total = self._total.copy()
        new._groups = {kernel: group.copy() for kernel, group in self._groups.items()}
        new._generic = dict(self._generic)
        new._lazy = dict(self._lazy)
        new._pools = {key: pool.copy() for key, pool in self._pools.items()}
        new._lazy_sum = self._lazy_sum.copy()
        new._lazy_done = self._lazy_done.copy()
        new._lazy_best = dict(self._lazy_best)
        return new

    # ----------------------------------------------------------------- totals

    def _sync(self) -> None:
        """Add the events composed since the last query to the running totals."""
        if self._registry_version != _registry._REGISTRY_VERSION:  # a curve was (un)registered
            self._reset_totals()
            self._pending = dict(self._counts)
            self._results.clear()
        if not self._pending:
            return
        pending, self._pending = self._pending, {}
        try:
            self._add(pending)
        except BaseException:
            self._registry_version = -1  # rebuild from self._counts at the next query
            raise

    def _add(self, pending: dict[_dp.DpEvent, int]) -> None:
        """Add events to the running totals: on the grid, at alpha = inf and in the pools."""
        grid, relation = self._grid, self._relation
        nf = grid.nf
        pools = list(self._pools.values())
        pool_orders = [a for pool in pools for a in pool.orders]
        grid_inc: np.ndarray | float = 0.0  # increments at the finite grid orders
        pool_inc = [0.0] * len(pool_orders)  # and at the pools' orders
        at_inf = 0.0
        d_a = d_b = 0.0
        batches: dict[_Kernel, tuple[list[tuple[float, ...]], list[float]]] = {}
        for event, n in pending.items():
            plan = _plan(event, relation)
            if plan.data_dependent:
                self._data_dependent = True
            if not plan.safe:
                self._convex = False
            kind = plan.kind
            if kind == "linear":
                d_a += n * plan.a
                d_b += n * plan.b
            elif kind == "kernel":
                params, weights = batches.setdefault(plan.kernel, ([], []))  # type: ignore[arg-type]
                params.append(plan.param)
                weights.append(n * plan.weight)
            elif kind == "generic":
                self._generic[event] = self._generic.get(event, 0) + n
                self._total += n * rdp_curve(event, self._orders, relation)
                if pool_orders:
                    values = _evaluate(event, np.array(pool_orders), relation).tolist()
                    pool_inc = [t + n * v for t, v in zip(pool_inc, values, strict=True)]
            elif kind == "lazy":
                self._lazy[event] = self._lazy.get(event, 0) + n
                done = np.flatnonzero(self._lazy_done)
                if done.size:  # keep the running sums complete
                    self._lazy_sum[done] += n * self._lazy_values(event, done)
        if d_a or d_b:
            self._lin_a += d_a
            self._lin_b += d_b
            grid_inc = d_a + d_b * grid.a
            pool_inc = [t + d_a + d_b * a for t, a in zip(pool_inc, pool_orders, strict=True)]
            at_inf += d_a if d_b == 0 else math.inf
        for kernel, (params, weights) in batches.items():
            p = np.array(params)
            if len(weights) == 1 and kernel.grid_row is not None:  # online use: one new event
                weight, param = weights[0], params[0]
                row = kernel.grid_row(param, grid)
                with np.errstate(over="ignore"):  # an order's RDP beyond the doubles: inf,
                    # which is an upper bound (the conversion then skips that order)
                    grid_inc = grid_inc + (row if weight == 1.0 else weight * row)
                scalar = kernel.scalar
                for pool in pools:  # a few orders: scalar arithmetic, in place
                    totals = pool.totals
                    for i, a in enumerate(pool.orders):
                        totals[i] += weight * scalar(param, a)  # type: ignore[misc]
                at_inf += weight * float(kernel.at_inf(p)[0])
            else:
                w = np.array(weights)
                ext = np.concatenate([grid.a, pool_orders]) if pool_orders else grid.a
                if ext.size:
                    rows = w @ kernel.matrix(p, ext)
                    grid_inc = grid_inc + rows[:nf]
                    if pool_orders:
                        pool_inc = [t + v for t, v in zip(pool_inc, rows[nf:].tolist(),
                                                          strict=True)]
                at_inf += float(w @ kernel.at_inf(p))
            group = self._groups.get(kernel)
            if group is None:
                group = self._groups[kernel] = _Group(kernel.width)
            for param, weight in zip(params, weights, strict=True):
                group.add(param, weight)
        if d_a or d_b or batches:
            if nf:
                self._total[:nf] += grid_inc
            _add_to_pools(pools, pool_inc)
            if grid.has_inf:
                self._total[nf] += at_inf
        elif pool_orders:  # generic curves only
            _add_to_pools(pools, pool_inc)

    def _lazy_values(self, event: _dp.DpEvent, idx: np.ndarray) -> np.ndarray:
        """One lazy event's curve at grid indices ``idx`` (memoised per event and grid)."""
        key = (event, self._relation, self._grid.key)
        memo = _LAZY_MEMO.get(key)
        if memo is None:
            memo = np.full(self._orders.shape, np.nan)
            _LAZY_MEMO[key] = memo
            if len(_LAZY_MEMO) > _CACHE_SIZE:
                _LAZY_MEMO.popitem(last=False)
        else:
            _LAZY_MEMO.move_to_end(key)
        missing = idx[np.isnan(memo[idx])]
        if missing.size:
            memo[missing] = _evaluate(event, self._orders[missing], self._relation)
        return memo[idx]

    def _lazy_at(self, idx: np.ndarray) -> np.ndarray:
        """Sum of count * curve over the lazy events at grid indices ``idx``.

        Running sums are kept at the indices the order search used lately (``_lazy_done``):
        a new lazy event is evaluated there when it is composed (one batch of orders per
        event), other indices are summed over every lazy event when first needed.
        """
        done = self._lazy_done[idx]
        if not done.all():
            todo = np.unique(idx[~done])
            sums = np.zeros(todo.shape)
            for event, n in self._lazy.items():
                sums += n * self._lazy_values(event, todo)
            self._lazy_sum[todo] = sums
            self._lazy_done[todo] = True
        return self._lazy_sum[idx]

    def _recentre_lazy(self, j: int) -> None:
        """Keep complete lazy running sums on a window of grid orders around the optimum ``j``.

        The window spans :data:`_LAZY_BELOW` orders below ``j`` (the optimum moves to smaller
        orders as events accumulate) and :data:`_LAZY_ABOVE` above; every lazy event composed
        later is evaluated there in one batch, so that the next searches find their sums ready.
        It is moved (and the new orders summed over every lazy event) only when ``j`` comes
        within two orders of its ends; sums at orders outside it are dropped, except at the
        first order (the smallest RDP, which the total-variation bound uses).
        """
        nf = self._grid.nf
        lo, hi = self._lazy_window
        if not (lo + 2 <= j <= hi - 2 or (lo == 0 and j <= hi - 2)
                or (hi == nf - 1 and lo + 2 <= j)):
            lo, hi = max(j - _LAZY_BELOW, 0), min(j + _LAZY_ABOVE, nf - 1)
            self._lazy_window = (lo, hi)
        self._lazy_done[1:lo] = False  # the first order stays: the TV bound uses its RDP
        self._lazy_done[hi + 1:nf] = False
        self._lazy_at(np.arange(lo, hi + 1))

    def _lazy_at_order(self, alpha: float) -> float:
        """Sum of count * curve over the lazy events at one off-grid order (memoised)."""
        total = 0.0
        relation = self._relation
        arr = None
        for event, n in self._lazy.items():
            key = (event, relation, alpha)
            value = _LAZY_OFFGRID.get(key)
            if value is None:
                if arr is None:
                    arr = np.array([alpha])
                value = float(_evaluate(event, arr, relation)[0])
                _LAZY_OFFGRID[key] = value
                if len(_LAZY_OFFGRID) > _OFFGRID_MEMO_SIZE:
                    _LAZY_OFFGRID.popitem(last=False)
            total += n * value
        return total

    def _grid_total(self, idx: np.ndarray | None = None) -> np.ndarray:
        """Total RDP at the grid orders ``idx`` (default: all of them)."""
        if idx is None:
            if not self._lazy:
                return self._total
            idx = np.arange(self._orders.size)
        if not self._lazy:
            return self._total[idx]
        return self._total[idx] + self._lazy_at(idx)

    def _total_at(self, alphas: np.ndarray) -> np.ndarray:
        """Exact total RDP at any orders (> 1, inf allowed), off the grid included."""
        finite = np.isfinite(alphas)
        all_finite = bool(finite.all())
        af = alphas if all_finite else alphas[finite]
        values = self._lin_a + self._lin_b * af
        at_inf = self._lin_a if self._lin_b == 0 else math.inf
        for kernel, group in self._groups.items():
            p, w = group.arrays()
            values = values + w @ kernel.matrix(p, af)
            if not all_finite:
                at_inf += float(w @ kernel.at_inf(p))
        if all_finite:
            out = values
        else:
            out = np.empty(alphas.shape)
            out[finite] = values
            out[~finite] = at_inf
        for events in (self._generic, self._lazy):
            for event, n in events.items():
                out = out + n * _evaluate(event, alphas, self._relation)
        return out

    def _nonlazy_at_order(self, alpha: float) -> float:
        """Exact total RDP of the non-lazy events at one finite order (scalar work per family)."""
        total = self._lin_a + self._lin_b * alpha
        for kernel, group in self._groups.items():
            total += kernel.total_at(group, alpha)
        if self._generic:
            arr = np.array([alpha])
            for event, n in self._generic.items():
                total += n * float(_evaluate(event, arr, self._relation)[0])
        return total

    def _total_at_order(self, alpha: float) -> float:
        """:meth:`_total_at` at one finite order, with fewer array operations (same values)."""
        total = self._nonlazy_at_order(alpha)
        if self._lazy:
            total += self._lazy_at_order(alpha)
        return total

    def rdp(self, orders: Any = None) -> np.ndarray:
        """Total RDP of the composed history at ``orders`` (default: the grid).

        sum over distinct events of count * rho_event(alpha) (Mironov 2017, Proposition 1);
        inf everywhere after a NonPrivateDpEvent.
        """
        arr = self._orders if orders is None else _as_orders(orders)
        if self._non_private:
            return np.full(arr.shape, np.inf)
        self._sync()
        if orders is None:
            return self._grid_total().copy()
        return self._total_at(arr)

    def _kind(self) -> BoundKind:
        return BoundKind.DATA_DEPENDENT if self._data_dependent else BoundKind.UPPER_BOUND


    # ----------------------------------------------------------------- queries

    def get_epsilon(self, target_delta: float) -> Epsilon:
        """Smallest epsilon the RDP curve certifies at ``target_delta``.

        Args:
            target_delta: Target delta in [0, 1] (0 uses only the pure-DP bound at alpha = inf).

        Returns:
            An ``Epsilon`` (method "RDP"; kind UPPER_BOUND, or DATA_DEPENDENT if a composed
            event's curve depends on the data); the order used is in :attr:`last_order`. It is
            0 (with ``last_order`` nan) when ``target_delta`` is at least the total-variation
            bound sqrt(1 - e^{-rho}) of the composed history: the hockey-stick divergence at
            epsilon = 0 is the total variation distance, so the history is then (0, delta)-DP
            (see :func:`.conversion._tv_bound`).
        """
        if not (type(target_delta) is float and 0.0 <= target_delta <= 1.0):
            target_delta = _validate.check_probability("target_delta", target_delta)
        self._sync()
        key = ("epsilon", target_delta)
        cached = self._results.get(key)
        if cached is not None:
            self.last_order = cached[1]
            return cached[0]
        kind = self._kind()
        self.last_order = math.nan
        if self._non_private:
            value = math.inf
        elif not self._counts or target_delta >= 1.0:
            value = 0.0
        elif target_delta == 0:
            grid = self._grid
            if grid.has_inf:
                value = float(self._grid_total(np.array([grid.nf]))[0])
                self.last_order = math.inf
            else:
                value = math.inf
        else:
            value, order, rho_min = self._optimise(False, math.log(target_delta))
            if target_delta >= _tv_from_rho(rho_min):
                value = 0.0
            else:
                value = max(0.0, value)
                self.last_order = order
        result = Epsilon(value, method=self.method, kind=kind)
        self._results[key] = (result, self.last_order)
        return result

    def get_delta(self, target_epsilon: float) -> float:
        """Smallest delta the RDP curve certifies at ``target_epsilon`` (finite, >= 0).

        The order-free bound sqrt(1 - e^{-rho}) >= TV >= delta(epsilon) is returned (with
        ``last_order`` nan) when it is smaller than every order's bound; it is 0 when the total
        RDP vanishes at some order (see :func:`.conversion._tv_bound`).
        """
        target_epsilon = _check_target_epsilon(target_epsilon)
        self._sync()
        key = ("delta", target_epsilon)
        cached = self._results.get(key)
        if cached is not None:
            self.last_order = cached[1]
            return cached[0]
        self.last_order = math.nan
        if self._non_private:
            value = 1.0
        elif not self._counts:
            value = 0.0
        else:
            log_best, order, rho_min = self._optimise(True, target_epsilon)
            best = math.exp(log_best)
            tv = _tv_from_rho(rho_min)
            if tv < best:
                value = tv
            else:
                self.last_order = order
                value = min(best, 1.0)
        self._results[key] = (value, self.last_order)
        return value
