"""Continuous mechanisms: a float-safe Laplace (the default) and textbook floating-point samplers.

:class:`Laplace` releases ``g * (round(value / g) + Z)`` with ``Z`` an exact discrete Laplace
on the integers (Canonne-Kamath-Steinke 2020, Algorithm 2) and ``g`` a power of two: the
approach of Google's differential-privacy library ("Secure Noise Generation": the input rounded
to a power-of-two granularity, the noise drawn as a discrete Laplace on it) and of OpenDP's
continuous mechanisms built on exact discrete sampling. Every output is a fixed function of the
integer ``round(value / g) + Z``, so the floating-point artefacts of the textbook sampler
(Mironov, CCS 2012) cannot occur, and the guarantee is that of the discrete mechanism: rounding
moves each coordinate by at most ``g / 2``, so the integer query ``round(value / g)`` has L1
sensitivity at most ``S = floor(Delta_1 / g) + c`` where ``c`` is the number of coordinates one
record can change, and noise of scale ``t >= S / epsilon`` grid steps makes it
``(S / t)``-DP, ``S / t <= epsilon`` (Ghosh-Roughgarden-Sundararajan 2012). The granularity is
the largest power of two with ``Delta_1 / g >= 512 c`` (:data:`GRID_STEPS`): the noise is at
most ``1 + 1/512`` times the textbook ``Delta_1 / epsilon``, and the output resolution is
about ``Delta_1 / (512 c)``.

:class:`TextbookLaplace` and :class:`Gaussian` are textbook floating-point samplers
(``value + rng.laplace(...)`` / ``rng.normal(...)``): private as real-valued designs, not as
doubles (the auditor's float-bits attack shows it). The Gaussian's float-safe replacement is
still to come (issue 32); for integer-valued releases prefer
:mod:`dpkd_audit.mechanisms.discrete`.

Limits (see :mod:`dpkd_audit._validate`): epsilon is a normal double; the derived noise scale
(Laplace b, Gaussian sigma) lies in [1e-300, 1e300]; inputs are real numbers (integer or float
dtypes, no booleans, strings, complex numbers or datetimes) with |x| <= 1e300 (the float-safe
Laplace: ``|x| <= 2^61 g``, so that the grid index and the noise stay inside int64); the
Gaussian accepts epsilon <= 1e12 (:data:`MAX_GAUSSIAN_EPSILON`) and delta in [1e-300, 1).
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
from dpkd_audit.mechanisms import samplers
from dpkd_audit.mechanisms.base import Mechanism, Norm, Sensitivity, coerce_sensitivity

__all__ = ["GRID_STEPS", "MAX_GAUSSIAN_EPSILON", "Gaussian", "Laplace", "LaplaceGrid",
           "TextbookLaplace", "as_real_array", "calibrated_gaussian_sigma", "laplace_grid",
           "laplace_scale"]

#: Grid steps per unit of L1 sensitivity and changed coordinate (at least) of the float-safe
#: Laplace: its granularity g is the largest power of two with Delta_1 / g >= GRID_STEPS * c.
GRID_STEPS = 512
#: Largest |value / g| accepted by the float-safe Laplace (index + noise stay inside int64).
MAX_GRID_INDEX = 1 << 61
#: Smallest granularity (a normal double, so value / g loses nothing).
_MIN_GRANULARITY = 2.0 ** -1000

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
class LaplaceGrid:
    """The grid of a float-safe Laplace release.

    Attributes:
        granularity: g, a power of two; outputs are multiples of it.
        sensitivity: S = floor(Delta_1 / g) + c, the L1 sensitivity of round(value / g).
        scale: t >= S / epsilon, the discrete Laplace scale in grid steps (exact rational).
    """

    granularity: float
    sensitivity: int
    scale: Fraction

    @property
    def noise_parameter(self) -> float:
        """The noise parameter a = 1 / t (the pmf is proportional to exp(-a |k|))."""
        return float(1 / self.scale)

    def sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` outputs g (round(value / g) + Lap_Z(t)), stacked on a new axis 0.

        ``value`` is a validated float array with ``|value| <= 2^61 g``; every output is a
        fixed function of the integer index + noise.
        """
        index = np.rint(value / self.granularity).astype(np.int64)
        noise = samplers.discrete_laplace(self.scale.numerator, self.scale.denominator,
                                          n * value.size, rng=rng)
        total = index + noise.reshape((n, *value.shape))
        return total.astype(np.float64) * self.granularity


