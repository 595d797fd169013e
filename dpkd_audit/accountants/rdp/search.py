"""The RDP accountant's order search: grid optimum, warm-started refinement, local models.

Any order's exact total RDP certifies a bound (Balle et al. 2020, Theorem 21), so the search only
decides where to evaluate; every answer is the bound at one order where the exact total was
computed. :class:`_OrderSearch` is the part of :class:`.rdp.RDPAccountant` that does it (see
:meth:`_OrderSearch._optimise`); it reads the accountant's running totals through the attributes
and methods listed in the class docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from dpkd_audit.accountants.rdp.plans import _Grid

_POLISH_STEPS = 80  # at most this many single-order steps (sharp minima need golden steps)
_POLISH_RTOL = 1e-12  # stop once the parabola promises less than this (relative) gain
#: Refine off the grid only while at most this many distinct lazy (subsampled-Gaussian) events
#: are composed: each off-grid order costs one quadrature or series per such event.
_LAZY_POLISH_MAX = 8
_POOL_SIZE = 6  # exact off-grid totals kept per query target (see _OrderSearch._polish)
_POOL_TARGETS = 4  # query targets (mode, delta or epsilon) with such a pool
_WALK_STEPS = 12  # a warm-started search of lazy curves walks at most this many orders


class _Pool:
    """Exact totals (lazy curves excepted) at a few off-grid orders, kept as running totals.

    Plain lists (a pool holds at most :data:`_POOL_SIZE` orders, for which Python floats are
    faster than numpy arrays): s = log(alpha - 1), alpha, the total, and the conversion constants
    of the order (:func:`_order_consts`).
    """

    __slots__ = ("consts", "orders", "s", "totals")

    def __init__(self, s: list[float], orders: list[float], totals: list[float],
                 consts: list[tuple[float, float, float, float]]) -> None:
        self.s = s
        self.orders = orders
        self.totals = totals
        self.consts = consts

    def copy(self) -> _Pool:
        return _Pool(list(self.s), list(self.orders), list(self.totals), list(self.consts))


def _order_consts(alpha: float) -> tuple[float, float, float, float]:
    """(t, log1p(-1/alpha), log(alpha), 1/t), t = alpha - 1: the constants of :func:`_bound`."""
    t = alpha - 1.0
    return t, math.log1p(-1.0 / alpha), math.log(alpha), 1.0 / t


def _bound(delta_mode: bool, target: float, rho: float,
           consts: tuple[float, float, float, float]) -> float:
    """The bound one finite order certifies from its total RDP (see RDPAccountant._objective)."""
    t, c1, c2, inv_t = consts
    if delta_mode:
        return min(t * (rho - target + c1) - c2, 0.0)
    return rho + c1 - (target + c2) * inv_t


def _consts(alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    t = alpha - 1.0
    return t, np.log1p(-1.0 / alpha), np.log(alpha), 1.0 / t


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


def _local_models(x: float, fx: float, known: list[tuple[float, float]],
                  min_gap: float) -> list[tuple[float, float]]:
    """Minimisers of local interpolating polynomials, and how far x may be from the true one.

    Newton interpolation (divided differences) of the bound f through x and the known points
    nearest to it (skipping points closer than ``min_gap`` to one already taken, whose divided
    differences would only resolve rounding noise), of degree 3 and 2, each with one more point
    for its error term: f - p = f[s_0..s_{d+1}] prod_{i<=d} (s - s_i) up to higher orders (the
    interpolation error formula, e.g. Stoer-Bulirsch, "Introduction to numerical analysis",
    Theorem 2.1.4.1). Returns (vertex, gap, gap at vertex) per degree (cubic first) for which p
    has a local minimum near x (p'' > 0 there): vertex minimises p; gap estimates f(x) - min f
    as (p''/2) (|x - vertex| + 2 e)^2, e = |E'(vertex)| / p''(vertex) the shift of the minimiser
    that the error term E causes (doubled for safety), and the gap at vertex is f(vertex) - min
    f, (p''/2) (2 e)^2, by the same model.
    """
    ss, table = [x], [fx]
    for _, s, f in sorted([(abs(s - x), s, f) for s, f in known]):
        for q in ss:
            if -min_gap < s - q < min_gap:
                break
        else:
            ss.append(s)
            table.append(f)
            if len(ss) == 5:
                break
    coef = [table[0]]
    for k in range(1, len(ss)):
        table = [(table[i + 1] - table[i]) / (ss[i + k] - ss[i]) for i in range(len(table) - 1)]
        coef.append(table[0])
    out = []
    for degree in (3, 2):
        if len(ss) < degree + 2:
            continue
        # p(x + h) = a1 h + a2 h^2 + a3 h^3 + fx, from the Newton form.
        d1 = ss[1] - x
        if degree == 2:
            a1, a2, a3 = coef[1] - coef[2] * d1, coef[2], 0.0
        else:
            d2 = ss[2] - x
            a1 = coef[1] - coef[2] * d1 + coef[3] * d1 * d2
            a2 = coef[2] - coef[3] * (d1 + d2)
            a3 = coef[3]
        if a3 == 0.0:
            if not a2 > 0.0:
                continue
            h, curv = -a1 / (2.0 * a2), 2.0 * a2  # curv = p''
        else:
            disc = a2 * a2 - 3.0 * a1 * a3
            if not (disc > 0.0 and a2 + math.sqrt(disc) != 0.0):
                continue
            root = math.sqrt(disc)
            h, curv = -a1 / (a2 + root), 2.0 * root  # the root where p'' = 2 sqrt(disc) > 0
        vertex = x + h
        # E'(vertex) for E = c prod_{i<=degree} (s - s_i): sum over i of the other factors.
        f0, f1, f2 = vertex - ss[0], vertex - ss[1], vertex - ss[2]
        if degree == 2:
            slope = f1 * f2 + f0 * f2 + f0 * f1
        else:
            f3 = vertex - ss[3]
            slope = f1 * f2 * f3 + f0 * f2 * f3 + f0 * f1 * f3 + f0 * f1 * f2
        shift = 2.0 * abs(coef[degree + 1] * slope) / curv
        gap = 0.5 * curv * (abs(h) + shift) ** 2
        if math.isfinite(vertex) and math.isfinite(gap):
            out.append((vertex, gap, 0.5 * curv * shift * shift))
    return out


Point = tuple[float, float, float]  # (log(alpha - 1), bound certified there, alpha)


class _OrderSearch:
    """The order search of :class:`.rdp.RDPAccountant` (a mixin; see the module docstring).

    It uses the accountant's grid (``_grid``), totals (``_total``, ``_grid_total(idx)``,
    ``_nonlazy_at_order(alpha)``, ``_lazy_at_order(alpha)``, ``_recentre_lazy(j)``), event
    records (``_lazy``, ``_generic``, ``_convex``), the ``_refine`` flag, and keeps its own
    state there: ``_pools`` (exact off-grid totals per query target) and ``_lazy_best`` (the
    last best grid index per target).
    """

    _grid: _Grid
    _orders: np.ndarray
    _total: np.ndarray
    _lazy: dict[Any, int]
    _generic: dict[Any, int]
    _convex: bool
    _refine: bool
    _pools: dict[tuple[bool, float], _Pool]
    _lazy_best: dict[tuple[bool, float], int]
    _grid_total: Callable[..., np.ndarray]
    _nonlazy_at_order: Callable[[float], float]
    _lazy_at_order: Callable[[float], float]
    _recentre_lazy: Callable[[int], None]

    def _objective(self, delta_mode: bool, target: float, rdp: np.ndarray,
                   consts: tuple[np.ndarray, ...]) -> np.ndarray:
        """The bound each finite order certifies: epsilon, or log delta in delta mode.

        epsilon = rho + log1p(-1/alpha) - (log delta + log alpha) / (alpha - 1) and log delta =
        (alpha - 1)(rho - eps + log1p(-1/alpha)) - log alpha (capped at 0): Balle et al. 2020,
        Theorem 21 (= Canonne-Kamath-Steinke 2020, Proposition 12), as
        :func:`.conversion._eps_at` and :func:`.conversion._log_delta_at`; Mironov
        2017's Proposition 3 is never smaller (its extra terms log1p(-1/alpha) and
        -log(alpha)/(alpha-1) are negative), so it is not formed.
        """
        t, c1, c2, inv_t = consts
        if delta_mode:
            return np.minimum(t * (rdp - target + c1) - c2, 0.0)
        return rdp + c1 - (target + c2) * inv_t

    def _grid_objective(self, delta_mode: bool, target: float, idx: np.ndarray | None,
                        total: np.ndarray) -> np.ndarray:
        """:meth:`_objective` at the finite grid orders ``idx`` (all when None) from totals."""
        grid = self._grid
        if not delta_mode:
            off = grid.eps_offset(target)
            return total + (off if idx is None else off[idx])
        sel = slice(None) if idx is None else idx
        return self._objective(True, target, total,
                               (grid.t[sel], grid.c1[sel], grid.c2[sel], grid.inv_t[sel]))

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
        between the coarse neighbours of the best coarse order; the best grid order between
        them is found by bisection on the sign of the difference of neighbouring values
        (:meth:`_search_lazy`), every value being exact and memoised per event and order. The
        result is then never above any grid order's value (in particular dp_accounting's
        default orders, which the default grid contains), and is polished like the rest when at
        most :data:`_LAZY_POLISH_MAX` distinct lazy events are composed (beyond, each off-grid
        order would cost one quadrature or series per event, so the best grid order is
        returned). Curves without that convexity (LNMax's minimum, registered curves) make the
        search evaluate the whole grid instead. alpha = inf (the pure-DP bound) is compared
        separately.
        """
        grid = self._grid
        nf = grid.nf
        best, order, rho_min = math.inf, math.nan, math.inf
        if nf:
            if self._lazy and self._convex:
                j, values, rho_min = self._search_lazy(delta_mode, target)
            else:
                total = self._grid_total()[:nf]
                values = self._grid_objective(delta_mode, target, None, total)
                # Renyi divergences increase with the order (van Erven-Harremoes 2014, Thm 3), so
                # the smallest is at the first order; any order's value bounds TV (registered
                # curves need not be monotone: the minimum is taken then).
                rho_min = float(total.min()) if self._generic else float(total[0])
                j = int(values.argmin())
            best, order = float(values[j]), float(grid.a[j])
            if (self._refine and nf > 1 and math.isfinite(best)
                    and len(self._lazy) <= _LAZY_POLISH_MAX):
                lo, hi = max(j - 1, 0), min(j + 1, nf - 1)
                best, order = self._polish(
                    delta_mode, target,
                    (float(grid.s[lo]), float(values[lo]), float(grid.a[lo])),
                    (float(grid.s[j]), best, order),
                    (float(grid.s[hi]), float(values[hi]), float(grid.a[hi])))
        else:
            order = float(self._orders[0])
        if grid.has_inf:
            d_inf = float(self._total[nf]) if not self._lazy \
                else float(self._grid_total(np.array([nf]))[0])
            if delta_mode:
                value = -math.inf if d_inf <= target else 0.0
            else:
                value = d_inf
            if value < best:
                best, order = value, math.inf
        return best, order, rho_min

    def _search_lazy(self, delta_mode: bool,
                     target: float) -> tuple[int, np.ndarray, float]:
        """Best grid order by a coarse scan and a bisection (quasi-convex case of _optimise).

        Warm start: from the best index of the last search for the same target, walk to the
        neighbour with the smaller value until both neighbours are strictly larger; a strict
        local minimum of a quasi-convex function is its global minimum on the grid (a smaller
        value beyond a neighbour would put that neighbour at most at the local minimum's level),
        so this gives the answer of the cold search below with a few orders only. Ties, or a
        walk longer than :data:`_WALK_STEPS`, fall back to the cold search: a coarse scan and a
        bisection.

        Returns the best grid index, the objective at the finite grid orders (nan where not
        evaluated; the best index's neighbours are evaluated) and the smallest total seen.
        """
        grid = self._grid
        nf = grid.nf
        values = np.full(nf, np.nan)
        rho_min = math.inf

        def evaluate(idx: np.ndarray) -> None:
            nonlocal rho_min
            idx = idx[np.isnan(values[idx])]
            if idx.size:
                total = self._grid_total(idx)
                rho_min = min(rho_min, float(total.min()))
                values[idx] = self._grid_objective(delta_mode, target, idx, total)

        key = (delta_mode, target)
        j = self._lazy_best.get(key, -1)
        if j >= 0:  # warm start: walk from the last best index to a strict local minimum
            evaluate(np.array([0]))  # the smallest order has the smallest RDP (for rho_min)
            for _ in range(_WALK_STEPS):
                evaluate(np.arange(max(j - 1, 0), min(j + 2, nf)))
                fj = values[j]
                left = values[j - 1] if j > 0 else math.inf
                right = values[j + 1] if j + 1 < nf else math.inf
                if fj < left and fj < right:  # strict: the grid minimum (quasi-convexity)
                    self._lazy_best[key] = j
                    self._recentre_lazy(j)
                    return j, values, rho_min
                if left < fj and left <= right:
                    j -= 1
                elif right < fj:
                    j += 1
                else:
                    break  # a tie: the cold search below decides
        coarse = grid.coarse
        seen: list[int] = []
        running = math.inf
        pos, size, stop = 0, grid.quad_coarse, False
        while pos < coarse.size and not stop:
            chunk = coarse[pos:pos + size]
            pos, size = pos + size, 4
            evaluate(chunk)
            for i in chunk.tolist():
                seen.append(i)
                value = float(values[i])
                if value > running:
                    stop = True  # past the minimum (quasi-convexity)
                running = min(running, value)
        seen_values = [float(values[i]) for i in seen]
        first = seen_values.index(running)
        if not math.isfinite(running):
            self._lazy_best.pop(key, None)
            return seen[first], values, rho_min
        last = len(seen) - 1 - seen_values[::-1].index(running)
        lo = seen[first - 1] if first > 0 else seen[first]
        hi = seen[last + 1] if last + 1 < len(seen) else seen[last]
        # The best grid order lies in [lo, hi]; bisect on the sign of f(m + 1) - f(m).
        while hi - lo > 2:
            m = (lo + hi) // 2
            evaluate(np.array([m, m + 1]))
            if values[m] < values[m + 1]:
                hi = m
            elif values[m] > values[m + 1]:
                lo = m + 1
            else:  # a tie says nothing under quasi-convexity: look at them all
                break
        evaluate(np.arange(lo, hi + 1))
        j = lo + int(np.argmin(values[lo:hi + 1]))
        evaluate(np.array([max(j - 1, 0), min(j + 1, nf - 1)]))
        self._lazy_best[key] = j
        self._recentre_lazy(j)
        return j, values, rho_min

    def _polish(self, delta_mode: bool, target: float, lo: Point, mid: Point,
                hi: Point) -> tuple[float, float]:
        """Refine the order between two grid neighbours by Brent's method on exact values.

        (lo, mid, hi) brackets the minimum (mid's value is the smallest). Exact totals at the
        off-grid orders evaluated by earlier refinements for the same target (a pool of
        :data:`_POOL_SIZE`, kept up to date as running totals by :meth:`_add`) that fall inside
        the bracket join it: the best known point and its two neighbours (by order) then bracket
        the minimum (quasi-convexity), usually much more tightly, so that an online query (one
        more event since the last) typically needs one or two new exact evaluations. The new
        evaluations join the pool, which keeps the orders nearest to the result.
        """
        key = (delta_mode, target)
        pool = self._pools.get(key)
        lo_s, mid_s, hi_s = lo[0], mid[0], hi[0]
        points = [mid]  # distinct orders only (lo or hi is mid at an end of the grid)
        if lo_s != mid_s:
            points.append(lo)
        if hi_s != mid_s:
            points.append(hi)
        lazy = bool(self._lazy)
        if pool is not None:
            for s, alpha, total, consts in zip(pool.s, pool.orders, pool.totals, pool.consts,
                                               strict=True):
                if lo_s < s < hi_s and s != mid_s:
                    rho = total + self._lazy_at_order(alpha) if lazy else total
                    points.append((s, _bound(delta_mode, target, rho, consts), alpha))
        points.sort()  # by order
        k, best = 0, points[0][1]
        for m in range(1, len(points)):
            if points[m][1] < best:
                k, best = m, points[m][1]
        new: list[tuple[float, float, float, tuple[float, float, float, float]]] = []

        def evaluate(u: float) -> tuple[float, float]:
            alpha = 1.0 + math.exp(u)
            consts = _order_consts(alpha)
            nonlazy = self._nonlazy_at_order(alpha)
            rho = nonlazy + self._lazy_at_order(alpha) if lazy else nonlazy
            new.append((u, alpha, nonlazy, consts))  # the pool keeps the non-lazy part
            return _bound(delta_mode, target, rho, consts), alpha

        lo_pt, x_pt, hi_pt = points[max(k - 1, 0)], points[k], points[min(k + 1, len(points) - 1)]
        known = [(p[0], p[1]) for p in points]
        result = self._model_step(x_pt, lo_pt[0], hi_pt[0], known, evaluate)
        if result is None:
            result = self._brent(lo_pt, x_pt, hi_pt, evaluate, known)
        if new:
            self._remember(key, pool, new, result[1])
        return result

    @staticmethod
    def _model_step(x_pt: Point, a: float, b: float, known: list[tuple[float, float]],
                    evaluate: Callable[[float], tuple[float, float]]) -> tuple[float, float] | None:
        """The first step of :meth:`_brent` when a local model settles it; else None.

        With the best point x bracketed by (a, b), the local models (:func:`_local_models`) may
        already place x within the tolerance of the minimum (then x is the answer), or vouch for
        their minimiser, which is then evaluated and is the answer if it is no worse than x. These
        are exactly the tests of the first iteration of :meth:`_brent` (minus the parabola, whose
        test cannot pass before a step), so the answer is the one :meth:`_brent` would give.
        """
        x, fx, alpha_x = x_pt
        if not a < b:
            return None
        scale = max(1.0, abs(x))
        tol = _POLISH_RTOL * abs(fx)
        models = _local_models(x, fx, known, 1e-6 * scale)
        if not models:
            return None
        if any(gap <= tol for _, gap, _ in models):
            return fx, alpha_x
        step, _, gap_there = models[0]
        span = b - a
        if not (gap_there <= tol and a + 1e-3 * span < step < b - 1e-3 * span
                and 1e-12 * scale < abs(step - x)):
            return None
        fu, alpha = evaluate(step)
        if fu <= fx:
            return fu, alpha
        known.append((step, fu))
        return None

    def _remember(self, key: tuple[bool, float], pool: _Pool | None,
                  new: list[tuple[float, float, float, tuple[float, float, float, float]]],
                  order: float) -> None:
        """Add new exact off-grid totals to the target's pool, keeping those nearest ``order``."""
        if pool is None:
            pool = _Pool([], [], [], [])
            self._pools[key] = pool
            while len(self._pools) > _POOL_TARGETS:  # least recently created target first
                self._pools.pop(next(iter(self._pools)))
        for s, alpha, total, consts in new:
            pool.s.append(s)
            pool.orders.append(alpha)
            pool.totals.append(total)
            pool.consts.append(consts)
        if len(pool.s) > _POOL_SIZE:
            centre = math.log(order - 1.0) if math.isfinite(order) and order > 1.0 else 0.0
            while len(pool.s) > _POOL_SIZE:  # drop the farthest from the result
                distance = [abs(v - centre) for v in pool.s]
                far = distance.index(max(distance))
                for column in (pool.s, pool.orders, pool.totals, pool.consts):
                    del column[far]

    @staticmethod
    def _brent(lo: Point, mid: Point, hi: Point, evaluate: Callable[[float], tuple[float, float]],
               known: list[tuple[float, float]]) -> tuple[float, float]:
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
        (initially: the distance from mid to the farther end of the bracket) was shorter than
        1e-4 (the three best points then pin the minimum down) and the parabola promises a gain
        below :data:`_POLISH_RTOL` (relative), once such a short parabolic step changed the
        value by less than that (closer points would only resolve rounding noise, which can
        also make the parabola non-convex), or when a local interpolation model with its error
        term (:func:`_local_models`, cubic or quadratic through the known points nearest to the
        best one) says that the best point is that close to the minimum, once the bracket is
        narrower than 1e-11, or after :data:`_POLISH_STEPS` steps. When such a model has a
        minimiser that passes the same safeguards as the parabola's vertex, it is evaluated
        instead, and the search stops there if it improved and the model put it within the
        tolerance (with exact values from earlier queries near the optimum, e.g. in online use,
        one such step usually settles the query).
        ``evaluate(s)`` returns (bound, alpha) at s; ``known`` lists the (s, bound) pairs known
        beforehand (the bracket's and other exact ones). Returns the best (value, order)
        evaluated.
        """
        known = list(known)
        a, b = lo[0], hi[0]
        x, fx, alpha_x = mid
        (w, fw, _), (v, fv, _) = sorted((lo, hi), key=lambda p: p[1])
        if not a < b:
            return fx, alpha_x
        if x in (a, b):  # the best order ends the bracket (an end of the grid)
            u = x + 1e-6 * (b - a) if x == a else x - 1e-6 * (b - a)
            fu, alpha = evaluate(u)
            known.append((u, fu))
            if not fu < fx:
                return fx, alpha_x  # quasi-convexity: the minimum is within 1e-6 of the end
            v, fv, w, fw = w, fw, x, fx
            x, fx, alpha_x = u, fu, alpha
        golden = False
        last, before_last = max(b - x, x - a), math.inf  # Brent's d and e
        for _ in range(_POLISH_STEPS):
            span = b - a
            scale = max(1.0, abs(x))
            if span <= 1e-11 * scale:
                break
            u, predicted = _parabola_min(v, fv, w, fw, x, fx)
            if last <= 1e-4 * scale and fx - predicted <= _POLISH_RTOL * abs(fx):
                break  # converged: the model promises no gain worth an evaluation
            tol = _POLISH_RTOL * abs(fx)
            models = _local_models(x, fx, known, 1e-6 * scale)
            if any(gap <= tol for _, gap, _ in models):
                break  # x is within the tolerance of the minimum by a local error model
            confident = False
            if models and not golden:
                step, _, gap_there = models[0]  # the best-informed model (cubic if any)
                if (a + 1e-3 * span < step < b - 1e-3 * span
                        and 1e-12 * scale < abs(step - x) < 0.5 * before_last):
                    u = step  # checked with the same safeguards as the parabola's vertex
                    confident = gap_there <= tol
            parabolic = (not golden and a + 1e-3 * span < u < b - 1e-3 * span
                         and 1e-12 * scale < abs(u - x) < 0.5 * before_last)  # nan fails too
            if not parabolic:
                half = max(b - x, x - a)
                u = x + 0.381966 * half if b - x > x - a else x - 0.381966 * half
            before_last, last = last, abs(u - x)
            fu, alpha = evaluate(u)
            known.append((u, fu))
            # A short parabolic step that gains (or loses) less than the tolerance confirms the
            # model: x is at the minimum to within it (closer steps only meet rounding noise).
            settled = parabolic and (
                (confident and fu <= fx)  # the model said its minimiser is within the tolerance
                or (last <= 1e-4 * scale and abs(fx - fu) <= _POLISH_RTOL * abs(fx)))
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
            if settled:
                break
        return fx, alpha_x
