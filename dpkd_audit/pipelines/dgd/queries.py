"""Which synthetic images go to the teacher ensemble (DGD's queries).

The paper queries synthetic images drawn at random (:attr:`QuerySelection.FIRST`: the first
``queries`` images of the synthetic set, whose latents are i.i.d.). :attr:`QuerySelection.
CONFIDENT` instead picks, class by class, the images the baseline classifies most
confidently, ``queries / classes`` per predicted class (an extension, not in the paper; it
measured better on MNIST with the CPU preset, see ``reports/dgd``). Either way the choice is
a function of the baseline and the synthetic set only, never of the teachers' votes, so it
costs nothing beyond what the baseline already cost (nothing more in ``sound`` mode, where the
baseline is DP; ``published`` mode is not private at the record level anyway).

:class:`LabelFilter` says which released labels the student then trains on. Keeping only the
labels equal to the baseline's class for their image is a function of the released labels and
of the baseline, so in ``sound`` mode (a DP baseline) it is post-processing and free at the
record level.
"""

from __future__ import annotations

import enum

import numpy as np
import torch

from dpkd_audit import _validate
from dpkd_audit.pipelines.common.config import parse_enum

__all__ = ["LabelFilter", "QuerySelection", "kept_labels", "select_queries"]


class QuerySelection(enum.StrEnum):
    """How the queried synthetic images are chosen."""

    #: The first ``queries`` synthetic images (i.i.d. latents): the paper.
    FIRST = "first"
    #: Class-balanced by the baseline's prediction, most confident first (an extension).
    CONFIDENT = "confident"


class LabelFilter(enum.StrEnum):
    """Which released labels the student trains on."""

    #: Every released label (the paper).
    NONE = "none"
    #: Only the released labels that equal the baseline's class for their image (an
    #: extension; sound mode, where the baseline is DP).
    BASELINE_AGREEMENT = "baseline-agreement"


def kept_labels(labels: np.ndarray, baseline_labels: np.ndarray,
                label_filter: LabelFilter) -> np.ndarray:
    """Indices (sorted) of the released labels the student trains on.

    Args:
        labels: The released labels ``(Q,)``.
        baseline_labels: The baseline's class for the same images ``(Q,)``.
        label_filter: :class:`LabelFilter`.

    Returns:
        ``int64`` indices into ``labels`` (all of them for ``NONE``; possibly none for
        ``BASELINE_AGREEMENT``).

    Raises:
        ValueError: If the two label arrays are not 1-d of one length, or on an unknown
            ``label_filter``.
    """
    label_filter = parse_enum(LabelFilter, "label_filter", label_filter)
    labels, baseline_labels = np.asarray(labels), np.asarray(baseline_labels)
    if labels.ndim != 1 or labels.shape != baseline_labels.shape:
        raise ValueError("labels and baseline_labels must be 1-d arrays of one length; got "
                         f"shapes {labels.shape} and {baseline_labels.shape}")
    if label_filter is LabelFilter.NONE:
        return np.arange(labels.shape[0], dtype=np.int64)
    return np.flatnonzero(labels == baseline_labels).astype(np.int64)


def select_queries(probabilities: torch.Tensor, queries: int,
                   selection: QuerySelection) -> np.ndarray:
    """Indices (sorted, distinct) of the ``queries`` synthetic images to label.

    Args:
        probabilities: The baseline's softmax ``(S, classes)`` on the synthetic set.
        queries: How many (1 <= queries <= S).
        selection: :class:`QuerySelection`.

    Returns:
        ``int64`` indices into the synthetic set. ``CONFIDENT`` gives each predicted class
        ``queries // classes`` images (the first ``queries % classes`` classes one more), its
        most confident ones; a class with too few images leaves its share to the most
        confident images not yet chosen.

    Raises:
        ValueError: On ``queries`` outside [1, S] or a bad ``probabilities``.
    """
    if not isinstance(probabilities, torch.Tensor) or probabilities.ndim != 2:
        raise ValueError("probabilities must be a 2-d tensor (synthetic images x classes)")
    total, classes = probabilities.shape
    _validate.check_int("queries", queries, minimum=1, maximum=total)
    if selection is QuerySelection.FIRST:
        return np.arange(queries, dtype=np.int64)
    confidence, predicted = probabilities.detach().float().cpu().max(dim=1)
    confidence, predicted = confidence.numpy(), predicted.numpy()
    order = np.lexsort((np.arange(total), -confidence))   # most confident first, stable
    chosen = np.zeros(total, dtype=bool)
    for k in range(classes):
        quota = queries // classes + (1 if k < queries % classes else 0)
        members = order[predicted[order] == k][:quota]
        chosen[members] = True
    missing = queries - int(chosen.sum())
    if missing:
        chosen[order[~chosen[order]][:missing]] = True
    return np.flatnonzero(chosen).astype(np.int64)
