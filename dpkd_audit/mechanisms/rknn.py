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
  estimator.

Helpers build answers from neighbour indices and labels (:func:`reverse_knn_answers`,
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
from dpkd_audit.events import BitRandomizedResponseDpEvent, CollisionDpEvent
from dpkd_audit.mechanisms import samplers
from dpkd_audit.mechanisms.base import AuditView, Mechanism, Norm, Sensitivity
from dpkd_audit.mechanisms.continuous import Laplace
from dpkd_audit.mechanisms.discrete import DiscreteLaplace

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

#: One Collision report: the client's public hash seed and its output z in [0, l).
COLLISION_REPORT_DTYPE = np.dtype([("seed", np.uint64), ("z", np.int64)])

#: Largest Bloom filter length accepted (hash values are reduced mod l in uint64 arithmetic).
MAX_BLOOM_LENGTH = 1 << 62

#: Largest per-bit epsilon of BitRandomizedResponse (q = 1/(e^eps_b + 1) stays a normal double).
_MAX_BIT_EPSILON = 700.0
#: Largest epsilon of Collision (e^eps stays a finite double).
MAX_COLLISION_EPSILON = 700.0
#: Largest cardinality for which Collision checks its sampler exactly (one rational per h).
_EXACT_COLLISION_CHECK = 4096

# Default number of (client x domain element) hash evaluations per chunk of the estimators.
_CHUNK_CELLS = 1 << 21


# --------------------------------------------------------------------------- validation helpers

def _as_int_array(value: Any, name: str, *, keep_dtype: bool = False) -> np.ndarray:
    """An int64 array from integers (or integral floats, or booleans); ValueError otherwise.

    With ``keep_dtype``, integer and boolean arrays are returned as they are (no copy).
    """
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:  # pragma: no cover - ragged input on old numpy
        raise ValueError(f"{name} must be an array of integers; got {type(value).__name__}") \
            from exc
    if keep_dtype and arr.dtype.kind in "biu":
        return arr
    if arr.dtype.kind == "b":
        return arr.astype(np.int64)
    if arr.dtype.kind in "iu":
        if arr.dtype == np.uint64 and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
            raise ValueError(f"{name} has entries too large for int64")
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} must contain finite integers (no NaN or inf)")
        if not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must contain integers; got non-integral values")
        if arr.size and np.max(np.abs(arr.astype(np.float64))) >= 2.0 ** 62:
            raise ValueError(f"{name} has entries too large for int64")
        return arr.astype(np.int64)
    raise ValueError(f"{name} must be an array of integers; got dtype {arr.dtype}")


def _check_shape(arr: np.ndarray, shape: tuple[int, ...], name: str) -> None:
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}; got {arr.shape}")


def _check_answers(value: Any, num_queries: int, num_classes: int, max_ones: int,
                   name: str, *, batched: bool) -> np.ndarray:
    """Validate 0/1 answer matrices with at most ``max_ones`` ones each; return uint8."""
    arr = _as_int_array(value, name, keep_dtype=True)
    if batched:
        if arr.ndim != 3 or arr.shape[1:] != (num_queries, num_classes):
            raise ValueError(f"{name} must have shape (n_clients, {num_queries}, {num_classes}); "
                             f"got {arr.shape}")
        if arr.shape[0] < 1:
            raise ValueError(f"{name} must hold at least one client; got shape {arr.shape}")
    else:
        _check_shape(arr, (num_queries, num_classes), name)
    if not np.all((arr == 0) | (arr == 1)):
        raise ValueError(f"{name} must contain only 0 and 1")
    ones = arr.reshape(arr.shape[0] if batched else 1, -1).sum(axis=1, dtype=np.int64)
    bad = np.flatnonzero(ones > max_ones)
    if bad.size:
        where = f" (client {int(bad[0])})" if batched else ""
        raise ValueError(f"{name} must have at most k*r={max_ones} ones per answer{where}; "
                         f"got {int(ones[bad[0]])}")
    return arr.astype(np.uint8, copy=False)


def _check_rknn_shape(k: Any, num_queries: Any, num_classes: Any, r: Any) -> tuple[int, ...]:
    """Validate (k, s, |Y|, r); one answer (s x |Y| cells) may hold at most 10^8 cells."""
    num_queries = _validate.check_size("num_queries", num_queries)
    num_classes = _validate.check_size("num_classes", num_classes, minimum=2)
    if num_queries * num_classes > _validate.MAX_SAMPLE_VALUES:
        raise ValueError(f"num_queries * num_classes (cells of one answer) must be <= "
                         f"{_validate.MAX_SAMPLE_VALUES:.0e}; got num_queries={num_queries}, "
                         f"num_classes={num_classes}")
    k = _validate.check_int("k", k, minimum=1, maximum=num_queries)
    r = _validate.check_int("r", r, minimum=1, maximum=num_classes)
    return k, num_queries, num_classes, r


