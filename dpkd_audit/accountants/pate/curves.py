"""RDP curves of PATE queries (GNMax, LNMax) and their registration with the RDP accountant.

GNMax: [PATE18] Theorem 6, Propositions 7-8; LNMax: [PATE17] Theorems 2-3, Lemma 4.

References: see :mod:`dpkd_audit.accountants.pate`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp
from scipy import special

from dpkd_audit import _validate
from dpkd_audit.accountants.base import (
    NeighboringRelation,
)
from dpkd_audit.accountants.pate._common import (
    _LN2,
    _LOGQ_FLOOR,
    _SQRT2,
    DEFAULT_ORDERS,
    _as_float_array,
    _check_logq,
    _check_orders,
    _check_votes,
    _fail,
    _log1mexp,
)
from dpkd_audit.accountants.rdp.accountant import (
    gaussian_rdp,
    laplace_rdp,
    pure_dp_rdp,
    register_rdp_curve,
)
from dpkd_audit.events import GaussianNoisyMaxDpEvent, LaplaceNoisyMaxDpEvent

# --------------------------------------------------------------------------- GNMax ([PATE18])


def _gnmax_logq_batch(votes: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """[PATE18] Proposition 7 for each row of ``votes`` (queries x classes), in log space.

    q <= sum_{i != i*} Pr[N(0, 2 sigma^2) >= n_i* - n_i] = sum (1/2) erfc((n_i* - n_i)/(2 sigma)),
    with each term log Phi(-(n_i* - n_i)/(sqrt(2) sigma)) from ``log_ndtr`` and the sum by
    ``logsumexp``. Capped at 1 - 1/m: the true argmax is the most likely output (a coupling of
    the i.i.d. noise), so it has probability >= 1/m.
    """
    votes = np.asarray(votes, dtype=np.float64)
    rows = np.arange(votes.shape[0])
    top_idx = np.argmax(votes, axis=1)
    gaps = votes[rows, top_idx][:, None] - votes
    terms = special.log_ndtr(-gaps / (_SQRT2 * np.asarray(sigma, dtype=np.float64)[:, None]))
    terms[rows, top_idx] = -np.inf
    logq = special.logsumexp(terms, axis=1)
    cap = math.log1p(-1.0 / votes.shape[1])
    return np.maximum(np.minimum(logq, cap), _LOGQ_FLOOR)


def gnmax_logq(votes: Any, sigma: float) -> float:
    """Log of the [PATE18] Proposition 7 bound on Pr[GNMax(votes) != argmax(votes)].

    Args:
        votes: Vote histogram (1-D, non-negative integers, at least 2 classes).
        sigma: Standard deviation of the Gaussian noise on each count (> 0).

    Returns:
        log q, with q <= 1 - 1/m; floored at -1e300 (still an upper bound, never -inf).
    """
    votes = _check_votes(votes)
    sigma = _validate.check_positive("sigma", sigma)
    return float(_gnmax_logq_batch(votes[None, :], np.array([sigma]))[0])


def gnmax_data_independent_rdp(sigma: float, orders: Any = DEFAULT_ORDERS) -> np.ndarray:
    """[PATE18] Proposition 8: GNMax with noise sigma is (lambda, lambda / sigma^2)-RDP.

    (The Gaussian mechanism on a histogram of L2 sensitivity sqrt(2), [M17] Table II, then the
    argmax as post-processing.)
    """
    sigma = _validate.check_positive("sigma", sigma)
    orders = _check_orders(orders)
    return orders / sigma**2


def _gnmax_theorem6(logq: Any, sigma: Any, orders: Any) -> tuple[np.ndarray, np.ndarray]:
    """[PATE18] Theorem 6 with mu1, mu2 of Proposition 10; returns (bound, valid), broadcast.

    With q the bound on Pr[M(D) != i*], mu2 = sigma sqrt(log(1/q)), mu1 = mu2 + 1 and
    eps_i = mu_i / sigma^2 (Proposition 8 at orders mu_i):

        D_lambda(M(D) || M(D')) <= 1/(lambda-1) log((1-q) A^(lambda-1) + q B^(lambda-1)),
        A = (1-q) / (1 - (q e^eps2)^((mu2-1)/mu2)),   B = e^eps1 / q^(1/(mu1-1)).

    Valid when (Theorem 6 and Lemma 9) lambda <= mu1, mu2 > 1, q e^eps2 < 1 (A > 0) and
    log q <= (mu2 - 1) eps2 - mu2 log(mu1/(mu1-1) * mu2/(mu2-1)), the range where the bound is
    non-decreasing in q, so that an *upper bound* on q may be used. (The authors' code uses
    lambda < mu1; the theorem allows equality.) Invalid entries hold +inf.
    """
    logq = np.asarray(logq, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    orders = np.asarray(orders, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = -logq
        mu2 = sigma * np.sqrt(t)
        mu1 = mu2 + 1.0
        var = sigma**2
        eps1 = mu1 / var
        eps2 = mu2 / var
        lemma9 = logq <= (mu2 - 1.0) * eps2 - mu2 * (np.log1p(1.0 / (mu1 - 1.0))
                                                     + np.log1p(1.0 / (mu2 - 1.0)))
        valid = (orders <= mu1) & (mu2 > 1.0) & (t > eps2) & lemma9 & np.isfinite(logq)
        log1q = _log1mexp(logq)
        log_a = log1q - _log1mexp((logq + eps2) * (1.0 - 1.0 / mu2))
        log_b = eps1 - logq / (mu1 - 1.0)
        lm1 = orders - 1.0
        log_s = np.logaddexp(log1q + lm1 * log_a, logq + lm1 * log_b)
        bound = np.maximum(log_s / lm1, 0.0)  # a Renyi divergence is >= 0 (rounding only)
    valid = valid & np.isfinite(bound)
    return np.where(valid, bound, np.inf), valid


def gnmax_rdp_from_logq(logq: float, sigma: float, orders: Any = DEFAULT_ORDERS) -> np.ndarray:
    """min(Theorem 6 bound where its conditions hold, Proposition 8) at each order ([PATE18]).

    Args:
        logq: log of an upper bound on Pr[GNMax output != i*] (<= 0; -inf is treated as the
            floor exp(-1e300)).
        sigma: Standard deviation of the Gaussian noise on each count (> 0).
        orders: Renyi orders (> 1).

    Returns:
        RDP upper bounds at ``orders``, data-dependent where valid, data-independent elsewhere.
    """
    logq = max(_check_logq(logq), _LOGQ_FLOOR)
    sigma = _validate.check_positive("sigma", sigma)
    orders = _check_orders(orders)
    dep, _ = _gnmax_theorem6(logq, sigma, orders)
    return np.minimum(orders / sigma**2, dep)


def gnmax_rdp(votes: Any, sigma: float, orders: Any = DEFAULT_ORDERS) -> np.ndarray:
    """Data-dependent RDP of one GNMax query on ``votes`` ([PATE18] Thm 6 + Props 7, 8, 10).

    Args:
        votes: Vote histogram of the query (1-D, non-negative integers).
        sigma: Standard deviation of the Gaussian noise on each count (> 0).
        orders: Renyi orders (> 1).

    Returns:
        Per order, min(data-dependent bound of Theorem 6 where its conditions hold,
        lambda / sigma^2). Never above the data-independent curve, never NaN.
    """
    votes = _check_votes(votes)
    sigma = _validate.check_positive("sigma", sigma)
    orders = _check_orders(orders)
    logq = _gnmax_logq_batch(votes[None, :], np.array([sigma]))[0]
    dep, _ = _gnmax_theorem6(logq, sigma, orders)
    return np.minimum(orders / sigma**2, dep)


# --------------------------------------------------------------------------- LNMax ([PATE17])


def _lnmax_indep_moments(moments: np.ndarray, scale: float) -> np.ndarray:
    """Data-independent log-moments alpha(l) of LNMax with Laplace scale b (gamma = 1/b).

    The minimum of: 2 gamma^2 l (l+1) ([PATE17] Theorem 2, via Bun-Steinke 2016 Prop. 3.3 for a
    (2 gamma)-DP mechanism); 2 gamma l (pure (2 gamma)-DP bounds the privacy loss pointwise);
    l times the RDP curve of :mod:`dpkd_audit.accountants.rdp` for LNMax, i.e. min(tight pure-DP
    curve of (2 gamma)-DP, 2 x Laplace(b) curve of [M17] Table II: the noisy histogram moves in
    two coordinates by 1; the argmax is post-processing). alpha(l) = l D_(l+1) ([M17] Sec. 3).
    """
    gamma = 1.0 / scale
    rdp_orders = moments + 1.0
    curve = np.minimum(pure_dp_rdp(2.0 * gamma, rdp_orders),
                       2.0 * laplace_rdp(gamma, rdp_orders))
    return np.minimum.reduce([
        2.0 * gamma**2 * moments * (moments + 1.0),
        2.0 * gamma * moments,
        moments * curve,
    ])


def _lnmax_logq_batch(votes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """[PATE17] Lemma 4 per row: q <= sum_{j != j*} (2 + gamma g_j) / (4 exp(gamma g_j)).

    g_j = n_j* - n_j >= 0, gamma = 1/scale: the tail of the difference of two Laplace(1/gamma)
    variables. Log space: log(2 + gamma g) - log 4 - gamma g; capped at 1 - 1/m.
    """
    votes = np.asarray(votes, dtype=np.float64)
    rows = np.arange(votes.shape[0])
    top_idx = np.argmax(votes, axis=1)
    z = (votes[rows, top_idx][:, None] - votes) / np.asarray(scale, dtype=np.float64)[:, None]
    terms = np.log(2.0 + z) - 2.0 * _LN2 - z
    terms[rows, top_idx] = -np.inf
    logq = special.logsumexp(terms, axis=1)
    return np.maximum(np.minimum(logq, math.log1p(-1.0 / votes.shape[1])), _LOGQ_FLOOR)


def lnmax_logq(votes: Any, noise_scale: float) -> float:
    """Log of the [PATE17] Lemma 4 bound on Pr[LNMax(votes) != argmax(votes)].

    Args:
        votes: Vote histogram (1-D, non-negative integers, at least 2 classes).
        noise_scale: Laplace scale b = 1/gamma of the noise on each count (> 0).
    """
    votes = _check_votes(votes)
    noise_scale = _validate.check_positive("noise_scale", noise_scale)
    return float(_lnmax_logq_batch(votes[None, :], np.array([noise_scale]))[0])


def _lnmax_moments(logq: np.ndarray, scale: Any, moments: np.ndarray,
                   indep: np.ndarray) -> np.ndarray:
    """[PATE17] Theorem 3 (where valid) min the data-independent moments ``indep``; broadcast.

    For an (2 gamma)-DP mechanism with q >= Pr[M(d) != o*] and q < (e^(2 gamma) - 1) /
    (e^(4 gamma) - 1) = 1/(e^(2 gamma) + 1):
        alpha(l) <= log((1-q) ((1-q)/(1 - e^(2 gamma) q))^l + q e^(2 gamma l)),
    evaluated as logaddexp(log(1-q) + l (log(1-q) - log(1 - e^(2 gamma + log q))),
    log q + 2 gamma l). (The 2017 reference code tested q < 0.5, weaker than the theorem's
    condition; the theorem's condition is used here.)
    """
    logq = np.asarray(logq, dtype=np.float64)
    eps = 2.0 / np.asarray(scale, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        valid = logq < -np.logaddexp(0.0, eps)
        log1q = _log1mexp(logq)
        dep = np.logaddexp(log1q + moments * (log1q - _log1mexp(eps + logq)),
                           logq + eps * moments)
        dep = np.maximum(dep, 0.0)
    dep = np.where(valid & np.isfinite(dep), dep, np.inf)
    return np.minimum(indep, dep)


def lnmax_data_independent_log_moments(noise_scale: float, orders: Any) -> np.ndarray:
    """Data-independent log-moments alpha(l) of LNMax ([PATE17] Thm 2; see module docs).

    Args:
        noise_scale: Laplace scale b = 1/gamma of the noise on each count (> 0).
        orders: Moment orders l > 0 (the moments accountant's lambda; RDP order = l + 1).
    """
    noise_scale = _validate.check_positive("noise_scale", noise_scale)
    moments = _check_orders(orders, lower=0.0)
    return _lnmax_indep_moments(moments, noise_scale)


def lnmax_log_moments(votes: Any, noise_scale: float, orders: Any) -> np.ndarray:
    """Data-dependent log-moments alpha(l) of one LNMax query ([PATE17] Thm 3, Lemma 4).

    Args:
        votes: Vote histogram of the query (1-D, non-negative integers).
        noise_scale: Laplace scale b = 1/gamma of the noise on each count (> 0); the query is
            (2/b)-DP.
        orders: Moment orders l > 0 (the moments accountant's lambda; RDP order = l + 1).

    Returns:
        alpha(l) bounds: Theorem 3 where its condition on q holds, never above the
        data-independent moments (:func:`lnmax_data_independent_log_moments`).
    """
    votes = _check_votes(votes)
    noise_scale = _validate.check_positive("noise_scale", noise_scale)
    moments = _check_orders(orders, lower=0.0)
    logq = _lnmax_logq_batch(votes[None, :], np.array([noise_scale]))[0]
    return _lnmax_moments(logq, noise_scale, moments, _lnmax_indep_moments(moments, noise_scale))


def lnmax_rdp(votes: Any, noise_scale: float, orders: Any = DEFAULT_ORDERS) -> np.ndarray:
    """Data-dependent RDP of one LNMax query: alpha(lambda - 1) / (lambda - 1) ([M17] Sec. 3).

    Args:
        votes: Vote histogram of the query.
        noise_scale: Laplace scale b of the noise on each count (> 0).
        orders: Renyi orders lambda > 1.
    """
    votes = _check_votes(votes)
    noise_scale = _validate.check_positive("noise_scale", noise_scale)
    orders = _check_orders(orders)
    logq = _lnmax_logq_batch(votes[None, :], np.array([noise_scale]))[0]
    moments = orders - 1.0
    return _lnmax_moments(logq, noise_scale, moments,
                          _lnmax_indep_moments(moments, noise_scale)) / moments


def _indep_curve(event: _dp.DpEvent, orders: np.ndarray) -> np.ndarray:
    """Data-independent RDP at ``orders`` (> 1, inf allowed), without the RDP registry."""
    if isinstance(event, GaussianNoisyMaxDpEvent):
        # [PATE18] Prop. 8: the Gaussian curve with L2 sensitivity sqrt(2), lambda / sigma^2.
        return np.asarray(gaussian_rdp(float(event.sigma) / _SQRT2, orders), dtype=np.float64)
    if isinstance(event, LaplaceNoisyMaxDpEvent):
        b = float(event.noise_scale)
        return np.minimum(pure_dp_rdp(2.0 / b, orders), 2.0 * laplace_rdp(1.0 / b, orders))
    raise ValueError("event must be a GaussianNoisyMaxDpEvent or LaplaceNoisyMaxDpEvent; "
                     f"got {type(event).__name__}")


def data_independent_rdp(event: _dp.DpEvent, orders: Any = DEFAULT_ORDERS) -> np.ndarray:
    """Data-independent RDP curve of a PATE event (its ``votes`` are ignored).

    The same curves as :mod:`dpkd_audit.accountants.rdp` registers for these events (built from
    its public ``gaussian_rdp``, ``pure_dp_rdp`` and ``laplace_rdp``): GNMax lambda / sigma^2
    ([PATE18] Proposition 8); LNMax min(tight pure-DP curve of (2/b)-DP, 2 x Laplace(b) curve of
    [M17] Table II), which is below [PATE17] Theorem 2.

    Raises:
        ValueError: If ``event`` is not a PATE noisy-max event, or ``orders`` are not > 1.
    """
    return _indep_curve(event, _check_orders(orders))


def pate_rdp_curve(event: _dp.DpEvent, orders: Any,
                   neighboring_relation: NeighboringRelation = NeighboringRelation.REPLACE_ONE,
                   ) -> np.ndarray:
    """RDP curve of one PATE event: data-dependent if it carries votes, else data-independent.

    Signature of :data:`dpkd_audit.accountants.rdp.RdpCurveFn` (both neighbouring relations of
    a record change one teacher's vote, so the relation does not matter here); ``orders`` may
    hold inf, where the data-independent (pure-DP) value is returned.

    Raises:
        ValueError: If ``event`` is not a PATE noisy-max event, or an order is not > 1.
    """
    arr = np.atleast_1d(_as_float_array("orders", orders, "real numbers > 1 (inf allowed)"))
    finite = np.isfinite(arr)
    if not np.all(finite | (arr == np.inf)):
        raise _fail("orders", "a 1-D array of real numbers > 1 (inf allowed)", orders)
    # At order inf (the pure-DP limit) only the data-independent curve has a value.
    out = _indep_curve(event, arr).copy()
    if np.any(finite):
        if isinstance(event, GaussianNoisyMaxDpEvent) and event.votes is not None:
            out[finite] = gnmax_rdp(event.votes, float(event.sigma), arr[finite])
        elif isinstance(event, LaplaceNoisyMaxDpEvent) and event.votes is not None:
            out[finite] = lnmax_rdp(event.votes, float(event.noise_scale), arr[finite])
    return out


def register_data_dependent_rdp_curves() -> None:
    """Make :class:`~dpkd_audit.accountants.rdp.RDPAccountant` use the votes of PATE events.

    Replaces the registered GNMax/LNMax curves by :func:`pate_rdp_curve`, flagged data-dependent
    for events with votes (their epsilons are then reported as DATA_DEPENDENT). Not done on
    import: by default RDPAccountant stays data-independent; :class:`PATEAccountant` is the
    data-dependent accountant (and adds the smooth-sensitivity release line).
    """
    def has_votes(event: _dp.DpEvent) -> bool:
        return getattr(event, "votes", None) is not None

    for event_type in (GaussianNoisyMaxDpEvent, LaplaceNoisyMaxDpEvent):
        register_rdp_curve(event_type, pate_rdp_curve, data_dependent=has_votes, replace=True)


