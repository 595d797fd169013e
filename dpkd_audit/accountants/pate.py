"""PATE privacy analysis: data-dependent RDP of GNMax, moments of LNMax, smooth sensitivity.

The noisy-argmax aggregators of PATE are private for every input (their *data-independent*
guarantee), but when the teachers agree strongly the released label is almost deterministic and
the privacy loss on *this* vote histogram is much smaller. PATE bounds that data-dependent loss
from q, an upper bound on the probability that the noisy argmax differs from the true one.

References (theorem numbers are those of the arXiv versions, as cited by the authors' code):

- [PATE18] Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson, "Scalable Private Learning
  with PATE", ICLR 2018 (arXiv:1802.08908). Theorem 6 (data-dependent RDP from q, with the
  conditions of Lemma 9), Proposition 7 (q for GNMax), Proposition 8 (data-independent RDP of
  GNMax), Proposition 10 (choice of mu1, mu2), Appendix B.4 (smooth sensitivity of the RDP:
  bounds BU/BL on q at a neighbour, Algorithm 3, Proposition 13, Algorithms 4-5, conditions
  C5-C6), Theorem 23 (RDP of the Gaussian noise with smooth sensitivity, GNSS).
- [PATE17] Papernot, Abadi, Erlingsson, Goodfellow, Talwar, "Semi-supervised Knowledge Transfer
  for Deep Learning from Private Training Data", ICLR 2017 (arXiv:1610.05755). Theorem 2
  (data-independent moments of an (2 gamma)-DP mechanism), Theorem 3 (data-dependent moments
  from q), Lemma 4 (q for LNMax).
- [M17] Mironov, "Renyi Differential Privacy", CSF 2017: Proposition 1 (composition), Table II
  (Laplace), Proposition 3 (conversion).
- [BBGHS20] Balle, Barthe, Gaboardi, Hsu, Sato, "Hypothesis testing interpretations and Renyi
  differential privacy", AISTATS 2020, Theorem 21 (improved RDP -> (epsilon, delta) conversion).
- [NRS07] Nissim, Raskhodnikova, Smith, "Smooth sensitivity and sampling in private data
  analysis", STOC 2007, Definitions 2.1-2.2 (local sensitivity at distance d, beta-smooth bound).

Everything is computed in log space: q is carried as log q (it underflows for strong consensus),
``log1mexp`` gives log(1 - e^x) without cancellation, and the Renyi sums use ``logaddexp``.

Neighbouring histograms: one teacher changes its vote (one count -1, another +1). This covers
replace-one and add/remove-one of a *record* alike (a record lives in exactly one teacher's
shard), so :class:`PATEAccountant` accepts both relations.

Data-dependent guarantees bound D_lambda(M(D) || M(D')) for the actual data D and every
neighbour D' (one direction, as in [PATE18]); RDP composition ([M17] Prop. 1) and the conversion
to (epsilon, delta) (:func:`dpkd_audit.accountants.rdp.epsilon_from_rdp`: [BBGHS20] Thm 21, and
a total-variation bound) hold pair by pair, so they apply unchanged. The bound itself depends on
D, so publishing it leaks. [PATE18] Appendix B.4 makes the release private with smooth
sensitivity: :func:`smooth_sensitivity_release_cost` returns the extra RDP that release costs, a
separate line item that :meth:`PATEAccountant.report` always shows next to the data-dependent
epsilon. That analysis rests on conditions C5-C6, which hold only for some (sigma, order) pairs
(roughly order < sigma / 1.3); they are checked numerically and orders where they fail are
refused for the release.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp
from scipy import special

from dpkd_audit import _validate
from dpkd_audit.accountants.base import (
    Accountant,
    BoundKind,
    Epsilon,
    NeighboringRelation,
)
from dpkd_audit.accountants.rdp.accountant import (
    delta_from_rdp,
    epsilon_from_rdp,
    gaussian_rdp,
    laplace_rdp,
    pure_dp_rdp,
    register_rdp_curve,
)
from dpkd_audit.events import GaussianNoisyMaxDpEvent, LaplaceNoisyMaxDpEvent

__all__ = [
    "DEFAULT_ORDERS",
    "PATEAccountant",
    "PATEReport",
    "SmoothSensitivityRelease",
    "data_independent_rdp",
    "gnmax_data_independent_rdp",
    "gnmax_local_sensitivity_bounds",
    "gnmax_logq",
    "gnmax_rdp",
    "gnmax_rdp_from_logq",
    "gnmax_smooth_sensitivity",
    "gnss_rdp",
    "lnmax_data_independent_log_moments",
    "lnmax_log_moments",
    "lnmax_logq",
    "lnmax_rdp",
    "pate_rdp_curve",
    "register_data_dependent_rdp_curves",
    "smooth_sensitivity_release_cost",
]

#: Default Renyi orders: fine near 1 (where small total budgets are optimised), up to 10^4 (where
#: strong consensus makes the data-dependent bound tiny).
DEFAULT_ORDERS: np.ndarray = np.unique(np.concatenate([
    1.0 + np.geomspace(1e-3, 1.0, 40),
    np.linspace(2.0, 20.0, 73),
    np.arange(21.0, 101.0, 1.0),
    np.geomspace(100.0, 1e4, 60),
]))
DEFAULT_ORDERS.setflags(write=False)

METHOD_DATA_DEPENDENT = "PATE data-dependent RDP (Papernot et al. 2018)"
METHOD_DATA_DEPENDENT_LNMAX = "PATE data-dependent RDP (Papernot et al. 2017, Theorem 3)"
METHOD_DATA_DEPENDENT_MIXED = "PATE data-dependent RDP (Papernot et al. 2017, 2018)"
METHOD_DATA_INDEPENDENT = "PATE data-independent RDP (Papernot et al. 2017, 2018)"

# A data-dependent epsilon within this relative distance of the data-independent one is reported
# as the latter (the votes did not help; the difference is rounding).
_SAME_REL_TOL = 1e-9
_LN2 = math.log(2.0)
_SQRT2 = math.sqrt(2.0)
# log q is floored here: q = exp(-1e300) is still an upper bound on a smaller true q (so the
# bounds stay valid), and every expression below stays finite (log_ndtr(-x) = -inf past 1e154).
_LOGQ_FLOOR = -1e300


# --------------------------------------------------------------------------- validation


def _fail(name: str, allowed: str, value: Any) -> ValueError:
    return ValueError(f"{name} must be {allowed}; got {value!r}")


def _as_float_array(name: str, value: Any, allowed: str) -> np.ndarray:
    if isinstance(value, (str, bytes)):
        raise _fail(name, allowed, value)
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise _fail(name, allowed, value) from None
    return arr


def _check_orders(orders: Any, name: str = "orders", *, lower: float = 1.0) -> np.ndarray:
    """A 1-D array of finite orders > ``lower`` (a scalar is accepted as one order)."""
    allowed = f"a finite real number > {lower:g} or a non-empty 1-D array of them"
    arr = np.atleast_1d(_as_float_array(name, orders, allowed))
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= lower):
        raise _fail(name, allowed, orders)
    return arr


def _check_order(order: Any, name: str = "order") -> float:
    value = _validate.check_positive(name, order)
    if value <= 1.0:
        raise _fail(name, "a finite real number > 1", order)
    return value


def _check_votes(votes: Any, name: str = "votes") -> np.ndarray:
    """A 1-D histogram of at least 2 non-negative integer vote counts, as int64."""
    allowed = "a 1-D array of at least 2 non-negative integer vote counts"
    arr = _as_float_array(name, votes, allowed)
    if (arr.ndim != 1 or arr.size < 2 or not np.all(np.isfinite(arr)) or np.any(arr < 0)
            or np.any(arr != np.round(arr)) or np.any(arr > 2**53)):
        raise _fail(name, allowed, votes)
    return arr.astype(np.int64)


def _check_logq(logq: Any, name: str = "logq") -> float:
    allowed = "a real number <= 0 (log of a probability), or -inf"
    try:
        value = float(logq)
    except (TypeError, ValueError):
        raise _fail(name, allowed, logq) from None
    if isinstance(logq, bool) or math.isnan(value) or value > 0:
        raise _fail(name, allowed, logq)
    return value


# --------------------------------------------------------------------------- log-space helpers


def _log1mexp(x: Any) -> np.ndarray:
    """log(1 - e^x) for x <= 0 (-inf at 0), without cancellation (Maechler 2012)."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(x < -_LN2, np.log1p(-np.exp(x)), np.log(-np.expm1(x)))


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


