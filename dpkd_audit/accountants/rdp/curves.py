"""Closed-form RDP curves of noise-adding and randomized-response mechanisms, per event and batched.

Each public ``*_rdp`` function evaluates one mechanism's exact Renyi divergence at any real orders
alpha > 1 (and at alpha = inf, where it is the pure-DP bound D_inf): Gaussian (Mironov 2017,
Prop 7), Laplace (Prop 6), the worst eps-DP pair, binary randomized response (Prop 5), k-ary
randomized response and discrete Laplace (exact, derived below). Mironov, "Renyi differential
privacy", CSF 2017 (arXiv:1702.07476).

The ``_*_rows`` functions are the batched "family kernels" the accountant uses: one vectorised
expression evaluates the curves of many events (rows: precomputed per-event parameters, see the
``_*_params`` functions) at many finite orders (columns). Every entry depends only on its own
(parameters, alpha), never on which other rows or orders are evaluated with it; each kernel is the
same exact divergence as its per-event curve, formed without cancellation (the tests compare them
with the per-event curves, with finite-atom sums and with mpmath).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import special

from dpkd_audit import _validate
from dpkd_audit.accountants.base import NeighboringRelation, UnsupportedEventError

__all__ = [
    "discrete_laplace_rdp",
    "gaussian_rdp",
    "laplace_rdp",
    "pure_dp_rdp",
    "randomized_response_rdp",
]

#: alpha * eps above which the Laplace curve uses its direct form (relative error below 1e-12;
#: see :func:`_laplace_matrix`).
_LAPLACE_DIRECT_MIN = 1e-3

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
    keeps full relative precision as alpha -> 1; it is used while t max|L| <= 1. Beyond,
    E_P[e^{tL}] - 1 = sum_i w_i expm1(t L_i) goes to log1p (no cancellation against the 1, which
    a log-sum-exp would suffer when the divergence is small; in the two- and three-valued losses
    of randomized response the negative terms are at most a fixed fraction of the positive ones),
    and the log-sum-exp form is used only once t max L > 700 (where expm1 would overflow).

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
        x = tl[:, None] * losses[None, :]
        direct = np.log1p(np.expm1(np.minimum(x, 700.0)) @ np.exp(log_w)) / tl
        lse = special.logsumexp(log_w[None, :] + x, axis=1) / tl
        out[~small] = np.where(x.max(axis=1) <= 700.0, direct, lse)
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


# --------------------------------------------------------------------------- per-event curves

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
    eps_min = (float(eps[0]) if eps.size == 1 else float(eps.min())) if eps.size else math.inf
    if eps_min < _LAPLACE_DIRECT_MIN and alpha.size \
            and eps_min * float(alpha.min()) < _LAPLACE_DIRECT_MIN:  # alpha > 1: a quick test
        rows, cols = np.nonzero(alpha[None, :] * e < _LAPLACE_DIRECT_MIN)
        ts, as_, es = t[cols], alpha[cols], eps[rows]
        num = as_ * _exp_m1_m_x(ts * es) + ts * _exp_m1_m_x(-as_ * es)
        out[rows, cols] = np.log1p(num / (as_ + ts)) / ts
    return np.maximum(out, 0.0)


def _laplace_vector(eps: np.ndarray, alpha: float, eps_min: float | None = None) -> np.ndarray:
    """``_laplace_matrix(eps, [alpha])[:, 0]`` with fewer array operations (same values).

    ``eps_min`` is eps.min() when the caller knows it.
    """
    if alpha * (float(eps.min()) if eps_min is None else eps_min) < _LAPLACE_DIRECT_MIN:
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


def _log_q_keep(p: float, k: int) -> float:
    """Log q_keep = log(1 - p + p/k) of k-ary randomized response, precise for every p.

    log1p(-p + p/k) near p = 0; for p >= 1/2, 1 - p is exact (Sterbenz) and q_keep <= 3/4, so
    log((1 - p) + p/k) keeps the relative precision that log1p would lose when q_keep is tiny.
    """
    return math.log1p(-p + p / k) if p < 0.5 else math.log((1.0 - p) + p / k)


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
    is the larger of the two directions D_alpha(RR(x)||U) and D_alpha(U||RR(x)) (their KL
    divergences are formed without cancellation by :func:`_rr_special_kls`). p = 0 (no noise)
    gives inf, p = 1 or k = 1 gives 0. Each direction is a finite privacy-loss distribution
    evaluated by :func:`_renyi_finite`; the accountant evaluates many events at once with
    :func:`_sym3_rows` (REPLACE_ONE) and :func:`_rr_special_rows`, which give the same values.
    """
    orders = _as_orders(orders)
    p = _validate.check_probability("noise_parameter", noise_parameter)
    k = _validate.check_int("num_buckets", num_buckets, minimum=1)
    if k == 1 or p == 1.0:
        return np.zeros(orders.shape)
    if p == 0.0:
        return np.full(orders.shape, np.inf)
    log_keep = _log_q_keep(p, k)
    log_other = math.log(p / k)
    if neighboring_relation is NeighboringRelation.REPLACE_SPECIAL:
        # P = RR(x): loss log(k q_keep) = log1p((k-1)(1-p)) w.p. q_keep, log(k q_other) = log p.
        l1, l2 = math.log1p((k - 1) * (1.0 - p)), math.log(p)
        forward_w = np.array([log_keep, math.log(k - 1) + log_other])
        forward_l = np.array([l1, l2])
        forward_kl, backward_kl = _rr_special_kls(p, k)
        backward_w = np.array([-math.log(k), math.log1p(-1.0 / k)])
        backward_l = -forward_l

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




