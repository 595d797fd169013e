"""k-ary randomized response on labels, and its unbiased server-side histogram estimator.

Warner 1965 (binary randomized response); Kairouz, Oh, Viswanath, "Extremal mechanisms for local
differential privacy", JMLR 2016 (k-ary RR, optimal in the high-privacy regime); Wang, Blocki,
Li, Jha, "Locally differentially private protocols for frequency estimation", USENIX Security
2017, Section 4.1 ("direct encoding") for the unbiased frequency estimator.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit._math.randomized_response import (
    rr_noise_parameter,
)
from dpkd_audit.mechanisms import samplers
from dpkd_audit.mechanisms.base import Mechanism, Norm, Sensitivity

__all__ = ["MAX_RR_EPSILON", "RandomizedResponse"]

#: Largest epsilon accepted: beyond it the event's noise parameter k/(e^eps + k - 1) leaves the
#: normal double range and the mechanism is not private in any useful sense anyway.
MAX_RR_EPSILON = 700.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class RandomizedResponse(Mechanism):
    """k-ary randomized response: keep the true label w.p. e^eps/(e^eps+k-1), else a uniform other.

    Warner 1965; Kairouz-Oh-Viswanath 2016: each other label has probability 1/(e^eps+k-1),
    so the likelihood ratio of any output under two inputs is at most e^eps: pure eps-(L)DP
    when one record changes one label (``Sensitivity(1, Norm.RECORDS)``). An array input is a
    batch of labels of *distinct* records, each randomized independently: one record changes one
    entry, so a release is still eps-DP (parallel composition). If one record owns several
    entries, the guarantee is eps times that number (basic composition), which this class does
    not charge.

    Sampling (floating point, documented): the label is changed when ``rng.random() < q_flip``
    with q_flip = (k-1)/(e^eps + k - 1) computed accurately and nudged up by 2^-50 relative;
    ``rng.random()`` returns multiples of 2^-53, so the real flip probability is
    P = ceil(q_flip * 2^53) / 2^53 (:func:`~dpkd_audit.mechanisms.samplers.coin_probability`),
    at least 2^-53 even for huge eps, and the replacement label is an exact uniform integer over
    the other k-1 labels. The constructor computes the sampler's *exact* epsilon,
    max |ln((1 - P) (k - 1) / P)|, from the rational P and refuses the parameters if it exceeds
    the claim: more flipping lowers the ratio keep/other, but for tiny eps (below about
    2^-50 k) the rounding could push keep below other, which would reverse the ratio.

    Attributes:
        epsilon: Claimed epsilon of one release (<= 700, and large enough for the sampler's
            2^-53 resolution: about 2^-50 num_classes).
        num_classes: Number of labels k (an integer in [2, 10^8]); labels are 0..k-1.
    """

    reference = "Warner 1965; Kairouz-Oh-Viswanath JMLR 2016 (k-ary randomized response)"

    epsilon: float
    num_classes: int

    def __post_init__(self) -> None:
        eps = _validate.check_epsilon_range(self.epsilon, maximum=MAX_RR_EPSILON)
        object.__setattr__(self, "epsilon", eps)
        k = _validate.check_size("num_classes", self.num_classes, minimum=2)
        object.__setattr__(self, "num_classes", k)
        if self.sampler_epsilon > eps:
            raise ValueError(
                f"epsilon must be a real number in [~{2.0**-50 * k:.3g}, {MAX_RR_EPSILON:g}] for "
                f"randomized response with num_classes={k}: below, the 2^-53 resolution of the "
                f"sampler's coin cannot realise the claim (its exact epsilon would be "
                f"{self.sampler_epsilon:.3g}); got {eps!r}")

    @property
    def _flip_threshold(self) -> float:
        """q_flip = (k-1)/(e^eps + k - 1), nudged up by 2^-50 relative (a few ulps)."""
        k = self.num_classes
        return min(1.0, (k - 1) / (k + math.expm1(self.epsilon)) * (1.0 + 2.0**-50))

    @property
    def sampler_epsilon(self) -> float:
        """The exact epsilon of the floating-point sampler (rounded up), <= the claim.

        max |ln(keep / other)| with keep = 1 - P and other = P / (k - 1), P the exact flip
        probability ceil(q_flip 2^53) / 2^53 (Warner 1965; Kairouz-Oh-Viswanath 2016: the
        likelihood ratio of k-ary RR is keep/other or its inverse).
        """
        flip = samplers.coin_probability(self._flip_threshold)
        keep, other = 1 - flip, flip / (self.num_classes - 1)
        if keep == 0 or other == 0:
            return math.inf
        return max(samplers.log_ratio_upper(keep, other), samplers.log_ratio_upper(other, keep))

    @property
    def sensitivity(self) -> Sensitivity:
        """One record changes at most one label (replace-one neighbours)."""
        return Sensitivity(value=1, norm=Norm.RECORDS)

    # ------------------------------------------------------------------ probabilities
    @property
    def keep_probability(self) -> float:
        """Probability p = e^eps / (e^eps + k - 1) = 1 / (1 + (k-1) e^-eps) of the true label."""
        return 1.0 / (1.0 + (self.num_classes - 1) * math.exp(-self.epsilon))

    @property
    def other_probability(self) -> float:
        """Probability q = 1 / (e^eps + k - 1) = (1 - p)/(k - 1) of each other label."""
        return 1.0 / (self.num_classes + math.expm1(self.epsilon))

    @property
    def noise_parameter(self) -> float:
        """The RandomizedResponseDpEvent noise parameter k/(e^eps + k - 1).

        dp_accounting's RR replaces the input, with this probability, by a uniform bucket.

        Keep w.p. 1 - p + p/k = e^eps/(e^eps+k-1) as required. Rounded down by at most a few ulps
        so that the event's epsilon ln(1 + k(1-p)/p) is never below the claimed epsilon.
        """
        return rr_noise_parameter(self.epsilon, self.num_classes)

    @property
    def event(self) -> _dp.DpEvent:
        return _dp.RandomizedResponseDpEvent(noise_parameter=self.noise_parameter,
                                             num_buckets=self.num_classes)

    # ------------------------------------------------------------------ sampling
    def _check_labels(self, value: Any, name: str) -> np.ndarray:
        return _validate.as_integer_array(value, name, minimum=0, maximum=self.num_classes - 1,
                                          what="integer labels (an int or an array of ints)")

    def _check_value(self, value: Any) -> np.ndarray:
        return self._check_labels(value, "value")

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        k = self.num_classes
        out = np.broadcast_to(value, (n, *value.shape)).copy()
        flip = rng.random(out.shape) < self._flip_threshold
        # A uniform *other* label: shift by a uniform offset in {1, ..., k-1} (mod k), computed
        # without forming label + offset (no int64 overflow whatever k).
        offset = rng.integers(1, k, size=int(flip.sum()))
        labels = out[flip]
        out[flip] = np.where(offset >= k - labels, labels - (k - offset), labels + offset)
        return out

    def neighbours(self) -> tuple[int, int]:
        return (0, 1)

    # ------------------------------------------------------------------ server side
    def estimate_counts(self, reports: Any) -> np.ndarray:
        """Unbiased estimate of the true label histogram from randomized reports.

        Wang-Blocki-Li-Jha 2017, Sec. 4.1 (direct encoding) / Kairouz-Oh-Viswanath 2016: with c_j
        the number of reports equal to j among n, E[c_j] = n_j p + (n - n_j) q, so
        n_j_hat = (c_j - n q) / (p - q) is unbiased; with m = e^eps - 1 this is
        (c_j (k + m) - n) / m. Post-processing of the reports: no privacy cost.

        Args:
            reports: Integer labels in [0, k) (any shape; every entry is one report).

        Returns:
            A float64 array of length k (entries may be negative; they sum to n).
        """
        arr = self._check_labels(reports, "reports").ravel()
        k = self.num_classes
        m = math.expm1(self.epsilon)
        counts = np.bincount(arr, minlength=k).astype(np.float64)
        return (counts * (k + m) - arr.size) / m
