"""Shared argument checks and their error messages.

Every public constructor and function validates user input through these helpers, so that a bad
argument always raises a ``ValueError`` that names the parameter, the allowed range and the value
received. Never use ``assert`` for user input.

It also holds the package-wide *limits* of the mechanisms (see
:mod:`dpkd_audit.mechanisms`, "Limits"): every mechanism refuses, with a ``ValueError`` naming
the parameter, anything its arithmetic cannot represent exactly, before any charge, allocation or
work:

- :data:`MAX_SAMPLE_VALUES`: no call draws or returns more than 10^8 values (``n`` outputs times
  the values of one output, or the noise drawn for them); sizes whose single output exceeds it
  are refused at construction.
- :data:`MIN_NOISE_SCALE` / :data:`MAX_NOISE_SCALE`: every floating-point noise scale (Laplace b,
  Gaussian sigma) lies in [1e-300, 1e300] (no subnormal, zero or infinite scale), and real inputs
  have magnitude <= :data:`MAX_ABS_REAL` = 1e300, so input + noise is always finite.
- :data:`MIN_DELTA`: a claimed delta is at least 1e-300 (normal doubles only).
- :data:`SMALLEST_NORMAL`: every epsilon is a normal double (>= 2^-1022).

Inputs of releases go through :func:`as_real_array` (real-valued queries) and
:func:`as_integer_array` (integer-valued queries): only numeric dtypes are accepted (no strings,
bytes, datetimes, complex numbers or Python objects), booleans are refused unless the query is a
0/1 vector (a flag is not a measurement: convert it explicitly with ``x.astype(int)``), values
must be finite and inside the mechanism's domain, and integers are range-checked in exact
integer arithmetic *before* any conversion, so that no value wraps around (a ``uint64`` of
2^64 - 1 is refused, never read as -1).
"""

from __future__ import annotations

import enum
import math
import numbers
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "MAX_ABS_REAL",
    "MAX_NOISE_SCALE",
    "MAX_SAMPLE_VALUES",
    "MIN_DELTA",
    "MIN_NOISE_SCALE",
    "SMALLEST_NORMAL",
    "as_integer_array",
    "as_real_array",
    "check_delta",
    "check_epsilon",
    "check_epsilon_range",
    "check_generator",
    "check_int",
    "check_mechanism_delta",
    "check_noise_scale",
    "check_output_size",
    "check_positive",
    "check_probability",
    "check_sample_count",
    "check_size",
    "parse_enum",
]

E = TypeVar("E", bound=enum.Enum)

#: Most values one call may draw or return (outputs times values per output): 10^8 (0.8 GB of
#: float64). Larger requests are refused before anything is allocated.
MAX_SAMPLE_VALUES = 10**8
#: Smallest positive normal double, 2^-1022: subnormal parameters are refused.
SMALLEST_NORMAL = 2.0**-1022
#: Range of every floating-point noise scale (Laplace scale b, Gaussian sigma).
MIN_NOISE_SCALE, MAX_NOISE_SCALE = 1e-300, 1e300
#: Largest magnitude of a real-valued input: |x| + 40 * MAX_NOISE_SCALE is still finite.
MAX_ABS_REAL = 1e300
#: Smallest delta a mechanism may claim (deltas below are not normal-range doubles).
MIN_DELTA = 1e-300


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _fail(name: str, allowed: str, value: Any) -> ValueError:
    return ValueError(f"{name} must be {allowed}; got {value!r}")


def _to_float(name: str, allowed: str, value: Any) -> float:
    """float(value) for a real number; a ValueError (not OverflowError) for huge integers."""
    try:
        return float(value)
    except OverflowError as exc:  # an int beyond the double range
        raise _fail(name, allowed, value) from exc


def check_nonnegative(name: str, value: Any) -> float:
    """A finite int or float >= 0 (not a bool), e.g. the weight of a loss term."""
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        raise _fail(name, "a finite real number >= 0", value)
    return float(value)


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
    value = _to_float(name, allowed, value)
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
    value = _to_float(name, allowed, value)
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
    value = _to_float(name, allowed, value)
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