def _xlog1px_m_x(x: float) -> float:
    """(1+x) log1p(x) - x >= 0 for x > -1, without cancellation near 0.

    |x| <= 0.1: sum_{n>=2} (-1)^n x^n / (n(n-1)) to n = 20 (the terms left out are below 1e-22
    of the sum); otherwise the direct form, which loses at most a factor 20 of relative precision.
    """
    if abs(x) <= 0.1:
        return math.fsum((-x) ** n / (n * (n - 1)) for n in range(2, 21))
    return (1.0 + x) * math.log1p(x) - x


def _x_m_log1px(x: float) -> float:
    """Return x - log1p(x) >= 0 for x > -1: sum_{n>=2} (-1)^n x^n / n to n = 20 when |x| <= 0.1."""
    if abs(x) <= 0.1:
        return math.fsum((-x) ** n / n for n in range(2, 21))
    return x - math.log1p(x)


def _rr_special_kls(p: float, k: int) -> tuple[float, float]:
    """KL(RR(x)||U) and KL(U||RR(x)) of k-ary randomized response, as sums of terms >= 0.

    With d = 1 - p, k q_keep = 1 + (k-1) d and k q_other = 1 - d, so
    KL(RR||U) = [f((k-1) d) + (k-1) f(-d)] / k with f(x) = (1+x) log1p(x) - x, and
    KL(U||RR) = [g((k-1) d) + (k-1) g(-d)] / k with g(x) = x - log1p(x) (the linear terms
    (k-1) d - (k-1) d cancel exactly); f, g >= 0, so small divergences (p near 1) keep their
    relative precision.
    """
    d = 1.0 - p
    x = (k - 1) * d
    if d <= 0.1:
        f_other, g_other = _xlog1px_m_x(-d), _x_m_log1px(-d)
    else:  # 1 - d = p: use log(p) itself (d may round to 1 when p is tiny)
        log_p = math.log(p)
        f_other, g_other = p * log_p + d, -d - log_p
    return ((_xlog1px_m_x(x) + (k - 1) * f_other) / k, (_x_m_log1px(x) + (k - 1) * g_other) / k)


