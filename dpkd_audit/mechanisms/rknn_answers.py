"""Reverse k-NN answers: building, checking and converting one record's 0/1 answer matrix.

Wang, Li, Wang, Li, Qian, Xin, Yang, "Fine-grained Private Knowledge Distillation" (the reverse
k-NN paper), Algorithm 1, lines 5-8, and Definition 4: every private record votes its label
(``r`` ones) into its ``k`` nearest queries, so its *answer* is a 0/1 matrix of shape
``(s, |Y|)`` with exactly ``k * r`` ones. Shared by the count release and bit randomized response
(:mod:`dpkd_audit.mechanisms.rknn`) and by Collision (:mod:`dpkd_audit.mechanisms.collision`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpkd_audit import _validate

__all__ = [
    "answer_to_index_set",
    "index_set_to_answer",
    "noisy_argmax",
    "reverse_knn_answers",
    "reverse_knn_counts",
]

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
