"""RDP of the Poisson-subsampled Gaussian mechanism (Mironov-Talwar-Zhang 2019), as an upper bound.

Mironov, Talwar, Zhang, "Renyi differential privacy of the sampled Gaussian mechanism",
arXiv:1908.10530, 2019 (MTZ19): the worst pair is mu0 = N(0, s^2) and mu = (1-q) N(0, s^2) +
q N(1, s^2), and the RDP is log(A_alpha)/(alpha-1), A_alpha = E_{mu0}[(mu/mu0)^alpha]. Three
evaluations of log A are used (see :func:`subsampled_gaussian_rdp`): the exact binomial sum at
integer orders, a trapezoid quadrature of a non-negative integrand at fractional orders below
16, and the MTZ19 series elsewhere. Each returns an *upper bound* on log A: the computed value is
inflated by a bound on its own error (rounding, series truncation, quadrature aliasing), see
:func:`_log_term_error` and the functions' docstrings.

Rounding model (Higham, "Accuracy and stability of numerical algorithms", 2nd ed., 2002,
Section 2.2 and Lemma 3.1): every floating-point operation has relative error at most u = 2^-53,
and the special functions used (scipy's gammaln, log_ndtr, log, log1p, exp, expm1) are taken to be
within 2 ulps of the exact value of their (exact) arguments, as the cephes/scipy accuracy tables
report. A sum of n computed terms then errs by at most n u times the sum of their magnitudes.
The bounds below use 16 u per unit of magnitude, four times what this model needs.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special

from dpkd_audit import _validate
from dpkd_audit.accountants.rdp.curves import _as_orders, _with_limit, gaussian_rdp

__all__ = ["subsampled_gaussian_rdp"]

_SGM_MAX_TERMS = 1 << 22
_QUAD_MAX_POINTS = 50_000
_QUAD_MAX_ORDER = 16.0  # fractional orders below: quadrature first (the series is slow)
_QUAD_HALF_WIDTH = 20.0  # quadrature range [-20 sigma, alpha + 20 sigma] (see _sgm_log_a_quads)
_SERIES_TOL = 2.0**-57  # a binomial-series term this small (relative) no longer changes the sum
_U = 2.0**-53  # unit roundoff of float64
_ERR_PER_MAGNITUDE = 16.0 * _U  # absolute error of a computed log-term, per unit of magnitude
#: Relative allowance for the rounding of the quadrature's integrand and sum (see
#: :func:`_sgm_log_a_quads`).
_QUAD_ROUNDING = 2.0**-40


def _log_term_error(magnitude: np.ndarray) -> np.ndarray:
    """Bound on |computed - exact| of a log-term formed from components of total ``magnitude``.

    A log-term c_1 + ... + c_m (m <= 8) whose components are special-function values or products
    of two inputs is computed with absolute error at most (2 + m) u sum_i |c_i| under the model of
    the module docstring; ``magnitude`` is sum_i |c_i| (plus 1 for the final exp), and the bound
    returned is 16 u (magnitude + 1). The relative error of exp(term) is then at most
    e^{bound} - 1 <= 1.01 bound.
    """
    return _ERR_PER_MAGNITUDE * (magnitude + 1.0)


def _log_expm1(x: np.ndarray) -> np.ndarray:
    """log(e^x - 1) for x > 0, without overflow."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    big = x > 30.0
    out[big] = x[big] + np.log1p(-np.exp(-x[big]))
    out[~big] = np.log(np.expm1(x[~big]))
    return out


