"""Laplace-family controls.

Too little noise, a histogram at the wrong scale, and naive floating-point Laplace (Mironov
CCS 2012).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np

from dpkd_audit import _validate
from dpkd_audit.audit.controls.base import (
    _TWO_53,
    Control,
    _check_finite,
    _real_vector,
)
from dpkd_audit.mechanisms.base import Norm, Sensitivity, coerce_sensitivity
from dpkd_audit.mechanisms.continuous import as_real_array

# ====================================================================== Laplace, too little noise


@dataclasses.dataclass(frozen=True, kw_only=True)
class HalfNoiseLaplace(Control):
    """Laplace mechanism with half the noise it needs: value + Lap(Delta_1 / (2 epsilon)).

    The correct mechanism adds Lap(Delta_1/epsilon) (Dwork-McSherry-Nissim-Smith 2006;
    Dwork-Roth 2014, Thm 3.6); this one divides the scale by two (e.g. a factor-2 slip in the
    sensitivity, as when add/remove and replace-one neighbours are confused).

    True epsilon: with scale b the density ratio on inputs at L1 distance Delta_1 is
    exp((|y - x'|_1 - |y - x|_1)/b) <= exp(Delta_1/b), with equality for every y beyond both
    inputs (e.g. y <= min(x, x') in one dimension). So the true epsilon is
    Delta_1 / b = 2 epsilon, attained on ``neighbours() = (0, Delta_1)`` by the event {y <= 0}.

    Attributes:
        epsilon: Claimed epsilon (> 0).
        sensitivity: L1 sensitivity Delta_1 (a number or a ``Sensitivity`` in L1), default 1.
    """

    #: audited as a real-valued design: its flaw is not the floating-point one
    floating_point_output = True

    reference: ClassVar[str] = "Dwork-Roth 2014 Thm 3.6 (correct scale Delta/eps); noise halved"
    flaw: ClassVar[str] = "Laplace scale Delta/(2 eps) instead of Delta/eps: true epsilon 2 eps"

    epsilon: float
    sensitivity: Sensitivity | float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L1))

    @property
    def scale(self) -> float:
        """The (wrong) Laplace scale Delta_1 / (2 epsilon)."""
        return self.sensitivity.value / (2.0 * self.epsilon)

    @property
    def true_epsilon(self) -> float:
        """Delta_1 / scale = 2 epsilon (the Laplace density ratio bound is attained)."""
        return self.sensitivity.value / self.scale

    def _check_value(self, value: Any) -> np.ndarray:
        return as_real_array(value)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return value + rng.laplace(0.0, self.scale, size=(n, *value.shape))

    def neighbours(self) -> tuple[float, float]:
        """(0, Delta_1): every output below 0 has likelihood ratio exactly e^(2 eps)."""
        return (0.0, float(self.sensitivity.value))



# ====================================================================== histogram, wrong scale


@dataclasses.dataclass(frozen=True, kw_only=True)
class HistogramWrongScale(Control):
    """Noisy histogram with Laplace scale epsilon instead of 1/epsilon.

    StatDP's "incorrect histogram" benchmark (Ding et al., CCS 2018, Sec. 6): the correct
    histogram release adds Lap(1/epsilon) to every count (a histogram has L1 sensitivity 1 under
    add/remove-one neighbours, Dwork-Roth 2014, Sec. 3.3), this one adds Lap(epsilon). Output: the
    noisy count vector, shape ``(num_bins,)`` per sample.

    Neighbouring relation: **add/remove one record** (L1 sensitivity 1; under replace-one it would
    be 2 and every epsilon below doubles). Only epsilon in (0, 1) is accepted: for epsilon >= 1
    the wrong scale is at least the right one and the release is private.

    True epsilon: one record changes one count by 1, and the density ratio of Lap(b) noise on a
    shift of 1 is at most e^(1/b), attained for every output of that bin outside the segment
    between the two counts. With b = epsilon: true epsilon = 1/epsilon (> epsilon).

    Attributes:
        epsilon: Claimed epsilon, in (0, 1).
        num_bins: Number of histogram bins (an integer >= 1).
    """

    #: audited as a real-valued design: its flaw is not the floating-point one
    floating_point_output = True

    reference: ClassVar[str] = "Ding et al. CCS 2018 (StatDP), incorrect histogram; Dwork-Roth 3.3"
    flaw: ClassVar[str] = "Laplace scale eps instead of 1/eps on each count: true epsilon 1/eps"

    epsilon: float
    num_bins: int = 5

    def __post_init__(self) -> None:
        eps = _validate.check_epsilon(self.epsilon)
        if eps >= 1.0:
            raise ValueError("epsilon must be a real number in (0, 1) for HistogramWrongScale "
                             f"(for epsilon >= 1 the wrong scale is not a violation); got {eps!r}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "num_bins",
                           _validate.check_int("num_bins", self.num_bins, minimum=1))

    @property
    def sensitivity(self) -> Sensitivity:
        """L1 sensitivity 1 of a histogram under add/remove-one neighbours."""
        return Sensitivity(value=1.0, norm=Norm.L1)

    @property
    def scale(self) -> float:
        """The (wrong) Laplace scale: epsilon."""
        return self.epsilon

    @property
    def true_epsilon(self) -> float:
        """1 / scale = 1/epsilon (Laplace with sensitivity 1 and scale epsilon)."""
        return 1.0 / self.scale

    def _check_value(self, value: Any) -> np.ndarray:
        counts = _real_vector(value, self.num_bins)
        if np.any(counts < 0):
            raise ValueError(f"value must be a histogram of non-negative counts; got minimum "
                             f"{counts.min()!r}")
        return counts

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return value + rng.laplace(0.0, self.scale, size=(n, self.num_bins))

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """The empty histogram and the histogram of one record in bin 0."""
        first = np.zeros(self.num_bins)
        second = first.copy()
        second[0] = 1.0
        return first, second



# ====================================================================== naive floating point


@dataclasses.dataclass(frozen=True, kw_only=True)
class NaiveFloatLaplace(Control):
    """Textbook floating-point Laplace sampler (Mironov, CCS 2012): value + Lap(Delta/epsilon).

    Mironov, "On significance of the least significant bits for differential privacy", CCS 2012
    (the attack on the textbook sampler): the noise is drawn as sign * b * (-ln U) with U a
    uniform double, and added to the input in floating point. Here U = 1 - ``rng.random()``, a
    multiple j/2^53 of 2^-53 (j = 1..2^53, exact), the sign is a fair coin, b = Delta/epsilon,
    and the output is fl(x + s fl(b fl(-ln U))) (numpy's ``Generator.laplace``, and therefore
    the package's continuous :class:`~dpkd_audit.mechanisms.continuous.Laplace`, uses the same
    inverse-CDF construction and shares the artefact). Over the reals the distribution is
    exactly Lap(b).

    True epsilon: ``math.inf``. The noise takes at most 2^54 values, spaced about b 2^-53/U
    apart, while the doubles near z are spaced ulp(z); wherever b 2^-53/U > ulp(z) (near 0,
    where ulp(z) is tiny, and in the tails, e.g. |z| >= 2 for b = 1) only some doubles are
    reachable, and which ones depends on the input through the rounding of x + z. On
    ``neighbours() = (0, Delta)`` many outputs of one input are impossible under the other
    (:meth:`attainable` decides it exactly): about 60% of the outputs of either input
    (measured for epsilon from 0.1 to 2 and Delta from 0.3 to 5), and with Delta = b = 1 most
    outputs of x = 1 in [2, 3). A generic bit-level feature also shows it: on [2, 3), x = 1
    yields fl(1 + z) with z in [1, 2), whose ties round to even, so the lowest mantissa bit is
    0 with probability 3/4 (1/2 under x = 0); the event {y in [2, 3), lowest bit 0} has
    probability ratio about 4.08 (ln 1.41 > epsilon = 1).

    Attributes:
        epsilon: Claimed epsilon (> 0).
        sensitivity: L1 sensitivity Delta (a number or a ``Sensitivity`` in L1), default 1.
    """

    reference: ClassVar[str] = "Mironov CCS 2012 (floating-point Laplace is not DP)"
    flaw: ClassVar[str] = ("textbook floating-point Laplace x + s b (-ln U): output bit patterns "
                           "depend on x, true epsilon infinite")

    epsilon: float
    sensitivity: Sensitivity | float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L1))

    @property
    def scale(self) -> float:
        """The (correct over the reals) Laplace scale b = Delta / epsilon."""
        return self.sensitivity.value / self.epsilon

    @property
    def true_epsilon(self) -> float:
        """math.inf (outputs possible under one input and impossible under the other)."""
        return math.inf

    def _check_value(self, value: Any) -> np.ndarray:
        return as_real_array(value)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        shape = (n, *value.shape)
        uniform = 1.0 - rng.random(shape)              # j / 2^53, j = 1..2^53, exact
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return value + sign * (self.scale * -np.log(uniform))

    def _outputs_for(self, x: float, sign: np.ndarray, j: np.ndarray) -> np.ndarray:
        """The sampler's exact output for uniform j/2^53 and the given signs (same arithmetic)."""
        return np.asarray(x) + sign * (self.scale * -np.log(j / _TWO_53))

    def attainable(self, value: float, outputs: Any) -> np.ndarray:
        """Whether each double in ``outputs`` can be produced by the sampler on input ``value``.

        Exact, deterministic support check (Mironov 2012's observation made executable): an
        output y > x needs sign +1 and y < x sign -1; the map j -> fl(x + s fl(b fl(-ln(j/2^53))))
        is monotone in j, so y is attainable iff one j in a window around
        j* = 2^53 exp(-|y - x|/b) reproduces y exactly; the window is widened until its end
        values bracket y. y == x is attainable (U = 1).

        Args:
            value: The input x (a finite real number).
            outputs: Doubles to check (any shape).

        Returns:
            A boolean array of the shape of ``outputs``.
        """
        x = _check_finite("value", value)
        y = np.asarray(outputs, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise ValueError("outputs must be finite")
        flat = y.ravel()
        result = flat == x
        todo = np.flatnonzero(~result)
        sign = np.where(flat[todo] > x, 1.0, -1.0)
        centre = np.clip(np.floor(_TWO_53 * np.exp(-np.abs(flat[todo] - x) / self.scale)),
                         1.0, _TWO_53)
        half = 8
        pending = np.arange(todo.size)
        while pending.size:
            offsets = np.arange(-half, half + 1, dtype=np.float64)
            j = np.clip(centre[pending, None] + offsets[None, :], 1.0, _TWO_53)
            vals = self._outputs_for(x, sign[pending, None], j)
            target = flat[todo[pending], None]
            hit = np.any(vals == target, axis=1)
            lo = np.min(vals, axis=1)
            hi = np.max(vals, axis=1)
            at_edge = (j[:, 0] == 1.0) | (j[:, -1] == _TWO_53)
            bracketed = (lo <= target[:, 0]) & (target[:, 0] <= hi)
            done = hit | bracketed | at_edge
            result[todo[pending[done]]] = hit[done]
            pending = pending[~done]
            half *= 8
            if half > 1 << 24 and pending.size:  # pragma: no cover - cannot happen for doubles
                raise RuntimeError("attainable: search window did not bracket the output")
        return result.reshape(y.shape)

    def neighbours(self) -> tuple[float, float]:
        """(0, Delta): the pair of Mironov's demonstration."""
        return (0.0, float(self.sensitivity.value))