# --------------------------------------------------------------------------- smooth sensitivity


def _gnmax_beta(logq: Any, sigma: Any, order: float, logq0: Any) -> np.ndarray:
    """The RDP at ``order`` as a function of log q, as analysed in [PATE18] Appendix B.4.

    beta(q) = Theorem 6 bound for q <= q0, lambda / sigma^2 above (q0: see _Thresholds).
    """
    dep, valid = _gnmax_theorem6(logq, sigma, order)
    ind = order / np.asarray(sigma, dtype=np.float64) ** 2
    return np.where(valid & (np.asarray(logq) <= logq0), dep, ind)


def _log_bu_bl(logq: Any, sigma: Any, num_classes: Any) -> tuple[np.ndarray, np.ndarray]:
    """[PATE18] Appendix B.4: log BU(q), log BL(q), bounds on q at a neighbouring histogram.

    BU(q) = min(1, (m-1)/2 erfc(erfcinv(2q/(m-1)) - 1/sigma)), BL(q) = (m-1)/2
    erfc(erfcinv(2q/(m-1)) + 1/sigma). With (1/2) erfc(y) = Phi(-sqrt(2) y), x = sqrt(2)
    erfcinv(2q/(m-1)) solves log Phi(-x) = log q - log(m-1) (``ndtri_exp``, exact in log space
    for tiny q), and BU = (m-1) Phi(-(x - sqrt(2)/sigma)), BL = (m-1) Phi(-(x + sqrt(2)/sigma)).
    """
    logq = np.asarray(logq, dtype=np.float64)
    log_m1 = np.log(np.asarray(num_classes, dtype=np.float64) - 1.0)
    shift = _SQRT2 / np.asarray(sigma, dtype=np.float64)
    x = -special.ndtri_exp(np.minimum(logq - log_m1, 0.0))
    log_bu = np.minimum(log_m1 + special.log_ndtr(-(x - shift)), 0.0)
    log_bl = np.maximum(log_m1 + special.log_ndtr(-(x + shift)), _LOGQ_FLOOR)
    return log_bu, log_bl


