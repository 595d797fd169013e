"""Cluster purity: the best label accuracy any labelling of given clusters can reach."""

from __future__ import annotations

import numpy as np

from dpkd_audit import _validate

__all__ = ["cluster_purity"]


def cluster_purity(assignment: np.ndarray, labels: np.ndarray, num_classes: int) -> float:
    """Share of samples whose label is the most common label of their cluster.

    Args:
        assignment: Cluster of every sample ``(n,)`` (non-negative integers).
        labels: Label of every sample ``(n,)`` in ``[0, num_classes)``.
        num_classes: Number of classes (>= 1).

    Raises:
        ValueError: For arrays of different shapes, empty ones, or values out of range.
    """
    num_classes = _validate.check_int("num_classes", num_classes, minimum=1)
    assignment, labels = np.asarray(assignment), np.asarray(labels)
    if assignment.shape != labels.shape or assignment.ndim != 1 or assignment.size == 0:
        raise ValueError(f"assignment and labels must be equal non-empty (n,) arrays; got "
                         f"{assignment.shape} and {labels.shape}")
    if (assignment.dtype.kind not in "iu" or labels.dtype.kind not in "iu"
            or assignment.min() < 0 or labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"assignment must be integers >= 0 and labels integers in [0, "
                         f"{num_classes}); got ranges [{assignment.min()}, {assignment.max()}] "
                         f"and [{labels.min()}, {labels.max()}]")
    _, cluster = np.unique(assignment, return_inverse=True)
    table = np.zeros((int(cluster.max()) + 1, num_classes), dtype=np.int64)
    np.add.at(table, (cluster, labels), 1)
    return float(table.max(axis=1).sum() / assignment.size)
