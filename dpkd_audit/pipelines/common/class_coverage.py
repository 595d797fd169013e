"""Per-class view of a staged label release: what the teacher, the release and the student cover.

A staged release whose candidate sets follow the student (DP-DFD's selective randomized
response, Algorithm 1) can lose a class for good: once the student gives it less than the
threshold on every image, it is in no candidate set, is never released again and the student
never gets the evidence to bring it back. At per-label eps = 1 on Fashion-MNIST one seed of three
loses trousers after the first stage this way (student 0.0% of the test trousers, teacher
98.6%; ``reports/benchmarks/published-caps-cpu``, last section). A run's overall accuracy hides
which class went; :class:`ClassTally` counts, per class, the teacher's labels and the released
labels over the stages and the last stage a class was released, and :func:`class_coverage`
adds the teacher's and the student's test recall, so a record names a lost class and the stage
it left.

What enters: the teacher's argmax on the public synthetic images, the released labels and the
public test set. In a sound run the teacher is the DP-SGD one, so the counts are post-processing
of what the ledger charged; in a published run, like ``label_accuracy``, they read the teacher's
labels outside the per-label epsilon, which is not a record-level guarantee anyway.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any

import numpy as np

from dpkd_audit import _validate

__all__ = ["ClassCoverage", "ClassTally", "class_coverage", "class_recall",
           "classes_at_risk", "warn_classes_at_risk"]

#: A class is *lost* when the student's test recall is under this fraction of the teacher's.
LOST_RECALL_FRACTION = 0.25


def class_recall(predictions: np.ndarray, labels: np.ndarray,
                 num_classes: int) -> tuple[float, ...]:
    """Recall of each class: the share of its test images predicted as it.

    Args:
        predictions: Predicted classes ``(n,)`` (ints in ``0..num_classes - 1``).
        labels: True classes ``(n,)``, same range.
        num_classes: Number of classes (>= 2).

    Returns:
        ``num_classes`` floats in [0, 1]; a class with no test image gets ``nan`` (no recall
        to measure).

    Raises:
        ValueError: On shapes that differ or classes out of range.
    """
    num_classes = _validate.check_int("num_classes", num_classes, minimum=2)
    predictions = _classes("predictions", predictions, num_classes)
    labels = _classes("labels", labels, num_classes)
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions and labels must have the same shape; got "
                         f"{predictions.shape} and {labels.shape}")
    totals = np.bincount(labels, minlength=num_classes)
    hits = np.bincount(labels[predictions == labels], minlength=num_classes)
    with np.errstate(invalid="ignore", divide="ignore"):
        recall = np.where(totals > 0, hits / np.maximum(totals, 1), np.nan)
    return tuple(float(r) for r in recall)


def _classes(name: str, values: np.ndarray, num_classes: int) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must be a 1-D integer array; got shape {array.shape}, "
                         f"dtype {array.dtype}")
    if array.size and (array.min() < 0 or array.max() >= num_classes):
        raise ValueError(f"{name} must lie in 0..{num_classes - 1}; got values from "
                         f"{array.min()} to {array.max()}")
    return array.astype(np.int64, copy=False)


class ClassTally:
    """Per-class counts of a staged release, updated once per stage.

    Args:
        num_classes: Number of classes (>= 2).
    """

    def __init__(self, num_classes: int) -> None:
        self.num_classes = _validate.check_int("num_classes", num_classes, minimum=2)
        self.teacher_labels = np.zeros(self.num_classes, dtype=np.int64)
        self.released = np.zeros(self.num_classes, dtype=np.int64)
        self.last_released_stage = np.zeros(self.num_classes, dtype=np.int64)
        self.stages = 0

    def update(self, teacher_labels: np.ndarray, released: np.ndarray) -> None:
        """Count one stage: the teacher's labels of its images and the released labels."""
        teacher_labels = _classes("teacher_labels", teacher_labels, self.num_classes)
        released = _classes("released", released, self.num_classes)
        self.stages += 1
        self.teacher_labels += np.bincount(teacher_labels, minlength=self.num_classes)
        counts = np.bincount(released, minlength=self.num_classes)
        self.released += counts
        self.last_released_stage[counts > 0] = self.stages


