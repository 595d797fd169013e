"""Continuous mechanisms: float-safe Laplace and Gaussian (the defaults) and textbook samplers.

Float-safe releases are ``g * (round(value / g) + Z)`` with ``g`` a power of two and ``Z`` an
exact integer noise: the approach of Google's differential-privacy library ("Secure Noise
Generation": the input rounded to a power-of-two granularity, the noise drawn as a discrete
Laplace / Gaussian on it) and of OpenDP's continuous mechanisms built on exact discrete
sampling. Every output is a fixed function of the integer ``round(value / g) + Z``, so the
floating-point artefacts of textbook samplers (Mironov, CCS 2012) cannot occur, and the
guarantee is that of the discrete mechanism on the rounded query. Rounding moves each
coordinate by at most ``g / 2``, so neighbours' rounded queries differ by at most one more
grid step per changed coordinate than ``Delta / g``.

:class:`Laplace`: ``Z`` an exact discrete Laplace (Canonne-Kamath-Steinke 2020, Algorithm 2).
The integer query ``round(value / g)`` has L1 sensitivity at most ``S = floor(Delta_1 / g) +
c`` (``c`` the number of coordinates one record can change), and noise of scale ``t >= S /
epsilon`` grid steps makes it ``(S / t)``-DP, ``S / t <= epsilon`` (Ghosh-Roughgarden-
Sundararajan 2012). The granularity is the largest power of two with ``Delta_1 / g >= 512 c``
(:data:`GRID_STEPS`): the noise is at most ``1 + 1/512`` times the textbook ``Delta_1 /
epsilon``, and the output resolution is about ``Delta_1 / (512 c)``.

:class:`Gaussian`: ``Z`` an exact discrete Gaussian N_Z(0, sigma_g^2) per coordinate (CKS
2020, Algorithm 3). The grid is the largest power of two with ``Delta_2 / g >= 512`` (one
changed coordinate) or ``>= 512 sqrt(c)``, made coarser while the noise in grid steps, about
``(sigma / Delta_2)(Delta_2 / g + rounding)``, would exceed :data:`MAX_GRID_SIGMA` = 2^13 (one
coordinate: it bounds the exact calibration's cost) or 0.96 x 30,000 (vectors: the exact
sampler's limit); the rounding then costs more than 1/512 of the noise (1.6% at epsilon 0.01,
12% at 0.001: ``python benchmarks/float_safe_gaussian.py``), and noise beyond the sampler is
refused by name. One changed coordinate: the shift of the rounded query is an integer of at
most ``floor(Delta_2 / g) + 1``, and sigma_g is calibrated on the exact (epsilon, delta) curve
of CKS 2020, Theorem 7 (:class:`~dpkd_audit.mechanisms.discrete.DiscreteGaussian`). ``c >=
2``: the shift is an integer vector of L2 norm at most ``Delta_2 / g + sqrt(c)``; the release
is (shift^2 / (2 sigma_g^2))-zCDP (CKS 2020, Theorem 14: the independent coordinates' Renyi
divergences add) and sigma_g is calibrated on the zCDP conversion of CKS 2020, Proposition 12
(:func:`dpkd_audit._math.privacy.zcdp_delta`), about 9% more noise than Balle-Wang's at
epsilon 1, delta 1e-5.

:class:`TextbookLaplace` and :class:`TextbookGaussian` are the textbook floating-point samplers
(``value + rng.laplace(...)`` / ``rng.normal(...)``): private as real-valued designs, not as
doubles; the default audit (float bits included) flags them. They are kept for comparison and
as audit controls.

Limits (see :mod:`dpkd_audit._validate`): epsilon is a normal double; the derived noise scale
(Laplace b, Gaussian sigma) lies in [1e-300, 1e300]; inputs are real numbers (integer or float
dtypes, no booleans, strings, complex numbers or datetimes) with |x| <= 1e300 (the float-safe
mechanisms: ``|x| <= 2^61 g``, so that the grid index and the noise stay inside int64); the
Gaussians accept epsilon <= 1e12 (:data:`MAX_GAUSSIAN_EPSILON`) and delta in [1e-300, 1) (the
float-safe one: a noise of at most 30,000 grid steps, the exact sampler's limit).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit._math.privacy import calibrate_analytic_gaussian, calibrate_zcdp_rho
from dpkd_audit.events import CalibratedGaussianDpEvent, DiscreteGaussianVectorDpEvent
from dpkd_audit.mechanisms import samplers
from dpkd_audit.mechanisms.base import (
    MAX_GAUSSIAN_EPSILON,
    Mechanism,
    Norm,
    Sensitivity,
    coerce_sensitivity,
)
from dpkd_audit.mechanisms.discrete import (
    DiscreteGaussian,
    _laplace_scale_fraction,
    _rational_variance,
)

__all__ = ["GRID_STEPS", "MAX_GAUSSIAN_EPSILON", "MAX_GRID_SIGMA", "Gaussian", "GaussianGrid",
           "Laplace", "LaplaceGrid", "TextbookGaussian", "TextbookLaplace", "as_real_array",
           "calibrated_gaussian_sigma", "gaussian_grid", "laplace_grid", "laplace_scale"]

#: Grid steps per unit of L1 sensitivity and changed coordinate (at least) of the float-safe
#: Laplace: its granularity g is the largest power of two with Delta_1 / g >= GRID_STEPS * c.
GRID_STEPS = 512
#: Largest |value / g| accepted by the float-safe Laplace (index + noise stay inside int64).
MAX_GRID_INDEX = 1 << 61
#: Most grid steps of noise of a scalar float-safe Gaussian (about 2^13, unless a tiny
#: epsilon needs more): bounds the cost of its exact CKS Thm 7 calibration (a curve of 80 sigma
#: points per step, ~1 s at 2^13); vectors (zCDP) go up to the sampler limit.
MAX_GRID_SIGMA = 8192.0
#: Smallest granularity (a normal double, so value / g loses nothing).
_MIN_GRANULARITY = 2.0 ** -1000

#: The flaw of the textbook floating-point samplers.
TEXTBOOK_FLAW = ("textbook floating-point sampler: its doubles carry the input's low-order bits "
                 "(Mironov 2012)")



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

    :func:`dpkd_audit._math.privacy.calibrate_analytic_gaussian` (bisection on the exact curve
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

    @property
    def event(self) -> _dp.DpEvent:
        """What one release is charged as: the discrete Laplace at the grid sensitivity."""
        return _dp.DiscreteLaplaceDpEvent(noise_parameter=self.noise_parameter,
                                          sensitivity=self.sensitivity)

    def sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` outputs g (round(value / g) + Lap_Z(t)), stacked on a new axis 0.

        ``value`` is a validated float array with ``|value| <= 2^61 g``; every output is a
        fixed function of the integer index + noise.
        """
        noise = samplers.discrete_laplace(self.scale.numerator, self.scale.denominator,
                                          n * value.size, rng=rng)
        return _on_grid(value, self.granularity, noise.reshape((n, *value.shape)))


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


