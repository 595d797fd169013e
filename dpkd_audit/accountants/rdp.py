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
then refined on the continuous curve between the best grid point's neighbours (Brent's bounded
scalar minimiser; a vectorised zoom when many distinct events were composed).

Sensitivity convention: an event's noise is normalised by the sensitivity *between neighbours
of the accountant's relation* (``GaussianDpEvent(s)`` is the pair N(0, s^2), N(1, s^2) under
every relation, as in dp_accounting's ``RdpAccountant`` and in the mechanisms of this package,
which declare replace-one sensitivities). dp_accounting's ``PLDAccountant`` instead shifts a
Gaussian by 2 under REPLACE_ONE (remove + add); compare with it under ADD_OR_REMOVE_ONE.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp
from scipy import optimize, special

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
_BRENT_MAX_EVENTS = 64  # above this, refinement uses a vectorised zoom (see _refined)


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


def laplace_rdp(epsilon: float, orders: Any) -> np.ndarray:
    """RDP of the Laplace mechanism with eps = sensitivity / scale (exact).

    Mironov 2017, Proposition 6 (Table II): for alpha > 1,
    D_alpha = 1/(alpha-1) log( alpha/(2alpha-1) e^{(alpha-1) eps} + (alpha-1)/(2alpha-1)
    e^{-alpha eps} ), and D_inf = eps. With t = alpha - 1 the argument of the log minus one is
    (alpha E2(t eps) + t E2(-alpha eps)) / (2 alpha - 1), E2(x) = e^x - 1 - x >= 0 (the terms
    alpha t eps cancel exactly), used while t eps <= 1; otherwise the equivalent form
    eps + log1p(t expm1(-(2alpha-1) eps) / (2alpha-1)) / t, where no cancellation can occur.
    """
    orders = _as_orders(orders)
    eps = _validate.check_positive("epsilon", epsilon, allow_inf=True)

    def finite(a: np.ndarray) -> np.ndarray:
        if math.isinf(eps):
            return np.full(a.shape, np.inf)
        t = a - 1.0
        out = np.empty_like(t)
        small = t * eps <= 1.0
        ts, as_ = t[small], a[small]
        num = as_ * _exp_m1_m_x(ts * eps) + ts * _exp_m1_m_x(-as_ * eps)
        out[small] = np.log1p(num / (as_ + ts)) / ts
        tl, al = t[~small], a[~small]
        out[~small] = eps + np.log1p(tl * np.expm1(-(2.0 * al - 1.0) * eps)
                                     / (2.0 * al - 1.0)) / tl
        return np.maximum(out, 0.0)

    return _with_limit(orders, finite, eps)


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
    """
    orders = _as_orders(orders)
    eps = _validate.check_positive("epsilon", epsilon, allow_inf=True)
    if math.isinf(eps):
        return np.full(orders.shape, np.inf)
    # Privacy loss +eps w.p. e^eps/(1+e^eps), -eps w.p. 1/(1+e^eps); KL = eps tanh(eps/2).
    log_w = np.array([-math.log1p(math.exp(-eps)), -eps - math.log1p(math.exp(-eps))])
    losses = np.array([eps, -eps])
    kl = eps * math.tanh(0.5 * eps)
    return _with_limit(orders, lambda a: _renyi_finite(log_w, losses, kl, a), eps)


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


def _log_binomial_remainder(alpha: float, x: np.ndarray, log_x: np.ndarray) -> np.ndarray:
    """Log phi(x), phi(x) = (1+x)^alpha - 1 - alpha x (> 0 for alpha > 1, x > -1, x != 0).

    |x| < 1/2: the binomial series sum_{j>=2} C(alpha,j) x^j (60 terms: error below 1e-17
    relative for alpha <= 16); x >= 1/2: (1+x)^alpha (1 - (1+alpha x)(1+x)^-alpha), the bracket
    in (0, 1) by Bernoulli's inequality, all in log space from ``log_x`` = log x (x may
    overflow); x <= -1/2: directly.
    """
    out = np.empty_like(x)
    small = np.abs(x) < 0.5
    xs = x[small]
    term = 0.5 * alpha * (alpha - 1.0) * xs * xs
    acc = term.copy()
    for j in range(2, 61):
        term = term * ((alpha - j) / (j + 1.0)) * xs
        acc = acc + term
    with np.errstate(divide="ignore"):
        out[small] = np.log(acc)
    big = x >= 0.5
    lx = log_x[big]
    log_1px = lx + np.log1p(np.exp(-lx))                              # log(1 + x)
    log_1pax = math.log(alpha) + lx + np.log1p(np.exp(-lx) / alpha)  # log(1 + alpha x)
    out[big] = alpha * log_1px + np.log(-np.expm1(log_1pax - alpha * log_1px))
    neg = x <= -0.5
    xn = x[neg]
    out[neg] = np.log(np.exp(alpha * np.log1p(xn)) - 1.0 - alpha * xn)
    return out


def _sgm_log_a_quad(q: float, sigma: float, alpha: float) -> float | None:
    """Log A_alpha by trapezoid quadrature of A - 1 = E_{z~mu0}[phi(q (L(z) - 1))] (or None).

    With L(z) = e^{(2z-1)/(2 sigma^2)} = mu1/mu0, mu/mu0 = 1 + q(L - 1) and E_{mu0}[L] = 1, so
    A_alpha - 1 = E_{mu0}[phi(x)], phi(x) = (1+x)^alpha - 1 - alpha x >= 0 (the definition of
    A_alpha, MTZ19 Sec. 3): a non-negative integrand, so tiny RDP values keep their relative
    precision. The integrand is analytic in the strip |Im z| < pi sigma^2 (branch points where
    1 + x = 0) and Gaussian-dominated, so the trapezoid rule on [-40 sigma, alpha + 40 sigma]
    (beyond which the mass is below e^-800) converges geometrically; the step is set for an
    aliasing error ~ e^-45 and checked against the half step (agreement to 1e-11 in log A - 1).
    Returns None (the caller then uses the series) if the rule would need more than
    ``_QUAD_MAX_POINTS`` points (tiny sigma, where the series converges at once) or the check
    fails.
    """
    d = min(3.0 * sigma, 0.9 * math.pi * sigma * sigma)
    h = 2.0 * math.pi * d / 45.0
    lo, hi = -40.0 * sigma, alpha + 40.0 * sigma
    log_q = math.log(q)
    log_norm = 0.5 * math.log(2.0 * math.pi) + math.log(sigma)
    previous = None
    for _ in range(3):
        n = math.ceil((hi - lo) / h)
        if n > _QUAD_MAX_POINTS:
            return None
        z = lo + h * np.arange(n + 1)
        log_l = (2.0 * z - 1.0) / (2.0 * sigma * sigma)
        capped = np.minimum(log_l, 700.0)
        x = np.where(log_l > 700.0, np.inf, q * np.expm1(capped))  # q (L - 1), no cancellation
        with np.errstate(divide="ignore", invalid="ignore"):
            log_x = np.where(log_l > 30.0, log_q + log_l
                             + np.log1p(-np.exp(-np.maximum(capped, 30.0))),
                             np.log(q * np.expm1(np.minimum(log_l, 30.0))))
        log_f = -z * z / (2.0 * sigma * sigma) - log_norm \
            + _log_binomial_remainder(alpha, x, log_x)
        log_s = math.log(h) + float(special.logsumexp(log_f))
        if previous is not None and abs(log_s - previous) <= 1e-11:
            return float(np.logaddexp(0.0, log_s))
        previous = log_s
        h *= 0.5
    return None


def subsampled_gaussian_rdp(sampling_probability: float, noise_multiplier: float,
                            orders: Any) -> np.ndarray:
    """RDP of the Poisson-subsampled Gaussian mechanism (add/remove neighbours).

    Mironov, Talwar, Zhang, "Renyi differential privacy of the sampled Gaussian mechanism",
    arXiv:1908.10530, 2019, Section 3: the worst pair is mu0 = N(0, s^2) and
    mu = (1-q) N(0, s^2) + q N(1, s^2), and the RDP is log(A_alpha)/(alpha-1) with
    A_alpha = E_{mu0}[(mu/mu0)^alpha] (the other direction is never larger, MTZ19 Sec. 3.1;
    checked numerically in the tests). Integer orders use the exact binomial expansion of
    Section 3.3 (:func:`_sgm_log_a_int`). Fractional orders below 16 use a trapezoid quadrature
    of the non-negative integrand of A_alpha - 1 (:func:`_sgm_log_a_quad`), which keeps full
    relative precision where the Section 3.3 series converges slowly (alpha near 1, large sigma)
    or loses precision (A_alpha - 1 below 1e-8); larger fractional orders, and tiny sigma, use the
    numerically stable series of Section 3.3 (:func:`_sgm_log_a_frac`). q = 1 is the Gaussian
    curve, q = 0 gives 0.
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
        out = np.empty_like(alpha)
        for n, a in enumerate(alpha):
            if float(a).is_integer():
                log_a = _sgm_log_a_int(q, s, int(a))
            else:
                log_a = None
                if a < _QUAD_MAX_ORDER:
                    log_a = _sgm_log_a_quad(q, s, float(a))
                if log_a is None:
                    log_a = _sgm_log_a_frac(q, s, float(a))
            out[n] = log_a / (a - 1.0)
        return np.maximum(out, 0.0)

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
    _cached_curve.cache_clear()