@dataclasses.dataclass(frozen=True)
class _Thresholds:
    """q0, q1 = BL(q0) and the plateau LS(q1) of [PATE18] Appendix B.4 for (sigma, order, m)."""

    logq0: float
    logq1: float
    plateau: float
    conditions_hold: bool
    why: str


def _ls_bound(logq: Any, sigma: Any, order: float, num_classes: Any, logq0: Any,
              logq1: Any) -> np.ndarray:
    """[PATE18] Algorithm 3: upper bound on the local sensitivity of beta at a histogram with q.

    max(beta(BU(q)) - beta(q), beta(q) - beta(BL(q))), with q moved to q1 when q1 <= q <= q0
    (Proposition 13: under C5-C6 the bound is largest there).
    """
    logq = np.asarray(logq, dtype=np.float64)
    logq = np.where((logq >= logq1) & (logq <= logq0), logq1, logq)
    b = _gnmax_beta(logq, sigma, order, logq0)
    log_bu, log_bl = _log_bu_bl(logq, sigma, num_classes)
    return np.maximum(np.maximum(_gnmax_beta(log_bu, sigma, order, logq0) - b,
                                 b - _gnmax_beta(log_bl, sigma, order, logq0)), 0.0)


def _is_nondecreasing(values: np.ndarray) -> bool:
    """Non-decreasing up to rounding (1e-9 of the largest magnitude on the grid)."""
    tol = 1e-9 * float(np.max(np.abs(values)))
    return bool(np.all(np.diff(values) >= -tol))