@dataclasses.dataclass(frozen=True, kw_only=True)
class ClassCoverage:
    """Per-class figures of a staged release and the student it trained.

    Attributes:
        teacher_labels: Synthetic images the teacher labelled as each class, all stages.
        released: Released labels of each class, all stages.
        last_released_stage: The last stage (1-based) that released each class; 0: never.
        teacher_recall: The teacher's test recall of each class.
        student_recall: The released student's test recall of each class.
        stages: Stages counted.
    """

    teacher_labels: tuple[int, ...]
    released: tuple[int, ...]
    last_released_stage: tuple[int, ...]
    teacher_recall: tuple[float, ...]
    student_recall: tuple[float, ...]
    stages: int

    @property
    def lost_classes(self) -> tuple[int, ...]:
        """Classes whose student recall is under a quarter of the teacher's (which is > 0)."""
        return tuple(c for c, (t, s) in enumerate(zip(self.teacher_recall, self.student_recall,
                                                      strict=True))
                     if t > 0 and s < LOST_RECALL_FRACTION * t)

    def cause(self, c: int) -> str:
        """Why class ``c`` is missing, read from the counts (one of three cases).

        * the generator rarely makes it: the teacher labelled under 1/(4k) of the synthetic
          images as it;
        * it left the release: it was last released in the first half of the stages (0: never);
        * it was released to the end but not learned.
        """
        k, total = len(self.released), sum(self.teacher_labels)
        last = self.last_released_stage[c]
        if self.teacher_labels[c] * 4 * k < total:
            return "the generator rarely makes it"
        if 2 * last <= self.stages:
            return ("it was never released" if last == 0 else
                    f"it left the release at stage {last} of {self.stages}: a class in no "
                    "candidate set is never released again")
        return "it was released to the end but not learned"

    def describe_lost(self) -> str | None:
        """One clause per lost class, or ``None`` when no class is lost."""
        total = sum(self.teacher_labels)
        parts = [f"class {c} (student recall {self.student_recall[c]:.1%}, teacher "
                 f"{self.teacher_recall[c]:.1%}; the teacher's label of "
                 f"{self.teacher_labels[c] / max(total, 1):.1%} of the synthetic images, "
                 f"{self.released[c]:,} labels released): {self.cause(c)}"
                 for c in self.lost_classes]
        return "; ".join(parts) or None

    def to_record(self) -> dict[str, Any]:
        """JSON-ready (a class without test images has recall ``null``)."""
        return {"teacher_labels": list(self.teacher_labels), "released": list(self.released),
                "last_released_stage": list(self.last_released_stage),
                "teacher_recall": [_finite(r) for r in self.teacher_recall],
                "student_recall": [_finite(r) for r in self.student_recall],
                "lost": {str(c): self.cause(c) for c in self.lost_classes}}


def classes_at_risk(class_histogram: Any, *, epsilon: float) -> tuple[int, ...]:
    """Classes a staged selective-RR release may lose at its first stage, before it starts.

    At the first stage the student is untrained, the candidate set is every class, and the
    teacher's label is kept with probability e^eps / (e^eps + k - 1) (0.23 at eps = 1, k = 10):
    a class that makes up s of the images is released at 1/(e^eps + k - 1) + s (e^eps - 1) /
    (e^eps + k - 1), barely above the floor that a class nobody holds gets, and the
    noise-aware student can fit it to near 0 on every image; from then on it is in no candidate
    set. Flagged: a class under 1/(2k) (the paper's threshold, half a balanced share) of the
    generator's images (its health histogram, the teacher's argmax) when that keep probability
    is under 1/2. Measured (Fashion-MNIST, published, eps = 1, 100 stages;
    ``reports/benchmarks/published-caps-cpu``): seeds 0 and 3, whose generators made trousers
    2.8 / 4.9% of the time, lost trousers for good; seeds 1 and 2 (6.9 / 6.0%) kept them.

    Args:
        class_histogram: The teacher's argmax counts over generator samples (``k >= 2``).
        epsilon: The per-label epsilon of the release (> 0).

    Returns:
        The flagged classes (empty when the first stage's labels are mostly right).
    """
    return _risk(class_histogram, epsilon)[0]