def _sgm_log_a_int(q: float, sigma: float, alpha: int) -> float:
    """Upper bound on log A_alpha for integer alpha: Mironov-Talwar-Zhang 2019, Section 3.3.

    A_alpha = E_{z~mu0}[(mu(z)/mu0(z))^alpha] = sum_{k=0}^{alpha} C(alpha,k) (1-q)^{alpha-k} q^k
    exp((k^2-k)/(2 sigma^2)). Since the same sum without the exponential is 1 and the k = 0, 1
    exponents vanish, A - 1 = sum_{k>=2} C(alpha,k) (1-q)^{alpha-k} q^k expm1((k^2-k)/(2sigma^2)),
    a sum of non-negative terms; log A = log1p(A - 1) keeps full relative precision. Each term's
    log is computed with absolute error at most e_k = :func:`_log_term_error` of its components'
    magnitudes (the log_expm1 of x_k = (k^2-k)/(2 sigma^2) has derivative e^x/(e^x-1) <= 1 + 1/x,
    so the relative rounding of x_k costs at most 2 u (x_k + 1)); A - 1 is inflated by
    sum_k T_k e_k (1.01), plus the rounding of the log-sum-exp (a few ulps of its value).
    """
    k = np.arange(2, alpha + 1, dtype=np.float64)
    g_a, g_k, g_ak = special.gammaln(alpha + 1.0), special.gammaln(k + 1.0), \
        special.gammaln(alpha - k + 1.0)
    x = (k * k - k) / (2.0 * sigma * sigma)
    c_1mq, c_q = (alpha - k) * math.log1p(-q), k * math.log(q)
    lx = _log_expm1(x)
    log_terms = g_a - g_k - g_ak + c_1mq + c_q + lx
    magnitude = abs(g_a) + np.abs(g_k) + np.abs(g_ak) + np.abs(c_1mq) + np.abs(c_q) \
        + np.abs(lx) + x
    lse = float(special.logsumexp(log_terms))
    err = float(special.logsumexp(log_terms + np.log(1.01 * _log_term_error(magnitude))))
    lse_hi = np.logaddexp(lse, err) + 8.0 * _U * (abs(lse) + math.log(k.size + 1.0) + 1.0)
    return float(np.logaddexp(0.0, lse_hi)) * (1.0 + 4.0 * _U)


def _gammaln_magnitude(x: np.ndarray) -> np.ndarray:
    """|gammaln(x)| plus the sensitivity of gammaln to a relative rounding of a negative x.

    For x < 0, gammaln(x) = log(pi / |sin(pi x)|) - gammaln(1 - x) (reflection), whose derivative
    has the term pi cot(pi x); a relative rounding u of x moves it by up to pi |x cot(pi x)| u.
    """
    out = np.abs(special.gammaln(x))
    neg = x < 0
    if neg.any():
        xn = x[neg]
        with np.errstate(divide="ignore"):
            out[neg] += np.abs(math.pi * xn / np.tan(math.pi * xn))
    return out


def _log_ndtr_slope(y: np.ndarray) -> np.ndarray:
    """Upper bound on |d log Phi(y) / dy| = phi(y) / Phi(y): |y| + 2 for y < 0, else e^{-y^2/2}.

    For y <= -1 the Mills-ratio bound Phi(y) >= phi(y) |y| / (y^2 + 1) (Gordon 1941) gives
    phi/Phi <= |y| + 1/|y| <= |y| + 1; for -1 < y < 0, phi/Phi <= phi(0)/Phi(-1) < 2.6; for
    y >= 0, Phi(y) >= 1/2 gives phi/Phi <= 2 phi(y) < e^{-y^2/2}.
    """
    with np.errstate(over="ignore"):
        return np.where(y < 0.0, np.abs(y) + 2.6, np.exp(-0.5 * y * y))