def _disjoint_answers(k: int, num_queries: int, num_classes: int,
                      r: int) -> tuple[np.ndarray, np.ndarray]:
    """Two answers of k*r ones with the smallest possible overlap.

    The first k queries x first r labels vs the last k queries x last r labels: disjoint
    whenever ``2k <= s`` or ``2r <= |Y|``.
    """
    a = np.zeros((num_queries, num_classes), dtype=np.uint8)
    b = np.zeros_like(a)
    a[:k, :r] = 1
    b[num_queries - k:, num_classes - r:] = 1
    return a, b


# --------------------------------------------------------------------------- answer helpers

def reverse_knn_answers(neighbours: Any, labels: Any, *, num_queries: int,
                        num_classes: int) -> np.ndarray:
    """One-record answers ``A^i`` (paper Algorithm 1, lines 5-8) from neighbours and labels.

    Args:
        neighbours: ``(n, k)`` integer array: the k nearest queries of each record (distinct,
            in ``[0, num_queries)``).
        labels: ``(n,)`` integer labels in ``[0, num_classes)`` (``r = 1``), or ``(n, r)``
            distinct labels per record (multi-label).
        num_queries: Number of queries s.
        num_classes: Number of classes |Y|.

    Returns:
        A ``(n, num_queries, num_classes)`` uint8 array with ``a[i, q, y] = 1`` iff query ``q``
        is among record i's neighbours and ``y`` among its labels (exactly k*r ones each).
    """
    idx = _flat_indices(neighbours, labels, num_queries, num_classes)
    out = np.zeros((idx.shape[0], num_queries * num_classes), dtype=np.uint8)
    np.put_along_axis(out, idx, 1, axis=1)
    return out.reshape(idx.shape[0], num_queries, num_classes)


def reverse_knn_counts(neighbours: Any, labels: Any, *, num_queries: int,
                       num_classes: int) -> np.ndarray:
    """The summed count matrix ``A = sum_i A^i`` (paper, "Label Aggregation"), int64 (s, |Y|).

    Same arguments as :func:`reverse_knn_answers`; computed with a bincount (no (n, s, |Y|)
    intermediate).
    """
    idx = _flat_indices(neighbours, labels, num_queries, num_classes)
    counts = np.bincount(idx.ravel(), minlength=num_queries * num_classes)
    return counts.astype(np.int64).reshape(num_queries, num_classes)


def _flat_indices(neighbours: Any, labels: Any, num_queries: int,
                  num_classes: int) -> np.ndarray:
    num_queries = _validate.check_int("num_queries", num_queries, minimum=1)
    num_classes = _validate.check_int("num_classes", num_classes, minimum=2)
    nb = _as_int_array(neighbours, "neighbours")
    if nb.ndim != 2 or nb.shape[1] < 1:
        raise ValueError(f"neighbours must have shape (n, k) with k >= 1; got {nb.shape}")
    lab = _as_int_array(labels, "labels")
    if lab.ndim == 1:
        lab = lab[:, None]
    if lab.ndim != 2 or lab.shape[0] != nb.shape[0] or lab.shape[1] < 1:
        raise ValueError(f"labels must have shape ({nb.shape[0]},) or ({nb.shape[0]}, r); "
                         f"got {np.shape(labels)}")
    _check_index_range(nb, num_queries, "neighbours")
    _check_index_range(lab, num_classes, "labels")
    _check_distinct_rows(nb, "neighbours")
    _check_distinct_rows(lab, "labels")
    idx = (nb[:, :, None] * num_classes + lab[:, None, :]).reshape(nb.shape[0], -1)
    return np.sort(idx, axis=1)


def _check_index_range(arr: np.ndarray, upper: int, name: str) -> None:
    if arr.size and (arr.min() < 0 or arr.max() >= upper):
        bad = arr[(arr < 0) | (arr >= upper)][0]
        raise ValueError(f"{name} must be integers in [0, {upper}); got {int(bad)}")