def _risk(class_histogram: Any, epsilon: float) -> tuple[tuple[int, ...], np.ndarray, float]:
    """The flagged classes, the histogram's shares and the first stage's keep probability."""
    counts = np.asarray(class_histogram, dtype=np.float64)
    if counts.ndim != 1 or counts.size < 2 or not np.all(np.isfinite(counts)) \
            or np.any(counts < 0) or counts.sum() <= 0:
        raise ValueError(f"class_histogram must be >= 2 non-negative counts with a positive "
                         f"sum; got {class_histogram!r}")
    epsilon = _validate.check_epsilon(epsilon)
    k = counts.size
    # e^eps / (e^eps + k - 1) with I = every class (SelectiveRandomizedResponse's keep)
    keep = 1.0 / (1.0 + (k - 1) * math.exp(-min(epsilon, 700.0)))
    share = counts / counts.sum()
    flagged = () if keep >= 0.5 else tuple(int(c) for c in np.flatnonzero(share * 2 * k < 1))
    return flagged, share, keep


def warn_classes_at_risk(class_histogram: Any, *, epsilon: float) -> tuple[int, ...]:
    """:func:`classes_at_risk`, with a ``RuntimeWarning`` naming them (before the stages)."""
    flagged, share, keep = _risk(class_histogram, epsilon)
    if flagged:
        shares = ", ".join(f"class {c} {share[c]:.1%}" for c in flagged)
        warnings.warn(
            f"the generator rarely makes {len(flagged)} class(es) ({shares} of its images, "
            f"under 1/(2k) = {1 / (2 * share.size):.1%}) and at per-label eps={float(epsilon):g} "
            f"the first stage keeps the teacher's label with probability {keep:.2f}: such a "
            "class can leave every candidate set after stage 1 and never be released again "
            "(measured: reports/benchmarks/published-caps-cpu); the record's `classes` block "
            "will say",
            RuntimeWarning, stacklevel=3)
    return flagged


def _finite(value: float) -> float | None:
    return None if np.isnan(value) else value


def class_coverage(tally: ClassTally, *, teacher_predictions: np.ndarray,
                   student_predictions: np.ndarray, test_labels: np.ndarray,
                   warn: bool = True) -> ClassCoverage:
    """The per-class figures of a finished run; warns (``RuntimeWarning``) on a lost class.

    Args:
        tally: The run's counts.
        teacher_predictions: The teacher's predicted classes on the test images.
        student_predictions: The student's predicted classes on the same images.
        test_labels: Their true classes.
        warn: Warn when a class is lost (see :attr:`ClassCoverage.lost_classes`).
    """
    if not isinstance(tally, ClassTally):
        raise ValueError(f"tally must be a ClassTally; got {type(tally).__name__}")
    k = tally.num_classes
    coverage = ClassCoverage(
        teacher_labels=tuple(int(v) for v in tally.teacher_labels),
        released=tuple(int(v) for v in tally.released),
        last_released_stage=tuple(int(v) for v in tally.last_released_stage),
        teacher_recall=class_recall(teacher_predictions, test_labels, k),
        student_recall=class_recall(student_predictions, test_labels, k), stages=tally.stages)
    lost = coverage.describe_lost()
    if warn and lost is not None:
        warnings.warn(f"the student misses {len(coverage.lost_classes)} class(es) that the "
                      f"teacher knows: {lost}", RuntimeWarning, stacklevel=2)
    return coverage
