"""Exponentially tilted PLD composition: finite, tight epsilons down to delta = 1e-15.

Why: dp_accounting's FFT composition truncates a tail mass of 1e-15 into the +inf atom at
every convolution; k squarings double it k times, so 10^4 subsampled-Gaussian steps carry
~5e-12 at +inf and every delta below it is answered inf (and deltas near it loosely). The
tails that decide a small delta are also where FFT round-off (~1e-16 of the peak) lives.

How (exponential tilting, the change of measure behind the saddle-point accountant of
Alghamdi, Asoodeh, Calmon, Diaz, Gomez, Kairouz, Wang, ISIT 2022, and behind large-deviation
estimates generally): for one release with privacy-loss pmf p(l) (under the first neighbour)
and lambda > 0, the tilted pmf p_lambda(l) = p(l) e^(lambda l) / M(lambda), with
M(lambda) = sum_l p(l) e^(lambda l) = exp(lambda D_(lambda + 1)) (the Renyi divergence of
order lambda + 1), is a probability distribution; tilting commutes with convolution
(the tilt of a composition is the composition of the tilts, normalisers multiplying), so

    p_(1 + ... + k)(l) = M_1 ... M_k e^(-lambda l) (p_1,lambda * ... * p_k,lambda)(l).

With lambda chosen so that the tilted mean is near the answer, the composed tilted pmf is
concentrated around the epsilon being sought: FFT round-off is relative to that mass, and
the tails truncated at each convolution (mass tau, dropped, not moved to +inf) are far from
it. Every step stays an upper bound:

- the single-release pmfs are dp_accounting's pessimistic connect-the-dots PLDs (each a
  dominating pair), their +inf masses composed exactly as 1 - prod (1 - m_i);
- dropping mass only lowers the sum computed from what is kept, and the dropped part's
  contribution to delta(eps) = E[(1 - e^(eps - L))_+] is at most
  D M e^(-lambda eps) C_lambda with D the total tilted mass dropped (each tilted factor has
  mass 1, so the dropped masses add) and C_lambda = sup_t (1 - e^-t)_+ e^(-lambda t) <= 1,
  because e^(-lambda l) (1 - e^(eps - l))_+ <= C_lambda e^(-lambda eps) for every l. That
  term is added to every delta.

zCDP parts. A multivariate discrete Gaussian release (:class:`DiscreteGaussianVectorDpEvent`)
has no one-dimensional PLD; what is known exactly is its moment generating function:
E[e^(lambda L)] <= exp(lambda (lambda + 1) rho) (rho-zCDP, Canonne-Kamath-Steinke 2020,
Thm 14). For independent losses L = L1 + L2 (composition), with L1's pmf known and only the
MGF of L2, delta(eps) = E_L1[g(eps - L1)] with g(c) = E[(1 - e^(c - L2))_+] <= min(1,
inf_alpha exp(f(alpha, c))), f the zCDP-to-(eps, delta) conversion of CKS 2020, Prop. 12
(:func:`dpkd_audit._math.privacy.zcdp_delta`), which holds for every real c. So the PLD part
keeps its exact shape and only the zCDP part is converted; with nothing else in the history
this is CKS's conversion itself.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from dp_accounting.pld import pld_pmf
from scipy import fft as sp_fft
from scipy import optimize, special

__all__ = ["LAMBDA_MIN", "LossTable", "Release", "pmf_arrays", "tilted_table", "zcdp_g"]

#: Tilted mass dropped from each end after each convolution (the dropped total is bounded
#: and added to every delta, so this only trades width for a negligible slack).
_TAU = 1e-13

#: Tilts are searched in [LAMBDA_MIN, _LAMBDA_MAX] (Renyi orders 1 + lambda).
LAMBDA_MIN, _LAMBDA_MAX = 1e-6, 1e5

#: Log-probability below which a composed loss is moved to +inf (see :func:`tilted_table`).
_LOG_FAINT = math.log(1e-30)


@dataclass(frozen=True)
class Release:
    """One kind of release: its single-occurrence pmf on the loss grid and its count.

    Attributes:
        lower: Grid index of ``probs[0]`` (loss = index * interval).
        probs: Finite-loss probabilities (>= 0).
        infinity_mass: Mass at loss +inf.
        count: Occurrences composed.
    """

    lower: int
    probs: np.ndarray
    infinity_mass: float
    count: int

    @functools.cached_property
    def log_probs(self) -> np.ndarray:
        """log(probs), -inf where a probability is 0."""
        with np.errstate(divide="ignore"):
            return np.log(self.probs)

    def losses(self, interval: float) -> np.ndarray:
        """The finite losses on a grid of step ``interval``."""
        return (self.lower + np.arange(self.probs.size)) * interval


def pmf_arrays(pmf: object) -> tuple[int, np.ndarray, float]:
    """(lowest index, dense probabilities, +inf mass) of a dp_accounting PLD pmf."""
    if isinstance(pmf, pld_pmf.SparsePLDPmf):
        keys = sorted(pmf._loss_probs)
        lower = int(keys[0]) if keys else 0
        probs = np.zeros((int(keys[-1]) - lower + 1) if keys else 1)
        for key in keys:
            probs[int(key) - lower] += pmf._loss_probs[key]
    else:
        lower = int(pmf._lower_loss)
        probs = np.array(pmf._probs, dtype=np.float64)
    return lower, np.maximum(probs, 0.0), float(pmf._infinity_mass)


def _log_mgf(release: Release, lam: float, interval: float) -> float:
    """The log of sum_l p(l) e^(lam l) over one occurrence's finite losses."""
    return float(special.logsumexp(release.log_probs + lam * release.losses(interval)))


