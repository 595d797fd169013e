"""Invert any accountant for one scalar: noise for a target epsilon, queries for a budget.

Both solvers bracket the answer and shrink the bracket on the accountant's own ``get_epsilon``
(Brent's method for the noise, bisection for the integer count); the value returned is always
one at which the accountant certifies ``epsilon <= target_epsilon`` (never a root estimate or
the midpoint of a bracket that straddles the target).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import optimize

from dpkd_audit import _validate
from dpkd_audit.accountants.base import Accountant

__all__ = ["CalibrationError", "calibrate_noise", "max_queries"]


class CalibrationError(ValueError):
    """No parameter in the allowed range meets the target."""


def _epsilon(build: Callable, value: float | int, target_delta: float) -> float:
    accountant = build(value)
    if not isinstance(accountant, Accountant):
        raise ValueError(f"build({value!r}) must return an Accountant; got "
                         f"{type(accountant).__name__}")
    eps = float(accountant.get_epsilon(target_delta))
    return math.inf if math.isnan(eps) else eps


def calibrate_noise(build: Callable[[float], Accountant], *, target_epsilon: float,
                    target_delta: float = 0.0, lower: float = 1e-6, upper: float = 1e9,
                    rtol: float = 1e-6) -> float:
    """Smallest noise parameter (to ``rtol``) whose composed epsilon is <= ``target_epsilon``.

    Args:
        build: Maps a noise parameter (larger = more private) to an accountant with the whole
            plan composed, e.g. ``lambda s: RDPAccountant().compose(LaplaceDpEvent(s), 1300)``.
        target_epsilon: The budget (> 0).
        target_delta: Delta at which epsilon is evaluated, in [0, 1).
        lower: Smallest noise parameter to consider (> 0).
        upper: Largest noise parameter to consider.
        rtol: Relative width of the final bracket.

    Returns:
        A noise parameter ``s`` with ``build(s).get_epsilon(target_delta) <= target_epsilon``.

    Raises:
        CalibrationError: If even ``upper`` does not meet the target.
    """
    target_epsilon = _validate.check_epsilon(target_epsilon, "target_epsilon")
    target_delta = _validate.check_delta(target_delta, "target_delta")
    lower = _validate.check_positive("lower", lower)
    upper = _validate.check_positive("upper", upper)
    rtol = _validate.check_positive("rtol", rtol)
    if upper <= lower:
        raise ValueError(f"upper must be > lower={lower}; got {upper}")
    cache: dict[float, float] = {}

    def epsilon(noise: float) -> float:
        if noise not in cache:
            cache[noise] = _epsilon(build, noise, target_delta)
        return cache[noise]

    if epsilon(upper) > target_epsilon:
        raise CalibrationError(
            f"no noise parameter up to upper={upper:g} reaches epsilon <= {target_epsilon:g} at "
            f"delta={target_delta:g}; the plan is impossible in that range")
    # Walk down from the (cheap, very private) upper end in steps of at most 8, aiming at 0.8 x
    # the answer predicted by the log-log slope of the last two points: the accountant is never
    # evaluated far below the answer, where epsilon (and e.g. a PLD grid) can be huge.
    hi, previous = upper, None
    while True:
        lo = hi / 8.0
        if previous is not None and 0 < epsilon(previous) < epsilon(hi):
            slope = math.log(epsilon(hi) / epsilon(previous)) / math.log(hi / previous)
            predicted = hi * math.exp(math.log(target_epsilon / epsilon(hi)) / slope)
            lo = min(hi / 1.25, max(lo, 0.8 * predicted))
        previous = hi
        if lo <= lower:
            if epsilon(lower) <= target_epsilon:
                return lower
            lo = lower
            break
        if epsilon(lo) > target_epsilon:
            break
        hi = lo
    return _refine(epsilon, lo, hi, target_epsilon, rtol)


def _refine(epsilon: Callable[[float], float], lo: float, hi: float, target_epsilon: float,
            rtol: float) -> float:
    """Shrink the bracket [lo, hi] (lo fails, hi meets) to ``rtol``; return its upper end.

    Brent's method (scipy's ``brentq``: inverse quadratic interpolation safeguarded by
    bisection) on log(epsilon / target) as a function of log(noise), which is smooth and
    monotone for every accountant here, needs about 8 evaluations where bisection needs 23;
    the final bracket is then closed explicitly, so the value returned always meets the target
    (never the root estimate itself). ``epsilon`` is cached by the caller.
    """
    ends = {math.log(lo): lo, math.log(hi): hi}
    evaluated: dict[float, float] = {}

    def excess(log_noise: float) -> float:
        noise = ends.get(log_noise, math.exp(log_noise))  # the ends exactly: cached
        eps = evaluated[noise] = epsilon(noise)
        if eps <= 0.0:
            return -50.0
        return max(-50.0, min(50.0, math.log(eps / target_epsilon)))

    try:
        root = math.exp(optimize.brentq(excess, math.log(lo), math.log(hi),
                                        xtol=rtol / 8, rtol=4 * np.finfo(float).eps))
    except ValueError:  # no sign change after clamping (e.g. NaN): plain bisection below
        root = math.sqrt(lo * hi)
    for noise, eps in evaluated.items():  # tighten the bracket with every evaluation made
        if eps <= target_epsilon:
            hi = min(hi, noise)
        else:
            lo = max(lo, noise)
    # Close the bracket around the root estimate with at most two probes, then bisect.
    probe = max(lo, root) * (1 + rtol / 4)
    for _ in range(2):
        if not lo < probe < hi or hi - lo <= rtol * hi:
            break
        if epsilon(probe) <= target_epsilon:
            hi, probe = probe, probe * (1 - rtol / 2)
        else:
            lo, probe = probe, probe * (1 + rtol / 2)
    while hi - lo > rtol * hi:  # invariant: lo fails, hi meets the target
        mid = math.sqrt(lo * hi) if hi / lo > 4 else 0.5 * (lo + hi)
        if epsilon(mid) <= target_epsilon:
            hi = mid
        else:
            lo = mid
    return hi


def max_queries(build: Callable[[int], Accountant], *, target_epsilon: float,
                target_delta: float = 0.0, upper: int = 10**9) -> int:
    """Largest number of queries k (0 if none) whose composed epsilon is <= ``target_epsilon``.

    Args:
        build: Maps a query count k >= 1 to an accountant with k queries composed, e.g.
            ``lambda k: RDPAccountant().compose(event, count=k)``.
        target_epsilon: The budget (> 0).
        target_delta: Delta at which epsilon is evaluated, in [0, 1).
        upper: Largest count considered; if it still fits, ``upper`` is returned.
    """
    target_epsilon = _validate.check_epsilon(target_epsilon, "target_epsilon")
    target_delta = _validate.check_delta(target_delta, "target_delta")
    upper = _validate.check_int("upper", upper, minimum=1)
    if _epsilon(build, 1, target_delta) > target_epsilon:
        return 0
    lo = 1
    hi = 2
    while hi < upper and _epsilon(build, hi, target_delta) <= target_epsilon:
        lo, hi = hi, min(upper, hi * 2)
    if _epsilon(build, hi, target_delta) <= target_epsilon:
        return hi
    while hi - lo > 1:  # invariant: lo fits, hi does not
        mid = (lo + hi) // 2
        if _epsilon(build, mid, target_delta) <= target_epsilon:
            lo = mid
        else:
            hi = mid
    return lo