@functools.lru_cache(maxsize=4096)
def _gnmax_thresholds(sigma: float, order: float, num_classes: int) -> _Thresholds:
    """Find q0 (where beta switches to data-independent) and check C5-C6 numerically.

    q0 is the largest log q such that the Theorem 6 conditions hold and the bound is <= the
    data-independent one at every smaller q (bisection in log space, keeping the end where the
    bound is valid and smaller). Then, on dense log-q grids (3001 points from 10^4 log q0 up to
    log q0, idem for q1): C5 (beta non-decreasing on (0, q0]),
    C6 (beta(BU(q)) - beta(q) non-decreasing on (0, q1]), validity below q0, and the bound not
    below lambda/sigma^2 between q0 and the validity limit (so that beta above equals
    :func:`gnmax_rdp`). [PATE18] verifies C5-C6 the same way (numerically) in its code.
    """
    ind = order / sigma**2

    def valid(lq: float) -> bool:
        return bool(_gnmax_theorem6(lq, sigma, order)[1])

    def good(lq: float) -> bool:
        dep, ok = _gnmax_theorem6(lq, sigma, order)
        return bool(ok) and float(dep) <= ind

    def bisect(lo: float, hi: float, pred) -> float:  # pred(lo) true, pred(hi) false
        for _ in range(400):
            mid = 0.5 * (lo + hi)
            if pred(mid):
                lo = mid
            else:
                hi = mid
            if hi - lo <= 1e-13 * abs(lo):
                break
        return lo

    cap = math.log1p(-1.0 / num_classes)
    # Largest valid log q: the conditions hold for all smaller q (checked on the grid below).
    if valid(cap):
        lq_valid = cap
    else:
        lo, hi = -1.0, cap
        while not valid(lo):
            hi, lo = lo, 2.0 * lo
            if lo < _LOGQ_FLOOR:
                raise ValueError(f"no q satisfies the conditions of PATE 2018 Theorem 6 at "
                                 f"sigma={sigma}, order={order}")
        lq_valid = bisect(lo, hi, valid)
    if good(lq_valid):
        logq0 = lq_valid
    else:
        lo, hi = 2.0 * lq_valid, lq_valid
        while not good(lo):
            hi, lo = lo, 2.0 * lo
            if lo < _LOGQ_FLOOR:
                raise ValueError(f"the data-dependent bound never beats the data-independent "
                                 f"one at sigma={sigma}, order={order}")
        logq0 = bisect(lo, hi, good)
    log_bl0 = float(_log_bu_bl(logq0, sigma, num_classes)[1])
    logq1 = min(log_bl0, logq0)
    plateau = float(_ls_bound(logq1, sigma, order, num_classes, logq0, logq1))

    # Numerical checks of the conditions the smooth-sensitivity analysis rests on.
    factors = np.geomspace(1e4, 1.0, 3001)  # ascending log q towards the threshold
    grid0 = logq0 * factors
    dep0, ok0 = _gnmax_theorem6(grid0, sigma, order)
    grid1 = logq1 * factors
    h1 = (_gnmax_beta(_log_bu_bl(grid1, sigma, num_classes)[0], sigma, order, logq0)
          - _gnmax_beta(grid1, sigma, order, logq0))
    above = np.linspace(logq0, lq_valid, 401)
    dep_above, ok_above = _gnmax_theorem6(above, sigma, order)
    why = ""
    if not np.all(ok0):
        why = "Theorem 6 conditions fail somewhere below q0"
    elif not _is_nondecreasing(dep0):
        why = "C5 fails (the bound is not non-decreasing in q below q0)"
    elif not _is_nondecreasing(h1):
        why = "C6 fails (beta(BU(q)) - beta(q) is not non-decreasing below q1)"
    elif np.any(ok_above[1:] & (dep_above[1:] < ind * (1 - 1e-12))):
        why = "the bound dips below lambda/sigma^2 again above q0"
    return _Thresholds(logq0=logq0, logq1=logq1, plateau=plateau, conditions_hold=not why,
                       why=why)