def _tilted_mean(release: Release, lam: float, interval: float) -> float:
    losses = release.losses(interval)
    log_w = release.log_probs + lam * losses
    w = np.exp(log_w - log_w.max())
    return float(np.dot(w, losses) / w.sum())


def cumulant(releases: Sequence[Release], lam: float, interval: float, rho: float) -> float:
    """K(lam) = log E[e^(lam L)] of the whole composition (zCDP parts by their bound)."""
    return math.fsum(r.count * _log_mgf(r, lam, interval) for r in releases) + (
        lam * (lam + 1.0) * rho)


def chernoff_tilt(releases: Sequence[Release], interval: float, rho: float,
                  log_delta: float) -> tuple[float, float]:
    """(lambda, eps) minimising the Chernoff bound eps(lambda) = (K(lambda) - log delta)/lambda.

    At the minimum the tilted mean of the composed loss equals that eps, a little above the
    exact epsilon: the tilt at which the composed pmf is accurate around the answer.
    """
    def bound(u: float) -> float:
        lam = math.exp(u)
        return (cumulant(releases, lam, interval, rho) - log_delta) / lam

    res = optimize.minimize_scalar(bound, bounds=(math.log(LAMBDA_MIN), math.log(_LAMBDA_MAX)),
                                   method="bounded", options={"xatol": 1e-4})
    return math.exp(float(res.x)), float(res.fun)


def tilt_for_mean(releases: Sequence[Release], interval: float, rho: float,
                  target: float) -> float:
    """The lambda whose tilted composed mean K'(lambda) is ``target`` (bisection in log)."""
    def mean(lam: float) -> float:
        return math.fsum(r.count * _tilted_mean(r, lam, interval) for r in releases) + (
            (2.0 * lam + 1.0) * rho)

    lo, hi = math.log(LAMBDA_MIN), math.log(_LAMBDA_MAX)
    if mean(math.exp(lo)) >= target:
        return LAMBDA_MIN
    if mean(math.exp(hi)) <= target:
        return _LAMBDA_MAX
    for _ in range(36):  # log-lambda to ~4e-10: any tilt is valid, this one only tightens
        mid = 0.5 * (lo + hi)
        if mean(math.exp(mid)) < target:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


def _truncate(probs: np.ndarray, offset: int) -> tuple[np.ndarray, int, float]:
    """Drop up to ``_TAU`` of mass from each end; (kept, new offset, dropped mass)."""
    probs = np.maximum(probs, 0.0)
    head = np.cumsum(probs)
    tail = np.cumsum(probs[::-1])
    lo = int(np.searchsorted(head, _TAU, side="right"))
    cut_top = int(np.searchsorted(tail, _TAU, side="right"))
    hi = probs.size - cut_top
    if lo >= hi:  # nothing that large at either end: keep all
        return probs, offset, 0.0
    dropped = (float(head[lo - 1]) if lo else 0.0) + (float(tail[cut_top - 1]) if cut_top
                                                      else 0.0)
    return probs[lo:hi], offset + lo, dropped