class _OnGrid(Mechanism):
    """What the float-safe mechanisms share: a grid per number of changed coordinates.

    A subclass defines ``coordinates`` (``None``: every coordinate of the value released) and
    ``grid(coordinates)``, whose result has ``granularity``, ``event`` and ``sample``.
    """

    coordinates: int | None

    def grid(self, coordinates: int) -> LaplaceGrid | GaussianGrid:  # pragma: no cover
        raise NotImplementedError

    @property
    def event(self) -> _dp.DpEvent:
        return self.grid(self.coordinates or 1).event

    def release_event(self, value: Any) -> _dp.DpEvent:
        """The event a release of the (validated) ``value`` is charged as.

        ``coordinates`` changed, or every coordinate of ``value`` when it is ``None``.
        """
        return self.grid(self._changed(value)).event

    def _changed(self, value: Any) -> int:
        return self.coordinates if self.coordinates is not None else max(1, int(np.size(value)))

    def _check_value(self, value: Any) -> np.ndarray:
        arr = as_real_array(value)
        _check_on_grid(arr, self.grid(self._changed(arr)).granularity)
        return arr

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.grid(self._changed(value)).sample(value, n, rng)

    def neighbours(self) -> tuple[float, float]:
        return (0.0, float(self.sensitivity.value))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Laplace(_OnGrid):
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
    #: Why an audit flags it (the audit suite lists it among the controls).
    flaw: ClassVar[str] = TEXTBOOK_FLAW

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
class GaussianGrid:
    """The grid of a float-safe Gaussian release.

    Attributes:
        granularity: g, a power of two; outputs are multiples of it.
        sensitivity: The L2 sensitivity of round(value / g) in grid steps: floor(Delta_2 / g)
            + 1 when one coordinate changes (an integer), Delta_2 / g + sqrt(c) (rounded up)
            when c >= 2 do.
        variance: sigma_g^2, the discrete Gaussian's exact rational variance parameter in
            grid steps.
        event: What one release is charged as: ``DiscreteGaussianDpEvent`` (c = 1, the exact
            curve of CKS Thm 7) or ``DiscreteGaussianVectorDpEvent`` (c >= 2, zCDP).
    """

    granularity: float
    sensitivity: float
    variance: Fraction
    event: _dp.DpEvent

    @property
    def sigma(self) -> float:
        """The noise's standard-deviation parameter in the value's units, sigma_g g."""
        return math.sqrt(self.variance) * self.granularity

    def sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` outputs g (round(value / g) + N_Z(0, sigma_g^2)), stacked on a new axis 0."""
        noise = samplers.discrete_gaussian(self.variance.numerator, self.variance.denominator,
                                           n * value.size, rng=rng)
        return _on_grid(value, self.granularity, noise.reshape((n, *value.shape)))


def _on_grid(value: np.ndarray, granularity: float, noise: np.ndarray) -> np.ndarray:
    """The outputs g (round(value / g) + noise): a fixed function of the integers."""
    index = np.rint(value / granularity).astype(np.int64)
    return (index + noise).astype(np.float64) * granularity


def _power_of_two_at_most(x: float) -> float:
    return math.ldexp(1.0, math.frexp(x)[1] - 1)


@functools.lru_cache(maxsize=256)
def gaussian_grid(epsilon: float, delta: float, sensitivity: float, coordinates: int, *,
                  parameters: str) -> GaussianGrid:
    """The grid, grid sensitivity and exact noise of a float-safe Gaussian (module docstring).

    Args:
        epsilon: The claimed epsilon (> 0).
        delta: The claimed delta, in (0, 1).
        sensitivity: Delta_2 (> 0).
        coordinates: c, the most coordinates one record can change (>= 1).
        parameters: The parameters to name in an error message.

    Raises:
        ValueError: If the grid is finer than 2^-1000 or the noise is beyond the exact sampler.
    """
    ratio = calibrated_gaussian_sigma(epsilon, delta, sensitivity) / sensitivity
    rounding = 1.0 if coordinates == 1 else math.sqrt(coordinates)
    granularity = _power_of_two_at_most(sensitivity / (GRID_STEPS * rounding))
    # The noise in grid steps is about ratio (Delta / g + rounding): coarsen the grid until it
    # fits (each doubling halves Delta / g). Scalars: MAX_GRID_SIGMA, which bounds the cost of
    # the exact Thm 7 calibration; vectors (zCDP, no curve): nearly the sampler's limit, since
    # their rounding (sqrt(c) steps) costs more.
    limit = MAX_GRID_SIGMA if coordinates == 1 else 0.96 * samplers.MAX_DISCRETE_GAUSSIAN_SIGMA
    while ratio * (sensitivity / granularity + rounding) > limit and \
            sensitivity / granularity > 1.0:
        granularity *= 2.0
    if not granularity >= _MIN_GRANULARITY:
        raise ValueError(f"{parameters}: the float-safe Gaussian grid would be finer than "
                         f"2^-1000 (sensitivity / (512 sqrt(coordinates)) must be >= 2^-1000)")
    steps = Fraction(sensitivity) / Fraction(granularity)
    if coordinates == 1:
        grid_sensitivity = math.floor(steps) + 1
        try:
            discrete = DiscreteGaussian(epsilon=epsilon, delta=delta,
                                        sensitivity=grid_sensitivity)
        except ValueError as exc:
            raise ValueError(f"{parameters}: the float-safe Gaussian's discrete noise cannot "
                             f"be calibrated: {exc}") from exc
        return GaussianGrid(granularity=granularity, sensitivity=float(grid_sensitivity),
                            variance=discrete.variance, event=discrete.event)
    rho = calibrate_zcdp_rho(epsilon, delta)
    while True:  # the zCDP noise can exceed the estimate above (a small rho): coarsen further
        bound = math.nextafter(float(steps) + math.sqrt(coordinates), math.inf)
        sigma_g = math.nextafter(bound / math.sqrt(2.0 * rho), math.inf)
        if sigma_g <= samplers.MAX_DISCRETE_GAUSSIAN_SIGMA or steps <= 1:
            break
        granularity *= 2.0
        steps = Fraction(sensitivity) / Fraction(granularity)
    if sigma_g > samplers.MAX_DISCRETE_GAUSSIAN_SIGMA:
        raise ValueError(f"{parameters}: the float-safe Gaussian needs {sigma_g:.4g} grid "
                         f"steps of noise, above the exact sampler's "
                         f"{samplers.MAX_DISCRETE_GAUSSIAN_SIGMA:g}")
    variance = _rational_variance(sigma_g)
    event = DiscreteGaussianVectorDpEvent(sigma=math.sqrt(variance), sensitivity=bound,
                                          epsilon=epsilon, delta=delta)
    return GaussianGrid(granularity=granularity, sensitivity=bound, variance=variance,
                        event=event)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Gaussian(_OnGrid):
    """The Gaussian mechanism, float-safe: g (round(value / g) + N_Z(0, sigma_g^2)) per coordinate.

    Balle and Wang, ICML 2018, Theorem 8 (the analytic Gaussian mechanism, whose sigma sets
    the grid), implemented as the discrete Gaussian on a power-of-two grid (module docstring;
    Canonne-Kamath-Steinke 2020, Alg. 3 for the exact sampler): no floating-point artefact, and
    the claim is that of the discrete mechanism on the rounded query. One changed coordinate:
    the exact curve of CKS Thm 7 at integer sensitivity floor(Delta_2 / g) + 1, charged as a
    ``DiscreteGaussianDpEvent`` (noise within ~0.2% of the continuous mechanism's). c >= 2
    changed coordinates: CKS Thm 14 (zCDP) at L2 sensitivity Delta_2 / g + sqrt(c) and the
    zCDP conversion (CKS Prop. 12), charged as a ``DiscreteGaussianVectorDpEvent`` (about 9%
    more noise than Balle-Wang at epsilon 1, delta 1e-5: the price of the conversion).

    Attributes:
        epsilon: Claimed epsilon of one release, a normal double <= 1e12.
        delta: Claimed delta of one release, in [1e-300, 1).
        sensitivity: L2 sensitivity (a number or a ``Sensitivity`` in L2), default 1.
        coordinates: The most coordinates of a released value that one record can change.
            ``None`` (default): every coordinate of the value released (always safe; the event
            of a release then depends on the value's size: :meth:`release_event`). ``event``
            and ``sigma`` are those of a release with ``coordinates`` (1 when ``None``).
    """

    reference = ("Balle-Wang ICML 2018, Thm 8; discrete Gaussian on a power-of-two grid (CKS "
                 "2020 Thm 7 / Thm 14, Alg. 3)")

    epsilon: float
    delta: float
    sensitivity: Sensitivity | float = 1.0
    coordinates: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon_range(
            self.epsilon, maximum=MAX_GAUSSIAN_EPSILON))
        object.__setattr__(self, "delta", _validate.check_mechanism_delta(self.delta))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L2))
        if self.coordinates is not None:
            object.__setattr__(self, "coordinates", _validate.check_size(
                "coordinates", self.coordinates))
        _ = self.grid(self.coordinates or 1)  # calibrate (and verify) now: refuse before use

    @property
    def _parameters(self) -> str:
        return (f"epsilon={self.epsilon!r}, delta={self.delta!r} with "
                f"sensitivity={self.sensitivity.value!r}")

    def grid(self, coordinates: int) -> GaussianGrid:
        """The grid of a release in which one record changes ``coordinates`` coordinates."""
        return gaussian_grid(self.epsilon, self.delta, self.sensitivity.value, coordinates,
                             parameters=self._parameters)

    @property
    def sigma(self) -> float:
        """The noise parameter sigma_g g (value units) of a release with ``coordinates`` (or 1)."""
        return self.grid(self.coordinates or 1).sigma



def _check_on_grid(arr: np.ndarray, granularity: float) -> None:
    """Refuse values whose grid index would leave int64 (|value| > 2^61 g)."""
    limit = MAX_GRID_INDEX * granularity
    if arr.size and float(np.max(np.abs(arr))) > limit:
        raise ValueError(f"value must have |value| <= {limit:g} (2^61 grid steps of "
                         f"{granularity:g}, so that the exact integer sampler's sums stay in "
                         f"int64); got {float(np.max(np.abs(arr))):g}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TextbookGaussian(Mechanism):
    """The textbook floating-point Gaussian sampler: value + N(0, sigma^2) in doubles.

    Balle and Wang, ICML 2018, Theorem 8 / Algorithm 1: the smallest sigma for which the
    mechanism with L2 sensitivity Delta_2 is (epsilon, delta)-DP *as a real-valued design*. Its
    doubles are not DP (Mironov, CCS 2012: the float-bits audit flags it); kept for comparison
    and as an audit control. Use :class:`Gaussian`.

    The calibrated sigma is re-checked against the exact curve in arbitrary precision (mpmath)
    at construction, so the claim holds exactly for the real-valued mechanism.

    Attributes:
        epsilon: Claimed epsilon of one release, a normal double <= 1e12.
        delta: Claimed delta of one release, in [1e-300, 1).
        sensitivity: L2 sensitivity (a number or a ``Sensitivity`` in L2), default 1.
    """

    reference = "Balle-Wang ICML 2018, Thm 8 (analytic Gaussian mechanism)"
    #: Why an audit flags it (the audit suite lists it among the controls).
    flaw: ClassVar[str] = TEXTBOOK_FLAW

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