def _thresholds_or_raise(sigma: float, order: float, num_classes: int) -> _Thresholds:
    th = _gnmax_thresholds(float(sigma), float(order), int(num_classes))
    if not th.conditions_hold:
        raise ValueError(
            f"the smooth-sensitivity analysis of PATE 2018 (Appendix B.4) does not apply at "
            f"sigma={sigma}, order={order}, num_classes={num_classes}: {th.why}; choose "
            "another order")
    return th


def _ls_at_distance_batch(votes: np.ndarray, sigma: np.ndarray, order: float) -> np.ndarray:
    """A^(d) for d = 0..D (D = largest number of teachers), one row per query (all m equal).

    [PATE18] Algorithms 4-5 (the authors' O(teachers x classes) form), vectorised over queries:
    with LS bounded by Algorithm 3 as a function of q (increasing up to q1, flat at its maximum
    ``plateau`` on [q1, q0], decreasing above q0, by C5-C6), the worst histogram within d
    vote changes is reached greedily: below q1, move a vote from the top class to the runner-up
    (raising q); above q0, move a vote from the runner-up to the top class (lowering q). Once the
    walk reaches [q1, q0] (or cannot move), A^(d) is the plateau, the global maximum. For
    d >= number of teachers every histogram is reachable, so A^(d) = plateau.
    """
    num_q, m = votes.shape
    order = float(order)
    ths = [_thresholds_or_raise(float(s), order, m) for s in sigma]
    logq0 = np.array([t.logq0 for t in ths])
    logq1 = np.array([t.logq1 for t in ths])
    plateau = np.array([t.plateau for t in ths])
    teachers = votes.sum(axis=1)
    horizon = int(teachers.max()) if num_q else 0
    v = -np.sort(-votes, axis=1).astype(np.float64)  # non-increasing rows
    logq = np.full((num_q, horizon + 1), np.nan)
    cur = _gnmax_logq_batch(v, sigma)
    logq[:, 0] = cur
    go_right = cur < logq1
    go_left = cur > logq0
    active = go_right | go_left
    logq[~active, 0] = np.nan  # already on the plateau
    rows = np.arange(num_q)
    for d in range(1, horizon + 1):
        if not np.any(active):
            break
        right = active & go_right
        left = active & go_left & (v[:, 1:].max(axis=1) > 0)
        if np.any(right):
            v[right, 0] -= 1.0
            v[right, 1] += 1.0
        if np.any(left):
            j = 1 + np.argmax(v[left, 1:], axis=1)
            v[left, 0] += 1.0
            v[rows[left], j] -= 1.0
        moved = right | left
        ok = moved & (v[:, 0] >= v[:, 1:].max(axis=1))
        cur = np.where(ok, _gnmax_logq_batch(v, sigma), np.nan)
        logq[:, d] = cur
        # Stop a walk once it reaches [q1, q0] (or overshoots), or cannot move any more.
        active = ok & np.where(go_right, cur < logq1, cur > logq0)
    finite = np.isfinite(logq)
    ls = np.broadcast_to(plateau[:, None], logq.shape).copy()
    if np.any(finite):
        qi = np.nonzero(finite)
        ls[qi] = _ls_bound(logq[qi], sigma[qi[0]], order, m, logq0[qi[0]], logq1[qi[0]])
    # Past the walk (or past the number of teachers) the plateau bounds everything.
    ls = np.where(finite, ls, plateau[:, None])
    return np.maximum.accumulate(ls, axis=1)