def _convolve(a: tuple[np.ndarray, int], b: tuple[np.ndarray, int]
              ) -> tuple[np.ndarray, int, float]:
    """A * b (b may be a itself: one transform then), truncated by :func:`_truncate`."""
    x, y = a[0], b[0]
    if min(x.size, y.size) <= 64:
        probs = np.convolve(x, y)
    else:
        size = x.size + y.size - 1
        n = sp_fft.next_fast_len(size, real=True)
        fx = sp_fft.rfft(x, n, workers=-1)
        fy = fx if y is x else sp_fft.rfft(y, n, workers=-1)
        probs = sp_fft.irfft(fx * fy, n, workers=-1)[:size]
    return _truncate(probs, a[1] + b[1])


def _combine(acc: tuple[np.ndarray, int] | None, item: tuple[np.ndarray, int]
             ) -> tuple[tuple[np.ndarray, int], float]:
    """``acc * item`` (``item`` itself when ``acc`` is None), with the mass cut."""
    if acc is None:
        return item, 0.0
    probs, offset, cut = _convolve(acc, item)
    return (probs, offset), cut


@dataclass(frozen=True)
class LossTable:
    """A composed privacy-loss pmf (one direction) with everything needed to bound delta.

    delta(eps) = infinity_mass + sum_l p(l) g(eps - l) + dropped_mass *
    exp(log_scale - lam * eps), where p(l) = exp(log_probs) at the losses (offset + i) *
    interval, g(c) = (1 - e^c)_+ without zCDP parts and the zCDP bound :func:`zcdp_g` with
    them (see the module docstring). With zCDP parts, g is read at c rounded down to the
    grid (g decreases, so this is an upper bound) and epsilons are grid points.

    Attributes:
        offset: Grid index of the first loss.
        interval: Grid step.
        log_probs: Log-probabilities of the losses (-inf for zero).
        infinity_mass: Mass at +inf.
        rho: Total zCDP parameter of the parts known by their MGF only.
        lam: The tilt (0: untilted, nothing dropped).
        dropped_mass: Tilted mass dropped by truncation.
        log_scale: log of the factor turning dropped tilted mass into a delta bound at eps = 0.
    """

    offset: int
    interval: float
    log_probs: np.ndarray
    infinity_mass: float
    rho: float = 0.0
    lam: float = 0.0
    dropped_mass: float = 0.0
    log_scale: float = -math.inf

    @functools.cached_property
    def _losses(self) -> np.ndarray:
        return (self.offset + np.arange(self.log_probs.size)) * self.interval

    @functools.cached_property
    def _suffix(self) -> tuple[np.ndarray, np.ndarray]:
        """U_i = sum_{j >= i} p_j and log W_i = log sum_{j >= i} p_j e^(-l_j) (+ a 0 / -inf)."""
        probs = np.exp(self.log_probs)
        upper = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])
        log_terms = self.log_probs - self._losses
        log_lower = np.concatenate([np.logaddexp.accumulate(log_terms[::-1])[::-1],
                                    [-np.inf]])
        return upper, log_lower

    def dropped_bound(self, epsilon: float) -> float:
        """The bound on the dropped tails' share of delta at ``epsilon`` (added to it)."""
        return self._extra(epsilon)

    def _extra(self, epsilon: float) -> float:
        if self.dropped_mass <= 0.0:
            return 0.0
        return self.dropped_mass * math.exp(min(700.0, self.log_scale - self.lam * epsilon))

    def _g_on_grid(self, first: int, last: int) -> np.ndarray:
        return zcdp_g(np.arange(first, last + 1) * self.interval, self.rho)

    def _grid_delta(self, k: int, g: np.ndarray, first: int) -> float:
        """Delta at eps = k * interval, given g on the grid indices from ``first`` on."""
        idx = k - self.offset - np.arange(self.log_probs.size) - first
        body = float(np.dot(np.exp(self.log_probs), g[idx]))
        return min(1.0, self.infinity_mass + body + self._extra(k * self.interval))

    def delta(self, epsilon: float) -> float:
        """Upper bound on the hockey-stick divergence at ``epsilon`` (clipped to [0, 1])."""
        if self.rho > 0.0 and self.log_probs.size == 1:  # one loss: g read exactly
            c = epsilon - self.offset * self.interval
            body = float(np.exp(self.log_probs[0]) * zcdp_g(np.array([c]), self.rho)[0])
            return min(1.0, self.infinity_mass + body + self._extra(epsilon))
        if self.rho > 0.0:
            k = math.floor(epsilon / self.interval)
            first = k - self.offset - self.log_probs.size + 1
            return self._grid_delta(k, self._g_on_grid(first, k - self.offset), first)
        upper, log_lower = self._suffix
        i = int(np.searchsorted(self._losses, epsilon, side="right"))
        body = max(0.0, float(upper[i] - np.exp(epsilon + log_lower[i])))
        return min(1.0, self.infinity_mass + body + self._extra(epsilon))

    def epsilon(self, delta: float, upper: float) -> float:
        """Smallest eps >= 0 with delta(eps) <= ``delta``; inf if none is found.

        To ~1e-11 relative, or the next grid point where zCDP parts meet a table of several
        losses (g is then read on the grid).

        Args:
            delta: Target delta (> 0).
            upper: An eps expected to satisfy the target (e.g. a Chernoff bound).
        """
        if self.infinity_mass >= delta:
            return math.inf
        if self.rho > 0.0 and self.log_probs.size > 1:
            return self._grid_epsilon(delta, upper)
        if self.delta(0.0) <= delta:
            return 0.0
        hi = max(upper, 1e-6)
        for _ in range(40):
            if self.delta(hi) <= delta:
                break
            hi *= 2.0
        else:
            return math.inf
        lo = 0.0
        for _ in range(200):
            if hi - lo <= 1e-11 * max(1.0, hi):
                break
            mid = 0.5 * (lo + hi)
            if self.delta(mid) <= delta:
                hi = mid
            else:
                lo = mid
        return hi

    def _grid_epsilon(self, delta: float, upper: float) -> float:
        """:meth:`epsilon` on the grid, with g computed once over the range it needs."""
        first = -self.offset - self.log_probs.size + 1
        k_hi = max(1, math.ceil(upper / self.interval))
        for _ in range(40):
            g = self._g_on_grid(first, k_hi - self.offset)
            if self._grid_delta(k_hi, g, first) <= delta:
                break
            k_hi *= 2
        else:
            return math.inf
        if self._grid_delta(0, g, first) <= delta:
            return 0.0
        k_lo = 0
        while k_hi - k_lo > 1:
            mid = (k_lo + k_hi) // 2
            if self._grid_delta(mid, g, first) <= delta:
                k_hi = mid
            else:
                k_lo = mid
        return k_hi * self.interval


