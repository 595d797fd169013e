"""How the RDP accountant adds each event's curve: family kernels, plans, parameter groups, grids.

The accountant does not evaluate every distinct event's curve on its own: it sorts events by
their (registered) curve into

- "linear" curves a + b alpha (Gaussian, GNMax, discrete Gaussian, zCDP): only the sums of
  count * a and count * b are kept;
- batched family kernels (:class:`_Kernel`): Laplace; the three-valued privacy losses of binary
  and k-ary randomized response (pure-DP events, bit RR, ``RandomizedResponseDpEvent`` under
  REPLACE_ONE, discrete Laplace with sensitivity 1); randomized response under REPLACE_SPECIAL;
  discrete Laplace with sensitivity >= 2; LNMax. Their per-event parameters are kept in arrays
  (:class:`_Group`) and evaluated for all events at once (one numpy expression per kernel, rows =
  events, see :mod:`.curves`);
- "generic" curves (any other registered curve), evaluated per distinct event (cached);
- "lazy" curves, expensive per order (the subsampled Gaussian): evaluated only at the orders
  the order search visits.

A plan is computed once per (event, relation) and cached; it validates the event exactly as its
curve does (same errors), so compose refuses the same events.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.accountants.base import NeighboringRelation, UnsupportedEventError
from dpkd_audit.accountants.rdp import registry as _registry
from dpkd_audit.accountants.rdp.curves import (
    _LAPLACE_DIRECT_MIN,
    _dlap_params,
    _dlap_rows,
    _laplace_matrix,
    _laplace_vector,
    _pure_matrix,
    _pure_params,
    _rr_one_params,
    _rr_special_at_inf,
    _rr_special_params,
    _rr_special_rows,
    _sym3_rows,
)
from dpkd_audit.accountants.rdp.registry import (
    _PROBE_ORDER,
    _bit_rr_curve,
    _declared_pure_curve,
    _discrete_gaussian_curve,
    _discrete_laplace_curve,
    _effective_noise_multiplier,
    _entry,
    _gaussian_curve,
    _gnmax_curve,
    _laplace_curve,
    _lnmax_curve,
    _poisson_curve,
    _rr_curve,
    _zcdp_curve,
    is_data_dependent,
    rdp_curve,
)
from dpkd_audit.accountants.rdp.subsampled import _QUAD_MAX_ORDER, SUBSAMPLED_NOISE_RANGE
from dpkd_audit.events import BitRandomizedResponseDpEvent, LaplaceNoisyMaxDpEvent

_PLAN_CACHE_SIZE = 1 << 16
_COARSE_RATIO = 1.6  # ratio of alpha - 1 between consecutive orders of the coarse scan


@dataclasses.dataclass(frozen=True, eq=False)
class _Kernel:
    """A family of curves evaluated for many parameter rows at many finite orders (columns).

    ``matrix(params, alpha)`` maps an (n, width) array of parameter rows and m finite orders to
    the (n, m) curves; ``vector(params, alpha)`` is the same at one order (fewer operations, same
    values); ``at_inf(params)`` gives D_inf per row. ``safe`` says that (alpha - 1) rho(alpha) is
    convex in alpha for every member (true for any exact Renyi divergence: van Erven-Harremoes
    2014, Theorem 11, and for a maximum of two), which the order search uses.
    """

    name: str
    width: int
    matrix: Callable[[np.ndarray, np.ndarray], np.ndarray]
    at_inf: Callable[[np.ndarray], np.ndarray]
    safe: bool
    vector: Callable[[np.ndarray, float, float], np.ndarray] | None = None
    #: One row at the grid's finite orders from cached per-grid constants, and one row at one
    #: order in scalar arithmetic (same values up to rounding), for kernels that have them.
    grid_row: Callable[[tuple[float, ...], _Grid], np.ndarray] | None = None
    scalar: Callable[[tuple[float, ...], float], float] | None = None
    #: sum_rows weight * curve at one finite order, for kernels with a cheaper form of it.
    weighted: Callable[[_Group, float], float] | None = None

    def total_at(self, group: _Group, alpha: float) -> float:
        """Sum over the group's rows of weight * curve at one finite order."""
        if self.weighted is not None:
            return self.weighted(group, alpha)
        p, w = group.arrays()
        return float(w @ self.at(p, alpha, group.min0))

    def at(self, params: np.ndarray, alpha: float, min0: float) -> np.ndarray:
        """The curves of every parameter row at one finite order (``min0``: min of column 0)."""
        if self.vector is not None:
            return self.vector(params, alpha, min0)
        return self.matrix(params, np.array([alpha]))[:, 0]


