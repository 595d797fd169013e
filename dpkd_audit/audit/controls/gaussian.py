"""The Gaussian mechanism with too little noise."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, ClassVar

import numpy as np

from dpkd_audit import _validate
from dpkd_audit._math.privacy import (
    analytic_gaussian_delta,
    calibrate_analytic_gaussian,
    smallest_satisfying,
)
from dpkd_audit.audit.controls.base import (
    Control,
)
from dpkd_audit.mechanisms.base import Norm, Sensitivity, coerce_sensitivity
from dpkd_audit.mechanisms.continuous import as_real_array

# ====================================================================== Gaussian, too little noise


@dataclasses.dataclass(frozen=True, kw_only=True)
class GaussianTooLittleNoise(Control):
    """Gaussian mechanism calibrated for half the L2 sensitivity: sigma is half what it must be.

    The correct sigma is the smallest for which N(0, sigma^2) with L2 sensitivity Delta is
    (epsilon, delta)-DP (Balle-Wang ICML 2018, Thm 8 / Alg. 1); this one calibrates to Delta/2
    (e.g. confusing add/remove with replace-one neighbours), so sigma = sigma*(epsilon, delta,
    Delta)/2 (the exact curve depends on Delta/sigma only).

    True epsilon (at the claimed delta): the smallest epsilon' with
    delta(epsilon'; sigma, Delta) <= delta on the exact curve of Balle-Wang Thm 8, found by
    bisection (``_math.privacy.smallest_satisfying``); e.g. epsilon = 1, delta = 1e-5 gives
    about 2.15. :attr:`delta_at_claimed_epsilon` is the real delta at the claimed epsilon.

    Attributes:
        epsilon: Claimed epsilon (> 0).
        delta: Claimed delta, in (0, 1).
        sensitivity: L2 sensitivity Delta (a number or a ``Sensitivity`` in L2), default 1.
    """

    #: audited as a real-valued design: its flaw is not the floating-point one
    floating_point_output = True

    reference: ClassVar[str] = "Balle-Wang ICML 2018, Thm 8 (exact curve); sigma halved"
    flaw: ClassVar[str] = ("Gaussian noise calibrated for half the L2 sensitivity (sigma / 2): "
                           "true epsilon at the claimed delta is larger")

    epsilon: float
    delta: float
    sensitivity: Sensitivity | float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        object.__setattr__(self, "delta", _validate.check_delta(self.delta, allow_zero=False))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L2))

    @functools.cached_property
    def sigma(self) -> float:
        """sigma*(epsilon, delta, Delta/2) = sigma*(epsilon, delta, Delta)/2."""
        return calibrate_analytic_gaussian(self.epsilon, self.delta, self.sensitivity.value / 2.0)

    @property
    def delta_at_claimed_epsilon(self) -> float:
        """Real delta at the claimed epsilon (Balle-Wang Thm 8), larger than the claim."""
        return analytic_gaussian_delta(self.epsilon, self.sigma, self.sensitivity.value)

    @functools.cached_property
    def true_epsilon(self) -> float:
        """Smallest epsilon' with delta(epsilon'; sigma, Delta) <= delta (Balle-Wang Thm 8)."""
        d, s = self.sensitivity.value, self.sigma

        def curve(e: float) -> float:
            return analytic_gaussian_delta(e, s, d)

        hi = max(1.0, self.epsilon)
        while curve(hi) > self.delta:
            hi *= 2.0
        return smallest_satisfying(curve, self.delta, 0.0, hi)

    def _check_value(self, value: Any) -> np.ndarray:
        return as_real_array(value)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return value + rng.normal(0.0, self.sigma, size=(n, *value.shape))

    def neighbours(self) -> tuple[float, float]:
        """(0, Delta): the privacy-loss distribution of a Gaussian depends only on |x - x'|."""
        return (0.0, float(self.sensitivity.value))