def zcdp_g(c: np.ndarray, rho: float) -> np.ndarray:
    """Vectorised min(1, inf_alpha exp(f(alpha, c))), f of CKS 2020 Prop. 12 (valid for all c).

    f(alpha, c) = (alpha - 1)(alpha rho - c) + (alpha - 1) log(1 - 1/alpha) - log(alpha) is
    convex in alpha; its stationary point is found by bisection on u = log(alpha - 1) (any
    alpha gives an upper bound, so an inexact root only loosens the value).
    """
    c = np.asarray(c, dtype=np.float64)
    lo = np.full(c.shape, -40.0)
    hi = np.full(c.shape, 40.0)
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        t = np.exp(mid)
        slope = (2.0 * t + 1.0) * rho - c - np.log1p(np.exp(-mid))
        neg = slope < 0.0
        lo = np.where(neg, mid, lo)
        hi = np.where(neg, hi, mid)
    # alpha = 1 + t with t = e^u: alpha - 1 = t and log(1 - 1/alpha) = u - log(1 + t) exactly
    # (1 + e^-40 rounds to 1, where log1p(-1/alpha) is -inf and 0 * -inf a NaN)
    t = np.exp(hi)
    with np.errstate(over="ignore", invalid="ignore"):
        log_bound = t * ((1.0 + t) * rho - c) + t * (hi - np.log1p(t)) - np.log1p(t)
    log_bound = np.where(np.isnan(log_bound), 0.0, log_bound)  # unknown: the trivial g <= 1
    return np.exp(np.minimum(log_bound, 0.0))


