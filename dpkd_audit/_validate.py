"""Shared argument checks and their error messages.

Every public constructor and function validates user input through these helpers, so that a bad
argument always raises a ``ValueError`` that names the parameter, the allowed range and the value
received. Never use ``assert`` for user input.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

__all__ = [
    "check_delta",
    "check_epsilon",
    "check_generator",
    "check_int",
    "check_positive",
    "check_probability",
    "check_sample_count",
]


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _fail(name: str, allowed: str, value: Any) -> ValueError:
    return ValueError(f"{name} must be {allowed}; got {value!r}")


def check_positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """Return ``value`` as a float if it is a finite real number > 0.

    Args:
        name: Parameter name used in the error message.
        value: The value to check.
        allow_inf: Whether ``+inf`` is accepted.

    Raises:
        ValueError: If ``value`` is not a real number > 0 (or is NaN or infinite).
    """
    allowed = "a real number > 0" + ("" if allow_inf else " (finite)")
    if not _is_real(value):
        raise _fail(name, allowed, value)
    value = float(value)
    if math.isnan(value) or value <= 0 or (math.isinf(value) and not allow_inf):
        raise _fail(name, allowed, value)
    return value


def check_epsilon(value: Any, name: str = "epsilon") -> float:
    """Return a privacy parameter epsilon as a float, requiring 0 < epsilon < inf."""
    return check_positive(name, value)


def check_delta(value: Any, name: str = "delta", *, allow_zero: bool = True) -> float:
    """Return delta as a float, requiring 0 <= delta < 1 (or 0 < delta < 1)."""
    allowed = "a real number in [0, 1)" if allow_zero else "a real number in (0, 1)"
    if not _is_real(value):
        raise _fail(name, allowed, value)
    value = float(value)
    lower_ok = value >= 0 if allow_zero else value > 0
    if math.isnan(value) or not lower_ok or value >= 1:
        raise _fail(name, allowed, value)
    return value


def check_probability(name: str, value: Any, *, open_low: bool = False,
                      open_high: bool = False) -> float:
    """Return a probability in [0, 1] (optionally open at either end) as a float."""
    lo, hi = ("(" if open_low else "["), (")" if open_high else "]")
    allowed = f"a real number in {lo}0, 1{hi}"
    if not _is_real(value):
        raise _fail(name, allowed, value)
    value = float(value)
    if (math.isnan(value) or value < 0 or value > 1 or (open_low and value == 0)
            or (open_high and value == 1)):
        raise _fail(name, allowed, value)
    return value


def check_int(name: str, value: Any, *, minimum: int | None = None,
              maximum: int | None = None) -> int:
    """Return ``value`` as a Python int within ``[minimum, maximum]``.

    Integral floats are refused: counts and sizes must be given as integers.
    """
    parts = []
    if minimum is not None:
        parts.append(f">= {minimum}")
    if maximum is not None:
        parts.append(f"<= {maximum}")
    allowed = "an integer" + (" " + " and ".join(parts) if parts else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise _fail(name, allowed, value)
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise _fail(name, allowed, value)
    return value


def check_sample_count(value: Any, name: str = "n") -> int:
    """Return a number of samples (an integer >= 1)."""
    return check_int(name, value, minimum=1)


def check_generator(rng: Any, name: str = "rng") -> np.random.Generator:
    """Require an injected ``numpy.random.Generator`` (never global state)."""
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"{name} must be a numpy.random.Generator (e.g. numpy.random.default_rng(seed)); "
            f"got {type(rng).__name__}"
        )
    return rng