def gnmax_local_sensitivity_bounds(votes: Any, sigma: float, order: float) -> np.ndarray:
    """Upper bounds A^(d) on the local sensitivity at distance d of the GNMax RDP at ``order``.

    [NRS07] Definition 2.1 / [PATE18] Appendix B.4: A^(d)(n) = max over histograms n' within d
    teacher changes of LS(n'), where LS is the local sensitivity of beta (the RDP at ``order``
    of one GNMax query, as a function of its vote histogram). Index d = 0 .. number of teachers;
    A^(d) is constant beyond.

    Raises:
        ValueError: On bad input, or if the conditions C5-C6 of [PATE18] fail (numerically) at
            (sigma, order, number of classes).
    """
    votes = _check_votes(votes)
    sigma = _validate.check_positive("sigma", sigma)
    order = _check_order(order)
    return _ls_at_distance_batch(votes[None, :], np.array([sigma]), order)[0]


def _discounted_max(beta: float, ls: np.ndarray) -> float:
    """[NRS07] Definition 2.2 via Lemma: S(x) = max_d e^(-beta d) A^(d)(x) is beta-smooth."""
    return float(np.max(np.exp(-beta * np.arange(ls.size)) * ls)) if ls.size else 0.0


def gnmax_smooth_sensitivity(votes: Any, sigma: float, order: float, beta: float) -> float:
    """beta-smooth upper bound on the local sensitivity of one GNMax query's RDP at ``order``.

    max_d e^(-beta d) A^(d) ([NRS07] Def. 2.2, Prop. 2.4 / [PATE18] Appendix B.4).
    """
    beta = _validate.check_positive("beta", beta)
    return _discounted_max(beta, gnmax_local_sensitivity_bounds(votes, sigma, order))


def gnss_rdp(beta: float, sigma_ss: float, order: float) -> float:
    """[PATE18] Theorem 23: RDP at ``order`` of releasing f(x) + S(x) * N(0, sigma_ss^2).

    For S a beta-smooth upper bound on the local sensitivity of f and 1 < lambda < 1/(2 beta):
    eps = lambda e^(2 beta) / sigma_ss^2 + (beta lambda - log(1 - 2 lambda beta) / 2)/(lambda-1).

    Raises:
        ValueError: If beta <= 0, sigma_ss <= 0, order <= 1 or order >= 1/(2 beta).
    """
    beta = _validate.check_positive("beta", beta)
    sigma_ss = _validate.check_positive("sigma_ss", sigma_ss)
    order = _check_order(order)
    if order * beta >= 0.5:
        raise ValueError(f"order must be < 1/(2 beta) = {0.5 / beta} for Theorem 23 (beta="
                         f"{beta}); got {order!r}")
    return (order * math.exp(2.0 * beta) / sigma_ss**2
            + (beta * order - 0.5 * math.log1p(-2.0 * order * beta)) / (order - 1.0))