def discrete_laplace_rdp(noise_parameter: float, sensitivity: int, orders: Any) -> np.ndarray:
    """Exact RDP of the discrete Laplace mechanism (pmf proportional to e^{-a|x|} on Z).

    Derivation (a = noise_parameter, integer shift k, u = e^{-a}, r = e^{-a(2alpha-1)}, c =
    tanh(a/2) the normaliser): splitting sum_x P(x)^alpha P(x-k)^{1-alpha} over x <= 0,
    0 < x < k and x >= k gives three geometric series whose sum is

        H_k(alpha) = [(1 - u r) e^{a(alpha-1)k} + (u - r) e^{-a alpha k}] / ((1 - r)(1 + u)),

    and D_alpha = log H_k / (alpha - 1). H_k is convex in k with H_0 = 1 < H_1, hence increasing
    in k >= 0, so the worst neighbouring shift is k = Delta = sensitivity. For Delta = 1 this is
    exactly binary randomized response with eps = a (the privacy loss is +-a), which is used
    there; D_inf = a Delta. Larger sensitivities are evaluated by :func:`_dlap_rows` (see there
    for the cancellation-free form of H - 1, which keeps full relative precision however small
    a Delta is). Tested against exact high-precision sums of the definition and against the
    finite privacy-loss distribution (Delta + 1 atoms) of the pair.
    """
    orders = _as_orders(orders)
    a = _validate.check_positive("noise_parameter", noise_parameter, allow_inf=True)
    delta = _validate.check_int("sensitivity", sensitivity, minimum=1)
    if math.isinf(a):
        return np.zeros(orders.shape)
    eps = a * delta
    if delta == 1:
        return pure_dp_rdp(eps, orders)
    row = np.array([_dlap_params(a, delta)])
    return _with_limit(orders, lambda alpha: _dlap_rows(row, alpha)[0], eps)


# --------------------------------------------------------------------------- batched kernels
#
# A kernel maps an (n, d) array of per-event parameter rows and m finite orders to the (n, m)
# array of the events' RDP. The rows are computed once per event by the ``_*_params`` functions.

#: 1/17!, 1/15!, ..., 1/3!: Horner coefficients of sinh(y) - y in y^2 (see :func:`_sinh_m_x`).
_SINH_COEFFS = tuple(1.0 / math.factorial(j) for j in range(17, 2, -2))


def _sinh_m_x(y: np.ndarray) -> np.ndarray:
    """sinh(y) - y = sum_{j>=1} y^{2j+1}/(2j+1)! for 0 <= y <= 1, without cancellation.

    Summed to y^17/17! by Horner's rule in y^2; the terms left out are below y^19/19! < 1e-17 of
    y^3/3!, i.e. below the float64 resolution of the sum.
    """
    z = y * y
    acc = _SINH_COEFFS[0]
    for c in _SINH_COEFFS[1:]:
        acc = acc * z + c
    return acc * z * y


def _pure_params(eps: float) -> tuple[float, ...]:
    """:func:`_sym3_rows` row of binary randomized response with parameter eps (finite, > 0).

    The privacy loss is +eps w.p. w1 = e^eps/(1+e^eps) and -eps w.p. w2 = 1/(1+e^eps) (Mironov
    2017, Prop 5); w1 + w2 = 1, w1 - w2 = tanh(eps/2) and KL = eps tanh(eps/2).
    """
    lw1 = -math.log1p(math.exp(-eps))
    wm = math.tanh(0.5 * eps)
    return (eps, eps * wm, 1.0, wm, math.exp(lw1), math.exp(lw1 - eps), 0.0)


def _rr_one_params(p: float, k: int) -> tuple[float, ...]:
    """:func:`_sym3_rows` row of k-ary randomized response (k >= 3, 0 < p < 1), REPLACE_ONE.

    The privacy loss is eps = log(q_keep/q_other) w.p. w1 = q_keep = 1-p+p/k, -eps w.p. w2 =
    q_other = p/k and 0 w.p. w3 = (k-2) p/k (see :func:`randomized_response_rdp`); w1 - w2 = 1-p
    and KL = (w1 - w2) eps.
    """
    eps = math.log1p(k * (1.0 - p) / p)  # log(q_keep / q_other), as randomized_response_rdp
    w1, w2 = (1.0 - p) + p / k, p / k
    return (eps, eps * (1.0 - p), w1 + w2, 1.0 - p, w1, w2, (k - 2) * (p / k))


