"""Which RDP curve each event has: the per-event curves and the registry behind ``rdp_curve``.

The curve of an event is looked up along ``type(event).__mro__`` among the registered event
types (:func:`register_rdp_curve` is the hook other modules, e.g. the PATE data-dependent
analysis, use). The built-in registrations are at the end of this module; events without a curve
are refused with an ``UnsupportedEventError`` that names them and says why.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.accountants.base import NeighboringRelation, UnsupportedEventError
from dpkd_audit.accountants.rdp.curves import (
    _as_orders,
    _with_limit,
    discrete_laplace_rdp,
    gaussian_rdp,
    laplace_rdp,
    pure_dp_rdp,
    randomized_response_rdp,
)
from dpkd_audit.accountants.rdp.subsampled import subsampled_gaussian_rdp
from dpkd_audit.events import (
    ApproxDpEvent,
    BitRandomizedResponseDpEvent,
    CollisionDpEvent,
    DeclaredGuarantee,
    DiscreteGaussianDpEvent,
    DiscreteGaussianVectorDpEvent,
    GaussianNoisyMaxDpEvent,
    LaplaceNoisyMaxDpEvent,
    PureDpEvent,
    SelectiveRandomizedResponseDpEvent,
    ShuffledHistogramDpEvent,
    ShuffledLocalDpEvent,
)

__all__ = [
    "RdpCurveFn",
    "is_data_dependent",
    "rdp_curve",
    "register_rdp_curve",
    "unregister_rdp_curve",
]

#: Signature of an RDP curve: ``fn(event, orders, neighboring_relation) -> rho(orders)``. Raise
#: ``ValueError`` (or ``UnsupportedEventError``) with the reason when the event is not supported.
RdpCurveFn = Callable[[_dp.DpEvent, np.ndarray, NeighboringRelation], np.ndarray]

_PROBE_ORDER = np.array([2.0])
_CACHE_SIZE = 4096

# --------------------------------------------------------------------------- event curves

def _gaussian_curve(event: _dp.GaussianDpEvent, orders: np.ndarray,
                    relation: NeighboringRelation) -> np.ndarray:
    return gaussian_rdp(event.noise_multiplier, orders)


def _laplace_curve(event: _dp.LaplaceDpEvent, orders: np.ndarray,
                   relation: NeighboringRelation) -> np.ndarray:
    nm = event.noise_multiplier
    if nm == 0:
        return np.full(orders.shape, np.inf)
    nm = _validate.check_positive("noise_multiplier", nm, allow_inf=True)
    return laplace_rdp(1.0 / nm, orders) if math.isfinite(nm) else np.zeros(orders.shape)


def _discrete_laplace_curve(event: _dp.DiscreteLaplaceDpEvent, orders: np.ndarray,
                            relation: NeighboringRelation) -> np.ndarray:
    return discrete_laplace_rdp(event.noise_parameter, event.sensitivity, orders)


def _rr_curve(event: _dp.RandomizedResponseDpEvent, orders: np.ndarray,
              relation: NeighboringRelation) -> np.ndarray:
    return randomized_response_rdp(event.noise_parameter, event.num_buckets, orders, relation)


def _declared_pure_curve(event: _dp.DpEvent, orders: np.ndarray,
                         relation: NeighboringRelation) -> np.ndarray:
    """Pure events with no more structure: the worst eps-DP curve (:func:`pure_dp_rdp`)."""
    eps, delta = event.guarantee()  # type: ignore[attr-defined]
    if delta > 0:
        raise UnsupportedEventError(
            f"it declares only ({eps}, {delta})-DP with delta > 0, which implies no finite RDP "
            "curve; use PLDAccountant or PureAccountant for it")
    return pure_dp_rdp(eps, orders)


def _bit_rr_curve(event: BitRandomizedResponseDpEvent, orders: np.ndarray,
                  relation: NeighboringRelation) -> np.ndarray:
    """bits_changed independent binary RRs with eps_per_bit: RDP adds (Mironov 2017, Prop 1)."""
    return event.bits_changed * pure_dp_rdp(event.epsilon_per_bit, orders)


def _lnmax_curve(event: LaplaceNoisyMaxDpEvent, orders: np.ndarray,
                 relation: NeighboringRelation) -> np.ndarray:
    """PATE LNMax, data-independent: min(RR(2/b), 2 Laplace(1/b)) at every order.

    The argmax is a post-processing (Mironov 2017, Prop 2) of the vote histogram plus independent
    Laplace(b) noise per class; changing one teacher moves two counts by one, so the noisy
    histogram's RDP is the sum of two Laplace curves with eps = 1/b (Prop 6 and Prop 1). The
    (2/b)-DP of the argmax (Papernot et al. 2017, Sec. 3) gives the RR curve; both are valid, so
    their pointwise minimum is.
    """
    b = event.noise_scale
    return np.minimum(pure_dp_rdp(2.0 / b, orders), 2.0 * laplace_rdp(1.0 / b, orders))


def _gnmax_curve(event: GaussianNoisyMaxDpEvent, orders: np.ndarray,
                 relation: NeighboringRelation) -> np.ndarray:
    """PATE GNMax, data-independent: alpha / sigma^2 (Papernot et al. 2018, Proposition 8).

    The vote histogram moves by L2 norm sqrt(2), so this is the Gaussian curve alpha * 2 /
    (2 sigma^2); the argmax is a post-processing.
    """
    return gaussian_rdp(event.sigma / math.sqrt(2.0), orders)


def _discrete_gaussian_curve(event: DiscreteGaussianDpEvent, orders: np.ndarray,
                             relation: NeighboringRelation) -> np.ndarray:
    """Discrete Gaussian: (Delta^2 / (2 sigma^2))-zCDP, i.e. alpha Delta^2 / (2 sigma^2).

    Canonne, Kamath, Steinke, "The discrete Gaussian for differential privacy", NeurIPS 2020
    (arXiv:2004.00010), Section 2.1: N_Z(0, sigma^2) noise on an integer query of sensitivity
    Delta is (Delta^2 / (2 sigma^2))-concentrated DP (the multivariate statement for L2
    sensitivity Delta is the one cited by ``events.DiscreteGaussianDpEvent``). Also the curve of
    ``DiscreteGaussianVectorDpEvent``, whose Delta is the real L2 norm of the shift vector (CKS
    2020, Thm 14: the independent coordinates' Renyi divergences add). The exact scalar curve is a
    little smaller; the tests check the bound against it.
    """
    return gaussian_rdp(event.sigma / event.sensitivity, orders)


def _zcdp_curve(event: _dp.ZCDpEvent, orders: np.ndarray,
                relation: NeighboringRelation) -> np.ndarray:
    """(xi, rho)-zCDP: xi + rho alpha (Bun-Steinke 2016, Definition 1.1)."""
    rho = float(event.rho)
    xi = float(event.xi)
    if not (math.isfinite(rho) and rho >= 0 and math.isfinite(xi) and xi >= 0):
        raise ValueError(f"rho and xi must be finite reals >= 0; got rho={event.rho!r}, "
                         f"xi={event.xi!r}")
    return _with_limit(orders, lambda a: xi + rho * a, xi if rho == 0 else np.inf)


def _poisson_curve(event: _dp.PoissonSampledDpEvent, orders: np.ndarray,
                   relation: NeighboringRelation) -> np.ndarray:
    if relation not in (NeighboringRelation.ADD_OR_REMOVE_ONE,
                        NeighboringRelation.REPLACE_SPECIAL):
        raise UnsupportedEventError(
            "the subsampled-Gaussian RDP of Mironov-Talwar-Zhang 2019 compares the mixture "
            "(1-q)N(0,s^2) + qN(1,s^2) with N(0,s^2), i.e. a record present or absent, so it "
            "needs neighboring_relation=ADD_OR_REMOVE_ONE (or REPLACE_SPECIAL); under "
            f"{relation.name} the pair is a mixture against a mixture (the replaced record's "
            "two values), which that analysis does not cover")
    return subsampled_gaussian_rdp(event.sampling_probability,
                                   _effective_noise_multiplier(event.event), orders)


def _effective_noise_multiplier(event: _dp.DpEvent) -> float:
    """Noise multiplier of one Gaussian equivalent to Gaussians composed on the same sample.

    Releasing Gaussians with multipliers s_i on the same (sampled) data is one Gaussian mechanism
    with multiplier (sum_i s_i^-2)^(-1/2) (the joint release is N(f(x), diag(s_i^2)); rescaling
    coordinate i by 1/s_i gives L2 sensitivity sqrt(sum_i s_i^-2) under unit noise).
    """
    if isinstance(event, _dp.GaussianDpEvent):
        s = event.noise_multiplier
        if s == 0:
            return 0.0
        return _validate.check_positive("noise_multiplier", s, allow_inf=True)
    if isinstance(event, _dp.SelfComposedDpEvent):
        count = _validate.check_int("SelfComposedDpEvent.count", event.count, minimum=0)
        if count == 0:
            return math.inf
        return _effective_noise_multiplier(event.event) / math.sqrt(count)
    if isinstance(event, _dp.ComposedDpEvent):
        precision = 0.0
        for sub in event.events:
            s = _effective_noise_multiplier(sub)
            precision += math.inf if s == 0 else 1.0 / (s * s)
        return 0.0 if math.isinf(precision) else (
            math.inf if precision == 0 else 1.0 / math.sqrt(precision))
    raise UnsupportedEventError(
        "only Poisson subsampling of a GaussianDpEvent (or of Gaussians composed with "
        f"Self/ComposedDpEvent) is supported; got {type(event).__name__}")


def _refuse(why: str) -> RdpCurveFn:
    def curve(event: _dp.DpEvent, orders: np.ndarray,
              relation: NeighboringRelation) -> np.ndarray:
        raise UnsupportedEventError(why)

    return curve


# --------------------------------------------------------------------------- registry

@dataclasses.dataclass(frozen=True)
class _Entry:
    fn: RdpCurveFn
    data_dependent: bool | Callable[[_dp.DpEvent], bool]


_REGISTRY: dict[type, _Entry] = {}
#: Bumped by every (un)registration: accountants rebuild their running totals when it changes.
_REGISTRY_VERSION = 0
#: (event, relation) -> plan: how an accountant adds the event's curve (filled and used by
#: :mod:`.plans`; cleared here whenever the registry changes).
_PLANS: dict[tuple[_dp.DpEvent, NeighboringRelation], Any] = {}
#: (event, relation, grid key) -> curve on that grid, nan where not evaluated yet (expensive
#: curves are evaluated lazily, order by order, during the order search; LRU-bounded).
_LAZY_MEMO: collections.OrderedDict[tuple[Any, ...], np.ndarray] = collections.OrderedDict()
#: (event, relation, order) -> curve value at an order off the grid (expensive curves only,
#: LRU-bounded): the order search's refinement reuses them across queries.
_LAZY_OFFGRID: collections.OrderedDict[tuple[Any, ...], float] = collections.OrderedDict()


def _registry_changed() -> None:
    global _REGISTRY_VERSION
    _REGISTRY_VERSION += 1
    _cached_curve.cache_clear()
    _ENTRIES.clear()
    _PLANS.clear()
    _LAZY_MEMO.clear()
    _LAZY_OFFGRID.clear()


def register_rdp_curve(event_type: type, fn: RdpCurveFn, *,
                       data_dependent: bool | Callable[[_dp.DpEvent], bool] = False,
                       replace: bool = False) -> None:
    """Register the RDP curve of an event type (the hook for data-dependent analyses).

    The curve of an event is looked up along ``type(event).__mro__``, so a registration for a
    base class covers its subclasses unless they have their own.

    Args:
        event_type: The ``DpEvent`` subclass (or mixin) the curve applies to.
        fn: ``fn(event, orders, neighboring_relation) -> np.ndarray`` of RDP values, one per
            order (orders are finite reals > 1 or inf). Raise ``ValueError`` with the reason for
            events it cannot handle; they are then refused by the accountant, which names them.
        data_dependent: Whether epsilons computed with this curve depend on the data (then they
            are reported as ``BoundKind.DATA_DEPENDENT``); a bool or a predicate on the event.
        replace: Allow replacing an existing registration.

    Raises:
        ValueError: If ``event_type`` is not a class, ``fn`` is not callable, or a curve is
            already registered for ``event_type`` and ``replace`` is False.
    """
    if not isinstance(event_type, type):
        raise ValueError(f"event_type must be a class; got {event_type!r}")
    if not callable(fn):
        raise ValueError(f"fn must be callable; got {fn!r}")
    if not (isinstance(data_dependent, bool) or callable(data_dependent)):
        raise ValueError(f"data_dependent must be a bool or a predicate; got {data_dependent!r}")
    if event_type in _REGISTRY and not replace:
        raise ValueError(f"an RDP curve is already registered for {event_type.__name__}; pass "
                         "replace=True to replace it")
    _REGISTRY[event_type] = _Entry(fn, data_dependent)
    _registry_changed()


def unregister_rdp_curve(event_type: type) -> None:
    """Remove the curve registered for exactly ``event_type`` (no-op if there is none)."""
    _REGISTRY.pop(event_type, None)
    _registry_changed()


#: type(event) -> its registration (None if none): the __mro__ lookup, cached.
_ENTRIES: dict[type, _Entry | None] = {}


def _entry(event: _dp.DpEvent) -> _Entry | None:
    cls = type(event)
    try:
        return _ENTRIES[cls]
    except KeyError:
        pass
    found = None
    for base in cls.__mro__:
        found = _REGISTRY.get(base)
        if found is not None:
            break
    _ENTRIES[cls] = found
    return found


def is_data_dependent(event: _dp.DpEvent) -> bool:
    """Whether the registered curve of ``event`` depends on the data (False if none)."""
    entry = _entry(event)
    if entry is None:
        return False
    dd = entry.data_dependent
    return bool(dd(event)) if callable(dd) else dd


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _cached_curve(event: _dp.DpEvent, relation: NeighboringRelation,
                  key: bytes) -> np.ndarray:
    orders = np.frombuffer(key, dtype=np.float64)
    return _evaluate(event, orders, relation)


def _evaluate(event: _dp.DpEvent, orders: np.ndarray,
              relation: NeighboringRelation) -> np.ndarray:
    entry = _entry(event)
    if entry is None:
        raise UnsupportedEventError(
            f"no RDP curve is known for {type(event).__name__} (register one with "
            "dpkd_audit.accountants.rdp.register_rdp_curve)")
    values = np.asarray(entry.fn(event, orders, relation), dtype=np.float64)
    if values.shape != orders.shape:
        raise ValueError(f"the RDP curve of {type(event).__name__} returned shape "
                         f"{values.shape} for {orders.shape} orders")
    values = np.where(np.isnan(values), np.inf, values)  # a failed order is simply not used
    values.setflags(write=False)
    return values


def rdp_curve(event: _dp.DpEvent, orders: Any,
              neighboring_relation: NeighboringRelation =
              NeighboringRelation.REPLACE_ONE) -> np.ndarray:
    """RDP of one occurrence of a leaf ``event`` at each order (cached per event and orders).

    Args:
        event: A leaf DpEvent with a registered curve (see the module table).
        orders: Orders alpha > 1 (a real number or a 1-D sequence; inf allowed).
        neighboring_relation: The neighbouring relation (matters for subsampling and RR).

    Returns:
        A read-only float64 array of RDP values (inf where the event has no finite RDP).

    Raises:
        UnsupportedEventError: If no curve is known for the event, or its curve refuses it.
        ValueError: If ``orders`` or the event's parameters are invalid.
    """
    arr = _as_orders(orders)
    if not isinstance(neighboring_relation, NeighboringRelation):
        raise ValueError("neighboring_relation must be a dp_accounting NeighboringRelation; "
                         f"got {neighboring_relation!r}")
    try:
        hash(event)
    except TypeError:
        return _evaluate(event, arr, neighboring_relation)
    return _cached_curve(event, neighboring_relation, arr.tobytes())


register_rdp_curve(_dp.GaussianDpEvent, _gaussian_curve)
register_rdp_curve(_dp.LaplaceDpEvent, _laplace_curve)
register_rdp_curve(_dp.DiscreteLaplaceDpEvent, _discrete_laplace_curve)
register_rdp_curve(_dp.RandomizedResponseDpEvent, _rr_curve)
register_rdp_curve(_dp.ZCDpEvent, _zcdp_curve)
register_rdp_curve(_dp.PoissonSampledDpEvent, _poisson_curve)
register_rdp_curve(DeclaredGuarantee, _declared_pure_curve)
for _pure_type in (PureDpEvent, ApproxDpEvent, CollisionDpEvent,
                   SelectiveRandomizedResponseDpEvent, ShuffledLocalDpEvent):
    register_rdp_curve(_pure_type, _declared_pure_curve)
register_rdp_curve(BitRandomizedResponseDpEvent, _bit_rr_curve)
register_rdp_curve(LaplaceNoisyMaxDpEvent, _lnmax_curve)
register_rdp_curve(GaussianNoisyMaxDpEvent, _gnmax_curve)
register_rdp_curve(DiscreteGaussianDpEvent, _discrete_gaussian_curve)
register_rdp_curve(DiscreteGaussianVectorDpEvent, _discrete_gaussian_curve)
register_rdp_curve(ShuffledHistogramDpEvent, _refuse(
    "the multi-message shuffled histogram is only known to be (epsilon, delta)-DP with "
    "delta > 0, which implies no finite RDP curve"))

register_rdp_curve(_dp.SampledWithoutReplacementDpEvent, _refuse(
    "SampledWithoutReplacementDpEvent is not supported: the RDP of sampling without replacement "
    "(Wang-Balle-Kasiviswanathan 2019, Theorem 9, which dp_accounting's RdpAccountant uses for a "
    "Gaussian under REPLACE_SPECIAL) is an upper bound at integer orders with no independent "
    "reference in this package to verify an implementation against, so none is provided; use "
    "PoissonSampledDpEvent (ADD_OR_REMOVE_ONE) or dp_accounting's RdpAccountant"))
register_rdp_curve(_dp.MixtureOfGaussiansDpEvent, _refuse(
    "MixtureOfGaussiansDpEvent is not supported: its pair (a mixture of Gaussians with different "
    "sensitivities against a centred Gaussian) has no closed-form Renyi divergence, and no "
    "verified numerical curve is implemented here; use a PLD accountant for it (dp_accounting's "
    "PLDAccountant supports it)"))