@dataclasses.dataclass(frozen=True)
class SmoothSensitivityRelease:
    """Cost of publishing the data-dependent RDP with smooth-sensitivity noise ([PATE18] B.4).

    The released value is ``rdp + smooth_sensitivity * sigma_ss * N(0, 1)``; publishing it costs
    ``release_rdp`` more RDP at ``order`` (Theorem 23), on top of ``rdp`` itself.

    Attributes:
        order: Renyi order of the analysis.
        beta: Smoothness parameter (0 < beta < 1/(2 order)).
        sigma_ss: Noise multiplier of the release, in units of the smooth sensitivity.
        smooth_sensitivity: beta-smooth bound on the local sensitivity of ``rdp``.
        rdp: The (total) RDP at ``order`` that is being released, from the data-dependent
            bound beta(q) of Appendix B.4 (equal to :func:`gnmax_rdp` when the conditions hold).
        release_rdp: Extra RDP at ``order`` of releasing ``rdp`` (Theorem 23).
        num_queries: Number of queries composed (with multiplicity).
    """

    order: float
    beta: float
    sigma_ss: float
    smooth_sensitivity: float
    rdp: float
    release_rdp: float
    num_queries: int

    @property
    def noise_std(self) -> float:
        """Standard deviation of the noise added to ``rdp`` when it is released."""
        return self.smooth_sensitivity * self.sigma_ss

    def epsilon(self, delta: float) -> tuple[float, float]:
        """(epsilon of ``rdp`` alone, epsilon of ``rdp`` + ``release_rdp``) at ``order``."""
        delta = _validate.check_delta(delta, "delta", allow_zero=False)
        alone, _ = epsilon_from_rdp([self.order], [self.rdp], delta)
        total, _ = epsilon_from_rdp([self.order], [self.rdp + self.release_rdp], delta)
        return alone, total

    def sample(self, rng: np.random.Generator) -> float:
        """The sanitised RDP value: ``rdp`` plus the smooth-sensitivity Gaussian noise."""
        rng = _validate.check_generator(rng)
        return float(self.rdp + self.noise_std * rng.standard_normal())


def _collect_counts(events: Any) -> Counter:
    if isinstance(events, Mapping):
        items = list(events.items())
    elif isinstance(events, Iterable):
        items = [(e, 1) for e in events]
    else:
        raise _fail("events", "a mapping event -> count or an iterable of events", events)
    out: Counter = Counter()
    for event, count in items:
        if not isinstance(event, (GaussianNoisyMaxDpEvent, LaplaceNoisyMaxDpEvent)):
            raise ValueError("events must hold GaussianNoisyMaxDpEvent or LaplaceNoisyMaxDpEvent; "
                             f"got {type(event).__name__}")
        if isinstance(event, LaplaceNoisyMaxDpEvent) and event.votes is not None:
            raise ValueError("events: no smooth-sensitivity analysis exists for data-dependent "
                             "LNMax (PATE 2017); got an LaplaceNoisyMaxDpEvent with votes")
        out[event] += _validate.check_int("count", count, minimum=1)
    return out


