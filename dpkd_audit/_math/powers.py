"""Repeated self-combination by squaring (self-convolution, moments of sums, ...)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["combine_power"]

T = TypeVar("T")


def combine_power(base: T, count: int, combine: Callable[[T, T], T]) -> T:
    """``base`` combined with itself ``count`` times (>= 1) by an associative ``combine``.

    Exponentiation by squaring: O(log count) calls, e.g. the distribution of a sum of
    ``count`` i.i.d. terms by convolution, or the moments of such a sum.

    Raises:
        ValueError: If ``count`` < 1.
    """
    if count < 1:
        raise ValueError(f"count must be an integer >= 1; got {count!r}")
    result: T | None = None
    power = base
    while count:
        if count & 1:
            result = power if result is None else combine(result, power)
        count >>= 1
        if count:
            power = combine(power, power)
    if result is None:  # pragma: no cover - count >= 1 sets it on the last bit
        raise RuntimeError("combine_power: no power combined")
    return result