def unregister_rdp_curve(event_type: type) -> None:
    """Remove the curve registered for exactly ``event_type`` (no-op if there is none)."""
    _REGISTRY.pop(event_type, None)
    _cached_curve.cache_clear()


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

    Args:
        orders: RDP orders for the grid search (reals > 1, inf allowed); default
            :data:`DEFAULT_ORDERS` (alpha - 1 log-spaced over [1e-3, 1e4], dp_accounting's
            orders, and inf).
        neighboring_relation: The neighbouring relation, fixed here (default REPLACE_ONE, as for
            the other accountants of the package). ``PoissonSampledDpEvent`` needs
            ADD_OR_REMOVE_ONE (or REPLACE_SPECIAL); randomized response needs REPLACE_ONE or
            REPLACE_SPECIAL. Other events' curves are stated for the relation their sensitivity
            or declared guarantee refers to.
        refine: Refine the best grid order on the continuous curve between its grid neighbours
            (Brent's bounded minimiser; a vectorised zoom when more than 64 distinct events
            were composed, see :meth:`_refined`).

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
        self._refine = refine
        self.last_order: float = math.nan

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
            rdp_curve(event, _PROBE_ORDER, self._relation)
        except (ValueError, TypeError, AttributeError, ArithmeticError,
                NotImplementedError) as err:
            raise self._unsupported(event, str(err) or type(err).__name__) from None

    # ----------------------------------------------------------------- totals

    def rdp(self, orders: Any = None) -> np.ndarray:
        """Total RDP of the composed history at ``orders`` (default: the grid).

        sum over distinct events of count * rho_event(alpha) (Mironov 2017, Proposition 1);
        inf everywhere after a NonPrivateDpEvent.
        """
        arr = self._orders if orders is None else _as_orders(orders)
        if self._non_private:
            return np.full(arr.shape, np.inf)
        total = np.zeros(arr.shape)
        for event, count in self._counts.items():
            total = total + count * rdp_curve(event, arr, self._relation)
        return total

    def _total_at(self, alphas: np.ndarray) -> np.ndarray:
        """Total RDP at off-grid orders (uncached: refinement points are used once)."""
        total = np.zeros(alphas.shape)
        for event, count in self._counts.items():
            total = total + count * _evaluate(event, alphas, self._relation)
        return total

    def _kind(self) -> BoundKind:
        if any(is_data_dependent(event) for event in self._counts):
            return BoundKind.DATA_DEPENDENT
        return BoundKind.UPPER_BOUND

    def _refined(self, grid_values: np.ndarray,
                 objective: Callable[[np.ndarray], np.ndarray]) -> tuple[float, float]:
        """Best grid point, refined on the continuous curve between its finite grid neighbours.

        With at most ``_BRENT_MAX_EVENTS`` distinct events, Brent's bounded scalar minimiser
        (scipy.optimize.minimize_scalar, method="bounded"); with more, where each scalar
        evaluation would cost one curve call per distinct event, a vectorised zoom: three rounds
        of 33 equispaced orders, each round narrowing to the neighbours of its best point (one
        curve call per event and round; the bracket shrinks 4096-fold). Any order gives a valid
        bound, so the result is the best value seen, never worse than the grid's.
        """
        i = int(np.argmin(grid_values))
        best, order = float(grid_values[i]), float(self._orders[i])
        finite_idx = np.flatnonzero(np.isfinite(self._orders) & np.isfinite(grid_values))
        if not self._refine or finite_idx.size < 2:
            return best, order
        j = int(finite_idx[np.argmin(grid_values[finite_idx])])
        pos = int(np.searchsorted(finite_idx, j))
        lo = float(self._orders[finite_idx[max(pos - 1, 0)]])
        hi = float(self._orders[finite_idx[min(pos + 1, finite_idx.size - 1)]])
        if not hi > lo:
            return best, order
        if len(self._counts) <= _BRENT_MAX_EVENTS:
            res = optimize.minimize_scalar(
                lambda a: float(objective(np.array([a]))[0]), bounds=(lo, hi), method="bounded",
                options={"xatol": 1e-7 * (hi - lo) + 1e-12, "maxiter": 60})
            x = float(res.x)
            value = float(objective(np.array([x]))[0])
        else:
            x, value = order, best
            for _ in range(3):
                points = np.linspace(lo, hi, 33)
                values = objective(points)
                k = int(np.argmin(values))
                if values[k] < value:
                    x, value = float(points[k]), float(values[k])
                lo, hi = float(points[max(k - 1, 0)]), float(points[min(k + 1, 32)])
        if value < best:
            return value, x
        return best, order

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
        kind = self._kind()
        self.last_order = math.nan
        if self._non_private:
            return Epsilon(math.inf, method=self.method, kind=kind)
        if not self._counts or target_delta >= 1.0:
            return Epsilon(0.0, method=self.method, kind=kind)
        grid_rdp = self.rdp()
        if target_delta > 0 and target_delta >= _tv_bound(self._orders, grid_rdp):
            return Epsilon(0.0, method=self.method, kind=kind)
        if target_delta == 0:
            values = np.where(np.isinf(self._orders), grid_rdp, np.inf)
            i = int(np.argmin(values))
            self.last_order = float(self._orders[i])
            return Epsilon(float(values[i]), method=self.method, kind=kind)
        values = _eps_at(self._orders, grid_rdp, target_delta)

        def objective(alphas: np.ndarray) -> np.ndarray:
            v = _eps_at(alphas, self._total_at(alphas), target_delta)
            return np.where(np.isfinite(v), v, np.inf)

        value, order = self._refined(values, objective)
        self.last_order = order
        return Epsilon(max(0.0, value), method=self.method, kind=kind)

    def get_delta(self, target_epsilon: float) -> float:
        """Smallest delta the RDP curve certifies at ``target_epsilon`` (finite, >= 0)."""
        target_epsilon = _check_target_epsilon(target_epsilon)
        self.last_order = math.nan
        if self._non_private:
            return 1.0
        if not self._counts:
            return 0.0
        grid_rdp = self.rdp()
        values = _log_delta_at(self._orders, grid_rdp, target_epsilon)

        def objective(alphas: np.ndarray) -> np.ndarray:
            v = _log_delta_at(alphas, self._total_at(alphas), target_epsilon)
            return np.where(np.isnan(v), 0.0, v)

        log_best, order = self._refined(values, objective)
        best = math.exp(log_best)
        tv = _tv_bound(self._orders, grid_rdp)
        if tv < best:
            return tv
        self.last_order = order
        return min(best, 1.0)
