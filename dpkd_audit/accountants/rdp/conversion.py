"""From an RDP curve to (epsilon, delta): the improved conversion and the total-variation bound.

For every order alpha > 1, the conversion of Balle, Barthe, Gaboardi, Hsu, Sato, "Hypothesis
testing interpretations and Renyi differential privacy", AISTATS 2020, Theorem 21 (=
Canonne-Kamath-Steinke 2020, Proposition 12), never above the classic Mironov 2017 Proposition 3;
at alpha = inf the pure-DP bound D_inf. Plus an order-free bound through the total variation
distance (the Bretagnolle-Huber inequality), which dp_accounting also uses; see
:func:`_tv_bound` for why it can certify epsilon = 0 (or a delta of 0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpkd_audit import _validate
from dpkd_audit.accountants.rdp.curves import _as_orders

__all__ = ["delta_from_rdp", "epsilon_from_rdp"]


def _log_delta_at(orders: np.ndarray, rdp: np.ndarray, epsilon: float) -> np.ndarray:
    """Log delta(epsilon) certified at each order (inf orders: 0 if D_inf <= eps else -inf/0).

    Improved: delta = e^{(alpha-1)(rho-eps)} (1-1/alpha)^{alpha-1} / alpha (Canonne-Kamath-Steinke
    2020, Proposition 12; Balle et al. 2020, Theorem 21); classic: e^{(alpha-1)(rho-eps)}
    (Mironov 2017, Proposition 3); the smaller one is used (the improved one always is).
    """
    out = np.full(orders.shape, 0.0)
    inf = np.isinf(orders)
    with np.errstate(invalid="ignore", over="ignore"):
        a = orders[~inf]
        r = rdp[~inf]
        t = a - 1.0
        classic = t * (r - epsilon)
        improved = classic + t * np.log1p(-1.0 / a) - np.log(a)
        vals = np.minimum(classic, improved)
        out[~inf] = np.where(np.isnan(vals) | np.isinf(r), np.inf, vals)
    out[inf] = np.where(rdp[inf] <= epsilon, -np.inf, 0.0)
    return np.minimum(out, 0.0)


def _eps_at(orders: np.ndarray, rdp: np.ndarray, delta: float) -> np.ndarray:
    """epsilon(delta) certified at each order; the inverse of :func:`_log_delta_at`.

    eps = rho + log((alpha-1)/alpha) - (log delta + log alpha)/(alpha-1) (Balle et al. 2020,
    Theorem 21; CKS 2020, Proposition 12), never above Mironov 2017 Proposition 3's
    rho + log(1/delta)/(alpha-1). At alpha = inf the bound is D_inf (pure DP, any delta).
    """
    out = np.empty(orders.shape, dtype=np.float64)
    inf = np.isinf(orders)
    out[inf] = rdp[inf]
    log_delta = math.log(delta) if delta > 0 else -math.inf
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        a = orders[~inf]
        r = rdp[~inf]
        t = a - 1.0
        classic = r - log_delta / t
        improved = r + np.log1p(-1.0 / a) - (log_delta + np.log(a)) / t
        vals = np.minimum(classic, improved)
        out[~inf] = np.where(np.isnan(vals), np.inf, vals)
    return out


def _tv_from_rho(rho: float) -> float:
    """sqrt(1 - e^{-rho}): bounds TV, hence delta(eps) for eps >= 0 (see :func:`_tv_bound`)."""
    return math.sqrt(-math.expm1(-rho)) if math.isfinite(rho) else 1.0


def _tv_bound(orders: np.ndarray, rdp: np.ndarray) -> float:
    """sqrt(1 - e^{-rho}) at the smallest finite rho: bounds TV, hence delta(eps) for eps >= 0.

    Bretagnolle-Huber (Bretagnolle and Huber 1979, in the form of Canonne, "A short note on an
    inequality between KL and TV", arXiv:2202.07198): TV(P,Q) <= sqrt(1 - exp(-KL(P||Q))), and
    KL <= D_alpha for alpha > 1 (van Erven-Harremoes 2014, Theorem 3), so every neighbouring pair
    has TV <= sqrt(1 - e^{-rho(alpha)}) at every order.

    Why this can certify epsilon = 0, or return delta = 0: the hockey-stick divergence
    delta(eps) = sup_S P(S) - e^eps Q(S) is non-increasing in eps and at eps = 0 equals TV(P,Q).
    So once the target delta is at least this bound, the mechanism is (0, delta)-DP: epsilon = 0
    is a valid (and, since epsilon >= 0, the tightest) answer, even though every order-by-order
    conversion still gives a positive epsilon. This happens for very noisy histories (the total
    RDP is tiny, so sqrt(1 - e^{-rho}) is below delta) and is not a loss of rigour. Likewise
    get_delta returns this bound when it is below every order's delta; it is 0 only when the
    total RDP is 0 at some order (nothing private composed, e.g. infinite noise), where the two
    output distributions coincide.
    """
    finite = rdp[np.isfinite(orders)]
    if finite.size == 0:
        return 1.0
    rho = float(np.min(finite))
    return math.sqrt(-math.expm1(-rho)) if math.isfinite(rho) else 1.0


def epsilon_from_rdp(orders: Any, rdp: Any, delta: float) -> tuple[float, float]:
    """Smallest epsilon at ``delta`` certified by an RDP curve on a grid, and its order.

    Args:
        orders: Orders > 1 (inf allowed).
        rdp: RDP values at ``orders`` (>= 0, inf allowed).
        delta: Target delta in [0, 1].

    Returns:
        (epsilon, order); epsilon = 0 when the Bretagnolle-Huber bound already gives delta, and
        the order is then nan: delta >= sqrt(1 - e^{-rho}) >= TV = delta(0) means the curve is
        (0, delta)-DP (see :func:`_tv_bound`). The PATE analysis (:mod:`.pate`) converts through
        this function and can report 0 for the same reason.
    """
    orders = _as_orders(orders)
    rdp = _as_rdp(rdp, orders)
    delta = _validate.check_probability("delta", delta)
    if delta >= 1.0:
        return 0.0, math.nan
    if delta > 0 and delta >= _tv_bound(orders, rdp):
        return 0.0, math.nan
    if delta == 0:
        eps = np.where(np.isinf(orders), rdp, np.inf)
    else:
        eps = _eps_at(orders, rdp, delta)
    i = int(np.argmin(eps))
    return max(0.0, float(eps[i])), float(orders[i])


def delta_from_rdp(orders: Any, rdp: Any, epsilon: float) -> tuple[float, float]:
    """Smallest delta at ``epsilon`` certified by an RDP curve on a grid, and its order.

    Returns:
        (delta, order); the order is nan when the Bretagnolle-Huber bound sqrt(1 - e^{-rho}) >=
        TV >= delta(epsilon) is the best one (it is 0 when some order has rho = 0: the output
        distributions then coincide; see :func:`_tv_bound`).
    """
    orders = _as_orders(orders)
    rdp = _as_rdp(rdp, orders)
    epsilon = _check_target_epsilon(epsilon)
    log_d = _log_delta_at(orders, rdp, epsilon)
    i = int(np.argmin(log_d))
    best, order = float(math.exp(log_d[i])), float(orders[i])
    tv = _tv_bound(orders, rdp)
    if tv < best:
        return tv, math.nan
    return min(best, 1.0), order


def _as_rdp(rdp: Any, orders: np.ndarray) -> np.ndarray:
    arr = np.asarray(rdp, dtype=np.float64).reshape(-1)
    if arr.shape != orders.shape or np.isnan(arr).any() or (arr < 0).any():
        raise ValueError(f"rdp must hold one value >= 0 (inf allowed) per order ({orders.size}); "
                         f"got {rdp!r}")
    return arr


def _check_target_epsilon(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not math.isfinite(float(value)) or float(value) < 0:
        raise ValueError(f"target_epsilon must be a finite real number >= 0; got {value!r}")
    return float(value)