def _lnmax_matrix(b: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """LNMax (:func:`.registry._lnmax_curve`): min(RR(2/b), 2 Laplace(1/b)) per b (rows)."""
    with np.errstate(over="ignore"):  # a scale below 2/1.8e308: eps = inf, the curve inf
        return np.minimum(_pure_matrix(2.0 / b, alpha), 2.0 * _laplace_matrix(1.0 / b, alpha))


def _laplace_grid_row(param: tuple[float, ...], grid: _Grid) -> np.ndarray:
    """:func:`.curves._laplace_matrix` of one eps at the grid's finite orders.

    The direct form from the grid's cached constants -(2alpha-1), (alpha-1)/(2alpha-1) and
    1/(alpha-1); the cancellation-free form (small alpha eps) goes through _laplace_matrix.
    """
    eps = param[0]
    if eps * float(grid.a[0]) < _LAPLACE_DIRECT_MIN:  # grid.a is ascending
        return _laplace_matrix(np.array([eps]), grid.a)[0]
    consts = grid.cache.get("laplace")
    if consts is None:
        a = grid.a
        consts = grid.cache["laplace"] = (-(2.0 * a - 1.0), (a - 1.0) / (2.0 * a - 1.0),
                                          1.0 / (a - 1.0))
    neg_c, ratio, inv_t = consts
    with np.errstate(over="ignore"):  # -(2 alpha - 1) eps below -1.8e308: exp(-inf) = 0, exact
        out = np.expm1(neg_c * eps)
    out *= ratio
    np.log1p(out, out=out)
    out *= inv_t
    out += eps  # > 0: the direct form is used only where alpha eps >= 1e-3 (no clamp needed)
    return out


def _laplace_scalar(param: tuple[float, ...], alpha: float) -> float:
    """:func:`.curves._laplace_matrix` of one eps at one finite order (scalar arithmetic)."""
    eps = param[0]
    if alpha * eps < _LAPLACE_DIRECT_MIN:
        return float(_laplace_matrix(np.array([eps]), np.array([alpha]))[0, 0])
    t, c = alpha - 1.0, 2.0 * alpha - 1.0
    return max(eps + math.log1p(math.expm1(-c * eps) * (t / c)) / t, 0.0)


def _laplace_weighted(group: _Group, alpha: float) -> float:
    """sum_i w_i Laplace(eps_i) at one order: sum w eps + (1/t) sum w log1p(...) (direct form).

    The direct form of :func:`.curves._laplace_matrix` summed with the weights before the
    division by t (same relative accuracy: the cancellation of eps against the log term is the
    same, per row or summed); the cancellation-free form where alpha min(eps) < 1e-3.
    """
    p, w = group.arrays()
    eps = p[:, 0]
    if alpha * group.min0 < _LAPLACE_DIRECT_MIN:
        return float(w @ _laplace_vector(eps, alpha, group.min0))
    t, c = alpha - 1.0, 2.0 * alpha - 1.0
    logs = np.expm1((-c) * eps)
    logs *= t / c
    np.log1p(logs, out=logs)
    return group.wsum0 + float(w @ logs) / t


_LAPLACE_KERNEL = _Kernel("laplace", 1, lambda p, a: _laplace_matrix(p[:, 0], a),
                          lambda p: p[:, 0], True,
                          lambda p, a, m: _laplace_vector(p[:, 0], a, m),
                          _laplace_grid_row, _laplace_scalar, _laplace_weighted)
_SYM3_KERNEL = _Kernel("randomized response", 7, _sym3_rows, lambda p: p[:, 0], True)
_RR_SPECIAL_KERNEL = _Kernel("randomized response (REPLACE_SPECIAL)", 13, _rr_special_rows,
                             _rr_special_at_inf, True)
_DLAP_KERNEL = _Kernel("discrete Laplace", 5, _dlap_rows, lambda p: p[:, 2], True)
# A pointwise minimum of two curves need not keep (alpha - 1) rho convex.
def _lnmax_at_inf(p: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # 2 / b beyond the doubles: inf, the pure epsilon
        return 2.0 / p[:, 0]


_LNMAX_KERNEL = _Kernel("lnmax", 1, lambda p, a: _lnmax_matrix(p[:, 0], a), _lnmax_at_inf,
                        False)


@dataclasses.dataclass(eq=False, slots=True)
class _Plan:
    """How the accountant adds one occurrence of an event: see the module docstring.

    Plans are shared through a cache and never modified after creation (not frozen only because
    frozen dataclasses are slower to build, which an online compose pays for every new event).
    """

    kind: str  # "zero", "linear", "kernel", "generic" or "lazy"
    safe: bool = True
    data_dependent: bool = False
    a: float = 0.0  # linear: a + b alpha, D_inf = a if b == 0 else inf
    b: float = 0.0
    kernel: _Kernel | None = None
    param: tuple[float, ...] = ()
    weight: float = 1.0  # kernel: weight * kernel(param)


_ZERO_PLAN = _Plan("zero")
_INF_PLAN = _Plan("linear", b=math.inf)  # no finite RDP at any order


def _positive(name: str, value: Any) -> float:
    """``_validate.check_positive(name, value, allow_inf=True)``, short-cut for plain floats."""
    if type(value) is float and value > 0.0:  # nan fails the comparison
        return value
    return _validate.check_positive(name, value, allow_inf=True)


def _gaussian_plan(noise_multiplier: float) -> _Plan:
    """Gaussian plan: alpha / (2 s^2) (Mironov 2017, Prop 7), validated as gaussian_rdp does."""
    if noise_multiplier == 0:
        return _INF_PLAN
    s = _positive("noise_multiplier", noise_multiplier)
    if math.isinf(s):
        return _ZERO_PLAN
    return _Plan("linear", b=0.5 / s / s)  # no underflow of s * s for tiny s (inf instead)


def _pure_plan(epsilon: float, weight: float = 1.0) -> _Plan:
    """Binary randomized response with parameter eps (:func:`.curves.pure_dp_rdp`)."""
    eps = _positive("epsilon", epsilon)
    if math.isinf(eps):
        return _INF_PLAN
    if weight == 0:
        return _ZERO_PLAN
    return _Plan("kernel", kernel=_SYM3_KERNEL, param=_pure_params(eps), weight=float(weight))


def _laplace_plan(event: _dp.LaplaceDpEvent, relation: NeighboringRelation) -> _Plan:
    nm = event.noise_multiplier
    if nm == 0:
        return _INF_PLAN
    nm = _positive("noise_multiplier", nm)
    if math.isinf(nm):
        return _ZERO_PLAN
    eps = _positive("epsilon", 1.0 / nm)
    if math.isinf(eps):
        return _INF_PLAN
    return _Plan("kernel", kernel=_LAPLACE_KERNEL, param=(eps,))


def _rr_plan(event: _dp.RandomizedResponseDpEvent, relation: NeighboringRelation) -> _Plan:
    """k-ary randomized response, validated in the order of randomized_response_rdp."""
    p = event.noise_parameter
    if not (type(p) is float and 0.0 <= p <= 1.0):
        p = _validate.check_probability("noise_parameter", p)
    k = event.num_buckets
    if not (type(k) is int and k >= 1):
        k = _validate.check_int("num_buckets", k, minimum=1)
    if k == 1 or p == 1.0:
        return _ZERO_PLAN
    if p == 0.0:
        return _INF_PLAN
    if relation is NeighboringRelation.REPLACE_SPECIAL:
        return _Plan("kernel", kernel=_RR_SPECIAL_KERNEL, param=_rr_special_params(p, k))
    if relation is not NeighboringRelation.REPLACE_ONE:
        _rr_curve(event, _PROBE_ORDER, relation)  # raises the curve's own error
    eps = math.log1p(k * (1.0 - p) / p)
    if math.isinf(eps):
        return _INF_PLAN
    if k == 2:
        return _pure_plan(eps)
    return _Plan("kernel", kernel=_SYM3_KERNEL, param=_rr_one_params(p, k))


def _discrete_laplace_plan(event: _dp.DiscreteLaplaceDpEvent,
                           relation: NeighboringRelation) -> _Plan:
    """Discrete Laplace, validated in the order of discrete_laplace_rdp."""
    a = _positive("noise_parameter", event.noise_parameter)
    delta = event.sensitivity
    if not (type(delta) is int and delta >= 1):
        delta = _validate.check_int("sensitivity", delta, minimum=1)
    if math.isinf(a):
        return _ZERO_PLAN
    if delta == 1:
        return _pure_plan(a)
    if math.isinf(a * delta):
        return _INF_PLAN
    return _Plan("kernel", kernel=_DLAP_KERNEL, param=_dlap_params(a, delta))


def _declared_pure_plan(event: _dp.DpEvent, relation: NeighboringRelation) -> _Plan:
    eps, delta = event.guarantee()  # type: ignore[attr-defined]
    if delta > 0:
        _declared_pure_curve(event, _PROBE_ORDER, relation)  # raises the curve's own error
    return _pure_plan(eps)


def _bit_rr_plan(event: BitRandomizedResponseDpEvent, relation: NeighboringRelation) -> _Plan:
    return _pure_plan(event.epsilon_per_bit, event.bits_changed)


def _lnmax_plan(event: LaplaceNoisyMaxDpEvent, relation: NeighboringRelation) -> _Plan:
    b = float(event.noise_scale)
    _validate.check_positive("epsilon", 2.0 / b, allow_inf=True)
    eps = _validate.check_positive("epsilon", 1.0 / b, allow_inf=True)
    if math.isinf(eps):
        return _INF_PLAN
    return _Plan("kernel", safe=False, kernel=_LNMAX_KERNEL, param=(b,))


def _zcdp_plan(event: _dp.ZCDpEvent, relation: NeighboringRelation) -> _Plan:
    _zcdp_curve(event, _PROBE_ORDER, relation)  # validates rho and xi with the curve's error
    return _Plan("linear", a=float(event.xi), b=float(event.rho))


def _poisson_plan(event: _dp.PoissonSampledDpEvent, relation: NeighboringRelation) -> _Plan:
    if relation not in (NeighboringRelation.ADD_OR_REMOVE_ONE,
                        NeighboringRelation.REPLACE_SPECIAL):
        _poisson_curve(event, _PROBE_ORDER, relation)  # raises the curve's own error
    q = _validate.check_probability("sampling_probability", event.sampling_probability)
    s = _effective_noise_multiplier(event.event)
    if s != 0:
        s = _validate.check_positive("noise_multiplier", s, allow_inf=True)
    if q == 0.0 or math.isinf(s):
        return _ZERO_PLAN
    if s == 0.0:
        return _INF_PLAN
    if q == 1.0 or not SUBSAMPLED_NOISE_RANGE[0] <= s <= SUBSAMPLED_NOISE_RANGE[1]:
        return _gaussian_plan(s)  # dominating outside the computed range (subsampled)
    return _Plan("lazy")


_PLAN_MAKERS: dict[Callable[..., np.ndarray], Callable[[Any, NeighboringRelation], _Plan]] = {
    _gaussian_curve: lambda e, r: _gaussian_plan(e.noise_multiplier),
    _gnmax_curve: lambda e, r: _gaussian_plan(e.sigma / math.sqrt(2.0)),
    _discrete_gaussian_curve: lambda e, r: _gaussian_plan(e.sigma / e.sensitivity),
    _zcdp_curve: _zcdp_plan,
    _laplace_curve: _laplace_plan,
    _rr_curve: _rr_plan,
    _discrete_laplace_curve: _discrete_laplace_plan,
    _declared_pure_curve: _declared_pure_plan,
    _bit_rr_curve: _bit_rr_plan,
    _lnmax_curve: _lnmax_plan,
    _poisson_curve: _poisson_plan,
}

#: Built-in curves whose (alpha - 1) rho(alpha) is convex (exact Renyi divergences, a maximum of
#: two, or a zCDP line): see :meth:`.rdp.RDPAccountant._optimise`.
_CONVEX_CURVES = frozenset([_gaussian_curve, _laplace_curve, _discrete_laplace_curve, _rr_curve,
                            _zcdp_curve, _poisson_curve, _declared_pure_curve, _bit_rr_curve,
                            _gnmax_curve, _discrete_gaussian_curve])


def _make_plan(event: _dp.DpEvent, relation: NeighboringRelation) -> _Plan:
    entry = _entry(event)
    if entry is None:
        raise UnsupportedEventError(
            f"no RDP curve is known for {type(event).__name__} (register one with "
            "dpkd_audit.accountants.rdp.register_rdp_curve)")
    maker = _PLAN_MAKERS.get(entry.fn)  # type: ignore[arg-type]
    if maker is None:
        rdp_curve(event, _PROBE_ORDER, relation)  # validates (raises the curve's error)
        plan = _Plan("generic", safe=entry.fn in _CONVEX_CURVES)
    else:
        plan = maker(event, relation)
    if is_data_dependent(event):
        plan = dataclasses.replace(plan, data_dependent=True)
    return plan


def _plan(event: _dp.DpEvent, relation: NeighboringRelation) -> _Plan:
    """The (cached) plan of a hashable leaf event; raises the curve's error if it is refused."""
    key = (event, relation)
    plans = _registry._PLANS
    plan = plans.get(key)
    if plan is None:
        plan = _make_plan(event, relation)
        if len(plans) >= _PLAN_CACHE_SIZE:
            plans.clear()
        plans[key] = plan
    return plan


class _Group:
    """The events of one kernel: a parameter row and a total weight (count x weight) per row.

    Rows live in growable arrays (capacity doubled when full), so adding an event costs O(1)
    amortised and :meth:`arrays` returns views without copying.
    """

    __slots__ = ("index", "min0", "n", "params", "weights", "wsum0")

    def __init__(self, width: int) -> None:
        self.index: dict[tuple[float, ...], int] = {}
        self.params = np.empty((8, width))
        self.weights = np.empty(8)
        self.n = 0
        self.min0 = math.inf  # smallest first parameter (the Laplace kernel's branch test)
        self.wsum0 = 0.0  # sum of weight * first parameter

    def add(self, param: tuple[float, ...], weight: float) -> None:
        self.wsum0 += weight * param[0]
        i = self.index.get(param)
        if i is not None:
            self.weights[i] += weight
            return
        self.min0 = min(self.min0, param[0])
        n = self.n
        if n == self.weights.size:
            self.params = np.concatenate([self.params, np.empty_like(self.params)])
            self.weights = np.concatenate([self.weights, np.empty_like(self.weights)])
        self.params[n] = param
        self.weights[n] = weight
        self.index[param] = n
        self.n = n + 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Views of the parameter rows and weights in use (valid until the next :meth:`add`)."""
        return self.params[:self.n], self.weights[:self.n]

    def copy(self) -> _Group:
        new = _Group.__new__(_Group)
        new.index = dict(self.index)
        new.params = self.params.copy()
        new.weights = self.weights.copy()
        new.n = self.n
        new.min0 = self.min0
        new.wsum0 = self.wsum0
        return new


class _Grid:
    """An order grid and the constants of the conversions at its finite orders (read-only)."""

    def __init__(self, orders: np.ndarray) -> None:
        self.orders = orders
        self.key = orders.tobytes()
        self.nf = int(np.count_nonzero(np.isfinite(orders)))  # sorted: finite orders first
        self.has_inf = self.nf < orders.size
        a = orders[:self.nf]
        self.a = a
        self.t = a - 1.0
        self.s = np.log(self.t)  # the order search works in s = log(alpha - 1)
        self.c1 = np.log1p(-1.0 / a)
        self.c2 = np.log(a)
        self.inv_t = 1.0 / self.t
        self._offsets: dict[float, np.ndarray] = {}
        self.cache: dict[str, Any] = {}  # per-kernel constants at the finite orders
        # Coarse scan: ascending orders at least _COARSE_RATIO apart in alpha - 1, from the
        # smallest to the largest finite order.
        coarse: list[int] = []
        step = math.log(_COARSE_RATIO)
        for i in range(self.nf):
            if not coarse or self.s[i] >= self.s[coarse[-1]] + step or i == self.nf - 1:
                coarse.append(i)
        self.coarse = np.array(coarse, dtype=np.int64)
        self.quad_coarse = max(1, int(np.count_nonzero(a[self.coarse] < _QUAD_MAX_ORDER)))

    def eps_offset(self, log_delta: float) -> np.ndarray:
        """c1 - (log delta + c2) / t at every finite order: epsilon = rho + this (cached)."""
        off = self._offsets.get(log_delta)
        if off is None:
            if len(self._offsets) >= 32:
                self._offsets.clear()
            off = self._offsets[log_delta] = self.c1 - (log_delta + self.c2) * self.inv_t
        return off

    def __deepcopy__(self, memo: dict) -> _Grid:
        return self


_GRIDS: dict[bytes, _Grid] = {}


def _grid_for(orders: np.ndarray) -> _Grid:
    key = orders.tobytes()
    grid = _GRIDS.get(key)
    if grid is None:
        if len(_GRIDS) >= 64:
            _GRIDS.clear()
        grid = _GRIDS[key] = _Grid(orders)
    return grid