def laplace_grid(sensitivity: float, epsilon: float, coordinates: int, *,
                 parameters: str) -> LaplaceGrid:
    """The granularity, grid sensitivity and scale of a float-safe Laplace (module docstring).

    Args:
        sensitivity: Delta_1 (> 0).
        epsilon: The claimed epsilon (> 0).
        coordinates: c, the most coordinates one record can change (>= 1).
        parameters: The parameters to name in an error message.

    Raises:
        ValueError: If the grid is finer than 2^-1000 or the discrete scale is beyond the
            exact sampler's 2^40 grid steps.
    """
    from dpkd_audit.mechanisms.discrete import _laplace_scale_fraction  # (imports this module)

    exponent = math.frexp(sensitivity / (GRID_STEPS * coordinates))[1] - 1
    granularity = math.ldexp(1.0, exponent)
    if not granularity >= _MIN_GRANULARITY:
        raise ValueError(f"{parameters}: the float-safe Laplace grid would be finer than "
                         f"2^-1000 (sensitivity / (512 coordinates) must be >= 2^-1000)")
    steps = math.floor(Fraction(sensitivity) / Fraction(granularity))
    grid_sensitivity = steps + coordinates
    try:
        scale = _laplace_scale_fraction(epsilon, grid_sensitivity)
    except ValueError as exc:
        raise ValueError(f"{parameters}: epsilon is too small for the float-safe Laplace's "
                         f"exact sampler (its scale would exceed 2^40 grid steps of "
                         f"{granularity:g})") from exc
    _validate.check_noise_scale(float(scale) * granularity, parameters=parameters,
                                what="float-safe Laplace scale t g")
    return LaplaceGrid(granularity=granularity, sensitivity=grid_sensitivity, scale=scale)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Laplace(Mechanism):
    """The Laplace mechanism, float-safe: g (round(value / g) + Lap_Z(t)) on every coordinate.

    Dwork, McSherry, Nissim, Smith 2006; Dwork-Roth 2014, Theorem 3.6 (pure epsilon-DP for L1
    sensitivity Delta_1), implemented as the discrete Laplace on a power-of-two grid (module
    docstring: Google's "Secure Noise Generation"; Canonne-Kamath-Steinke 2020, Alg. 2): no
    floating-point artefact, and the claim is exactly that of the discrete mechanism, charged
    as its ``DiscreteLaplaceDpEvent`` (noise parameter 1/t, integer sensitivity S) so that the
    RDP and PLD accountants compose it exactly.

    Attributes:
        epsilon: Claimed epsilon of one release (a normal double > 0, with the scale
            sensitivity/epsilon in [1e-300, 1e300]).
        sensitivity: L1 sensitivity (a number or a ``Sensitivity`` in L1), default 1.
        coordinates: The most coordinates of a released value that one record can change;
            each adds one grid step to the rounded query's sensitivity. ``None`` (default):
            every coordinate of the value released (always safe; the event of a release then
            depends on the value's size: :meth:`release_event`). ``event`` is that of a
            release with ``coordinates`` (1 when ``None``: a scalar).
    """

    reference = ("Dwork-McSherry-Nissim-Smith 2006; Dwork-Roth 2014 Thm 3.6; exact discrete "
                 "Laplace on a power-of-two grid (CKS 2020 Alg. 2)")

    epsilon: float
    sensitivity: Sensitivity | float = 1.0
    coordinates: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon_range(self.epsilon))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L1))
        if self.coordinates is not None:
            object.__setattr__(self, "coordinates", _validate.check_size(
                "coordinates", self.coordinates))
        _ = laplace_scale(self.sensitivity.value, self.epsilon, parameters=self._parameters)
        _ = self.grid(self.coordinates or 1)  # refuse an unusable grid now

    @property
    def _parameters(self) -> str:
        return f"epsilon={self.epsilon!r} with sensitivity={self.sensitivity.value!r}"

    @functools.lru_cache(maxsize=64)  # noqa: B019 - frozen, hashable instances
    def grid(self, coordinates: int) -> LaplaceGrid:
        """The grid of a release in which one record changes ``coordinates`` coordinates."""
        return laplace_grid(self.sensitivity.value, self.epsilon, coordinates,
                            parameters=self._parameters)

    @property
    def scale(self) -> float:
        """The noise scale of a release with ``coordinates`` (or 1) changed: t g >= Delta_1/eps."""
        grid = self.grid(self.coordinates or 1)
        return float(grid.scale) * grid.granularity

    def _event_of(self, coordinates: int) -> _dp.DpEvent:
        grid = self.grid(coordinates)
        return _dp.DiscreteLaplaceDpEvent(noise_parameter=grid.noise_parameter,
                                          sensitivity=grid.sensitivity)

    @property
    def event(self) -> _dp.DpEvent:
        return self._event_of(self.coordinates or 1)

    def release_event(self, value: Any) -> _dp.DpEvent:
        """The event a release of the (validated) ``value`` is charged as.

        ``coordinates`` changed, or every coordinate of ``value`` when it is ``None``.
        """
        return self._event_of(self._changed(value))

    def _changed(self, value: Any) -> int:
        return self.coordinates if self.coordinates is not None else max(1, int(np.size(value)))

    def _check_value(self, value: Any) -> np.ndarray:
        arr = as_real_array(value)
        grid = self.grid(self._changed(arr))
        limit = MAX_GRID_INDEX * grid.granularity
        if arr.size and float(np.max(np.abs(arr))) > limit:
            raise ValueError(f"value must have |value| <= {limit:g} (2^61 grid steps of "
                             f"{grid.granularity:g}, so that the exact integer sampler's sums "
                             f"stay in int64); got {float(np.max(np.abs(arr))):g}")
        return arr

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.grid(self._changed(value)).sample(value, n, rng)

    def neighbours(self) -> tuple[float, float]:
        return (0.0, float(self.sensitivity.value))


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextbookLaplace(Mechanism):
    """The textbook floating-point Laplace sampler: value + Lap(Delta_1 / epsilon) in doubles.

    Dwork, McSherry, Nissim, Smith 2006; Dwork-Roth 2014, Theorem 3.6: pure epsilon-DP for
    queries of L1 sensitivity Delta_1 *as a real-valued design*. Its doubles are not DP
    (Mironov, CCS 2012: the float-bits audit flags it); kept for comparison and as an audit
    control. Use :class:`Laplace`.

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

