"""Reverse k-NN labelling: the central count release and the two local randomizers.

Wang, Li, Wang, Li, Qian, Xin, Yang, "Fine-grained Private Knowledge Distillation" (the reverse
k-NN paper, ``papers/rknn-fine-grained-private-kd.txt``). There are ``s`` query samples and
``|Y|`` classes; every private record votes its label (``r`` ones; ``r = 1`` for multi-class) into
its ``k`` nearest queries, so one record's *answer* is a 0/1 matrix ``A^i`` of shape ``(s, |Y|)``
with exactly ``k * r`` ones (Algorithm 1, lines 5-8; Definition 4, "Bucketized Sparse Vector
Summation"). Replacing one record changes its answer in at most ``2kr`` cells.

- :class:`ReverseKnnCountRelease`: central epsilon-DP release of the summed count matrix with
  noise of scale ``2kr / epsilon`` on every cell ("Mechanism and Accuracy Guarantees",
  Proposition 1). Exact discrete Laplace by default.
- :class:`BitRandomizedResponse`: the per-client local randomizer that flips every bit of
  ``A^i`` with probability ``1 / (e^(epsilon/(2kr)) + 1)`` ("Local Private Mechanisms",
  Theorem 1; Duchi, Jordan, Wainwright, FOCS 2013), with its unbiased server-side estimator.
- :class:`Collision`: the ``(d, c, epsilon, l)``-Collision mechanism of Wang et al., IJCAI 2021
  (paper Appendix A, Definition 5, Theorem 2) with ``d = s |Y|``, ``c = kr``, and its unbiased
  estimator (defined in :mod:`dpkd_audit.mechanisms.collision`, re-exported here).

Helpers (:mod:`dpkd_audit.mechanisms.rknn_answers`, re-exported here) build answers from
neighbour indices and labels (:func:`reverse_knn_answers`,
:func:`reverse_knn_counts`), map an answer to its flat index set and back
(:func:`answer_to_index_set`, :func:`index_set_to_answer`), and derive labels from noisy counts
(:func:`noisy_argmax`).

Local randomizers and parallel composition: ``randomize_clients`` randomizes a whole population
(one record per client, the paper's "most stringent case", ``m_i = 1``) and is *not* charged to a
ledger. Each record is in exactly one client and each client's report depends only on its own
record through an epsilon-LDP randomizer, so the vector of all reports is epsilon-DP at record
level (parallel composition, McSherry 2009); a pipeline charges :attr:`event` *once* per release
of the whole population.
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
from dpkd_audit.events import BitRandomizedResponseDpEvent
from dpkd_audit.mechanisms import samplers
from dpkd_audit.mechanisms.base import Mechanism, Norm, Sensitivity
from dpkd_audit.mechanisms.collision import COLLISION_REPORT_DTYPE, Collision, collision_hash
from dpkd_audit.mechanisms.continuous import Laplace
from dpkd_audit.mechanisms.discrete import DiscreteLaplace
from dpkd_audit.mechanisms.rknn_answers import (
    _as_int_array,
    _check_answers,
    _check_rknn_shape,
    _check_shape,
    _disjoint_answers,
    answer_to_index_set,
    index_set_to_answer,
    noisy_argmax,
    reverse_knn_answers,
    reverse_knn_counts,
)

__all__ = [
    "COLLISION_REPORT_DTYPE",
    "BitRandomizedResponse",
    "Collision",
    "ReverseKnnCountRelease",
    "answer_to_index_set",
    "collision_hash",
    "index_set_to_answer",
    "noisy_argmax",
    "reverse_knn_answers",
    "reverse_knn_counts",
]

#: Largest per-bit epsilon of BitRandomizedResponse (q = 1/(e^eps_b + 1) stays a normal double).
_MAX_BIT_EPSILON = 700.0


# --------------------------------------------------------------------------- central release

@dataclasses.dataclass(frozen=True, kw_only=True)
class ReverseKnnCountRelease(Mechanism):
    """Central epsilon-DP release of the reverse k-NN count matrix (s x |Y|, integers).

    Reverse k-NN paper, "Mechanism and Accuracy Guarantees" and Proposition 1: replacing one
    record changes its answer ``A^i`` (k*r ones) in at most 2kr cells, so the summed count
    matrix has L1 sensitivity ``2kr`` and ``Laplace(2kr / epsilon)`` noise on every cell is
    epsilon-DP (Dwork-Roth 2014, Thm 3.6).

    - ``discrete=True`` (default): exact discrete Laplace ``P[X = x] ∝ exp(-|x| / t)`` with
      ``t`` = ``2kr / epsilon`` rounded *up* to a rational, sampled by CKS 2020 Algorithm 2
      (no floating point): the package's :class:`~dpkd_audit.mechanisms.discrete.
      DiscreteLaplace` with integer L1 sensitivity 2kr. For integer queries of L1 sensitivity
      Delta it is (Delta / t)-DP <= epsilon (Ghosh-Roughgarden-Sundararajan 2012; CKS 2020,
      Sec. 2). Event: ``DiscreteLaplaceDpEvent(1 / t, 2kr)``.
    - ``discrete=False``: the float-safe Laplace
      (:class:`~dpkd_audit.mechanisms.continuous.Laplace` with ``coordinates=2kr``: the counts
      on a power-of-two grid, exact discrete Laplace noise; issue 32); event
      ``DiscreteLaplaceDpEvent`` of its grid.

    The noise mechanism is available as :attr:`noise`; this class adds the shape and count
    validation, the sensitivity derived from (k, r) and the worst-case neighbours.

    Inputs: an ``(s, |Y|)`` matrix of non-negative integer counts (integer dtype, or floats
    holding integers), at most 2^62 (discrete) or 2^52 (continuous: 2^61 steps of the grid
    g = 2^-9); booleans are refused.

    Attributes:
        epsilon: Claimed epsilon of one release (limits of the noise mechanism).
        k: Queries each record votes into, ``1 <= k <= num_queries``.
        num_queries: Number of queries s (>= 1).
        num_classes: Number of classes |Y| (>= 2); s |Y| <= 10^8.
        r: Labels per record, ``1 <= r <= num_classes`` (1 for multi-class).
        discrete: Exact discrete Laplace (True) or continuous Laplace (False).
    """

    reference = ("Wang et al. 2022 (reverse k-NN), Prop. 1; Dwork-Roth 2014 Thm 3.6; "
                 "Canonne-Kamath-Steinke 2020 Alg. 2")

    epsilon: float
    k: int
    num_queries: int
    num_classes: int
    r: int = 1
    discrete: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        k, s, y, r = _check_rknn_shape(self.k, self.num_queries, self.num_classes, self.r)
        for name, val in (("k", k), ("num_queries", s), ("num_classes", y), ("r", r)):
            object.__setattr__(self, name, val)
        if not isinstance(self.discrete, (bool, np.bool_)):
            raise ValueError(f"discrete must be a bool; got {self.discrete!r}")
        object.__setattr__(self, "discrete", bool(self.discrete))
        _ = self.noise  # fail early on a scale the exact sampler cannot handle

    @functools.cached_property
    def noise(self) -> DiscreteLaplace | Laplace:
        """The noise mechanism: (discrete) Laplace with L1 sensitivity 2kr at ``epsilon``."""
        if self.discrete:
            return DiscreteLaplace(epsilon=self.epsilon, sensitivity=2 * self.k * self.r)
        # one record changes at most 2kr cells (k answers, each moving r votes between two
        # classes): the float-safe Laplace's grid adds one step per changed cell
        return Laplace(epsilon=self.epsilon, sensitivity=float(2 * self.k * self.r),
                       coordinates=2 * self.k * self.r)

    @property
    def sensitivity(self) -> Sensitivity:
        """L1 sensitivity 2kr of the count matrix (replace-one neighbours)."""
        return Sensitivity(value=2 * self.k * self.r, norm=Norm.L1)

    @property
    def scale_fraction(self) -> Fraction:
        """Discrete Laplace scale t >= 2kr/epsilon as an exact rational (rounded up).

        Raises:
            ValueError: For ``discrete=False`` (the continuous scale is a float).
        """
        if not self.discrete:
            raise ValueError("scale_fraction is defined only for discrete=True")
        return self.noise.scale_fraction

    @property
    def scale(self) -> float:
        """The noise scale actually used (rounded up for the discrete sampler)."""
        return self.noise.scale

    @property
    def event(self) -> _dp.DpEvent:
        return self.noise.event

    @property
    def max_count(self) -> int:
        """Largest count accepted: 2^62 (discrete) or 2^61 grid steps (continuous).

        Discrete: count + noise must fit in int64; continuous: the float-safe Laplace's grid
        index must (2^61 steps of its granularity, 2^52 for the grid 2^-9 of 2kr changed cells).
        """
        if self.discrete:
            return 1 << 62
        from dpkd_audit.mechanisms.continuous import MAX_GRID_INDEX

        grid = self.noise.grid(2 * self.k * self.r)  # type: ignore[union-attr]
        return min(1 << 53, int(MAX_GRID_INDEX * grid.granularity))

    def _check_value(self, value: Any) -> np.ndarray:
        # Everything the noise mechanism would check is checked here, before any charge.
        arr = _validate.as_integer_array(
            value, "value", minimum=0, maximum=self.max_count, allow_integral_float=True,
            what="a count matrix of non-negative integers")
        _check_shape(arr, (self.num_queries, self.num_classes), "value")
        return arr

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.noise._sample(value if self.discrete else value.astype(np.float64), n, rng)

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """Counts of a one-record dataset before/after replacing the record (2kr L1 apart).

        The record moves from the first k queries x first r labels to the last k queries x
        last r labels; the supports are disjoint whenever ``2k <= s`` or ``2r <= |Y|`` (always
        for r = 1), so the pair attains the sensitivity.
        """
        a, b = _disjoint_answers(self.k, self.num_queries, self.num_classes, self.r)
        return a.astype(np.int64), b.astype(np.int64)


# --------------------------------------------------------------------------- local: bit RR

@dataclasses.dataclass(frozen=True, kw_only=True)
class BitRandomizedResponse(Mechanism):
    """Per-bit randomized response on one client's reverse k-NN answer (epsilon-LDP).

    Reverse k-NN paper, "Local Private Mechanisms" and Theorem 1 (Duchi, Jordan, Wainwright,
    FOCS 2013): every bit of the ``(s, |Y|)`` 0/1 answer is flipped independently with
    probability ``q = 1 / (e^(eps_b) + 1)``, ``eps_b = epsilon / (2kr)``. Each bit alone is
    eps_b-LDP (ratio ``(1 - q) / q = e^(eps_b)``); two answers with at most kr ones each differ
    in at most 2kr bits, so one report is ``2kr * eps_b = epsilon``-LDP (composition over the
    differing bits; the other bits have identical distributions).

    **Input choice:** an answer must be 0/1 with *at most* k*r ones (not exactly k*r): the
    privacy argument only needs ``|A xor A'| <= 2kr``, which holds for any two such answers,
    and the estimator is unbiased for every 0/1 input. One record per client (``m_i = 1``);
    a client holding several records has more than k*r ones and is refused.

    Server-side unbiased estimator (proof of Theorem 1): with ``p = e^(eps_b)/(e^(eps_b) + 1)``,
    ``E[(b' - q)/(p - q)] = b``, summed over clients (:meth:`estimate_counts`).

    Floating point (verified): eps_b is epsilon/(2kr) rounded *down* (so 2kr eps_b <= epsilon
    exactly), and a bit flips when ``Generator.random() < q_f``, q_f = q nudged up by 2^-50
    relative, i.e. with probability P = ceil(q_f 2^53) / 2^53 >= q exactly
    (:func:`~dpkd_audit.mechanisms.samplers.coin_probability`). More flipping lowers the ratio
    (1 - P)/P, so each bit is at most eps_b-LDP -- unless the rounding pushes P above 1/2 (tiny
    eps_b, below about 2^-50), which would reverse the ratio: the constructor computes the
    sampler's exact per-bit epsilon |ln((1 - P)/P)| and refuses parameters where it exceeds
    eps_b. eps_b is also at most 700 (so q = 1/(e^eps_b + 1) is a normal double > 0).

    Attributes:
        epsilon: Claimed local epsilon of one client's report, with eps_b = epsilon/(2kr)
            in [about 2^-50, 700].
        k: Queries each record votes into, ``1 <= k <= num_queries``.
        num_queries: Number of queries s (>= 1).
        num_classes: Number of classes |Y| (>= 2); s |Y| <= 10^8.
        r: Labels per record, ``1 <= r <= num_classes``.
    """

    reference = ("Wang et al. 2022 (reverse k-NN), Thm 1; "
                 "Duchi-Jordan-Wainwright FOCS 2013")

    epsilon: float
    k: int
    num_queries: int
    num_classes: int
    r: int = 1

    def __post_init__(self) -> None:
        eps = _validate.check_epsilon_range(self.epsilon)
        object.__setattr__(self, "epsilon", eps)
        k, s, y, r = _check_rknn_shape(self.k, self.num_queries, self.num_classes, self.r)
        for name, val in (("k", k), ("num_queries", s), ("num_classes", y), ("r", r)):
            object.__setattr__(self, name, val)
        eps_b = self.epsilon_per_bit
        allowed = (f"a real number with epsilon/(2kr) = epsilon/{2 * k * r} in "
                   f"[~{2.0**-49:.3g}, {_MAX_BIT_EPSILON:g}]")
        if not 0.0 < eps_b <= _MAX_BIT_EPSILON:
            raise ValueError(f"epsilon must be {allowed}; got {eps!r}")
        if self.sampler_epsilon_per_bit > eps_b:
            raise ValueError(
                f"epsilon must be {allowed} (below, the 2^-53 resolution of the sampler's coin "
                f"cannot realise the per-bit epsilon {eps_b:.3g}); got {eps!r}")

    @property
    def _flip_threshold(self) -> float:
        """Q = 1/(e^eps_b + 1) = expit(-eps_b), nudged up by 2^-50 relative."""
        eps_b = self.epsilon_per_bit
        return math.exp(-eps_b) / (1.0 + math.exp(-eps_b)) * (1.0 + 2.0**-50)

    @property
    def sampler_epsilon_per_bit(self) -> float:
        """Exact per-bit epsilon |ln((1 - P)/P)| of the sampler (rounded up).

        P is the exact probability of the flip coin ``rng.random() < q_f``.
        """
        flip = samplers.coin_probability(min(1.0, self._flip_threshold))
        if flip == 0 or flip == 1:
            return math.inf
        return max(samplers.log_ratio_upper(1 - flip, flip),
                   samplers.log_ratio_upper(flip, 1 - flip))

    @property
    def max_ones(self) -> int:
        """At most k*r ones in one answer."""
        return self.k * self.r

    @property
    def num_bits(self) -> int:
        """Bits per report, s * |Y|."""
        return self.num_queries * self.num_classes

    @property
    def bits_changed(self) -> int:
        """Bits one record can change: min(2kr, s|Y|)."""
        return min(2 * self.k * self.r, self.num_bits)

    @property
    def epsilon_per_bit(self) -> float:
        """eps_b = epsilon / (2kr) (paper, Local Private Mechanisms), rounded down.

        Rounded so that 2kr eps_b <= epsilon holds exactly (the composition over the 2kr
        changed bits never exceeds the claim).
        """
        bits = 2 * self.k * self.r
        eps_b = self.epsilon / bits
        if eps_b > 0 and Fraction(eps_b) * bits > Fraction(self.epsilon):
            eps_b = math.nextafter(eps_b, 0.0)
        return eps_b

    @property
    def flip_probability(self) -> float:
        """Flip probability q = 1 / (e^(eps_b) + 1) (paper, Theorem 1), without overflow."""
        return math.exp(-self.epsilon_per_bit) / (1.0 + math.exp(-self.epsilon_per_bit))

    @property
    def keep_probability(self) -> float:
        """Keep probability p = e^(eps_b) / (e^(eps_b) + 1) = 1 - q."""
        return 1.0 / (1.0 + math.exp(-self.epsilon_per_bit))

    @property
    def estimator_variance_per_client(self) -> float:
        """Variance of one client's per-cell estimate, p q / (p - q)^2 (either true bit)."""
        p, q = self.keep_probability, self.flip_probability
        return p * q / (p - q) ** 2

    @property
    def sensitivity(self) -> Sensitivity:
        """One record changes at most 2kr bits of the answer."""
        return Sensitivity(value=self.bits_changed, norm=Norm.RECORDS)

    @property
    def event(self) -> _dp.DpEvent:
        return BitRandomizedResponseDpEvent(epsilon_per_bit=self.epsilon_per_bit,
                                            num_bits=self.num_bits,
                                            bits_changed=self.bits_changed)

    def _check_value(self, value: Any) -> np.ndarray:
        return _check_answers(value, self.num_queries, self.num_classes, self.max_ones,
                              "value", batched=False)

    def _flip(self, answers: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        flips = rng.random(answers.shape) < self._flip_threshold
        return answers ^ flips.astype(np.uint8)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return self._flip(np.broadcast_to(value, (n, *value.shape)), rng)

    def randomize_clients(self, answers: Any, rng: np.random.Generator) -> np.ndarray:
        """Randomize every client's answer independently (vectorised; not charged).

        Args:
            answers: ``(n_clients, s, |Y|)`` 0/1 array, at most k*r ones per client.
            rng: Injected Generator.

        Returns:
            uint8 array of the same shape: the clients' reports.

        Not charged to any ledger: each record is in one client, so the whole population's
        reports are epsilon-DP by parallel composition; charge :attr:`event` once per release.
        """
        rng = _validate.check_generator(rng)
        arr = _check_answers(answers, self.num_queries, self.num_classes, self.max_ones,
                             "answers", batched=True)
        return self._flip(arr, rng)

    def estimate_counts(self, reports: Any) -> np.ndarray:
        """Unbiased estimate of the summed count matrix from the reports (Theorem 1 proof).

        ``sum_i (b'_i - q) / (p - q)`` per cell; each client's term has expectation equal to its
        true bit and variance :attr:`estimator_variance_per_client`.

        Args:
            reports: ``(n, s, |Y|)`` 0/1 reports, or one ``(s, |Y|)`` report.

        Returns:
            float64 ``(s, |Y|)`` array of estimated counts.
        """
        arr = _as_int_array(reports, "reports", keep_dtype=True)
        if arr.ndim == 2:
            arr = arr[None]
        if arr.ndim != 3 or arr.shape[1:] != (self.num_queries, self.num_classes):
            raise ValueError(f"reports must have shape (n, {self.num_queries}, "
                             f"{self.num_classes}); got {np.shape(reports)}")
        if not np.all((arr == 0) | (arr == 1)):
            raise ValueError("reports must contain only 0 and 1")
        p, q = self.keep_probability, self.flip_probability
        ones = arr.sum(axis=0, dtype=np.int64)
        return (ones - arr.shape[0] * q) / (p - q)

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """Two answers of k*r ones with disjoint supports (2kr bits apart) when possible."""
        return _disjoint_answers(self.k, self.num_queries, self.num_classes, self.r)