def check_epsilon_range(value: Any, *, minimum: float = SMALLEST_NORMAL,
                        maximum: float = math.inf, name: str = "epsilon",
                        why: str = "") -> float:
    """Return epsilon as a float in ``[minimum, maximum]`` (finite, > 0, normal).

    Args:
        value: The value to check.
        minimum: Smallest accepted value (at least the smallest normal double).
        maximum: Largest accepted value.
        name: Parameter name used in the error message.
        why: Optional reason for the range, appended to the message.

    Raises:
        ValueError: If ``value`` is not a real number in the range.
    """
    minimum = max(float(minimum), SMALLEST_NORMAL)
    high = "" if math.isinf(maximum) else f", {maximum:.6g}]"
    allowed = (f"a real number in [{minimum:.6g}{high}" if high
               else f"a finite real number >= {minimum:.6g}")
    if why:
        allowed += f" ({why})"
    if not _is_real(value):
        raise _fail(name, allowed, value)
    value = _to_float(name, allowed, value)
    if math.isnan(value) or not minimum <= value <= maximum or math.isinf(value):
        raise _fail(name, allowed, value)
    return value


def check_mechanism_delta(value: Any, name: str = "delta") -> float:
    """Return a claimed delta as a float in ``[MIN_DELTA, 1)`` (1e-300 <= delta < 1)."""
    allowed = f"a real number in [{MIN_DELTA:g}, 1)"
    if not _is_real(value):
        raise _fail(name, allowed, value)
    value = _to_float(name, allowed, value)
    if math.isnan(value) or not MIN_DELTA <= value < 1.0:
        raise _fail(name, allowed, value)
    return value


def check_noise_scale(scale: float, *, parameters: str, what: str = "noise scale") -> float:
    """Require a derived noise scale in ``[MIN_NOISE_SCALE, MAX_NOISE_SCALE]``.

    Args:
        scale: The derived scale (may be inf, 0 or NaN after an overflow).
        parameters: The parameters the scale was derived from, with their values, e.g.
            ``"epsilon=1e-310 with sensitivity=1"``: they are named in the message.
        what: What the scale is (e.g. ``"Laplace scale sensitivity/epsilon"``).

    Raises:
        ValueError: If the scale is outside the range.
    """
    if not (MIN_NOISE_SCALE <= scale <= MAX_NOISE_SCALE):  # also catches NaN
        raise ValueError(
            f"{parameters} give a {what} of {scale:.6g}, outside the supported range "
            f"[{MIN_NOISE_SCALE:g}, {MAX_NOISE_SCALE:g}] (no subnormal, zero or infinite noise); "
            f"change these parameters")
    return float(scale)


def check_size(name: str, value: Any, *, minimum: int = 1,
               maximum: int = MAX_SAMPLE_VALUES) -> int:
    """Return a size parameter (an integer in ``[minimum, maximum]``, default cap 10^8)."""
    return check_int(name, value, minimum=minimum, maximum=maximum)


def check_output_size(n: int, per_output: int, *, name: str = "n",
                      what: str = "values per output") -> None:
    """Refuse a call that would draw or return more than :data:`MAX_SAMPLE_VALUES` values.

    Args:
        n: Number of outputs requested.
        per_output: Values drawn or returned per output (>= 1).
        name: Parameter name of ``n`` used in the message.
        what: What ``per_output`` counts, for the message.

    Raises:
        ValueError: If ``n * per_output > MAX_SAMPLE_VALUES``.
    """
    per_output = max(1, int(per_output))
    if int(n) * per_output > MAX_SAMPLE_VALUES:
        raise ValueError(
            f"{name} must be an integer <= {MAX_SAMPLE_VALUES // per_output} here "
            f"({name} x {per_output} {what} must stay <= {MAX_SAMPLE_VALUES:.0e}, the largest "
            f"request a call may allocate); got {n}")


# ----------------------------------------------------------------------------- inputs

def _as_array(value: Any, name: str, what: str) -> np.ndarray:
    if isinstance(value, (str, bytes, bytearray, memoryview)):
        raise ValueError(f"{name} must be {what}; got {type(value).__name__}")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError, OverflowError) as exc:  # ragged nested sequences
        raise ValueError(f"{name} must be {what}; got {type(value).__name__}") from exc
    return arr