def _check_distinct_rows(arr: np.ndarray, name: str) -> None:
    if arr.shape[-1] < 2:
        return
    srt = np.sort(arr, axis=-1)
    dup = np.any(srt[..., 1:] == srt[..., :-1], axis=-1)
    if np.any(dup):
        row = int(np.flatnonzero(np.atleast_1d(dup))[0])
        raise ValueError(f"{name} must hold distinct entries in each row; row {row} repeats one")


def answer_to_index_set(answer: Any) -> np.ndarray:
    """The flat index set of a 0/1 answer: ``{q * |Y| + y : A[q, y] = 1}``, sorted (int64).

    The flattening of the reverse k-NN paper, Appendix A (domain d = s |Y|, cardinality kr).
    A single ``(s, |Y|)`` answer gives a 1-d array; a batch ``(n, s, |Y|)`` whose answers all
    have the same number m of ones gives an ``(n, m)`` array.
    """
    arr = _as_int_array(answer, "answer")
    if arr.ndim not in (2, 3):
        raise ValueError(f"answer must have shape (s, |Y|) or (n, s, |Y|); got {arr.shape}")
    if not np.all((arr == 0) | (arr == 1)):
        raise ValueError("answer must contain only 0 and 1")
    if arr.ndim == 2:
        return np.flatnonzero(arr).astype(np.int64)
    flat = arr.reshape(arr.shape[0], -1)
    ones = flat.sum(axis=1)
    if np.any(ones != ones[0]):
        raise ValueError("answer batch must have the same number of ones in every answer; got "
                         f"between {int(ones.min())} and {int(ones.max())}")
    return np.nonzero(flat)[1].astype(np.int64).reshape(arr.shape[0], int(ones[0]))


def index_set_to_answer(index_set: Any, num_queries: int, num_classes: int) -> np.ndarray:
    """Inverse of :func:`answer_to_index_set`: a uint8 ``(s, |Y|)`` (or ``(n, s, |Y|)``) answer."""
    num_queries = _validate.check_int("num_queries", num_queries, minimum=1)
    num_classes = _validate.check_int("num_classes", num_classes, minimum=1)
    idx = _as_int_array(index_set, "index_set")
    if idx.ndim not in (1, 2):
        raise ValueError(f"index_set must have shape (m,) or (n, m); got {idx.shape}")
    d = num_queries * num_classes
    _check_index_range(idx, d, "index_set")
    _check_distinct_rows(idx, "index_set")
    batch = idx.reshape(-1, idx.shape[-1])
    out = np.zeros((batch.shape[0], d), dtype=np.uint8)
    np.put_along_axis(out, batch, 1, axis=1)
    out = out.reshape(batch.shape[0], num_queries, num_classes)
    return out[0] if idx.ndim == 1 else out