def _sgm_log_a_frac(q: float, sigma: float, alpha: float) -> float:
    """Upper bound on log A_alpha at a fractional alpha: the series of MTZ19, Section 3.3.

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
    below 1e-13 of |A - 1| (or of A when A is large), and the magnitude of the last term is added.
    When A is of order one, A - 1 is formed with an exactly rounded sum (math.fsum) before log1p,
    so that small RDP values keep their relative precision.

    Rounding: the terms nearly cancel against the 1 of A when sigma is large (A - 1 ~ q^2 alpha^2
    / (2 sigma^2) while the terms are of order one), so the few-ulp errors of the log-terms (whose
    components, gammaln(alpha+1) for one, reach alpha log 2 and more) could leave the value
    ~1e-10 below the exact one at large orders. Each term's log is therefore given the error
    bound of :func:`_log_term_error` (components: the three gammaln, i log q, j log(1-q),
    (i^2-i)/(2 sigma^2), log_ndtr and the rounding of its argument, amplified by the derivative
    |d log Phi(y)/dy| <= |y| + 1), and A - 1 is inflated by sum_i |T_i| e_i (1.01) + the tail + the
    rounding of the final sum. Measured against 50-digit references (tests): the inflation is
    about 1e-7 relative at alpha = 16.5 and 4e-9 at alpha = 1000.5 for q = 0.01, sigma = 100 or
    q = 0.1, sigma = 1000, below 1e-11 for sigma <= 50, and reaches 1e-3 at sigma = 10^4 (where
    the uninflated series was 6e-7 below the exact value: the bound is then loose, not wrong).
    """
    log_q, log_1mq = math.log(q), math.log1p(-q)
    z0 = sigma * sigma * (log_1mq - log_q) + 0.5
    log_gamma_a1 = special.gammaln(alpha + 1.0)
    two_s2 = 2.0 * sigma * sigma
    floor = alpha + 2.0  # past it, the alternating-series bound applies
    log_parts: list[np.ndarray] = []
    sign_parts: list[np.ndarray] = []
    err_parts: list[np.ndarray] = []
    start, size = 0, math.ceil(floor) + 64
    z_mag = abs(sigma * sigma * (log_1mq - log_q)) + 1.5
    while True:
        i = np.arange(start, start + size, dtype=np.float64)
        j = alpha - i
        g_i, g_j = special.gammaln(i + 1.0), special.gammaln(j + 1.0)
        log_c = log_gamma_a1 - g_i - g_j
        y0, y1 = (z0 - i) / sigma, (j - z0) / sigma
        n0, n1 = special.log_ndtr(y0), special.log_ndtr(y1)
        e0, e1 = (i * i - i) / two_s2, (j * j - j) / two_s2
        s0 = log_c + i * log_q + j * log_1mq + e0 + n0
        s1 = log_c + j * log_q + i * log_1mq + e1 + n1
        log_parts.append(np.logaddexp(s0, s1))
        sign_parts.append(special.gammasgn(j + 1.0))
        # Error bounds of the two parts' logs (module docstring): the magnitudes of their
        # components, and the rounding of log_ndtr's argument (|y0| sigma <= z_mag + i) times
        # |d log Phi(y)/dy| (:func:`_log_ndtr_slope`).
        g_common = abs(log_gamma_a1) + np.abs(g_i) + _gammaln_magnitude(j + 1.0)
        mag0 = g_common + np.abs(i * log_q) + np.abs(j * log_1mq) + np.abs(e0) + np.abs(n0) \
            + _log_ndtr_slope(y0) * (z_mag + i) / sigma
        mag1 = g_common + np.abs(j * log_q) + np.abs(i * log_1mq) + np.abs(e1) + np.abs(n1) \
            + _log_ndtr_slope(y1) * (z_mag + np.abs(j)) / sigma
        err_parts.append(np.logaddexp(s0 + np.log(1.01 * _log_term_error(mag0)),
                                      s1 + np.log(1.01 * _log_term_error(mag1))))
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
    log_errs = np.concatenate(err_parts)  # log of each term's absolute error bound
    tail = math.exp(last) if last > -745.0 else 0.0  # bound on the omitted alternating tail
    if top < 600.0:
        rounding = math.fsum(np.exp(log_errs).tolist())
        a_minus_1 += tail + rounding + 2.0 * _U * abs(a_minus_1)
        value = math.log1p(a_minus_1) if a_minus_1 > -1.0 else -math.inf
    else:
        scaled = math.fsum((signs * np.exp(logs - top)).tolist()) + math.exp(last - top) \
            + math.fsum(np.exp(log_errs - top).tolist())
        value = top + math.log(scaled * (1.0 + 4.0 * _U))
    return value + 4.0 * _U * abs(value)


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


