"""Deterministic private / public / student-test splits (numpy only).

Reverse k-NN labelling (papers/rknn-fine-grained-private-kd.txt; scheme recorded in
NOTES.md, "Reverse k-NN labelling"): the test set is permuted with a fixed seed; the first half
is the *public* set (unlabelled for the method), the second half the *student test* set; the
whole training set is the *private* set. For MNIST: public 5,000, student test 5,000, private
60,000. The same scheme is used for every dataset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dpkd_audit._validate import check_int
from dpkd_audit.data.datasets import Dataset

__all__ = ["Splits", "rknn_splits"]


def _index_array(name: str, value: np.ndarray, upper: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be a 1-d integer array; got dtype {arr.dtype} and "
                         f"shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= upper):
        raise ValueError(f"{name} must hold indices in [0, {upper}); got values in "
                         f"[{arr.min()}, {arr.max()}]")
    if np.unique(arr).size != arr.size:
        raise ValueError(f"{name} must not repeat an index")
    arr = arr.astype(np.int64, copy=True)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, kw_only=True, eq=False)
class Splits:
    """Index-based private / public / student-test split of a :class:`Dataset`.

    Attributes:
        dataset: The dataset the indices refer to.
        seed: Seed of the permutation of the test set.
        private_indices: Indices into ``dataset.train_*`` (the private set).
        public_indices: Indices into ``dataset.test_*`` (public, unlabelled for the method).
        student_test_indices: Indices into ``dataset.test_*`` (student evaluation); disjoint
            from ``public_indices``.
    """

    dataset: Dataset = field(repr=False)
    seed: int
    private_indices: np.ndarray = field(repr=False)
    public_indices: np.ndarray = field(repr=False)
    student_test_indices: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, Dataset):
            raise ValueError(f"dataset must be a Dataset; got {type(self.dataset).__name__}")
        check_int("seed", self.seed, minimum=0)
        n_train, n_test = self.dataset.n_train, self.dataset.n_test
        object.__setattr__(self, "private_indices",
                           _index_array("private_indices", self.private_indices, n_train))
        for name in ("public_indices", "student_test_indices"):
            object.__setattr__(self, name, _index_array(name, getattr(self, name), n_test))
        if np.intersect1d(self.public_indices, self.student_test_indices).size:
            raise ValueError("public_indices and student_test_indices must be disjoint")

    @property
    def private_images(self) -> np.ndarray:
        """Private images ``(n_private, h, w)``."""
        return self.dataset.train_images[self.private_indices]

    @property
    def private_labels(self) -> np.ndarray:
        """Private labels ``(n_private,)``."""
        return self.dataset.train_labels[self.private_indices]

    @property
    def public_images(self) -> np.ndarray:
        """Public images ``(n_public, h, w)``."""
        return self.dataset.test_images[self.public_indices]

    @property
    def public_labels(self) -> np.ndarray:
        """True labels of the public set: for *measuring* label accuracy only, never training."""
        return self.dataset.test_labels[self.public_indices]

    @property
    def student_test_images(self) -> np.ndarray:
        """Student-test images ``(n_student_test, h, w)``."""
        return self.dataset.test_images[self.student_test_indices]

    @property
    def student_test_labels(self) -> np.ndarray:
        """Student-test labels ``(n_student_test,)``."""
        return self.dataset.test_labels[self.student_test_indices]

    def __repr__(self) -> str:
        return (f"Splits(dataset={self.dataset.name.value!r}, seed={self.seed}, "
                f"private={self.private_indices.size}, public={self.public_indices.size}, "
                f"student_test={self.student_test_indices.size})")


def rknn_splits(dataset: Dataset, *, seed: int, public_size: int | None = None) -> Splits:
    """Split a dataset as in reverse k-NN labelling (NOTES.md, "Reverse k-NN labelling").

    The test set is permuted with ``numpy.random.default_rng(seed).permutation``; the first
    ``public_size`` (default ``n_test // 2``) permuted indices are public, the rest student
    test; the private set is the whole training set (indices ``0..n_train-1``).

    Args:
        dataset: The dataset to split.
        seed: Non-negative integer seed; the split is a deterministic function of it.
        public_size: Size of the public set, in ``[1, n_test - 1]``; default ``n_test // 2``.

    Raises:
        ValueError: Naming ``seed`` or ``public_size`` if out of range.
    """
    if not isinstance(dataset, Dataset):
        raise ValueError(f"dataset must be a Dataset; got {type(dataset).__name__}")
    seed = check_int("seed", seed, minimum=0)
    n_test = dataset.n_test
    if n_test < 2:
        raise ValueError(f"dataset must have at least 2 test images; got {n_test}")
    if public_size is None:
        public_size = n_test // 2
    public_size = check_int("public_size", public_size, minimum=1, maximum=n_test - 1)
    perm = np.random.default_rng(seed).permutation(n_test)
    return Splits(dataset=dataset, seed=seed, private_indices=np.arange(dataset.n_train),
                  public_indices=perm[:public_size], student_test_indices=perm[public_size:])
