"""Renyi differential privacy (RDP) accounting with exact per-event curves and a fine order search.

Mironov, "Renyi differential privacy", CSF 2017 (arXiv:1702.07476): a mechanism is
(alpha, rho)-RDP if the Renyi divergence of order alpha between its output distributions on any two
neighbouring inputs is at most rho (Definition 4); RDP curves add up under adaptive composition
(Proposition 1) and survive post-processing (Proposition 2). The accountant therefore keeps the
composed history as ``count x event`` (grouped lazily by the base class), evaluates one curve
rho_event(alpha) per *distinct* event (cached per event and order grid) and sums
``count * rho_event(alpha)``; 10^4 identical events cost one curve evaluation.

Every curve below can be evaluated at any real order alpha > 1 (and at alpha = inf, where it is
the pure-DP bound D_inf, or inf). Each one cites its source in its docstring:

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
                                      Laplace-noised vote histogram; see :func:`_lnmax_curve`)
GaussianNoisyMaxDpEvent               alpha / sigma^2 (Papernot et al. 2018, Proposition 8)
DiscreteGaussianDpEvent               alpha Delta^2 / (2 sigma^2) (Canonne-Kamath-Steinke 2020)
ZCDpEvent                             xi + rho alpha (Bun-Steinke 2016, Definition 1.1)
PoissonSampledDpEvent(q, Gaussian)    Mironov-Talwar-Zhang 2019 (ADD_OR_REMOVE_ONE/REPLACE_SPECIAL)
====================================  ==========================================================

``ApproxDpEvent`` with delta > 0, ``ShuffledHistogramDpEvent`` and every other event are refused
with an ``UnsupportedEventError`` naming them. Other modules (e.g. the PATE data-dependent
analysis) add curves through :func:`register_rdp_curve`.

Conversion to (epsilon, delta): for every order, the improved conversion of Balle, Barthe,
Gaboardi, Hsu, Sato, "Hypothesis testing interpretations and Renyi differential privacy",
AISTATS 2020, Theorem 21 (= Canonne-Kamath-Steinke 2020, Proposition 12), never above the classic
Mironov 2017 Proposition 3, plus the order-free Bretagnolle-Huber bound
delta(eps) <= TV <= sqrt(1 - exp(-KL)) <= sqrt(1 - exp(-rho(alpha))) (KL <= D_alpha by van
Erven-Harremoes 2014, Theorem 3) that dp_accounting also uses. The order is optimised on a dense
log-scale grid (alpha - 1 from 1e-3 to 1e4, plus dp_accounting's default orders and alpha = inf),
then refined on the continuous curve between the best grid point's neighbours (successive
parabolic steps on exact values). Every bound returned is computed from the exact total RDP at
the order reported in ``last_order``; interpolation only chooses where to evaluate.

Speed (issue 3, "online" use: one compose per event, a query after each): the accountant keeps
running totals on the grid instead of re-summing every distinct event's curve at each query;
events whose curves form a family (Gaussian-like lines a + b alpha, Laplace, pure-DP events,
LNMax) are evaluated together, one vectorised expression per family; the subsampled Gaussian,
costly per order, is evaluated only at the orders a quasi-convex search visits (see
``RDPAccountant._optimise``); query results are cached until the next compose.
``python benchmarks/accountants.py`` compares the timings with dp_accounting's.

Sensitivity convention: an event's noise is normalised by the sensitivity *between neighbours
of the accountant's relation* (``GaussianDpEvent(s)`` is the pair N(0, s^2), N(1, s^2) under
every relation, as in dp_accounting's ``RdpAccountant`` and in the mechanisms of this package,
which declare replace-one sensitivities). dp_accounting's ``PLDAccountant`` instead shifts a
Gaussian by 2 under REPLACE_ONE (remove + add); compare with it under ADD_OR_REMOVE_ONE.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, Self

import numpy as np
from dp_accounting import dp_event as _dp
from scipy import special

from dpkd_audit import _validate
from dpkd_audit.accountants.base import (
    Accountant,
    BoundKind,
    Epsilon,
    NeighboringRelation,
    UnsupportedEventError,
)
from dpkd_audit.events import (
    ApproxDpEvent,
    BitRandomizedResponseDpEvent,
    CollisionDpEvent,
    DeclaredGuarantee,
    DiscreteGaussianDpEvent,
    GaussianNoisyMaxDpEvent,
    LaplaceNoisyMaxDpEvent,
    PureDpEvent,
    SelectiveRandomizedResponseDpEvent,
    ShuffledHistogramDpEvent,
    ShuffledLocalDpEvent,
)

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

#: Signature of an RDP curve: ``fn(event, orders, neighboring_relation) -> rho(orders)``. Raise
#: ``ValueError`` (or ``UnsupportedEventError``) with the reason when the event is not supported.
RdpCurveFn = Callable[[_dp.DpEvent, np.ndarray, NeighboringRelation], np.ndarray]

_PROBE_ORDER = np.array([2.0])
_CACHE_SIZE = 4096
_SGM_MAX_TERMS = 1 << 22
_QUAD_MAX_POINTS = 50_000
_QUAD_MAX_ORDER = 16.0  # fractional orders below: quadrature first (the series is slow)
_QUAD_HALF_WIDTH = 20.0  # quadrature range [-20 sigma, alpha + 20 sigma] (see _sgm_log_a_quads)
_SERIES_TOL = 2.0**-57  # a binomial-series term this small (relative) no longer changes the sum
#: alpha * eps above which the Laplace curve uses its direct form (relative error below 1e-12;
#: see :func:`_laplace_matrix`).
_LAPLACE_DIRECT_MIN = 1e-3
_COARSE_RATIO = 1.6  # ratio of alpha - 1 between consecutive orders of the coarse scan
_ZOOM_POINTS = 6  # orders per round of the vectorised zoom
_ZOOM_WIDTH = 0.15  # zoom until the bracket spans at most this much log(alpha - 1)
_POLISH_STEPS = 80  # at most this many single-order steps (sharp minima need golden steps)
_POLISH_RTOL = 1e-12  # stop once the parabola promises less than this (relative) gain
_PLAN_CACHE_SIZE = 1 << 16


# --------------------------------------------------------------------------- numerics


_E2_COEFFS = tuple(1.0 / math.factorial(j) for j in range(16, 1, -1))  # 1/16!, ..., 1/2!


def _exp_m1_m_x(x: np.ndarray) -> np.ndarray:
    """e^x - 1 - x (>= 0), without cancellation for small |x|.

    |x| < 1/2: x^2 sum_{j=2}^{16} x^{j-2}/j! by Horner's rule (truncation < 1e-17 relative);
    otherwise expm1(x) - x, which loses at most a factor 4 of relative precision there.
    """
    x = np.asarray(x, dtype=np.float64)
    small = np.abs(x) < 0.5
    xs = np.where(small, x, 0.0)
    acc = np.full(x.shape, _E2_COEFFS[0])
    for c in _E2_COEFFS[1:]:
        acc = acc * xs + c
    with np.errstate(over="ignore", invalid="ignore"):
        large = np.expm1(np.where(small, 0.0, x)) - np.where(small, 0.0, x)
    return np.where(small, acc * xs * xs, large)


def _with_limit(orders: np.ndarray, finite: Callable[[np.ndarray], np.ndarray],
                at_inf: float) -> np.ndarray:
    """Evaluate ``finite`` at the finite orders and put ``at_inf`` (= D_inf) at alpha = inf."""
    out = np.empty(orders.shape, dtype=np.float64)
    inf = np.isinf(orders)
    out[inf] = at_inf
    if not inf.all():
        out[~inf] = finite(orders[~inf])
    return out


def _renyi_finite(log_w: np.ndarray, losses: np.ndarray, kl: float,
                  orders: np.ndarray) -> np.ndarray:
    """Renyi divergence D_alpha(P||Q) for a privacy loss L = log(P/Q) with finitely many values.

    D_alpha = log E_P[e^{(alpha-1) L}] / (alpha-1) (Mironov 2017, Definition 3). With t = alpha-1,
    E_P[e^{tL}] - 1 = t KL + sum_i w_i (e^{t L_i} - 1 - t L_i), a sum of non-negative terms, which
    keeps full relative precision as alpha -> 1; the log-sum-exp form is used when t max|L| > 1.

    Args:
        log_w: log P of each atom of the privacy loss (the weights sum to 1).
        losses: The privacy loss at each atom.
        kl: KL(P||Q) = sum_i w_i L_i, computed by the caller without cancellation.
        orders: Finite orders > 1.
    """
    t = orders - 1.0
    out = np.empty_like(t)
    small = t * np.max(np.abs(losses)) <= 1.0
    if small.any():
        ts = t[small]
        e2 = _exp_m1_m_x(ts[:, None] * losses[None, :])
        out[small] = np.log1p(ts * kl + e2 @ np.exp(log_w)) / ts
    if (~small).any():
        tl = t[~small]
        out[~small] = special.logsumexp(log_w[None, :] + tl[:, None] * losses[None, :],
                                        axis=1) / tl
    return np.maximum(out, 0.0)


# --------------------------------------------------------------------------- closed-form curves


def _as_orders(orders: Any, name: str = "orders") -> np.ndarray:
    """Validate orders: a non-empty 1-D sequence of reals > 1 (inf allowed), returned as float64."""
    try:
        arr = np.asarray(orders, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a non-empty 1-D sequence of real numbers > 1; got "
                         f"{orders!r}") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1 or arr.size == 0 or np.isnan(arr).any() or not (arr > 1.0).all():
        raise ValueError(f"{name} must be a non-empty 1-D sequence of real numbers > 1 "
                         f"(inf allowed); got {orders!r}")
    return arr


def gaussian_rdp(noise_multiplier: float, orders: Any) -> np.ndarray:
    """RDP of the Gaussian mechanism: alpha / (2 s^2), s = sigma / (L2 sensitivity).

    Mironov 2017, Proposition 7 (Table II): D_alpha(N(0, s^2) || N(1, s^2)) = alpha / (2 s^2).
    ``noise_multiplier = 0`` (no noise) gives inf; inf gives 0.
    """
    orders = _as_orders(orders)
    s = _validate.check_positive("noise_multiplier", noise_multiplier, allow_inf=True) \
        if noise_multiplier != 0 else 0.0
    if s == 0.0:
        return np.full(orders.shape, np.inf)
    if math.isinf(s):
        return np.zeros(orders.shape)
    return _with_limit(orders, lambda a: a / (2.0 * s * s), np.inf)


def _laplace_matrix(eps: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Laplace RDP (Mironov 2017, Proposition 6) for each eps (rows) at finite orders (columns).

    D_alpha = eps + log1p(t expm1(-(2alpha-1) eps) / (2alpha-1)) / t, t = alpha - 1, is the
    direct form (the one dp_accounting uses). Its only cancellation is eps against the log term,
    which costs a relative error of about 6e-16 / (alpha eps); it is used where alpha eps >=
    ``_LAPLACE_DIRECT_MIN`` (relative error below 1e-12, checked against mpmath in the tests).
    Below, the argument of the log minus one is (alpha E2(t eps) + t E2(-alpha eps)) /
    (2 alpha - 1), E2(x) = e^x - 1 - x >= 0 (the terms alpha t eps cancel exactly), which keeps
    full relative precision. Every entry depends only on its own (eps, alpha): the values do not
    depend on which other parameters or orders are evaluated with them.
    """
    e = eps[:, None]
    t = alpha - 1.0
    c = 2.0 * alpha - 1.0
    out = e + np.log1p(np.expm1(-c * e) * (t / c)) / t
    if eps.size and alpha.size and float(eps.min()) * float(alpha.min()) < _LAPLACE_DIRECT_MIN:
        rows, cols = np.nonzero(alpha[None, :] * e < _LAPLACE_DIRECT_MIN)
        ts, as_, es = t[cols], alpha[cols], eps[rows]
        num = as_ * _exp_m1_m_x(ts * es) + ts * _exp_m1_m_x(-as_ * es)
        out[rows, cols] = np.log1p(num / (as_ + ts)) / ts
    return np.maximum(out, 0.0)