def _sgm_log_integrand(q: float, sigma: float, alphas: np.ndarray,
                       z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """log(mu0(z) phi(q (L(z) - 1))) for each order (rows) at each point z (columns, ascending).

    L(z) = e^{(2z-1)/(2 sigma^2)} = mu1/mu0 and phi(x) = (1+x)^alpha - 1 - alpha x >= 0
    (see :func:`_sgm_log_a_quads`). x = q (L - 1) is formed with expm1 (no cancellation) and is
    increasing in z, so the three regimes of phi are column ranges: |x| < 1/2 uses the binomial
    series (:func:`_binomial_series`, split at |x| = 0.05 so that most columns need few terms);
    x >= 1/2 uses (1+x)^alpha (1 - (1+alpha x)(1+x)^-alpha), the bracket in (0, 1) by Bernoulli's
    inequality, all in log space from log x (x may overflow); x <= -1/2 is direct. Every entry
    depends only on its own (alpha, z).

    Also returns a bound on each entry's relative error (rounding model of the module docstring,
    16 u per unit of magnitude): log mu0 errs by at most its magnitude z^2/(2 sigma^2) + |log(
    sqrt(2 pi) sigma)| times u; x carries the rounding of log L (relative |log L| + 2 u), which
    phi amplifies by at most alpha (x phi'(x) / phi(x) <= alpha (1 + 1/|...|) is at most alpha
    here up to the constants); the binomial series (at most 61 terms, whose absolute values sum to
    at most 100 phi for alpha <= 16, |x| < 1/2) adds 6100; the log-space branch adds its
    components' magnitudes over |log of the bracket's exponent| (the cancellation of
    1 - e^{d}); the direct branch adds its terms' magnitudes over phi.
    """
    two_s2 = 2.0 * sigma * sigma
    log_l = (2.0 * z - 1.0) / two_s2
    capped = np.minimum(log_l, 700.0)
    x = np.where(log_l > 700.0, np.inf, q * np.expm1(capped))  # q (L - 1), no cancellation
    a = alphas[:, None]
    out = np.empty((alphas.size, z.size))
    cond = np.zeros((alphas.size, z.size))  # magnitudes beyond the common ones, per entry
    n_neg = int(np.searchsorted(x, -0.5, "right"))
    big = int(np.searchsorted(x, 0.5, "left"))
    lo5 = max(int(np.searchsorted(x, -0.05, "right")), n_neg)
    hi5 = min(int(np.searchsorted(x, 0.05, "left")), big)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for start, stop in ((n_neg, lo5), (lo5, hi5), (hi5, big)):
            if stop > start:
                out[:, start:stop] = np.log(np.maximum(
                    _binomial_series(a, x[None, start:stop]), 0.0))
                cond[:, start:stop] = 6100.0
        if big < z.size:
            ll, cl = log_l[big:], capped[big:]
            lx = np.where(ll > 30.0,
                          math.log(q) + ll + np.log1p(-np.exp(-np.maximum(cl, 30.0))),
                          np.log(q * np.expm1(np.minimum(ll, 30.0))))[None, :]  # log x
            log_1px = lx + np.log1p(np.exp(-lx))                        # log(1 + x)
            log_1pax = np.log(a) + lx + np.log1p(np.exp(-lx) / a)       # log(1 + alpha x)
            d = log_1pax - a * log_1px
            out[:, big:] = a * log_1px + np.log(-np.expm1(d))
            cond[:, big:] = (np.abs(log_1pax) + a * np.abs(log_1px) + np.abs(lx) + 1.0) \
                * (1.0 + 1.0 / np.abs(d))
        if n_neg:
            xn = x[None, :n_neg]
            pw = np.exp(a * np.log1p(xn))
            phi = pw - 1.0 - a * xn
            out[:, :n_neg] = np.log(phi)
            cond[:, :n_neg] = (pw + 1.0 + a * np.abs(xn)) / phi * (a + 2.0)
    log_norm = 0.5 * math.log(2.0 * math.pi) + math.log(sigma)
    log_mu0 = -z * z / two_s2 - log_norm
    common = z * z / two_s2 + abs(log_norm) + a * (3.0 + np.abs(log_l) + abs(math.log(q))) + 64.0
    rel_err = _ERR_PER_MAGNITUDE * (common + cond)
    return out + log_mu0[None, :], rel_err


def _sgm_log_a_quads(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
    """Upper bounds on log A_alpha at several orders by trapezoid quadrature (nan where it fails).

    With L(z) = e^{(2z-1)/(2 sigma^2)} = mu1/mu0, mu/mu0 = 1 + q(L - 1) and E_{mu0}[L] = 1, so
    A_alpha - 1 = E_{mu0}[phi(x)], phi(x) = (1+x)^alpha - 1 - alpha x >= 0 (the definition of
    A_alpha, MTZ19 Sec. 3): a non-negative integrand, so tiny RDP values keep their relative
    precision. The integrand is analytic in the strip |Im z| < pi sigma^2 (branch points where
    1 + x = 0) and Gaussian-dominated, so the trapezoid rule converges geometrically
    (Trefethen-Weideman, "The exponentially convergent trapezoidal rule", SIAM Review 2014,
    Theorem 5.1); the step h is set for an aliasing error ~ e^-45 and the sum is checked against
    the one with step h/2 (agreement to 1e-11 in log(A - 1); else h/4 is tried). The range is
    [-20 sigma, alpha + 20 sigma]: left of it -q < x < 0 and phi(x) <= phi(-q) <= alpha q (phi is
    convex with phi(0) = 0), right of it the integrand is at most mu0(z) L(z)^alpha =
    e^{alpha(alpha-1)/(2 sigma^2)} N(z; alpha, sigma^2); so the mass left out is at most
    e^-200 (alpha q + e^{alpha(alpha-1)/(2 sigma^2)}), while A - 1 >= (alpha-1) KL(mu||mu0)
    (about (alpha-1) q^2 / (2 sigma^2)) and A >= q^alpha e^{alpha(alpha-1)/(2 sigma^2)}: the
    relative truncation error stays below 1e-30 unless these bounds are below e^-130. All orders
    share the points (each order keeps its own range, so a value does not depend on which orders
    are evaluated with it). An order gets nan (the caller then uses the series) if its rule would
    need more than ``_QUAD_MAX_POINTS`` points (tiny sigma, where the series converges at once)
    or the check fails.

    Upper bound: the accepted log(A - 1) is raised by the difference between the two rules (with
    geometric convergence the error of the finer rule is about the square of the coarser one's,
    so that difference bounds it: the standard a-posteriori estimate; the theorem above gives the
    rate, not the constant), by the weighted rounding bound of :func:`_sgm_log_integrand`
    (sum_z f(z) r(z) / sum_z f(z)), by the rounding of the sum (N u for N points) and by 1e-30
    for the truncated range.
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
    log_f, rel = _sgm_log_integrand(q, sigma, a, lo + 0.5 * h * k)
    log_f[k[None, :] > n2[:, None]] = -np.inf
    fine = special.logsumexp(log_f, axis=1) + math.log(0.5 * h)
    coarse = special.logsumexp(log_f[:, ::2], axis=1) + math.log(h)
    weighted = special.logsumexp(log_f + np.log(rel), axis=1) + math.log(0.5 * h)
    diff = np.abs(fine - coarse)
    res = np.where(diff <= 1e-11, fine, np.nan)
    todo = np.flatnonzero(np.isnan(res) & (2 * n2 <= _QUAD_MAX_POINTS))
    if todo.size:  # step h/4: the new points are the midpoints of the h/2 grid
        km = np.arange(int(n2[todo].max()))
        log_g, rel_g = _sgm_log_integrand(q, sigma, a[todo], lo + 0.25 * h * (2 * km + 1))
        log_g[km[None, :] >= n2[todo][:, None]] = -np.inf
        quarter = np.logaddexp(fine[todo] - math.log(2.0),
                               special.logsumexp(log_g, axis=1) + math.log(0.25 * h))
        weighted_q = np.logaddexp(weighted[todo] - math.log(2.0),
                                  special.logsumexp(log_g + np.log(rel_g), axis=1)
                                  + math.log(0.25 * h))
        good = np.abs(quarter - fine[todo]) <= 1e-11
        res[todo[good]] = quarter[good]
        diff[todo[good]] = np.abs(quarter - fine[todo])[good]
        weighted[todo[good]] = weighted_q[good]
        n2[todo[good]] *= 2
    # log(A - 1) raised by: the a-posteriori aliasing estimate, the integrand's rounding, the
    # summation (N u) and the truncated range (1e-30), all relative.
    relative = np.expm1(diff) + np.exp(weighted - res) + (n2 + 2.0) * _U + 1e-30
    res = res + np.log1p(relative)
    out[ok] = np.where(np.isnan(res), np.nan, np.logaddexp(0.0, res) * (1.0 + 4.0 * _U))
    return out


def _sgm_log_a_quad(q: float, sigma: float, alpha: float) -> float | None:
    """Upper bound on log A_alpha at one order by :func:`_sgm_log_a_quads` (None on failure)."""
    value = float(_sgm_log_a_quads(q, sigma, np.array([alpha]))[0])
    return None if math.isnan(value) else value


#: Noise multipliers for which the subsampled curve is computed; outside it the (dominating)
#: Gaussian curve is used (see :func:`subsampled_gaussian_rdp`).
SUBSAMPLED_NOISE_RANGE = (1e-6, 1e6)


def subsampled_gaussian_rdp(sampling_probability: float, noise_multiplier: float,
                            orders: Any) -> np.ndarray:
    """Upper bound on the RDP of the Poisson-subsampled Gaussian mechanism (add/remove neighbours).

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

    Every value is an upper bound on the exact RDP: each method inflates its log A by a bound on
    its own error (rounding under the model of the module docstring, series truncation,
    quadrature aliasing; see the three functions). Without that inflation the series sat up to
    5e-10 (relative) below the exact value at fractional orders >= 16 and large sigma (6e-7 at
    sigma = 10^4), where A - 1 is small and its terms are not: the terms cancel against the 1 of
    A. The inflation is below 1e-10 relative at integer orders, about 1e-11 for the quadrature,
    and for the series below 1e-11 when sigma <= 50, about 1e-7 at sigma = 100-1000 and up to
    1e-3 at sigma = 10^4 (see :func:`_sgm_log_a_frac`).
    """
    orders = _as_orders(orders)
    q = _validate.check_probability("sampling_probability", sampling_probability)
    s = _validate.check_positive("noise_multiplier", noise_multiplier, allow_inf=True) \
        if noise_multiplier != 0 else 0.0
    if q == 0.0 or math.isinf(s):
        return np.zeros(orders.shape)
    if s == 0.0:
        return np.full(orders.shape, np.inf)
    if q == 1.0 or not SUBSAMPLED_NOISE_RANGE[0] <= s <= SUBSAMPLED_NOISE_RANGE[1]:
        # Outside the range where the series and quadrature are computed, the Gaussian curve
        # alpha / (2 s^2) is used: it is an upper bound, since E_P[((1-q) + q dQ/dP)^alpha] <=
        # (1-q) + q E_P[(dQ/dP)^alpha] <= E_P[(dQ/dP)^alpha] (convexity of x^alpha), and
        # immaterial there (epsilon ~ 0 above the range, astronomically large below it).
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
        return np.maximum(log_a / (alpha - 1.0) * (1.0 + 2.0 * _U), 0.0)

    return _with_limit(orders, finite, np.inf)