def noisy_argmax(noisy_counts: Any, *, rng: np.random.Generator | None = None) -> np.ndarray:
    """Per-query label ``argmax_y A[q, y]`` of noisy counts (paper, "Label Aggregation").

    Post-processing of a DP release, so it costs no privacy. Ties (frequent with integer noise)
    are broken by the *lowest* class index when ``rng`` is None (``numpy.argmax`` semantics),
    or uniformly at random among the tied classes when a Generator is given.

    Args:
        noisy_counts: Real array of shape ``(..., |Y|)`` (e.g. ``(s, |Y|)``).
        rng: Optional Generator for random tie-breaking.

    Returns:
        int64 array of shape ``noisy_counts.shape[:-1]``.
    """
    try:
        arr = np.asarray(noisy_counts, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError("noisy_counts must be an array of real numbers") from exc
    if arr.ndim < 1 or arr.shape[-1] < 1:
        raise ValueError(f"noisy_counts must have shape (..., |Y|) with |Y| >= 1; got {arr.shape}")
    if np.any(np.isnan(arr)):
        raise ValueError("noisy_counts must not contain NaN")
    if rng is None:
        return np.argmax(arr, axis=-1).astype(np.int64)
    rng = _validate.check_generator(rng)
    ties = arr == arr.max(axis=-1, keepdims=True)
    keys = np.where(ties, 1.0 + rng.random(arr.shape), 0.0)
    return np.argmax(keys, axis=-1).astype(np.int64)


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
    - ``discrete=False``: the textbook floating-point Laplace
      (:class:`~dpkd_audit.mechanisms.continuous.Laplace`, ``Generator.laplace``, subject to
      the Mironov 2012 artefacts); event ``LaplaceDpEvent(1 / epsilon)``.

    The noise mechanism is available as :attr:`noise`; this class adds the shape and count
    validation, the sensitivity derived from (k, r) and the worst-case neighbours.

    Inputs: an ``(s, |Y|)`` matrix of non-negative integer counts (integer dtype, or floats
    holding integers), at most 2^62 (discrete) or 2^53 (continuous); booleans are refused.

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
        return Laplace(epsilon=self.epsilon, sensitivity=float(2 * self.k * self.r))

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
        """Largest count accepted: 2^62 (discrete) or 2^53 (continuous).

        Discrete: count + noise must fit in int64; continuous: the count must be exact in
        float64.
        """
        return (1 << 62) if self.discrete else (1 << 53)

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


# --------------------------------------------------------------------------- local: Collision

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 (Steele, Lea, Flood, OOPSLA 2014): x + golden gamma, then the finaliser.

    Wrapping modulo 2^64 is intended (silenced for 0-d inputs, where numpy would warn).
    """
    with np.errstate(over="ignore"):
        x = x + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
        return x ^ (x >> np.uint64(31))


def collision_hash(seeds: Any, values: Any, bloom_length: int) -> np.ndarray:
    """The public hash ``H_seed(v) = splitmix64(seed xor v) mod l`` (broadcast), int64.

    numpy uint64 arithmetic wraps modulo 2^64, so this is the exact 64-bit SplitMix64 output.
    The modulo bias is at most l / 2^64.
    """
    l_ = _validate.check_int("bloom_length", bloom_length, minimum=1, maximum=MAX_BLOOM_LENGTH)
    s = np.asarray(seeds, dtype=np.uint64)
    v = np.asarray(values, dtype=np.int64).astype(np.uint64)
    return (_splitmix64(s ^ v) % np.uint64(l_)).astype(np.int64)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Collision(Mechanism):
    """The (d, c, epsilon, l)-Collision mechanism: epsilon-LDP for sets of c items out of d.

    Wang, Li, Qian, Du, Lin, Yang, "Hiding Numerical Vectors in Local Private and Shuffled
    Messages", IJCAI 2021; reverse k-NN paper, Appendix A, Definition 5 and Theorem 2.

    Per client: draw a fresh public seed (uint64, independent of the data) defining the hash
    ``H(v) = splitmix64(seed xor v) mod l``; with ``h = |H(V)|`` distinct hash values of the
    input set V (``h <= c``) and ``Omega = c e^eps + l - c``, output z in ``[0, l)`` with::

        P[z | V] = e^eps / Omega                               if z in H(V),
                   (Omega - e^eps h) / ((l - h) Omega)         otherwise.

    Report = (seed, z). **Privacy** (for every seed, so for every hash function, colliding or
    not): the "otherwise" probability equals ``((c - h) e^eps + (l - c)) / ((l - h) Omega)``,
    a weighted average of e^eps and 1 (weights c - h and l - c, sum l - h) divided by Omega,
    hence in ``[1/Omega, e^eps/Omega]`` -- as is the "in" probability. So every output
    probability lies in ``[1/Omega, e^eps/Omega]`` for *every* V, and for any two inputs
    ``P[z | V] / P[z | V'] <= e^eps``; the seed's distribution does not depend on V. This needs
    ``l > h``, guaranteed by ``l >= c + 1``. The pmfs sum to one:
    ``h e^eps/Omega + (Omega - h e^eps)/Omega = 1``.

    **Estimator** (paper, after Definition 5): ``(1[H(v) = z] - 1/l) / (e^eps/Omega - 1/l)``
    is unbiased for ``1[v in V]``: for v in V, ``H(v) in H(V)`` so ``P[H(v) = z] = e^eps/Omega``;
    for v not in V, ``H(v)`` is uniform and independent of ``(H(V), z)`` when the hash behaves
    as a random function, so ``P[H(v) = z] = 1/l``. Only unbiasedness relies on the hash;
    privacy holds for any hash.

    Default ``l = round(2c - 1 + c e^eps)`` (paper Theorem 2 with c = kr), at least c + 1.

    Floating point (verified): the "in H(V)" branch is taken when ``Generator.random() <
    h e^eps_d/Omega_d``, a probability computed to a few ulps and then rounded up to the 2^-53
    grid (:func:`~dpkd_audit.mechanisms.samplers.coin_probability`); the choice within each
    branch is an exact uniform integer draw. For c <= 4096 the constructor computes the
    sampler's *exact* epsilon from these rational probabilities (:meth:`sampler_epsilon`, over
    every possible number h of distinct hash values). Above, every per-output probability is
    within a relative rho = 2^-50 Omega / min(e^eps, l - c) of the design value (the branch
    probabilities are at least e^eps/Omega and (l - c)/Omega), so the sampler is
    (eps_d + ln((1 + rho)/(1 - rho)))-LDP. The sampler runs at the *design* epsilon
    (:attr:`design_epsilon`): the claim itself when the exact check passes, else
    eps_d = eps - 3 rho - 4 ulp(eps), which keeps the real epsilon below the claim. Parameters
    for which neither works (an "outside" branch too rare for the 2^-53 grid, e.g. a huge eps
    with a short ``bloom_length``, or a ``bloom_length`` near 2^62 with a small eps, where the
    old sampler's real epsilon was several times the claim) are refused. The pmf and estimator
    formulas below use the claimed eps; they differ from the sampler's law by at most the
    relative rho (< 1e-9 with the default ``bloom_length`` and c <= 10^6).

    Attributes:
        epsilon: Claimed local epsilon of one report, in (0, 700] (and above 3 rho).
        domain_size: d, the domain ``[0, d)`` of the items (1 <= d <= 10^8).
        cardinality: c, the exact size of every input set, ``1 <= c <= d``.
        bloom_length: l, the hash range, ``c + 1 <= l <= 2^62`` (default as above).
    """

    reference = ("Wang et al. IJCAI 2021 (Collision); Wang et al. 2022 (reverse k-NN), "
                 "Def. 5, Thm 2")

    epsilon: float
    domain_size: int
    cardinality: int
    bloom_length: int | None = None

    def __post_init__(self) -> None:
        eps = _validate.check_epsilon_range(self.epsilon, maximum=MAX_COLLISION_EPSILON)
        object.__setattr__(self, "epsilon", eps)
        d = _validate.check_size("domain_size", self.domain_size)
        c = _validate.check_int("cardinality", self.cardinality, minimum=1, maximum=d)
        object.__setattr__(self, "domain_size", d)
        object.__setattr__(self, "cardinality", c)
        if self.bloom_length is None:
            default = 2 * c - 1 + c * math.exp(eps) if eps < 700 else math.inf
            if not default <= MAX_BLOOM_LENGTH:
                raise ValueError(f"epsilon={eps} is too large for the default bloom_length "
                                 f"(2c - 1 + c e^eps > 2^62); pass bloom_length explicitly")
            length = max(round(default), c + 1)
        else:
            length = _validate.check_int("bloom_length", self.bloom_length, minimum=c + 1,
                                         maximum=MAX_BLOOM_LENGTH)
        object.__setattr__(self, "bloom_length", int(length))
        if self.design_epsilon is None:
            rho = self._rounding(eps)
            raise ValueError(
                f"epsilon={eps!r} with cardinality={c} and bloom_length={length} cannot be "
                f"realised by the floating-point sampler (2^-53 coin resolution: relative "
                f"error up to {rho:.3g} on the output probabilities); use a bloom_length nearer "
                f"the default 2c - 1 + c e^eps, or a larger epsilon")

    def _rounding(self, eps: float) -> float:
        """rho(eps) = 2^-50 Omega / min(e^eps, l - c): relative error of every output probability.

        2^-50 >= 2 x (4 ulps of float error + the 2^-53 coin grid); the branch probabilities are
        at least e^eps/Omega (inside) and (l - c)/Omega (outside).
        """
        e = math.exp(eps)
        c, length = self.cardinality, self.bloom_length
        omega = c * e + length - c
        return 2.0**-50 * omega / min(e, length - c)

    def _inside_threshold(self, h: Any, design: float) -> Any:
        """The sampler's threshold for the "z in H(V)" branch: h e^eps_d / Omega_d (floats).

        The one expression used by both the sampler and the exact check, so that they agree
        bit for bit.
        """
        e_d = math.exp(design)
        return h * (e_d / (self.cardinality * e_d + self.bloom_length - self.cardinality))

    def sampler_epsilon(self, design: float) -> float:
        """Exact epsilon (rounded up) of the sampler run at ``design``, for c <= 4096.

        For every possible number h of distinct hash values, the branch probability is exactly
        P_in(h) = :func:`~dpkd_audit.mechanisms.samplers.coin_probability` of the threshold, so
        the output probabilities are exactly P_in(h)/h (inside) and (1 - P_in(h))/(l - h)
        (outside); the result is ln(largest / smallest) over all h (any two inputs).

        Raises:
            ValueError: For c > 4096 (use the bound of the class docstring).
        """
        c, length = self.cardinality, self.bloom_length
        if c > _EXACT_COLLISION_CHECK:
            raise ValueError(f"cardinality must be <= {_EXACT_COLLISION_CHECK} for the exact "
                             f"sampler check; got {c}")
        largest = smallest = None
        for h in range(1, c + 1):
            t = float(self._inside_threshold(h, design))
            if not 0.0 < t < 1.0:
                return math.inf
            inside = samplers.coin_probability(t)
            probs = (inside / h, (1 - inside) / (length - h))
            if min(probs) == 0:
                return math.inf
            largest = max(probs) if largest is None else max(largest, *probs)
            smallest = min(probs) if smallest is None else min(smallest, *probs)
        return samplers.log_ratio_upper(largest, smallest)

    @functools.cached_property
    def design_epsilon(self) -> float | None:
        """The epsilon the sampler runs at (see the class docstring); None if none works.

        The claimed epsilon itself when the exact check (c <= 4096) shows the rounded sampler
        within the claim; otherwise eps - 3 rho - 4 ulp(eps) when that is > 0 and rho <= 1e-3
        (checked exactly again for c <= 4096, by the bound above it).
        """
        eps = self.epsilon
        exact = self.cardinality <= _EXACT_COLLISION_CHECK
        if exact and self.sampler_epsilon(eps) <= eps:
            return eps
        rho = self._rounding(eps)
        design = eps - 3.0 * rho - 4.0 * math.ulp(eps)
        if rho > 1e-3 or design <= 0.0:
            return None
        if exact:
            return design if self.sampler_epsilon(design) <= eps else None
        rho_d = self._rounding(design)
        return design if design + math.log1p(rho_d) - math.log1p(-rho_d) <= eps else None

    @classmethod
    def for_reverse_knn(cls, *, epsilon: float, k: int, num_queries: int, num_classes: int,
                        r: int = 1, bloom_length: int | None = None) -> Collision:
        """The ``(s |Y|, kr, epsilon, l)``-Collision mechanism of the paper's Appendix A."""
        k, s, y, r = _check_rknn_shape(k, num_queries, num_classes, r)
        return cls(epsilon=epsilon, domain_size=s * y, cardinality=k * r,
                   bloom_length=bloom_length)

    # ------------------------------------------------------------ probabilities
    @property
    def omega(self) -> float:
        """Normalisation Omega = c e^eps + l - c (Definition 5)."""
        return self.cardinality * math.exp(self.epsilon) + self.bloom_length - self.cardinality

    @property
    def hit_probability(self) -> float:
        """P[z = H(v)] for v in V: e^eps / Omega."""
        return math.exp(self.epsilon) / self.omega

    def estimator_variance_per_client(self, member: bool) -> float:
        """Variance of one client's estimate of 1[v in V] (random-hash model).

        ``P(1 - P) / (e^eps/Omega - 1/l)^2`` with ``P = e^eps/Omega`` (member) or ``1/l``.
        """
        pt, pf = self.hit_probability, 1.0 / self.bloom_length
        prob = pt if member else pf
        return prob * (1.0 - prob) / (pt - pf) ** 2

    @property
    def sensitivity(self) -> Sensitivity:
        """Entries of the d-dim 0/1 vector one record changes (2c; guarantee holds for all V)."""
        return Sensitivity(value=min(2 * self.cardinality, self.domain_size), norm=Norm.RECORDS)

    @property
    def event(self) -> _dp.DpEvent:
        return CollisionDpEvent(epsilon=self.epsilon, domain_size=self.domain_size,
                                cardinality=self.cardinality, bloom_length=self.bloom_length)

    # ------------------------------------------------------------ validation
    def _check_sets(self, value: Any, name: str, *, batched: bool) -> np.ndarray:
        arr = _validate.as_integer_array(
            value, name, minimum=0, maximum=self.domain_size - 1,
            what="item indices (integers, distinct within a set)",
            range_text=f"[0, {self.domain_size})")
        c = self.cardinality
        if batched:
            if arr.ndim != 2 or arr.shape[1] != c or arr.shape[0] < 1:
                raise ValueError(f"{name} must have shape (n_clients, {c}) with n_clients >= 1; "
                                 f"got {arr.shape}")
        else:
            _check_shape(arr, (c,), name)
        _check_index_range(arr, self.domain_size, name)
        _check_distinct_rows(arr, name)
        return arr

    def _check_value(self, value: Any) -> np.ndarray:
        return self._check_sets(value, "value", batched=False)

    def _values_per_output(self, value: Any) -> int:
        return 2 * self.cardinality  # hashes and ranks of the c items for every output

    # ------------------------------------------------------------ randomizer
    def output_pmf(self, index_set: Any, seed: int) -> np.ndarray:
        """Exact pmf of z over ``[0, l)`` for input set V and hash seed (Definition 5).

        Allocates an array of length l; meant for tests and exact audits with small l.
        """
        v = self._check_sets(index_set, "index_set", batched=False)
        seed_arr = _check_seeds(seed, shape=())
        if self.bloom_length > _validate.MAX_SAMPLE_VALUES:
            raise ValueError(f"output_pmf needs bloom_length <= {_validate.MAX_SAMPLE_VALUES:.0e} "
                             f"(it returns one probability per output); got {self.bloom_length}")
        hv = np.unique(collision_hash(seed_arr, v, self.bloom_length))
        h = hv.size
        e = math.exp(self.epsilon)
        pmf = np.full(self.bloom_length,
                      (self.omega - e * h) / ((self.bloom_length - h) * self.omega))
        pmf[hv] = e / self.omega
        return pmf

    def _randomize(self, sets: np.ndarray, seeds: np.ndarray,
                   rng: np.random.Generator) -> np.ndarray:
        """Reports for validated ``(n, c)`` sets and given seeds, vectorised over clients."""
        n, c = sets.shape
        length = self.bloom_length
        hv = np.sort(collision_hash(seeds[:, None], sets, length), axis=1)
        distinct = np.ones_like(hv, dtype=bool)
        distinct[:, 1:] = hv[:, 1:] != hv[:, :-1]
        h = distinct.sum(axis=1)
        # Distinct hash values first (ascending), duplicates pushed to the end as sentinel l.
        compact = np.sort(np.where(distinct, hv, length), axis=1)
        # Branch "z in H(V)": total probability h e^eps_d / Omega_d, uniform over the h values.
        inside = rng.random(n) < self._inside_threshold(h, self.design_epsilon)
        pick = rng.integers(0, h)
        z_in = np.take_along_axis(compact, pick[:, None], axis=1)[:, 0]
        # Branch "otherwise": uniform over the l - h values outside H(V). The u-th of them is
        # u + #{j < h : s_j - j <= u} for the sorted distinct members s_0 < s_1 < ...
        # (s_j - j, the number of non-members below s_j, is non-decreasing), vectorised.
        u = rng.integers(0, length - h)
        ranks = np.arange(c)
        below = ((compact - ranks) <= u[:, None]) & (ranks < h[:, None])
        z_out = u + below.sum(axis=1)
        out = np.empty(n, dtype=COLLISION_REPORT_DTYPE)
        out["seed"] = seeds
        out["z"] = np.where(inside, z_in, z_out)
        return out

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        sets = np.broadcast_to(value, (n, value.shape[0]))
        return self._randomize(sets, _draw_seeds(n, rng), rng)

    def randomize_clients(self, index_sets: Any, rng: np.random.Generator) -> np.ndarray:
        """Each client's report (fresh seed, z), vectorised over clients; not charged.

        Args:
            index_sets: ``(n_clients, c)`` integer array, distinct entries in ``[0, d)`` per row
                (see :func:`answer_to_index_set`).
            rng: Injected Generator.

        Returns:
            Structured array of shape ``(n_clients,)`` and dtype :data:`COLLISION_REPORT_DTYPE`.

        Not charged to any ledger: each record is in one client, so the whole population's
        reports are epsilon-DP by parallel composition; charge :attr:`event` once per release.
        """
        rng = _validate.check_generator(rng)
        sets = self._check_sets(index_sets, "index_sets", batched=True)
        return self._randomize(sets, _draw_seeds(sets.shape[0], rng), rng)

    # ------------------------------------------------------------ estimator
    def estimate_counts(self, reports: Any, *, chunk_size: int | None = None) -> np.ndarray:
        """Unbiased estimate of ``sum_i 1[v in V_i]`` for every v in ``[0, d)`` (float64, (d,)).

        ``sum_i (1[H_i(v) = z_i] - 1/l) / (e^eps/Omega - 1/l)`` (paper, after Definition 5),
        vectorised over clients in chunks of ``chunk_size`` clients (default: about 2^21
        hash evaluations per chunk). Reshape to ``(s, |Y|)`` for a reverse k-NN count matrix.

        Args:
            reports: Structured array of :data:`COLLISION_REPORT_DTYPE` (from
                :meth:`randomize_clients` / :meth:`sample`) or a sequence of ``(seed, z)``
                pairs (from :meth:`release`).
            chunk_size: Clients per chunk (>= 1), optional.
        """
        rep = _as_reports(reports, self.bloom_length)
        d = self.domain_size
        if chunk_size is None:
            chunk_size = max(1, _CHUNK_CELLS // d)
        chunk_size = _validate.check_int("chunk_size", chunk_size, minimum=1)
        values = np.arange(d, dtype=np.uint64)
        hits = np.zeros(d, dtype=np.int64)
        length = np.uint64(self.bloom_length)
        for start in range(0, rep.shape[0], chunk_size):
            part = rep[start:start + chunk_size]
            hashed = _splitmix64(part["seed"][:, None] ^ values) % length
            hits += np.count_nonzero(hashed == part["z"].astype(np.uint64)[:, None], axis=0)
        pf = 1.0 / self.bloom_length
        return (hits - rep.shape[0] * pf) / (self.hit_probability - pf)

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """Two index sets of size c, disjoint when ``2c <= d`` (first c vs last c items)."""
        c, d = self.cardinality, self.domain_size
        return np.arange(c, dtype=np.int64), np.arange(d - c, d, dtype=np.int64)

    def audit_view(self, x: Any, x_prime: Any) -> AuditView:
        """Whether each report's ``z`` lies in ``H_seed(x)`` and in ``H_seed(x')``.

        The report's meaning depends on its public seed: a black-box attack sees (seed, z)
        pairs that never repeat. The two membership bits are what the likelihood ratio of the
        pair depends on (Wang et al. IJCAI 2021: the report is ``z`` in ``H(V)`` with boosted
        probability).
        """
        sets = [self._check_value(x), self._check_value(x_prime)]
        length = self.bloom_length

        def apply(reports: Any) -> np.ndarray:
            seeds, z = reports["seed"], reports["z"]
            bits = [np.any(collision_hash(seeds[:, None], v[None, :], length) == z[:, None],
                           axis=1) for v in sets]
            return np.stack(bits, axis=1).astype(np.int64)

        return AuditView(description="z in H_seed(x), z in H_seed(x')", apply=apply)


def _draw_seeds(n: int, rng: np.random.Generator) -> np.ndarray:
    """Draw n uniform 64-bit public seeds."""
    return rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)


def _check_seeds(seed: Any, *, shape: tuple[int, ...]) -> np.ndarray:
    arr = np.asarray(seed)
    if arr.dtype.kind not in "iu" or arr.shape != shape:
        raise ValueError(f"seed must be an integer in [0, 2^64) of shape {shape}; got {seed!r}")
    if arr.dtype.kind == "i" and np.any(arr < 0):
        raise ValueError(f"seed must be an integer in [0, 2^64); got {seed!r}")
    return arr.astype(np.uint64)


def _as_reports(reports: Any, bloom_length: int) -> np.ndarray:
    if isinstance(reports, np.ndarray) and reports.dtype.names is not None:
        if set(reports.dtype.names) != {"seed", "z"}:
            raise ValueError(f"reports must have fields ('seed', 'z'); got {reports.dtype.names}")
        for field in ("seed", "z"):
            if reports.dtype[field].kind not in "iu":
                raise ValueError(f"reports field {field!r} must be integer; "
                                 f"got {reports.dtype[field]}")
        if reports.dtype["seed"].kind == "i" and np.any(reports["seed"] < 0):
            raise ValueError("reports seeds must be in [0, 2^64)")
        flat = reports.reshape(-1)
        rep = np.empty(flat.shape[0], dtype=COLLISION_REPORT_DTYPE)
        rep["seed"] = flat["seed"]  # assigned by name (astype would assign by position)
        rep["z"] = flat["z"]
    else:
        try:
            pairs = [(int(s), int(z)) for s, z in reports]
            rep = np.array(pairs, dtype=COLLISION_REPORT_DTYPE)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ValueError("reports must be a structured array of COLLISION_REPORT_DTYPE or a "
                             "sequence of (seed, z) pairs with seed in [0, 2^64)") from exc
    if rep.shape[0] < 1:
        raise ValueError("reports must hold at least one report")
    if np.any(rep["z"] < 0) or np.any(rep["z"] >= bloom_length):
        raise ValueError(f"reports z must be in [0, bloom_length={bloom_length})")
    return rep