def _laplace_vector(eps: np.ndarray, alpha: float) -> np.ndarray:
    """``_laplace_matrix(eps, [alpha])[:, 0]`` with fewer array operations (same values)."""
    if alpha * float(eps.min()) < _LAPLACE_DIRECT_MIN:
        return _laplace_matrix(eps, np.array([alpha]))[:, 0]
    t = alpha - 1.0
    c = 2.0 * alpha - 1.0
    return np.maximum(eps + np.log1p(np.expm1(-c * eps) * (t / c)) / t, 0.0)


def laplace_rdp(epsilon: float, orders: Any) -> np.ndarray:
    """RDP of the Laplace mechanism with eps = sensitivity / scale (exact).

    Mironov 2017, Proposition 6 (Table II): for alpha > 1,
    D_alpha = 1/(alpha-1) log( alpha/(2alpha-1) e^{(alpha-1) eps} + (alpha-1)/(2alpha-1)
    e^{-alpha eps} ), and D_inf = eps. Evaluated by :func:`_laplace_matrix` (relative error
    below 1e-12 at every order).
    """
    orders = _as_orders(orders)
    eps = _validate.check_positive("epsilon", epsilon, allow_inf=True)

    def finite(a: np.ndarray) -> np.ndarray:
        if math.isinf(eps):
            return np.full(a.shape, np.inf)
        return _laplace_matrix(np.array([eps]), a)[0]

    return _with_limit(orders, finite, eps)