def _power(base: tuple[np.ndarray, int], count: int) -> tuple[tuple[np.ndarray, int], float]:
    """``count``-fold composition of a tilted pmf by repeated squaring; (result, dropped).

    A mass cut from a square of level j recurs in every later use of that square:
    it is counted (number of such blocks in the result) times.
    """
    part: tuple[np.ndarray, int] | None = None
    dropped = 0.0
    square = base
    n = count
    while n:
        if n & 1:
            part, cut = _combine(part, square)
            dropped += cut
        n >>= 1
        if n:
            probs, offset, cut = _convolve(square, square)
            dropped += cut * n
            square = (probs, offset)
    if part is None:
        raise ValueError(f"a release's count must be >= 1; got {count}")
    return part, dropped


def tilted_table(releases: Sequence[Release], interval: float, lam: float,
                 rho: float = 0.0) -> LossTable:
    """The composed pmf of ``releases`` computed under the tilt ``lam``, then untilted.

    Kinds with the same count are convolved first ((A * B)^n = A^n * B^n), each such product
    raised to its count by repeated squaring, the powers convolved; each convolution by FFT,
    negative round-off clipped, tails beyond mass ``_TAU`` dropped (bounded in the table).
    """
    composed: tuple[np.ndarray, int] | None = None
    dropped = 0.0
    log_norm = 0.0
    infinity_log_survival = 0.0
    by_count: dict[int, tuple[np.ndarray, int]] = {}
    for release in releases:
        log_w = release.log_probs + lam * release.losses(interval)
        log_m = float(special.logsumexp(log_w))
        log_norm += release.count * log_m
        if release.infinity_mass < 1.0:
            infinity_log_survival += release.count * math.log1p(-release.infinity_mass)
        else:
            infinity_log_survival = -math.inf
        base, base_offset, cut = _truncate(np.exp(log_w - log_m), release.lower)
        dropped += cut * release.count
        by_count[release.count], cut = _combine(by_count.get(release.count),
                                                (base, base_offset))
        dropped += cut * release.count
    for count, product in sorted(by_count.items()):
        part, cut = _power(product, count)
        composed, joined = _combine(composed, part)
        dropped += cut + joined
    if composed is None:  # only zCDP parts: the finite loss is 0
        composed = (np.ones(1), 0)
    probs, offset = composed
    # FFT round-off can shift the kept mass either way: count any shortfall as dropped too,
    # plus a 1e-12 slack (a relative 1e-12 of a Chernoff-sized term)
    dropped = max(dropped, 1.0 - math.fsum(probs.tolist()) if probs.size < 4096
                  else 1.0 - float(np.sum(probs))) + 1e-12
    losses = (offset + np.arange(probs.size)) * interval
    with np.errstate(divide="ignore"):
        log_probs = np.log(np.maximum(probs, 0.0)) + log_norm - lam * losses
    # losses whose probability is below 1e-30 (a millionth of the smallest delta resolved,
    # even summed over 10^9 of them) move to +inf: pessimistic, and a shorter table
    faint = log_probs < _LOG_FAINT
    if faint.any() and not faint.all():
        keep = np.flatnonzero(~faint)
        first, last = int(keep[0]), int(keep[-1])
        outside = np.concatenate([log_probs[:first], log_probs[last + 1:]])
        faint_mass = float(np.sum(np.exp(outside)))
        log_probs = log_probs[first:last + 1]
        offset += first
    else:
        faint_mass = 0.0
    infinity = -math.expm1(infinity_log_survival)
    # D M e^(-lam eps) C_lam with C_lam <= 1 (module docstring); with zCDP parts their MGF
    # bound multiplies in as well (g(c) <= C e^(-lam c) e^(lam (lam + 1) rho)).
    log_scale = log_norm + lam * (lam + 1.0) * rho
    return LossTable(offset=offset, interval=interval, log_probs=log_probs,
                     infinity_mass=min(1.0, infinity + faint_mass), rho=rho,
                     lam=lam, dropped_mass=dropped, log_scale=log_scale)
