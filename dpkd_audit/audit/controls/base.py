"""The base class of the broken-on-purpose controls and their shared numeric helpers."""

from __future__ import annotations

import abc
import math
from typing import Any, ClassVar

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit.events import ApproxDpEvent, PureDpEvent
from dpkd_audit.mechanisms.base import Mechanism
from dpkd_audit.mechanisms.continuous import as_real_array

__all__ = ["Control"]

#: Largest epsilon accepted by the randomized-response control (as for RandomizedResponse).
_MAX_RR_EPSILON = 700.0
#: 2^53: numpy's ``Generator.random()`` returns k / 2^53 for a uniform integer k in [0, 2^53).
_TWO_53 = float(1 << 53)

def _check_finite(name: str, value: Any) -> float:
    """A finite real number (any sign), as float; ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a finite real number; got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite real number; got {value!r}")
    return value


def _real_vector(value: Any, length: int, name: str = "value") -> np.ndarray:
    """A finite float64 vector of shape ``(length,)``; ValueError otherwise."""
    arr = as_real_array(value, name)
    if arr.shape != (length,):
        raise ValueError(f"{name} must be a vector of shape ({length},); got shape {arr.shape}")
    return arr


def _laplace_cdf(x: float, scale: float) -> float:
    """CDF of Lap(0, scale) at x, accurate in both tails."""
    if x < 0:
        return 0.5 * math.exp(x / scale)
    return 1.0 - 0.5 * math.exp(-x / scale)


def _laplace_sf(x: float, scale: float) -> float:
    """Survival function P(Lap(0, scale) >= x), accurate in both tails."""
    return _laplace_cdf(-x, scale)


# =============================================================================== base class


class Control(Mechanism):
    """A mechanism whose claimed guarantee (``epsilon``/``delta``) is known to be right or wrong.

    Concrete controls are frozen keyword-only dataclasses. ``epsilon`` and ``delta`` are the
    *claimed* guarantee (what the buggy code promises and what ``event`` charges);
    ``true_epsilon`` is the real one (at the claimed ``delta``), ``math.inf`` when unbounded.
    """

    #: One-line description of the bug.
    flaw: ClassVar[str] = ""

    @property
    @abc.abstractmethod
    def true_epsilon(self) -> float:
        """The smallest epsilon for which the mechanism is (epsilon, delta)-DP (inf: none)."""

    @property
    def is_private_as_claimed(self) -> bool:
        """Whether the claim holds (``true_epsilon <= epsilon``): True for negative controls."""
        return self.true_epsilon <= self.epsilon * (1.0 + 1e-12)

    @property
    def event(self) -> _dp.DpEvent:
        """The claimed guarantee, as the buggy code would charge it."""
        if self.delta == 0.0:
            return PureDpEvent(self.epsilon)
        return ApproxDpEvent(self.epsilon, self.delta)


