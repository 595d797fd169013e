"""Continuous textbook mechanisms: Laplace and Gaussian (floating-point samplers, named as such).

For integer-valued releases prefer :mod:`dpkd_audit.mechanisms.discrete`, whose exact samplers
have no floating-point artefacts (Mironov 2012).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit._privacy_math import calibrate_analytic_gaussian
from dpkd_audit.events import CalibratedGaussianDpEvent
from dpkd_audit.mechanisms.base import Mechanism, Norm, Sensitivity, coerce_sensitivity

__all__ = ["Gaussian", "Laplace", "as_real_array"]


def as_real_array(value: Any, name: str = "value") -> np.ndarray:
    """A finite float64 array (scalars become 0-d arrays); ValueError otherwise."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real number or an array of real numbers; "
                         f"got {type(value).__name__}") from exc
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


@dataclasses.dataclass(frozen=True, kw_only=True)
class Laplace(Mechanism):
    """The Laplace mechanism: value + Lap(Delta_1 / epsilon) on every coordinate.

    Dwork, McSherry, Nissim, Smith 2006; Dwork-Roth 2014, Theorem 3.6: pure epsilon-DP for
    queries of L1 sensitivity Delta_1. Textbook floating-point sampler (``Generator.laplace``).

    Attributes:
        epsilon: Claimed epsilon of one release (> 0).
        sensitivity: L1 sensitivity (a number or a ``Sensitivity`` in L1), default 1.
    """

    reference = "Dwork-McSherry-Nissim-Smith 2006; Dwork-Roth 2014 Thm 3.6"
    floating_point_output = True

    epsilon: float
    sensitivity: Sensitivity | float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L1))

    @property
    def scale(self) -> float:
        """The Laplace scale b = Delta_1 / epsilon."""
        return self.sensitivity.value / self.epsilon

    @property
    def event(self) -> _dp.DpEvent:
        return _dp.LaplaceDpEvent(noise_multiplier=1.0 / self.epsilon)

    def _check_value(self, value: Any) -> np.ndarray:
        return as_real_array(value)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return value + rng.laplace(0.0, self.scale, size=(n, *value.shape))

    def neighbours(self) -> tuple[float, float]:
        return (0.0, float(self.sensitivity.value))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gaussian(Mechanism):
    """The Gaussian mechanism: value + N(0, sigma^2) per coordinate, sigma analytically calibrated.

    Balle and Wang, ICML 2018, Theorem 8 / Algorithm 1: the smallest sigma for which the
    mechanism with L2 sensitivity Delta_2 is (epsilon, delta)-DP. Textbook floating-point sampler.

    Attributes:
        epsilon: Claimed epsilon of one release (> 0).
        delta: Claimed delta of one release, in (0, 1).
        sensitivity: L2 sensitivity (a number or a ``Sensitivity`` in L2), default 1.
    """

    reference = "Balle-Wang ICML 2018, Thm 8 (analytic Gaussian mechanism)"
    floating_point_output = True

    epsilon: float
    delta: float
    sensitivity: Sensitivity | float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        object.__setattr__(self, "delta", _validate.check_delta(self.delta, allow_zero=False))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L2))

    @functools.cached_property
    def sigma(self) -> float:
        """Standard deviation of the noise (calibrated, never below what the claim needs)."""
        return calibrate_analytic_gaussian(self.epsilon, self.delta, self.sensitivity.value)

    @property
    def event(self) -> _dp.DpEvent:
        return CalibratedGaussianDpEvent(self.sigma / self.sensitivity.value,
                                         epsilon=self.epsilon, delta=self.delta)

    def _check_value(self, value: Any) -> np.ndarray:
        return as_real_array(value)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return value + rng.normal(0.0, self.sigma, size=(n, *value.shape))

    def neighbours(self) -> tuple[float, float]:
        return (0.0, float(self.sensitivity.value))