def _pure_matrix(eps: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Binary randomized-response RDP (Mironov 2017, Prop 5) for each eps (rows) and order.

    The privacy loss is +eps w.p. w1 = e^eps/(1+e^eps) and -eps w.p. w2 = 1/(1+e^eps), with
    KL = eps tanh(eps/2); D_alpha = log(w1 e^{t eps} + w2 e^{-t eps}) / t, t = alpha - 1, is
    formed as :func:`_renyi_finite` does: log1p(t KL + w1 E2(t eps) + w2 E2(-t eps)) / t while
    t eps <= 1 (non-negative terms, full relative precision as alpha -> 1), log-sum-exp beyond.
    Every entry depends only on its own (eps, alpha).
    """
    e = eps[:, None]
    t = (alpha - 1.0)[None, :]
    te = t * e
    log_w1 = -np.log1p(np.exp(-e))
    log_w2 = log_w1 - e
    kl = e * np.tanh(0.5 * e)
    small = te <= 1.0
    tes = np.where(small, te, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        near = np.log1p(t * kl + np.exp(log_w1) * _exp_m1_m_x(tes)
                        + np.exp(log_w2) * _exp_m1_m_x(-tes)) / t
        far = np.logaddexp(log_w1 + te, log_w2 - te) / t
    return np.maximum(np.where(small, near, far), 0.0)


def pure_dp_rdp(epsilon: float, orders: Any) -> np.ndarray:
    """Largest RDP curve of any eps-DP mechanism: binary randomized response with parameter eps.

    RR_eps outputs the true bit w.p. e^eps/(e^eps+1); Mironov 2017, Proposition 5 (Table II):
    D_alpha = 1/(alpha-1) log( (e^{alpha eps} + e^{(1-alpha) eps}) / (e^eps + 1) ), D_inf = eps.
    It dominates every eps-DP pair: any eps-DP pair of output distributions is a post-processing
    of (RR_eps(0), RR_eps(1)) (Kairouz-Oh-Viswanath 2015, Section 2, with delta = 0), and Renyi
    divergences obey data processing (van Erven-Harremoes 2014, Theorem 9), so this curve is the
    tight conversion from pure DP (Steinke, "Tight RDP & zCDP bounds from pure DP",
    differentialprivacy.org, 2022); it is below both eps and the zCDP bound alpha eps^2 / 2 of
    Bun-Steinke 2016, Proposition 3.3, and below Mironov 2017's min(eps, 2 alpha eps^2).
    Evaluated by :func:`_pure_matrix`.
    """
    orders = _as_orders(orders)
    eps = _validate.check_positive("epsilon", epsilon, allow_inf=True)
    if math.isinf(eps):
        return np.full(orders.shape, np.inf)
    return _with_limit(orders, lambda a: _pure_matrix(np.array([eps]), a)[0], eps)


def randomized_response_rdp(noise_parameter: float, num_buckets: int, orders: Any,
                            neighboring_relation: NeighboringRelation =
                            NeighboringRelation.REPLACE_ONE) -> np.ndarray:
    """Exact RDP of k-ary randomized response (dp_accounting's ``RandomizedResponseDpEvent``).

    With probability 1-p the true bucket is output, otherwise a uniform one: q_keep = 1-p+p/k,
    q_other = p/k. REPLACE_ONE compares two different inputs, (q_keep, q_other, q_other, ...)
    against (q_other, q_keep, q_other, ...):
    D_alpha = 1/(alpha-1) log(q_keep^alpha q_other^{1-alpha} + q_other^alpha q_keep^{1-alpha}
    + (k-2) q_other), which is Mironov 2017, Proposition 5 for k = 2, and is symmetric.
    REPLACE_SPECIAL compares an input with the special record whose output is uniform; the curve
    is the larger of the two directions D_alpha(RR(x)||U) and D_alpha(U||RR(x)). p = 0 (no noise)
    gives inf, p = 1 or k = 1 gives 0.
    """
    orders = _as_orders(orders)
    p = _validate.check_probability("noise_parameter", noise_parameter)
    k = _validate.check_int("num_buckets", num_buckets, minimum=1)
    if k == 1 or p == 1.0:
        return np.zeros(orders.shape)
    if p == 0.0:
        return np.full(orders.shape, np.inf)
    log_keep = math.log1p(-p + p / k)
    log_other = math.log(p / k)
    if neighboring_relation is NeighboringRelation.REPLACE_SPECIAL:
        # P = RR(x): loss log(k q_keep) = log1p((k-1)(1-p)) w.p. q_keep, log(k q_other) = log p.
        l1, l2 = math.log1p((k - 1) * (1.0 - p)), math.log(p)
        forward_w = np.array([log_keep, math.log(k - 1) + log_other])
        forward_l = np.array([l1, l2])
        forward_kl = math.exp(log_keep) * l1 + (k - 1) * math.exp(log_other) * l2
        backward_w = np.array([-math.log(k), math.log1p(-1.0 / k)])
        backward_l = -forward_l
        backward_kl = -(l1 + (k - 1) * l2) / k

        def finite(a: np.ndarray) -> np.ndarray:
            return np.maximum(_renyi_finite(forward_w, forward_l, forward_kl, a),
                              _renyi_finite(backward_w, backward_l, backward_kl, a))

        return _with_limit(orders, finite, max(l1, -l2))
    if neighboring_relation is not NeighboringRelation.REPLACE_ONE:
        raise UnsupportedEventError(
            "randomized response reports one record's value, so it is defined for REPLACE_ONE "
            f"or REPLACE_SPECIAL neighbours only; got {neighboring_relation.name}")
    eps = math.log1p(k * (1.0 - p) / p)  # log(q_keep / q_other)
    if k == 2:
        return pure_dp_rdp(eps, orders)  # exactly binary RR with parameter eps
    log_w = np.array([log_keep, log_other, math.log(k - 2) + log_other])
    losses = np.array([eps, -eps, 0.0])
    kl = eps * (1.0 - p)  # (q_keep - q_other) eps
    return _with_limit(orders, lambda a: _renyi_finite(log_w, losses, kl, a), eps)


def discrete_laplace_rdp(noise_parameter: float, sensitivity: int, orders: Any) -> np.ndarray:
    """Exact RDP of the discrete Laplace mechanism (pmf proportional to e^{-a|x|} on Z).

    Derivation (a = noise_parameter, integer shift k, u = e^{-a}, r = e^{-a(2alpha-1)}, c =
    tanh(a/2) the normaliser): splitting sum_x P(x)^alpha P(x-k)^{1-alpha} over x <= 0,
    0 < x < k and x >= k gives three geometric series whose sum is

        H_k(alpha) = [(1 - u r) e^{a(alpha-1)k} + (u - r) e^{-a alpha k}] / ((1 - r)(1 + u)),

    and D_alpha = log H_k / (alpha - 1). H_k is convex in k with H_0 = 1 < H_1, hence increasing
    in k >= 0, so the worst neighbouring shift is k = Delta = sensitivity. For Delta = 1 this is
    exactly binary randomized response with eps = a (the privacy loss is +-a), which is used
    there (cancellation-free); D_inf = a Delta. As alpha -> 1 the numerator minus
    (1-r)(1+u) is (1-ur) expm1(a t Delta) + (u-r) expm1(-a alpha Delta), t = alpha-1, and
    1-ur, u-r, 1-r are evaluated with expm1, which keeps the relative error near 1e-16/(a Delta).
    Tested against an exact high-precision sum of the definition.
    """
    orders = _as_orders(orders)
    a = _validate.check_positive("noise_parameter", noise_parameter, allow_inf=True)
    delta = _validate.check_int("sensitivity", sensitivity, minimum=1)
    if math.isinf(a):
        return np.zeros(orders.shape)
    eps = a * delta
    if delta == 1:
        return pure_dp_rdp(eps, orders)

    def finite(alpha: np.ndarray) -> np.ndarray:
        t = alpha - 1.0
        one_m_ur = -np.expm1(-2.0 * a * alpha)          # 1 - u r
        u_m_r = math.exp(-a) * -np.expm1(-2.0 * a * t)  # u - r
        one_m_r = -np.expm1(-a * (2.0 * alpha - 1.0))   # 1 - r
        log_den = np.log(one_m_r) + math.log1p(math.exp(-a))
        out = np.empty_like(t)
        small = t * eps <= 1.0
        num = (one_m_ur[small] * np.expm1(eps * t[small])
               + u_m_r[small] * np.expm1(-eps * alpha[small]))
        out[small] = np.log1p(num / np.exp(log_den[small])) / t[small]
        big = ~small
        log_h = np.logaddexp(np.log(one_m_ur[big]) + eps * t[big],
                             np.log(u_m_r[big]) - eps * alpha[big]) - log_den[big]
        out[big] = log_h / t[big]
        return np.maximum(out, 0.0)

    return _with_limit(orders, finite, eps)


def _log_expm1(x: np.ndarray) -> np.ndarray:
    """log(e^x - 1) for x > 0, without overflow."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    big = x > 30.0
    out[big] = x[big] + np.log1p(-np.exp(-x[big]))
    out[~big] = np.log(np.expm1(x[~big]))
    return out


def _sgm_log_a_int(q: float, sigma: float, alpha: int) -> float:
    """Log A_alpha for integer alpha: Mironov-Talwar-Zhang 2019, Section 3.3.

    A_alpha = E_{z~mu0}[(mu(z)/mu0(z))^alpha] = sum_{k=0}^{alpha} C(alpha,k) (1-q)^{alpha-k} q^k
    exp((k^2-k)/(2 sigma^2)). Since the same sum without the exponential is 1 and the k = 0, 1
    exponents vanish, A - 1 = sum_{k>=2} C(alpha,k) (1-q)^{alpha-k} q^k expm1((k^2-k)/(2sigma^2)),
    a sum of non-negative terms; log A = log1p(A - 1) keeps full relative precision.
    """
    k = np.arange(2, alpha + 1, dtype=np.float64)
    log_binom = special.gammaln(alpha + 1.0) - special.gammaln(k + 1.0) \
        - special.gammaln(alpha - k + 1.0)
    x = (k * k - k) / (2.0 * sigma * sigma)
    log_terms = log_binom + (alpha - k) * math.log1p(-q) + k * math.log(q) + _log_expm1(x)
    return float(np.logaddexp(0.0, special.logsumexp(log_terms)))


def _sgm_log_a_frac(q: float, sigma: float, alpha: float) -> float:
    """Log A_alpha for fractional alpha: the series of Mironov-Talwar-Zhang 2019, Section 3.3.

    Split the real line at z0 = sigma^2 log(1/q - 1) + 1/2, where q mu1 = (1-q) mu0, and expand
    ((1-q) + q e^{(2z-1)/(2 sigma^2)})^alpha by the generalised binomial theorem on each side:
    A_alpha = sum_{i>=0} C(alpha,i) [ q^i (1-q)^{alpha-i} e^{(i^2-i)/(2 sigma^2)} Phi((z0-i)/sigma)
    + q^{alpha-i} (1-q)^i e^{(j^2-j)/(2 sigma^2)} Phi((j-z0)/sigma) ], j = alpha - i.
    Terms are computed in log space (log_ndtr for the Gaussian tails). For i > alpha the signs
    alternate and both parts decrease in magnitude: the ratio of consecutive terms is
    |C(alpha,i+1)/C(alpha,i)| = (i-alpha)/(i+1) < 1 times a factor <= 1 (the exponentials
    cancel against the Gaussian-tail ratio Phi(x - 1/sigma)/Phi(x) <= exp(x/sigma -
    1/(2 sigma^2)), which follows from the Mills-ratio bound phi(y)/Phi(y) >= -y). The
    truncation error is thus at most the first omitted term: the series is cut once a term falls
    below 1e-13 of |A - 1| (or of A when A is large), and the magnitude of the last term is added,
    which keeps the result an upper bound. When A is of order one, A - 1 is formed with an exactly
    rounded sum (math.fsum) before log1p, so that small RDP values keep their relative precision.
    """
    log_q, log_1mq = math.log(q), math.log1p(-q)
    z0 = sigma * sigma * (log_1mq - log_q) + 0.5
    log_gamma_a1 = special.gammaln(alpha + 1.0)
    two_s2 = 2.0 * sigma * sigma
    floor = alpha + 2.0  # past it, the alternating-series bound applies
    log_parts: list[np.ndarray] = []
    sign_parts: list[np.ndarray] = []
    start, size = 0, math.ceil(floor) + 64
    while True:
        i = np.arange(start, start + size, dtype=np.float64)
        j = alpha - i
        log_c = log_gamma_a1 - special.gammaln(i + 1.0) - special.gammaln(j + 1.0)
        s0 = log_c + i * log_q + j * log_1mq + (i * i - i) / two_s2 \
            + special.log_ndtr((z0 - i) / sigma)
        s1 = log_c + j * log_q + i * log_1mq + (j * j - j) / two_s2 \
            + special.log_ndtr((j - z0) / sigma)
        log_parts.append(np.logaddexp(s0, s1))
        sign_parts.append(special.gammasgn(j + 1.0))
        start += size
        size *= 2
        if start < floor:
            continue
        logs = np.concatenate(log_parts)
        signs = np.concatenate(sign_parts)
        top, last = float(np.max(logs)), float(logs[-1])
        if top < 600.0:
            a_minus_1 = math.fsum([*(signs * np.exp(logs)).tolist(), -1.0])
            scale = math.log(abs(a_minus_1)) if a_minus_1 != 0.0 else -745.0
        else:
            scale = top
        if last < scale - 30.0 or start >= _SGM_MAX_TERMS:
            break
    tail = math.exp(last) if last > -745.0 else 0.0  # bound on the omitted alternating tail
    if top < 600.0:
        a_minus_1 += tail
        return math.log1p(a_minus_1) if a_minus_1 > -1.0 else -math.inf
    scaled = math.fsum((signs * np.exp(logs - top)).tolist()) + math.exp(last - top)
    return top + math.log(scaled)


def _binomial_series(alpha: np.ndarray, x: np.ndarray) -> np.ndarray:
    """phi(x) = (1+x)^alpha - 1 - alpha x = sum_{j>=2} C(alpha,j) x^j, for |x| < 1/2.

    ``alpha`` is a column (one order per row), ``x`` a row. The terms decrease geometrically
    (by at least |x| < 1/2) once j >= 5 for alpha <= 16, so the sum stops, after at most 60
    terms, when every term of the last round is below 2^-57 of its partial sum; the terms left
    out then add less than 2^-56 relative, i.e. they no longer change the float64 sum.
    """
    term = 0.5 * alpha * (alpha - 1.0) * x * x
    acc = term.copy()
    for j in range(2, 61):
        term = term * ((alpha - j) / (j + 1.0)) * x
        acc += term
        if j >= 8 and j % 4 == 0 and bool(np.all(np.abs(term) <= _SERIES_TOL * acc)):
            break
    return acc


def _sgm_log_integrand(q: float, sigma: float, alphas: np.ndarray, z: np.ndarray) -> np.ndarray:
    """log(mu0(z) phi(q (L(z) - 1))) for each order (rows) at each point z (columns, ascending).

    L(z) = e^{(2z-1)/(2 sigma^2)} = mu1/mu0 and phi(x) = (1+x)^alpha - 1 - alpha x >= 0
    (see :func:`_sgm_log_a_quads`). x = q (L - 1) is formed with expm1 (no cancellation) and is
    increasing in z, so the three regimes of phi are column ranges: |x| < 1/2 uses the binomial
    series (:func:`_binomial_series`, split at |x| = 0.05 so that most columns need few terms);
    x >= 1/2 uses (1+x)^alpha (1 - (1+alpha x)(1+x)^-alpha), the bracket in (0, 1) by Bernoulli's
    inequality, all in log space from log x (x may overflow); x <= -1/2 is direct. Every entry
    depends only on its own (alpha, z).
    """
    two_s2 = 2.0 * sigma * sigma
    log_l = (2.0 * z - 1.0) / two_s2
    capped = np.minimum(log_l, 700.0)
    x = np.where(log_l > 700.0, np.inf, q * np.expm1(capped))  # q (L - 1), no cancellation
    a = alphas[:, None]
    out = np.empty((alphas.size, z.size))
    n_neg = int(np.searchsorted(x, -0.5, "right"))
    big = int(np.searchsorted(x, 0.5, "left"))
    lo5 = max(int(np.searchsorted(x, -0.05, "right")), n_neg)
    hi5 = min(int(np.searchsorted(x, 0.05, "left")), big)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for start, stop in ((n_neg, lo5), (lo5, hi5), (hi5, big)):
            if stop > start:
                out[:, start:stop] = np.log(np.maximum(
                    _binomial_series(a, x[None, start:stop]), 0.0))
        if big < z.size:
            ll, cl = log_l[big:], capped[big:]
            lx = np.where(ll > 30.0,
                          math.log(q) + ll + np.log1p(-np.exp(-np.maximum(cl, 30.0))),
                          np.log(q * np.expm1(np.minimum(ll, 30.0))))[None, :]  # log x
            log_1px = lx + np.log1p(np.exp(-lx))                        # log(1 + x)
            log_1pax = np.log(a) + lx + np.log1p(np.exp(-lx) / a)       # log(1 + alpha x)
            out[:, big:] = a * log_1px + np.log(-np.expm1(log_1pax - a * log_1px))
        if n_neg:
            xn = x[None, :n_neg]
            out[:, :n_neg] = np.log(np.exp(a * np.log1p(xn)) - 1.0 - a * xn)
    log_mu0 = -z * z / two_s2 - (0.5 * math.log(2.0 * math.pi) + math.log(sigma))
    return out + log_mu0[None, :]


def _sgm_log_a_quads(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
    """Log A_alpha at several orders by trapezoid quadrature of A - 1 (nan where it fails).

    With L(z) = e^{(2z-1)/(2 sigma^2)} = mu1/mu0, mu/mu0 = 1 + q(L - 1) and E_{mu0}[L] = 1, so
    A_alpha - 1 = E_{mu0}[phi(x)], phi(x) = (1+x)^alpha - 1 - alpha x >= 0 (the definition of
    A_alpha, MTZ19 Sec. 3): a non-negative integrand, so tiny RDP values keep their relative
    precision. The integrand is analytic in the strip |Im z| < pi sigma^2 (branch points where
    1 + x = 0) and Gaussian-dominated, so the trapezoid rule converges geometrically; the step h
    is set for an aliasing error ~ e^-45 and the sum is checked against the one with step h/2
    (agreement to 1e-11 in log(A - 1); else h/4 is tried). The range is [-20 sigma,
    alpha + 20 sigma]: left of it -q < x < 0 and phi(x) <= phi(-q) <= alpha q (phi is convex
    with phi(0) = 0), right of it the integrand is at most mu0(z) L(z)^alpha =
    e^{alpha(alpha-1)/(2 sigma^2)} N(z; alpha, sigma^2); so the mass left out is at most
    e^-200 (alpha q + e^{alpha(alpha-1)/(2 sigma^2)}), while A - 1 >= (alpha-1) KL(mu||mu0)
    (about (alpha-1) q^2 / (2 sigma^2)) and A >= q^alpha e^{alpha(alpha-1)/(2 sigma^2)}: the
    relative truncation error stays below 1e-30 unless these bounds are below e^-130. All orders
    share the points (each order keeps its own range, so a value does not depend on which orders
    are evaluated with it). An order
    gets nan (the caller then uses the series) if its rule would need more than
    ``_QUAD_MAX_POINTS`` points (tiny sigma, where the series converges at once) or the check
    fails.
    """
    alphas = np.asarray(alphas, dtype=np.float64)
    out = np.full(alphas.shape, np.nan)
    d = min(3.0 * sigma, 0.9 * math.pi * sigma * sigma)
    h = 2.0 * math.pi * d / 45.0
    lo = -_QUAD_HALF_WIDTH * sigma
    steps = np.ceil((alphas + _QUAD_HALF_WIDTH * sigma - lo) / h)  # intervals of length h
    ok = np.flatnonzero(2.0 * steps <= _QUAD_MAX_POINTS)
    if ok.size == 0:
        return out
    a = alphas[ok]
    n2 = 2 * steps[ok].astype(np.int64)  # intervals of length h/2
    k = np.arange(int(n2.max()) + 1)
    log_f = _sgm_log_integrand(q, sigma, a, lo + 0.5 * h * k)
    log_f[k[None, :] > n2[:, None]] = -np.inf
    fine = special.logsumexp(log_f, axis=1) + math.log(0.5 * h)
    coarse = special.logsumexp(log_f[:, ::2], axis=1) + math.log(h)
    res = np.where(np.abs(fine - coarse) <= 1e-11, fine, np.nan)
    todo = np.flatnonzero(np.isnan(res) & (2 * n2 <= _QUAD_MAX_POINTS))
    if todo.size:  # step h/4: the new points are the midpoints of the h/2 grid
        km = np.arange(int(n2[todo].max()))
        log_g = _sgm_log_integrand(q, sigma, a[todo], lo + 0.25 * h * (2 * km + 1))
        log_g[km[None, :] >= n2[todo][:, None]] = -np.inf
        quarter = np.logaddexp(fine[todo] - math.log(2.0),
                               special.logsumexp(log_g, axis=1) + math.log(0.25 * h))
        good = np.abs(quarter - fine[todo]) <= 1e-11
        res[todo[good]] = quarter[good]
    out[ok] = np.where(np.isnan(res), np.nan, np.logaddexp(0.0, res))
    return out


def _sgm_log_a_quad(q: float, sigma: float, alpha: float) -> float | None:
    """Log A_alpha at one order by :func:`_sgm_log_a_quads` (None where it fails)."""
    value = float(_sgm_log_a_quads(q, sigma, np.array([alpha]))[0])
    return None if math.isnan(value) else value


def subsampled_gaussian_rdp(sampling_probability: float, noise_multiplier: float,
                            orders: Any) -> np.ndarray:
    """RDP of the Poisson-subsampled Gaussian mechanism (add/remove neighbours).

    Mironov, Talwar, Zhang, "Renyi differential privacy of the sampled Gaussian mechanism",
    arXiv:1908.10530, 2019, Section 3: the worst pair is mu0 = N(0, s^2) and
    mu = (1-q) N(0, s^2) + q N(1, s^2), and the RDP is log(A_alpha)/(alpha-1) with
    A_alpha = E_{mu0}[(mu/mu0)^alpha] (the other direction is never larger, MTZ19 Sec. 3.1;
    checked numerically in the tests). Integer orders use the exact binomial expansion of
    Section 3.3 (:func:`_sgm_log_a_int`). Fractional orders below 16 use a trapezoid quadrature
    of the non-negative integrand of A_alpha - 1 (:func:`_sgm_log_a_quads`), which keeps full
    relative precision where the Section 3.3 series converges slowly (alpha near 1, large sigma)
    or loses precision (A_alpha - 1 below 1e-8); larger fractional orders, and tiny sigma, use the
    numerically stable series of Section 3.3 (:func:`_sgm_log_a_frac`). The quadrature is
    vectorised over the orders (:func:`_sgm_log_a_quads`); every order's value is independent of
    the others evaluated with it. q = 1 is the Gaussian curve, q = 0 gives 0.
    """
    orders = _as_orders(orders)
    q = _validate.check_probability("sampling_probability", sampling_probability)
    s = _validate.check_positive("noise_multiplier", noise_multiplier, allow_inf=True) \
        if noise_multiplier != 0 else 0.0
    if q == 0.0 or math.isinf(s):
        return np.zeros(orders.shape)
    if s == 0.0:
        return np.full(orders.shape, np.inf)
    if q == 1.0:
        return gaussian_rdp(s, orders)

    def finite(alpha: np.ndarray) -> np.ndarray:
        log_a = np.full(alpha.shape, np.nan)
        integer = alpha == np.floor(alpha)
        quad = ~integer & (alpha < _QUAD_MAX_ORDER)
        if quad.any():
            log_a[quad] = _sgm_log_a_quads(q, s, alpha[quad])
        for n in np.flatnonzero(integer):
            log_a[n] = _sgm_log_a_int(q, s, int(alpha[n]))
        for n in np.flatnonzero(np.isnan(log_a)):
            log_a[n] = _sgm_log_a_frac(q, s, float(alpha[n]))
        return np.maximum(log_a / (alpha - 1.0), 0.0)

    return _with_limit(orders, finite, np.inf)


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
    sensitivity Delta is the one cited by ``events.DiscreteGaussianDpEvent``). The exact scalar
    curve is a little smaller; the tests check the bound against it.
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
#: (event, relation) -> _Plan: how an accountant adds the event's curve (see :func:`_plan`).
_PLANS: dict[tuple[_dp.DpEvent, NeighboringRelation], _Plan] = {}
#: (event, relation, grid key) -> curve on that grid, nan where not evaluated yet (expensive
#: curves are evaluated lazily, order by order, during the order search; LRU-bounded).
_LAZY_MEMO: collections.OrderedDict[tuple[Any, ...], np.ndarray] = collections.OrderedDict()


def _registry_changed() -> None:
    global _REGISTRY_VERSION
    _REGISTRY_VERSION += 1
    _cached_curve.cache_clear()
    _PLANS.clear()
    _LAZY_MEMO.clear()


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


def _entry(event: _dp.DpEvent) -> _Entry | None:
    for cls in type(event).__mro__:
        entry = _REGISTRY.get(cls)
        if entry is not None:
            return entry
    return None


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
register_rdp_curve(ShuffledHistogramDpEvent, _refuse(
    "the multi-message shuffled histogram is only known to be (epsilon, delta)-DP with "
    "delta > 0, which implies no finite RDP curve"))


# --------------------------------------------------------------------------- accountant plans
#
# The accountant does not evaluate every distinct event's curve on its own: it sorts events by
# their (registered) curve into
#   - "linear" curves a + b alpha (Gaussian, GNMax, discrete Gaussian, zCDP): only the sums of
#     count * a and count * b are kept;
#   - batched kernels (Laplace, pure-DP binary RR, LNMax): the parameters are kept in arrays and
#     evaluated for all events at once (one numpy expression per kernel, rows = events);
#   - "generic" curves (any other registered curve), evaluated per distinct event (cached);
#   - "lazy" curves, expensive per order (the subsampled Gaussian): evaluated only at the orders
#     the order search visits.
# A plan is computed once per (event, relation) and cached; it validates the event exactly as
# its curve does (same errors), so compose refuses the same events.


@dataclasses.dataclass(frozen=True, eq=False)
class _Kernel:
    """A family of curves evaluated for many parameters (rows) at many finite orders (columns).

    ``safe`` says that (alpha - 1) rho(alpha) is convex in alpha for every member (true for any
    exact Renyi divergence: van Erven-Harremoes 2014, Theorem 11), which the order search uses.
    """

    name: str
    matrix: Callable[[np.ndarray, np.ndarray], np.ndarray]
    at_inf: Callable[[np.ndarray], np.ndarray]
    safe: bool
    vector: Callable[[np.ndarray, float], np.ndarray] | None = None  # one order, same values

    def at(self, params: np.ndarray, alpha: float) -> np.ndarray:
        """The curves of every parameter at one finite order."""
        if self.vector is not None:
            return self.vector(params, alpha)
        return self.matrix(params, np.array([alpha]))[:, 0]


def _lnmax_matrix(b: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    return np.minimum(_pure_matrix(2.0 / b, alpha), 2.0 * _laplace_matrix(1.0 / b, alpha))


_LAPLACE_KERNEL = _Kernel("laplace", _laplace_matrix, lambda eps: eps, True, _laplace_vector)
_PURE_KERNEL = _Kernel("pure", _pure_matrix, lambda eps: eps, True)
# A pointwise minimum of two curves need not keep (alpha - 1) rho convex.
_LNMAX_KERNEL = _Kernel("lnmax", _lnmax_matrix, lambda b: 2.0 / b, False)


@dataclasses.dataclass(frozen=True, eq=False)
class _Plan:
    """How the accountant adds one occurrence of an event: see the comment above."""

    kind: str  # "zero", "linear", "kernel", "generic" or "lazy"
    safe: bool = True
    data_dependent: bool = False
    a: float = 0.0  # linear: a + b alpha, D_inf = a if b == 0 else inf
    b: float = 0.0
    kernel: _Kernel | None = None
    param: float = 0.0
    weight: float = 1.0  # kernel: weight * kernel(param)


_ZERO_PLAN = _Plan("zero")
_INF_PLAN = _Plan("linear", b=math.inf)  # no finite RDP at any order


def _gaussian_plan(noise_multiplier: float) -> _Plan:
    """Gaussian plan: alpha / (2 s^2) (Mironov 2017, Prop 7), validated as gaussian_rdp does."""
    if noise_multiplier == 0:
        return _INF_PLAN
    s = _validate.check_positive("noise_multiplier", noise_multiplier, allow_inf=True)
    if math.isinf(s):
        return _ZERO_PLAN
    return _Plan("linear", b=1.0 / (2.0 * s * s))


def _pure_plan(epsilon: float, weight: float = 1.0) -> _Plan:
    eps = _validate.check_positive("epsilon", epsilon, allow_inf=True)
    if math.isinf(eps):
        return _INF_PLAN
    if weight == 0:
        return _ZERO_PLAN
    return _Plan("kernel", kernel=_PURE_KERNEL, param=eps, weight=float(weight))


def _laplace_plan(event: _dp.LaplaceDpEvent, relation: NeighboringRelation) -> _Plan:
    nm = event.noise_multiplier
    if nm == 0:
        return _INF_PLAN
    nm = _validate.check_positive("noise_multiplier", nm, allow_inf=True)
    if math.isinf(nm):
        return _ZERO_PLAN
    eps = _validate.check_positive("epsilon", 1.0 / nm, allow_inf=True)
    if math.isinf(eps):
        return _INF_PLAN
    return _Plan("kernel", kernel=_LAPLACE_KERNEL, param=eps)


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
    return _Plan("kernel", safe=False, kernel=_LNMAX_KERNEL, param=b)


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
    if q == 1.0:
        return _gaussian_plan(s)
    return _Plan("lazy")


_PLAN_MAKERS: dict[Callable[..., np.ndarray], Callable[[Any, NeighboringRelation], _Plan]] = {
    _gaussian_curve: lambda e, r: _gaussian_plan(e.noise_multiplier),
    _gnmax_curve: lambda e, r: _gaussian_plan(e.sigma / math.sqrt(2.0)),
    _discrete_gaussian_curve: lambda e, r: _gaussian_plan(e.sigma / e.sensitivity),
    _zcdp_curve: _zcdp_plan,
    _laplace_curve: _laplace_plan,
    _declared_pure_curve: _declared_pure_plan,
    _bit_rr_curve: _bit_rr_plan,
    _lnmax_curve: _lnmax_plan,
    _poisson_curve: _poisson_plan,
}

#: Built-in curves whose (alpha - 1) rho(alpha) is convex (exact Renyi divergences, a maximum of
#: two, or a zCDP line): see :meth:`RDPAccountant._optimise`.
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
    plan = _PLANS.get(key)
    if plan is None:
        plan = _make_plan(event, relation)
        if len(_PLANS) >= _PLAN_CACHE_SIZE:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


class _Group:
    """The events of one kernel: parameter and total weight (count x weight) per parameter."""

    __slots__ = ("_arrays", "index", "params", "weights")

    def __init__(self) -> None:
        self.index: dict[float, int] = {}
        self.params: list[float] = []
        self.weights: list[float] = []
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, param: float, weight: float) -> None:
        i = self.index.get(param)
        if i is None:
            self.index[param] = len(self.params)
            self.params.append(param)
            self.weights.append(weight)
        else:
            self.weights[i] += weight
        self._arrays = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._arrays is None:
            self._arrays = (np.array(self.params), np.array(self.weights))
        return self._arrays

    def copy(self) -> _Group:
        new = _Group()
        new.index = dict(self.index)
        new.params = list(self.params)
        new.weights = list(self.weights)
        new._arrays = self._arrays  # never mutated in place
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
        # Coarse scan: ascending orders at least _COARSE_RATIO apart in alpha - 1, from the
        # smallest to the largest finite order.
        coarse: list[int] = []
        step = math.log(_COARSE_RATIO)
        for i in range(self.nf):
            if not coarse or self.s[i] >= self.s[coarse[-1]] + step or i == self.nf - 1:
                coarse.append(i)
        self.coarse = np.array(coarse, dtype=np.int64)
        self.quad_coarse = max(1, int(np.count_nonzero(a[self.coarse] < _QUAD_MAX_ORDER)))

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


def _consts(alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    t = alpha - 1.0
    return t, np.log1p(-1.0 / alpha), np.log(alpha), 1.0 / t


def _tv_from_rho(rho: float) -> float:
    """sqrt(1 - e^{-rho}): bounds TV, hence delta(eps) for eps >= 0 (see :func:`_tv_bound`)."""
    return math.sqrt(-math.expm1(-rho)) if math.isfinite(rho) else 1.0


def _parabola_min(s0: float, v0: float, s1: float, v1: float, s2: float,
                  v2: float) -> tuple[float, float]:
    """Vertex (abscissa, value) of the parabola through three points, in any order.

    By divided differences; nan if the points are not distinct or the parabola is not convex.
    """
    if s0 == s1 or s1 == s2 or s0 == s2:
        return math.nan, math.nan
    d01 = (v1 - v0) / (s1 - s0)
    curv = ((v2 - v1) / (s2 - s1) - d01) / (s2 - s0)
    if not (math.isfinite(d01) and math.isfinite(curv) and curv > 0.0):
        return math.nan, math.nan
    x = 0.5 * (s0 + s1) - d01 / (2.0 * curv)
    return x, v0 + d01 * (x - s0) + curv * (x - s0) * (x - s1)


# --------------------------------------------------------------------------- conversions


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


def _tv_bound(orders: np.ndarray, rdp: np.ndarray) -> float:
    """sqrt(1 - e^{-rho}) at the smallest finite rho: bounds TV, hence delta(eps) for eps >= 0.

    Bretagnolle-Huber: TV(P,Q) <= sqrt(1 - exp(-KL(P||Q))), and KL <= D_alpha for alpha > 1
    (van Erven-Harremoes 2014, Theorem 3); delta(eps) <= delta(0) = TV.
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
        the order is then nan.
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
        (delta, order); the order is nan when the Bretagnolle-Huber bound is the best one.
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


# --------------------------------------------------------------------------- accountant


class RDPAccountant(Accountant):
    """Renyi-DP accountant: exact per-event curves, improved conversion, fine order search.

    The composed history is kept as running totals, updated when an event is composed (lazily,
    at the next query, in one vectorised pass over the events composed since the last one), so
    a query costs about one pass over the order grid whatever the history's length; results are
    cached until the next compose. See :meth:`_optimise` for the order search.

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
            ``refine=False`` the answer is the best order of the grid.

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
        self._registry_version = _REGISTRY_VERSION
        self._total = np.zeros(self._orders.shape)  # sum over non-lazy events, on the grid
        self._lin_a = 0.0  # sum of count * a over linear curves a + b alpha
        self._lin_b = 0.0
        self._groups: dict[_Kernel, _Group] = {}
        self._generic: dict[_dp.DpEvent, int] = {}
        self._lazy: dict[_dp.DpEvent, int] = {}
        self._convex = True  # every curve composed has (alpha - 1) rho(alpha) convex
        self._data_dependent = False

    @property
    def orders(self) -> np.ndarray:
        """The grid of orders (a read-only view)."""
        view = self._orders.view()
        view.setflags(write=False)
        return view

    def _check_leaf(self, event: _dp.DpEvent) -> None:
        try:
            hash(event)
        except TypeError:
            raise self._unsupported(event, "the event is not hashable") from None
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
               "_orders", "_grid"}
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
        return new

    # ----------------------------------------------------------------- totals

    def _sync(self) -> None:
        """Add the events composed since the last query to the running totals."""
        if self._registry_version != _REGISTRY_VERSION:  # a curve was (un)registered: rebuild
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
        grid, relation = self._grid, self._relation
        nf = grid.nf
        d_a = d_b = 0.0
        batches: dict[_Kernel, tuple[list[float], list[float]]] = {}
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
            elif kind == "lazy":
                self._lazy[event] = self._lazy.get(event, 0) + n
        if d_a or d_b:
            self._lin_a += d_a
            self._lin_b += d_b
            self._total[:nf] += d_a + d_b * grid.a
            if grid.has_inf:
                self._total[nf] += d_a if d_b == 0 else math.inf
        for kernel, (params, weights) in batches.items():
            p, w = np.array(params), np.array(weights)
            if nf:
                self._total[:nf] += w @ kernel.matrix(p, grid.a)
            if grid.has_inf:
                self._total[nf] += float(w @ kernel.at_inf(p))
            group = self._groups.get(kernel)
            if group is None:
                group = self._groups[kernel] = _Group()
            for param, weight in zip(params, weights, strict=True):
                group.add(param, weight)

    def _lazy_at(self, idx: np.ndarray) -> np.ndarray:
        """Sum of count * curve over the lazy events at grid indices ``idx`` (memoised)."""
        out = np.zeros(idx.shape)
        grid, relation = self._grid, self._relation
        for event, n in self._lazy.items():
            key = (event, relation, grid.key)
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
                memo[missing] = _evaluate(event, self._orders[missing], relation)
            out += n * memo[idx]
        return out

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

    def _total_at_order(self, alpha: float) -> float:
        """:meth:`_total_at` at one finite order, with fewer array operations (same values)."""
        total = self._lin_a + self._lin_b * alpha
        for kernel, group in self._groups.items():
            p, w = group.arrays()
            total += float(w @ kernel.at(p, alpha))
        if self._generic or self._lazy:
            arr = np.array([alpha])
            for events in (self._generic, self._lazy):
                for event, n in events.items():
                    total += n * float(_evaluate(event, arr, self._relation)[0])
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

    # ----------------------------------------------------------------- order search

    def _objective(self, delta_mode: bool, target: float, rdp: np.ndarray,
                   consts: tuple[np.ndarray, ...]) -> np.ndarray:
        """The bound each finite order certifies: epsilon, or log delta in delta mode.

        epsilon = rho + log1p(-1/alpha) - (log delta + log alpha) / (alpha - 1) and log delta =
        (alpha - 1)(rho - eps + log1p(-1/alpha)) - log alpha (capped at 0): Balle et al. 2020,
        Theorem 21 (= Canonne-Kamath-Steinke 2020, Proposition 12), as :func:`_eps_at` and
        :func:`_log_delta_at`; Mironov 2017's Proposition 3 is never smaller (its extra terms
        log1p(-1/alpha) and -log(alpha)/(alpha-1) are negative), so it is not formed.
        """
        t, c1, c2, inv_t = consts
        if delta_mode:
            return np.minimum(t * (rdp - target + c1) - c2, 0.0)
        return rdp + c1 - (target + c2) * inv_t

    def _objective_at(self, delta_mode: bool, target: float,
                      alphas: np.ndarray) -> np.ndarray:
        return self._objective(delta_mode, target, self._total_at(alphas), _consts(alphas))

    def _objective_at_order(self, delta_mode: bool, target: float, alpha: float) -> float:
        """:meth:`_objective_at` at one finite order (scalar arithmetic)."""
        rho = self._total_at_order(alpha)
        t = alpha - 1.0
        c1 = math.log1p(-1.0 / alpha)
        if delta_mode:
            return min(t * (rho - target + c1) - math.log(alpha), 0.0)
        return rho + c1 - (target + math.log(alpha)) * (1.0 / t)

    def _optimise(self, delta_mode: bool, target: float) -> tuple[float, float, float]:
        """Best bound over the orders: (value, its order, smallest finite-order RDP seen).

        ``target`` is log(delta) for epsilon, epsilon for (log) delta. Any order's exact total
        RDP certifies a bound, so the answer is always the value at one order where the exact
        total was evaluated (never an interpolated one); the search only decides which orders.

        Grid: the totals are known on the whole grid (running sums) and the best grid order is
        taken, then, with ``refine``, polished by :meth:`_polish` between its grid neighbours.
        With lazily evaluated curves (the subsampled Gaussian) and every curve convex in the
        sense below, the grid is not evaluated everywhere: with f(t) = t rho(1+t) convex (true
        of every Renyi divergence: van Erven-Harremoes 2014, Theorem 11, and of zCDP lines) and
        h(t) = t log t - (1+t) log(1+t) convex (h'' = 1/t - 1/(1+t) > 0), the epsilon bound is
        (f(t) + h(t) - log delta) / t, whose sublevel sets {f + h - log delta - lambda t <= 0}
        are intervals: it is quasi-convex in t (and log delta(t) = f(t) + h(t) - eps t is
        convex). So a scan of a coarse subset of the grid in ascending order can stop once a
        value exceeds the smallest one seen, and the minimum over the whole continuum lies
        between the coarse neighbours of the best coarse order; that bracket is narrowed by a
        vectorised zoom (:data:`_ZOOM_POINTS` orders per round, all curves evaluated together)
        and then polished. The result is then never above any grid order's value (in
        particular dp_accounting's default orders, which the default grid contains). Curves
        without that convexity (LNMax's minimum, registered curves) make the search evaluate
        the whole grid instead. alpha = inf (the pure-DP bound) is compared separately.
        """
        grid = self._grid
        nf = grid.nf
        best, order, rho_min = math.inf, math.nan, math.inf
        if nf:
            if self._lazy and self._convex and self._refine:
                best, order, rho_min = self._scan(delta_mode, target)
            else:
                total = self._grid_total()[:nf]
                values = self._objective(delta_mode, target, total,
                                         (grid.t, grid.c1, grid.c2, grid.inv_t))
                rho_min = float(total.min())
                j = int(np.argmin(values))
                best, order = float(values[j]), float(grid.a[j])
                if self._refine and nf > 1 and math.isfinite(best):
                    lo, hi = max(j - 1, 0), min(j + 1, nf - 1)
                    best, order = self._polish(
                        delta_mode, target,
                        (float(grid.s[lo]), float(values[lo]), float(grid.a[lo])),
                        (float(grid.s[j]), best, order),
                        (float(grid.s[hi]), float(values[hi]), float(grid.a[hi])))
        else:
            order = float(self._orders[0])
        if grid.has_inf:
            d_inf = float(self._grid_total(np.array([nf]))[0])
            if delta_mode:
                value = -math.inf if d_inf <= target else 0.0
            else:
                value = d_inf
            if value < best:
                best, order = value, math.inf
        return best, order, rho_min

    def _scan(self, delta_mode: bool, target: float) -> tuple[float, float, float]:
        """Coarse ascending scan, zoom and polish (quasi-convex case of :meth:`_optimise`)."""
        grid = self._grid
        coarse = grid.coarse
        points: list[tuple[float, float, float]] = []  # (log(alpha - 1), value, alpha)
        running, rho_min = math.inf, math.inf
        pos, size, stop = 0, grid.quad_coarse, False
        while pos < coarse.size and not stop:
            chunk = coarse[pos:pos + size]
            pos, size = pos + size, 4
            total = self._grid_total(chunk)
            rho_min = min(rho_min, float(total.min()))
            values = self._objective(delta_mode, target, total, (
                grid.t[chunk], grid.c1[chunk], grid.c2[chunk], grid.inv_t[chunk]))
            for i, v in zip(chunk.tolist(), values.tolist(), strict=True):
                points.append((float(grid.s[i]), v, float(grid.a[i])))
                if v > running:
                    stop = True  # past the minimum (quasi-convexity)
                running = min(running, v)
        values_seen = [p[1] for p in points]
        i = values_seen.index(running)
        if not math.isfinite(running):
            return running, points[i][2], rho_min
        last = len(values_seen) - 1 - values_seen[::-1].index(running)
        lo = points[i - 1] if i > 0 else points[i]
        hi = points[last + 1] if last + 1 < len(points) else points[last]
        mid = points[i]
        while hi[0] - lo[0] > _ZOOM_WIDTH:
            s = np.linspace(lo[0], hi[0], _ZOOM_POINTS + 2)[1:-1]
            alphas = 1.0 + np.exp(s)
            values = self._objective_at(delta_mode, target, alphas)
            merged = sorted({p[0]: p for p in (lo, mid, hi, *zip(
                s.tolist(), values.tolist(), alphas.tolist(), strict=True))}.values())
            k = min(range(len(merged)), key=lambda m: merged[m][1])
            mid = merged[k]
            lo, hi = merged[max(k - 1, 0)], merged[min(k + 1, len(merged) - 1)]
        value, order = self._polish(delta_mode, target, lo, mid, hi)
        return value, order, rho_min

    def _polish(self, delta_mode: bool, target: float, lo: tuple[float, float, float],
                mid: tuple[float, float, float],
                hi: tuple[float, float, float]) -> tuple[float, float]:
        """Brent's minimisation in s = log(alpha - 1) on exact values, from a bracket.

        (lo, mid, hi) brackets the minimum (mid's value is the smallest; mid may be lo or hi at
        an end of the grid, and is then first moved 1e-6 of the bracket inwards, where it stays
        if that does not improve it). As in Brent's method
        (R. P. Brent, "Algorithms for minimization without derivatives", 1973, Chapter 5), each
        step evaluates the exact total at the vertex of the parabola through the three best
        points so far, or at the golden-section point of the larger half of the bracket when
        that vertex falls outside it, is not shorter than half the step before last, or the
        previous parabolic step did not improve (sharp, asymmetric minima, e.g. at the
        subsampled Gaussian's transition to its large-order regime). It stops once the last step
        was shorter than 1e-4 (the three best points then pin the minimum down) and the parabola
        promises a gain below :data:`_POLISH_RTOL` (relative), once the bracket is narrower than
        1e-11, or after :data:`_POLISH_STEPS` steps. Returns the best (value, order) evaluated.
        """
        a, b = lo[0], hi[0]
        x, fx, alpha_x = mid
        (w, fw, _), (v, fv, _) = sorted((lo, hi), key=lambda p: p[1])
        if not a < b:
            return fx, alpha_x
        if x in (a, b):  # the best order ends the bracket (an end of the grid)
            u = x + 1e-6 * (b - a) if x == a else x - 1e-6 * (b - a)
            alpha = 1.0 + math.exp(u)
            fu = self._objective_at_order(delta_mode, target, alpha)
            if not fu < fx:
                return fx, alpha_x  # quasi-convexity: the minimum is within 1e-6 of the end
            v, fv, w, fw = w, fw, x, fx
            x, fx, alpha_x = u, fu, alpha
        golden = False
        last = before_last = math.inf  # lengths of the last two steps (Brent's d and e)
        for _ in range(_POLISH_STEPS):
            span = b - a
            scale = max(1.0, abs(x))
            if span <= 1e-11 * scale:
                break
            u, predicted = _parabola_min(v, fv, w, fw, x, fx)
            if last <= 1e-4 * scale and fx - predicted <= _POLISH_RTOL * abs(fx):
                break  # converged: the model promises no gain worth an evaluation
            parabolic = (not golden and a + 1e-3 * span < u < b - 1e-3 * span
                         and 1e-12 * scale < abs(u - x) < 0.5 * before_last)  # nan fails too
            if not parabolic:
                half = max(b - x, x - a)
                u = x + 0.381966 * half if b - x > x - a else x - 0.381966 * half
            before_last, last = last, abs(u - x)
            alpha = 1.0 + math.exp(u)
            fu = self._objective_at_order(delta_mode, target, alpha)
            golden = parabolic and not fu < fx
            if fu < fx:
                if u < x:
                    b = x
                else:
                    a = x
                v, fv, w, fw = w, fw, x, fx
                x, fx, alpha_x = u, fu, alpha
            else:
                if u < x:
                    a = u
                else:
                    b = u
                if fu <= fw or w == x:
                    v, fv, w, fw = w, fw, u, fu
                elif fu <= fv or v in (x, w):
                    v, fv = u, fu
        return fx, alpha_x

    # ----------------------------------------------------------------- queries

    def get_epsilon(self, target_delta: float) -> Epsilon:
        """Smallest epsilon the RDP curve certifies at ``target_delta``.

        Args:
            target_delta: Target delta in [0, 1] (0 uses only the pure-DP bound at alpha = inf).

        Returns:
            An ``Epsilon`` (method "RDP"; kind UPPER_BOUND, or DATA_DEPENDENT if a composed
            event's curve depends on the data); the order used is in :attr:`last_order`.
        """
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
        """Smallest delta the RDP curve certifies at ``target_epsilon`` (finite, >= 0)."""
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