def _sym3_rows(params: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """RDP of a privacy loss taking the values +eps, -eps and 0 (w.p. w1, w2, w3) per row.

    This is binary randomized response (w3 = 0: pure-DP events, discrete Laplace with
    sensitivity 1) and k-ary randomized response under REPLACE_ONE (rows from
    :func:`_pure_params`, :func:`_rr_one_params`). D_alpha = log(w1 e^{t eps} + w2 e^{-t eps} +
    w3) / t, t = alpha - 1 (Mironov 2017, Definition 3). As in :func:`_renyi_finite`, while
    t eps <= 1 the argument of the log minus one is t KL + w1 E2(t eps) + w2 E2(-t eps), E2(x) =
    e^x - 1 - x, here written (w1 + w2)(cosh(y) - 1) + (w1 - w2)(sinh(y) - y), y = t eps, with
    cosh(y) - 1 = 2 sinh(y/2)^2 and sinh(y) - y by :func:`_sinh_m_x`: every term is >= 0, so the
    value keeps full relative precision as alpha -> 1. Beyond, D = log1p(w1 expm1(y) +
    w2 expm1(-y)) / t (w1 >= w2 and y > 1, so the negative term is below e^-1 of the positive
    one; no cancellation against the 1 when w3 is close to 1), and D = eps + log(w1 + w2 e^{-2y}
    + w3 e^{-y}) / t once y > 700 (no overflow).
    """
    eps, kl, wp, wm, w1, w2, w3 = (params[:, i:i + 1] for i in range(7))
    t = alpha - 1.0
    te = t * eps
    small = te <= 1.0
    y = np.where(small, te, 0.0)
    h = np.sinh(0.5 * y)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        near = np.log1p(t * kl + wp * (2.0 * h * h) + wm * _sinh_m_x(y)) / t
        e1 = np.exp(-te)
        far = np.where(te <= 700.0,
                       np.log1p(w1 * np.expm1(np.minimum(te, 700.0)) + w2 * (e1 - 1.0)) / t,
                       eps + np.log(w1 + (w2 * e1 + w3) * e1) / t)
    return np.maximum(np.where(small, near, far), 0.0)


def _rr_special_params(p: float, k: int) -> tuple[float, ...]:
    """:func:`_rr_special_rows` row of k-ary randomized response (k >= 2, 0 < p < 1).

    Forward, P = RR(x) against the uniform U: loss l1 = log1p((k-1)(1-p)) w.p. q_keep and l2 =
    log p w.p. (k-1) q_other; backward, losses -l1, -l2 w.p. 1/k, (k-1)/k; the KL divergences
    come from :func:`_rr_special_kls`.
    """
    log_keep, log_other = _log_q_keep(p, k), math.log(p / k)
    l1, l2 = math.log1p((k - 1) * (1.0 - p)), math.log(p)
    kl_f, kl_b = _rr_special_kls(p, k)
    lwa_f, lwb_f = log_keep, math.log(k - 1) + log_other
    lwa_b, lwb_b = -math.log(k), math.log1p(-1.0 / k)
    return (max(abs(l1), abs(l2)), l1, l2, lwa_f, lwb_f, kl_f, lwa_b, lwb_b, kl_b,
            math.exp(lwa_f), math.exp(lwb_f), math.exp(lwa_b), math.exp(lwb_b))


def _two_atom(t: np.ndarray, small: np.ndarray, la: np.ndarray, lb: np.ndarray,
              lwa: np.ndarray, lwb: np.ndarray, wa: np.ndarray, wb: np.ndarray,
              kl: np.ndarray) -> np.ndarray:
    """D_alpha of a privacy loss taking the value la w.p. wa and lb w.p. wb (as _renyi_finite)."""
    xa, xb = t * la, t * lb
    with np.errstate(over="ignore", invalid="ignore"):
        near = np.log1p(t * kl + wa * _exp_m1_m_x(np.where(small, xa, 0.0))
                        + wb * _exp_m1_m_x(np.where(small, xb, 0.0))) / t
        far = np.where(np.maximum(xa, xb) <= 700.0,
                       np.log1p(wa * np.expm1(np.minimum(xa, 700.0))
                                + wb * np.expm1(np.minimum(xb, 700.0))) / t,
                       np.logaddexp(lwa + xa, lwb + xb) / t)
    return np.maximum(np.where(small, near, far), 0.0)


def _rr_special_rows(params: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """k-ary randomized response under REPLACE_SPECIAL: the larger of the two directions.

    Each direction is a two-valued privacy loss (:func:`_rr_special_params`) evaluated as
    :func:`_renyi_finite` does (the E2 form while t max|loss| <= 1, log1p of the expm1 sum
    beyond, log-sum-exp past t max loss = 700).
    """
    m, l1, l2, lwa_f, lwb_f, kl_f, lwa_b, lwb_b, kl_b, wa_f, wb_f, wa_b, wb_b = (
        params[:, i:i + 1] for i in range(13))
    t = alpha - 1.0
    small = t * m <= 1.0
    forward = _two_atom(t, small, l1, l2, lwa_f, lwb_f, wa_f, wb_f, kl_f)
    backward = _two_atom(t, small, -l1, -l2, lwa_b, lwb_b, wa_b, wb_b, kl_b)
    return np.maximum(forward, backward)


def _rr_special_at_inf(params: np.ndarray) -> np.ndarray:
    """D_inf of :func:`_rr_special_rows` rows: max(l1, -l2)."""
    return np.maximum(params[:, 1], -params[:, 2])


def _dlap_params(a: float, k: int) -> tuple[float, ...]:
    """:func:`_dlap_rows` row of the discrete Laplace mechanism (a finite > 0, shift k >= 2)."""
    u = math.exp(-a)
    return (a, float(k), a * k, u, math.log1p(u))


#: 1/3!, 1/5!, ..., 1/19!: the Taylor coefficients of sinh used by :func:`_dlap_rows`.
_DLAP_INV_FACT = tuple(1.0 / math.factorial(m) for m in range(3, 21, 2))


def _dlap_rows(params: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Discrete Laplace RDP (closed form of :func:`discrete_laplace_rdp`) per row and order.

    With t = alpha - 1, A = 1 - u r = -expm1(-2 a alpha), B = u - r = u (-expm1(-2 a t)) and
    E2(x) = e^x - 1 - x >= 0, writing expm1 = x + E2 in the numerator of H_k - 1 gives

        H_k - 1 = [a k L + A E2(a t k) + B E2(-a alpha k)] / ((1 - r)(1 + u)),

    L = A t - B alpha = 2 e^{-a alpha} (t sinh(a alpha) - alpha sinh(a t)) >= 0 (sinh(x)/x
    increases). The terms A t and B alpha agree to O(a^2) (L = O(a^3)), so L is summed from its
    Taylor series while a alpha <= 1:
    L = 2 e^{-a alpha} a alpha t sum_{m odd >= 3} (a alpha)^{m-1} (1 - (t/alpha)^{m-1}) / m!,
    1 - (t/alpha)^{m-1} = -expm1((m-1) log1p(-1/alpha)): non-negative terms, cut after m = 19
    (the rest is below 1/21! < 2e-20 of the sum), and directly beyond. Every term of H - 1 is
    then non-negative (full relative precision as a k -> 0 or alpha -> 1), used while
    t a k <= 1; beyond, H - 1 = [A expm1(a t k) + B expm1(-a alpha k)] / ((1 - r)(1 + u)) (A > B
    and expm1(a t k) > e - 1, so the negative term is below 1/(e-1) of the positive one) goes to
    log1p, and log H is a log-sum-exp of the two exponentials once a t k > 700.
    """
    a, _, eps, u, log1pu = (params[:, i:i + 1] for i in range(5))
    t = alpha - 1.0
    aa = a * alpha
    big_a = -np.expm1(-2.0 * aa)
    big_b = u * -np.expm1(-2.0 * (a * t))
    log_den = np.log(-np.expm1(-a * (2.0 * alpha - 1.0))) + log1pu
    etk = eps * t
    small = etk <= 1.0
    series = aa <= 1.0
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        ell = big_a * t - big_b * alpha
        if series.any():
            z = np.where(series, aa * aa, 0.0)
            l1a = np.log1p(-1.0 / alpha)
            coeffs = [-np.expm1((m - 1.0) * l1a) * c
                      for m, c in zip(range(3, 21, 2), _DLAP_INV_FACT, strict=True)]
            acc = coeffs[-1]
            for c in coeffs[-2::-1]:
                acc = acc * z + c
            ell = np.where(series, 2.0 * np.exp(-aa) * (aa * t) * (acc * z), ell)
        ea = eps * alpha
        num = (eps * ell + big_a * _exp_m1_m_x(np.where(small, etk, 0.0))
               + big_b * _exp_m1_m_x(-np.where(small, ea, 0.0)))
        den = np.exp(log_den)
        near = np.log1p(num / den) / t
        far = np.where(
            etk <= 700.0,
            np.log1p((big_a * np.expm1(np.minimum(etk, 700.0)) + big_b * np.expm1(-ea)) / den) / t,
            (np.logaddexp(np.log(big_a) + etk, np.log(big_b) - ea) - log_den) / t)
    return np.maximum(np.where(small, near, far), 0.0)
