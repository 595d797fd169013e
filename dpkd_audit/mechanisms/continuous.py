"""Continuous textbook mechanisms: Laplace and Gaussian (floating-point samplers, named as such).

For integer-valued releases prefer :mod:`dpkd_audit.mechanisms.discrete`, whose exact samplers
have no floating-point artefacts (Mironov 2012).

Limits (see :mod:`dpkd_audit._validate`): epsilon is a normal double; the derived noise scale
(Laplace b, Gaussian sigma) lies in [1e-300, 1e300]; inputs are real numbers (integer or float
dtypes, no booleans, strings, complex numbers or datetimes) with |x| <= 1e300; the Gaussian
accepts epsilon <= 1e12 (:data:`MAX_GAUSSIAN_EPSILON`) and delta in [1e-300, 1).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit._privacy_math import calibrate_analytic_gaussian
from dpkd_audit.events import CalibratedGaussianDpEvent
from dpkd_audit.mechanisms.base import Mechanism, Norm, Sensitivity, coerce_sensitivity

__all__ = ["MAX_GAUSSIAN_EPSILON", "Gaussian", "Laplace", "as_real_array",
           "calibrated_gaussian_sigma", "laplace_scale"]

#: Largest epsilon of the calibrated (epsilon, delta) mechanisms (Gaussian, GNMax, discrete
#: Gaussian). The float calibration evaluates a - b with a, b ~ sqrt(epsilon / 2) (Balle-Wang
#: 2018, Thm 8); up to 1e12 its rounding (< 1e-9 absolute) is far below what the curve
#: resolves, and the result is re-verified in arbitrary precision anyway. Larger epsilons
#: promise nothing useful.
MAX_GAUSSIAN_EPSILON = 1e12


def as_real_array(value: Any, name: str = "value") -> np.ndarray:
    """A finite float64 array of real numbers (scalars become 0-d arrays); ValueError otherwise.

    The package's shared validator :func:`dpkd_audit._validate.as_real_array`: integer
    (|x| <= 2^53) and float16/32/64 dtypes only, |x| <= 1e300; booleans, strings, bytes,
    complex numbers, datetimes and objects are refused.
    """
    return _validate.as_real_array(value, name)


def laplace_scale(sensitivity: float, epsilon: float, *, parameters: str) -> float:
    """The Laplace scale b >= sensitivity/epsilon (exactly), checked to lie in [1e-300, 1e300].

    The float quotient may be half an ulp below the exact one, which would make the real
    epsilon sensitivity/b exceed the claim by an ulp: it is then moved up by one ulp (checked
    in exact rational arithmetic), so sensitivity/b <= epsilon always (Dwork-Roth 2014, Thm 3.6
    holds with any b >= sensitivity/epsilon).

    Args:
        sensitivity: The L1 sensitivity (> 0).
        epsilon: The claimed epsilon (> 0).
        parameters: The parameters to name in the error message.

    Raises:
        ValueError: If the scale is outside [1e-300, 1e300].
    """
    scale = sensitivity / epsilon
    if math.isfinite(scale) and scale > 0 and \
            Fraction(sensitivity) > Fraction(epsilon) * Fraction(scale):
        scale = math.nextafter(scale, math.inf)
    return _validate.check_noise_scale(scale, parameters=parameters,
                                       what="Laplace scale sensitivity/epsilon")


def calibrated_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Balle-Wang sigma for (epsilon, delta) and L2 sensitivity, verified and range-checked.

    :func:`dpkd_audit._privacy_math.calibrate_analytic_gaussian` (bisection on the exact curve
    of Theorem 8, then verification in arbitrary precision), and a check that sigma lies in
    [1e-300, 1e300].

    Raises:
        ValueError: Naming epsilon, delta and sensitivity when no such sigma exists.
    """
    parameters = f"epsilon={epsilon!r}, delta={delta!r} with sensitivity={sensitivity!r}"
    try:
        sigma = calibrate_analytic_gaussian(epsilon, delta, sensitivity)
    except ValueError as exc:
        raise ValueError(f"{parameters} cannot be calibrated: {exc}") from exc
    return _validate.check_noise_scale(sigma, parameters=parameters, what="Gaussian sigma")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Laplace(Mechanism):
    """The Laplace mechanism: value + Lap(Delta_1 / epsilon) on every coordinate.

    Dwork, McSherry, Nissim, Smith 2006; Dwork-Roth 2014, Theorem 3.6: pure epsilon-DP for
    queries of L1 sensitivity Delta_1. Textbook floating-point sampler (``Generator.laplace``).

    Attributes:
        epsilon: Claimed epsilon of one release (a normal double > 0, with the scale
            sensitivity/epsilon in [1e-300, 1e300]).
        sensitivity: L1 sensitivity (a number or a ``Sensitivity`` in L1), default 1.
    """

    reference = "Dwork-McSherry-Nissim-Smith 2006; Dwork-Roth 2014 Thm 3.6"
    floating_point_output = True

    epsilon: float
    sensitivity: Sensitivity | float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon_range(self.epsilon))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L1))
        _ = self.scale  # refuse an unusable scale now, before any release

    @functools.cached_property
    def scale(self) -> float:
        """The Laplace scale b >= Delta_1 / epsilon (rounded up to a double)."""
        return laplace_scale(self.sensitivity.value, self.epsilon,
                             parameters=f"epsilon={self.epsilon!r} with "
                                        f"sensitivity={self.sensitivity.value!r}")

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

    The calibrated sigma is re-checked against the exact curve in arbitrary precision (mpmath)
    at construction, so the claim holds exactly for the real-valued mechanism.

    Attributes:
        epsilon: Claimed epsilon of one release, a normal double <= 1e12.
        delta: Claimed delta of one release, in [1e-300, 1).
        sensitivity: L2 sensitivity (a number or a ``Sensitivity`` in L2), default 1.
    """

    reference = "Balle-Wang ICML 2018, Thm 8 (analytic Gaussian mechanism)"
    floating_point_output = True

    epsilon: float
    delta: float
    sensitivity: Sensitivity | float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon_range(
            self.epsilon, maximum=MAX_GAUSSIAN_EPSILON))
        object.__setattr__(self, "delta", _validate.check_mechanism_delta(self.delta))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L2))
        _ = self.sigma  # calibrate (and verify) now: refuse before any release

    @functools.cached_property
    def sigma(self) -> float:
        """Standard deviation of the noise (calibrated, never below what the claim needs)."""
        return calibrated_gaussian_sigma(self.epsilon, self.delta, self.sensitivity.value)

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