def as_real_array(value: Any, name: str = "value", *,
                  max_abs: float = MAX_ABS_REAL) -> np.ndarray:
    """A finite float64 array of real numbers with ``|x| <= max_abs`` (scalars become 0-d).

    Accepted dtypes: signed and unsigned integers of magnitude <= 2^53, and float16, float32
    and float64 (all converted to float64 *exactly*, so that distances between neighbouring
    inputs -- the declared sensitivity -- are preserved); refused: booleans, complex numbers,
    strings, bytes, datetimes/timedeltas, long doubles (rounding them to float64 could stretch a
    sensitivity-sized distance) and Python objects (including integers beyond 64 bits).
    Integers are range-checked in exact integer arithmetic before the conversion.

    Raises:
        ValueError: Naming ``name``, the accepted range and what was received.
    """
    what = f"a real number or an array of real numbers with |x| <= {max_abs:g}"
    arr = _as_array(value, name, what)
    if arr.dtype.kind not in "iuf" or (arr.dtype.kind == "f" and arr.dtype.itemsize > 8):
        kind = "booleans" if arr.dtype.kind == "b" else f"dtype {arr.dtype}"
        raise ValueError(f"{name} must be {what} (integer, float16, float32 or float64 dtype); "
                         f"got {kind} ({type(value).__name__})")
    if arr.dtype.kind in "iu":
        limit = min(int(max_abs), 1 << 53)  # integers beyond 2^53 do not convert exactly
        if arr.size and (int(arr.max()) > limit or int(arr.min()) < -limit):
            raise ValueError(f"{name} must be {what}; integers must have magnitude <= 2^53 "
                             f"(exact in float64); got entries in [{arr.min()}, {arr.max()}]")
        return arr.astype(np.float64)
    with np.errstate(over="ignore"):
        out = arr.astype(np.float64)
    if not np.all(np.isfinite(out)):
        raise ValueError(f"{name} must be finite (no NaN or inf): {what}")
    if out.size and float(np.max(np.abs(out))) > max_abs:
        raise ValueError(f"{name} must be {what}; got an entry of magnitude "
                         f"{float(np.max(np.abs(out))):.6g}")
    return out


def as_integer_array(value: Any, name: str = "value", *, minimum: int | None = None,
                     maximum: int | None = None, allow_bool: bool = False,
                     allow_integral_float: bool = False,
                     what: str = "an integer or an array of integers",
                     range_text: str | None = None) -> np.ndarray:
    """An int64 array of integers within ``[minimum, maximum]``, without wrap-around.

    The bounds are checked in exact integer arithmetic on the original dtype (``uint64`` values
    above 2^63 - 1 are refused, never wrapped), and only then converted to int64.

    Args:
        value: The input.
        name: Parameter name used in error messages.
        minimum: Smallest accepted value (default: int64's).
        maximum: Largest accepted value (default: int64's).
        allow_bool: Accept boolean arrays (as 0/1), for 0/1 queries.
        allow_integral_float: Accept float arrays holding integers (exactly representable,
            |x| <= 2^53), e.g. counts computed in floating point.
        what: Description of the expected input for the messages.
        range_text: How to write the accepted range (default ``"[minimum, maximum]"``).

    Raises:
        ValueError: Naming ``name``, the accepted range and what was received.
    """
    lo = -(1 << 63) if minimum is None else int(minimum)
    hi = (1 << 63) - 1 if maximum is None else int(maximum)
    lo, hi = max(lo, -(1 << 63)), min(hi, (1 << 63) - 1)
    allowed = f"{what} in {range_text or f'[{lo}, {hi}]'}"
    arr = _as_array(value, name, allowed)
    kind = arr.dtype.kind
    if kind == "b" and allow_bool:
        arr = arr.astype(np.int64)
        kind = "i"
    if kind == "f" and allow_integral_float:
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must be {allowed}: finite (no NaN or inf)")
        if arr.size and float(np.max(np.abs(arr))) > 2.0**53:
            raise ValueError(f"{name} must be {allowed}; floats must be integers of magnitude "
                             f"<= 2^53 (exact in float64); got {float(np.max(np.abs(arr))):.6g}")
        if not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must be {allowed}; got non-integral values")
        arr = arr.astype(np.int64)
        kind = "i"
    if kind not in "iu":
        got = "booleans" if kind == "b" else f"dtype {arr.dtype}"
        dtypes = "integer dtype" + (", or integral floats" if allow_integral_float else "")
        raise ValueError(f"{name} must be {allowed} ({dtypes}); got {got} "
                         f"({type(value).__name__})")
    if arr.size:
        amin, amax = int(arr.min()), int(arr.max())
        if amin < lo or amax > hi:
            raise ValueError(f"{name} must be {allowed}; got entries in [{amin}, {amax}]")
    return arr.astype(np.int64)


def parse_enum(cls: type[E], text: Any, name: str) -> E:
    """The member of the enum ``cls`` whose value is ``text``.

    Raises:
        ValueError: Naming ``name``, the allowed values and what was received.
    """
    try:
        return cls(text)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in cls)
        raise ValueError(f"{name} must be one of {allowed}; got {text!r}") from None
