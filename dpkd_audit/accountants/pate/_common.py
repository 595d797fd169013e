"""Shared pieces of the PATE analysis: default orders, method names, input checks, log space."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpkd_audit import _validate

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