def smooth_sensitivity_release_cost(events: Any, order: float, *, beta: float | None = None,
                                    sigma_ss: float | None = None) -> SmoothSensitivityRelease:
    """Extra RDP of releasing the data-dependent RDP of GNMax queries ([PATE18] App. B.4, Thm 23).

    The released quantity is f = sum over queries of beta(q) at ``order`` (plus the constant
    data-independent RDP of events without votes). Its local sensitivity at distance d is at
    most the sum of the per-query A^(d) (one teacher changes its vote in every query), and
    S = max_d e^(-beta d) sum A^(d) is beta-smooth; f + S sigma_ss N(0, 1) is then
    (order, :func:`gnss_rdp`)-RDP.

    Args:
        events: GNMax/LNMax events (an iterable, or a mapping event -> count). Events with
            ``votes`` are analysed data-dependently; GNMax only (LNMax with votes is refused).
        order: The Renyi order (> 1) at which the data-dependent RDP is released.
        beta: Smoothness (0 < beta < 1/(2 order)). None: the paper's choice, minimising
            rdp + release cost + 2 noise std over beta in [0.3, 0.49]/order.
        sigma_ss: Noise multiplier. None: (order e^(2 beta) / S)^(1/3), the minimiser of
            order e^(2 beta)/sigma^2 + 2 S sigma.

    Note:
        Choosing ``order``, ``beta`` or ``sigma_ss`` from the data (the defaults) is itself
        data-dependent, as in the paper's tables; fix them in advance for a private release.

    Raises:
        ValueError: On bad input, when no event carries votes, or when the conditions C5-C6
            fail at (sigma, order) for some query.
    """
    counts = _collect_counts(events)
    order = _check_order(order)
    if beta is not None:
        beta = _validate.check_positive("beta", beta)
        if order * beta >= 0.5:
            raise ValueError(f"beta must be < 1/(2 order) = {0.5 / order}; got {beta!r}")
    if sigma_ss is not None:
        sigma_ss = _validate.check_positive("sigma_ss", sigma_ss)
    dep_events = [e for e in counts if e.votes is not None]
    if not dep_events:
        raise ValueError("events: none carries votes, so nothing data-dependent is released")
    orders = np.array([order])
    rdp = 0.0
    ls_total = np.zeros(1)
    for event in counts:
        if event.votes is None:
            rdp += counts[event] * float(data_independent_rdp(event, orders)[0])
    by_m: dict[int, list[GaussianNoisyMaxDpEvent]] = {}
    for event in dep_events:
        by_m.setdefault(len(event.votes), []).append(event)
    for m, group in by_m.items():
        votes = np.array([e.votes for e in group], dtype=np.int64)
        sigmas = np.array([float(e.sigma) for e in group])
        mult = np.array([counts[e] for e in group], dtype=np.float64)
        ls = _ls_at_distance_batch(votes, sigmas, order)
        summed = mult @ ls
        if summed.size > ls_total.size:
            ls_total = np.concatenate([ls_total, np.full(summed.size - ls_total.size,
                                                         ls_total[-1])])
        elif summed.size < ls_total.size:
            summed = np.concatenate([summed, np.full(ls_total.size - summed.size, summed[-1])])
        ls_total = ls_total + summed
        ths = [_thresholds_or_raise(float(s), order, m) for s in sigmas]
        logq = _gnmax_logq_batch(votes, sigmas)
        betas_q = _gnmax_beta(logq, sigmas, order, np.array([t.logq0 for t in ths]))
        rdp += float(mult @ betas_q)

    num_queries = int(sum(counts.values()))
    if not np.any(ls_total > 0):  # nothing varies: the value is public, no noise needed
        return SmoothSensitivityRelease(order=order, beta=beta or 0.3 / order, sigma_ss=0.0,
                                        smooth_sensitivity=0.0, rdp=rdp, release_rdp=0.0,
                                        num_queries=num_queries)

    def cost_for(b: float, s: float | None) -> tuple[float, float, float, float]:
        smooth = _discounted_max(b, ls_total)
        sig = s if s is not None else (order * math.exp(2.0 * b) / smooth) ** (1.0 / 3.0)
        release = gnss_rdp(b, sig, order)
        return rdp + release + 2.0 * smooth * sig, smooth, sig, release

    candidates = [beta] if beta is not None else list(np.arange(0.30, 0.495, 0.01) / order)
    best = min(((*cost_for(float(b), sigma_ss), float(b)) for b in candidates),
               key=lambda r: r[0])
    _, smooth, sig, release, b = best
    return SmoothSensitivityRelease(order=order, beta=b, sigma_ss=sig, smooth_sensitivity=smooth,
                                    rdp=rdp, release_rdp=release, num_queries=num_queries)


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
        if self._non_private:
            return Epsilon(math.inf, method=METHOD_DATA_INDEPENDENT, kind=BoundKind.UPPER_BOUND)
        if not self._counts:
            return Epsilon(0.0, method=METHOD_DATA_INDEPENDENT, kind=BoundKind.UPPER_BOUND)
        eps_ind, eps_dep, _ = self._epsilon_pair(target_delta)
        if eps_dep < eps_ind * (1.0 - _SAME_REL_TOL):
            return Epsilon(eps_dep, method=self._dependent_method(),
                           kind=BoundKind.DATA_DEPENDENT)
        return Epsilon(eps_ind, method=METHOD_DATA_INDEPENDENT, kind=BoundKind.UPPER_BOUND)

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
        if self._non_private:
            return Epsilon(math.inf, method=METHOD_DATA_INDEPENDENT, kind=BoundKind.UPPER_BOUND)
        if not self._counts:
            return Epsilon(0.0, method=METHOD_DATA_INDEPENDENT, kind=BoundKind.UPPER_BOUND)
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
