"""Smooth-sensitivity release of the data-dependent RDP of GNMax ([PATE18] Appendix B.4).

Theorem 23 of [PATE18] (GNSS); [NRS07] Definitions 2.1-2.2 (beta-smooth bounds).

References: see :mod:`dpkd_audit.accountants.pate`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from scipy import special

from dpkd_audit import _validate
from dpkd_audit.accountants.pate._common import (
    _LOGQ_FLOOR,
    _SQRT2,
    _check_order,
    _check_votes,
    _fail,
)
from dpkd_audit.accountants.pate.curves import (
    _gnmax_logq_batch,
    _gnmax_theorem6,
    data_independent_rdp,
)
from dpkd_audit.accountants.rdp.accountant import (
    epsilon_from_rdp,
)
from dpkd_audit.events import GaussianNoisyMaxDpEvent, LaplaceNoisyMaxDpEvent

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

    def largest(start: float, lo: float, pred, failure: str) -> float:
        # The largest log q <= start where pred holds: start itself, or a bisection after
        # doubling lo (log q < 0) until pred holds there.
        if pred(start):
            return start
        hi = start
        while not pred(lo):
            hi, lo = lo, 2.0 * lo
            if lo < _LOGQ_FLOOR:
                raise ValueError(f"{failure} at sigma={sigma}, order={order}")
        return bisect(lo, hi, pred)

    cap = math.log1p(-1.0 / num_classes)
    # Largest valid log q: the conditions hold for all smaller q (checked on the grid below).
    lq_valid = largest(cap, -1.0, valid, "no q satisfies the conditions of PATE 2018 Theorem 6")
    logq0 = largest(lq_valid, 2.0 * lq_valid, good,
                    "the data-dependent bound never beats the data-independent one")
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


