"""Report-noisy-max that also returns the noisy value."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from dpkd_audit import _validate
from dpkd_audit.audit.controls.base import (
    Control,
    _real_vector,
)
from dpkd_audit.mechanisms.base import Norm, Sensitivity, coerce_sensitivity

# ====================================================================== noisy max with its value


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoisyMaxReturningValue(Control):
    """Report-noisy-max that releases the noisy maximum *value* (optionally with its index).

    Report noisy max releases only argmax_j (q_j + Lap(2 Delta/epsilon)), which is epsilon-DP for
    any queries of sensitivity Delta (Dwork-Roth 2014, Sec. 3.3, Claim 3.9 and the remark on
    non-monotone queries; StatDP's ``noisy_max_v1a``). Returning the maximum value instead is
    StatDP's "incorrect noisy max" (``noisy_max_v1b``, Ding et al. CCS 2018, Sec. 6); the value
    is not covered by the argmax analysis.

    True epsilon (queries q in R^k, all k answers may move by up to Delta): the density of
    (I, V) at (i, v) is f(v - q_i) prod_{j != i} F(v - q_j), with f, F the pdf and cdf of
    Lap(b), b = 2 Delta/epsilon. Both f and F are e^(1/b)-log-Lipschitz, so each of the k factors
    changes by at most e^(Delta/b): the ratio is <= e^(k Delta / b). For v below every q_j and
    q'_j all factors are in the left tail, f(v - q) = e^((v - q)/b)/(2b) and F(v - q) =
    e^((v - q)/b)/2, and with q' = q + Delta (1, ..., 1) the ratio is exactly e^(k Delta/b); the
    density of V alone, d/dv prod_j F(v - q_j), has the same ratio there. Hence
    true epsilon = k Delta / b = k epsilon / 2, with or without the index; it exceeds the claim
    only for k >= 3, so ``num_classes >= 3`` is required.

    Attributes:
        epsilon: Claimed epsilon (> 0).
        num_classes: Number of queries k (an integer >= 3).
        sensitivity: Per-query sensitivity Delta, default 1.
        with_index: Release (index, value) as a float row of length 2 instead of the value alone.
    """

    #: audited as a real-valued design: its flaw is not the floating-point one
    floating_point_output = True

    reference: ClassVar[str] = "Ding et al. CCS 2018 (StatDP) noisy_max_v1b; Dwork-Roth 2014 3.3"
    flaw: ClassVar[str] = ("report noisy max releases the noisy maximum value: true epsilon "
                           "k eps / 2 instead of eps")

    epsilon: float
    num_classes: int = 5
    sensitivity: Sensitivity | float = 1.0
    with_index: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        object.__setattr__(self, "num_classes",
                           _validate.check_int("num_classes", self.num_classes, minimum=3))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L1))
        if not isinstance(self.with_index, bool):
            raise ValueError(f"with_index must be a bool; got {self.with_index!r}")

    @property
    def scale(self) -> float:
        """Laplace scale b = 2 Delta / epsilon of the (correct) index-only mechanism."""
        return 2.0 * self.sensitivity.value / self.epsilon

    @property
    def true_epsilon(self) -> float:
        """The true epsilon k Delta / b = k epsilon / 2 (see the class docstring)."""
        return self.num_classes * self.sensitivity.value / self.scale

    def _check_value(self, value: Any) -> np.ndarray:
        return _real_vector(value, self.num_classes)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        noisy = value + rng.laplace(0.0, self.scale, size=(n, self.num_classes))
        index = np.argmax(noisy, axis=1)
        top = noisy[np.arange(n), index]
        if self.with_index:
            return np.column_stack([index.astype(np.float64), top])
        return top

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """All-zero answers and all-Delta answers.

        q = (0, ..., 0) and q' = (Delta, ..., Delta): every output value below 0 has likelihood
        ratio exactly e^(k eps / 2).
        """
        zeros = np.zeros(self.num_classes)
        return zeros, zeros + self.sensitivity.value
