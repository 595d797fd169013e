"""Randomized response with the wrong keep probability."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import numpy as np
from scipy import special

from dpkd_audit import _validate
from dpkd_audit.audit.controls.base import (
    _MAX_RR_EPSILON,
    Control,
)
from dpkd_audit.mechanisms.base import Norm, Sensitivity

# ====================================================================== randomized response


@dataclasses.dataclass(frozen=True, kw_only=True)
class WrongRandomizedResponse(Control):
    """k-ary randomized response whose keep probability uses the binary formula.

    Correct k-ary RR keeps the label w.p. e^eps/(e^eps + k - 1) and reports each other label
    w.p. 1/(e^eps + k - 1) (Warner 1965; Kairouz-Oh-Viswanath 2016). This one keeps it w.p.
    p = e^eps/(e^eps + 1) (the k = 2 formula) and otherwise reports a uniform *other* label,
    each w.p. (1 - p)/(k - 1) = 1/((e^eps + 1)(k - 1)).

    True epsilon: outputs other than x and x' have the same probability under both inputs; the
    output y = x has probability p under x and (1 - p)/(k - 1) under x', so
    true epsilon = ln(p (k - 1)/(1 - p)) = epsilon + ln(k - 1), larger than epsilon for k >= 3
    (``num_classes >= 3`` is required). Attained on ``neighbours() = (0, 1)`` by the output 0.

    Attributes:
        epsilon: Claimed epsilon (> 0, <= 700).
        num_classes: Number of labels k (an integer >= 3).
    """

    reference: ClassVar[str] = "Kairouz-Oh-Viswanath JMLR 2016 (correct k-ary RR); binary formula"
    flaw: ClassVar[str] = ("k-ary randomized response keeps the label w.p. e^eps/(e^eps+1): true "
                           "epsilon eps + ln(k-1)")

    epsilon: float
    num_classes: int = 10

    def __post_init__(self) -> None:
        eps = _validate.check_epsilon(self.epsilon)
        if eps > _MAX_RR_EPSILON:
            raise ValueError(f"epsilon must be a real number in (0, {_MAX_RR_EPSILON:g}] for "
                             f"randomized response; got {eps!r}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "num_classes",
                           _validate.check_int("num_classes", self.num_classes, minimum=3))

    @property
    def sensitivity(self) -> Sensitivity:
        """One record changes one label (replace-one neighbours)."""
        return Sensitivity(value=1, norm=Norm.RECORDS)

    @property
    def keep_probability(self) -> float:
        """Keep probability p = e^eps / (e^eps + 1) (the binary formula, wrong for k >= 3)."""
        return float(special.expit(self.epsilon))

    @property
    def other_probability(self) -> float:
        """(1 - p) / (k - 1) = 1 / ((e^eps + 1)(k - 1)) for each other label."""
        return float(special.expit(-self.epsilon)) / (self.num_classes - 1)

    @property
    def true_epsilon(self) -> float:
        """ln(p / ((1 - p)/(k - 1))) = epsilon + ln(k - 1)."""
        return self.epsilon + math.log(self.num_classes - 1)

    def _check_value(self, value: Any) -> np.ndarray:
        arr = np.asarray(value)
        if arr.dtype.kind not in "iu":
            raise ValueError(f"value must be integer labels in [0, {self.num_classes}) (integer "
                             f"dtype); got dtype {arr.dtype}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self.num_classes):
            raise ValueError(f"value must be integer labels in [0, {self.num_classes}); got "
                             f"entries in [{arr.min()}, {arr.max()}]")
        return arr.astype(np.int64)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        k = self.num_classes
        out = np.broadcast_to(value, (n, *value.shape)).copy()
        flip = rng.random(out.shape) < float(special.expit(-self.epsilon))
        out[flip] = (out[flip] + rng.integers(1, k, size=int(flip.sum()))) % k
        return out

    def neighbours(self) -> tuple[int, int]:
        """Labels 0 and 1; the output 0 has ratio e^eps (k - 1)."""
        return (0, 1)
