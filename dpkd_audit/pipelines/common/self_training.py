"""Self-training: relabel the training images with the student's own predictions, then retrain.

A student trained on labels with structured errors (reverse k-NN's public images inherit
their cluster's label, so an image clustered with the wrong class is mislabelled) does not
repeat all of them: where the CNN generalises from the correctly labelled majority, its
prediction on a mislabelled training image is the right class. Pseudo-labelling (Lee, ICML
2013 workshop; the teacher-student rounds of Xie et al., "Self-training with Noisy Student",
CVPR 2020) takes those predictions as the next round's hard labels and trains a fresh student
on them, with the same augmentation and label smoothing.

Privacy: each round reads only the previous student (a function of the released labels and of
the training images) and the training images. Where those images are public, as in reverse
k-NN, every round is post-processing of the release and costs nothing more.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from dpkd_audit import _validate
from dpkd_audit.pipelines.common.student import (
    StudentConfig,
    StudentResult,
    predict,
    train_student,
)

__all__ = ["SelfTrainingResult", "train_self_trained_student"]


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class SelfTrainingResult:
    """Outcome of :func:`train_self_trained_student`.

    Attributes:
        student: The last round's student (its ``test_accuracy`` is the one to report).
        test_accuracy_per_round: Last-epoch test accuracy of each round's student, round 0
            first (for the record and plots; never to pick a round).
        labels_per_round: The hard labels each self-training round trained on (round 1
            first; empty with ``rounds = 0``).
    """

    student: StudentResult
    test_accuracy_per_round: tuple[float, ...]
    labels_per_round: tuple[np.ndarray, ...] = dataclasses.field(repr=False)


def train_self_trained_student(train_images: np.ndarray, train_targets: np.ndarray, *,
                               rounds: int, num_classes: int, test_images: np.ndarray,
                               test_labels: np.ndarray, config: StudentConfig, seed: int,
                               device: torch.device, progress: bool = True
                               ) -> SelfTrainingResult:
    """Train a student on ``train_targets``, then ``rounds`` times on its own predictions.

    Round 0 is :func:`~dpkd_audit.pipelines.common.student.train_student` on
    ``train_targets`` with ``seed``; round r >= 1 trains a fresh student (seed ``seed + r``)
    on the argmax of round r - 1's predicted probabilities on ``train_images``.

    Args:
        train_images: uint8 ``(n, h, w)``.
        train_targets: The first round's labels (hard or soft, as for ``train_student``).
        rounds: Self-training rounds after the first student (>= 0; 0 is plain training).
        num_classes: Number of classes.
        test_images: uint8 ``(m, h, w)``, evaluation only.
        test_labels: Their labels.
        config: Every round's training hyper-parameters.
        seed: Seed of round 0 (>= 0).
        device: Where to train.
        progress: Progress bars on stderr.

    Raises:
        ValueError: On ``rounds`` < 0 or not an integer (before any training), and whatever
            ``train_student`` refuses.
    """
    _validate.check_int("rounds", rounds, minimum=0)
    _validate.check_int("seed", seed, minimum=0)
    result = train_student(train_images, train_targets, num_classes=num_classes,
                           test_images=test_images, test_labels=test_labels, config=config,
                           seed=seed, device=device, progress=progress)
    accuracies = [result.test_accuracy]
    labels: list[np.ndarray] = []
    for r in range(1, rounds + 1):
        predicted = predict(result.model, train_images, device=device).argmax(axis=1)
        labels.append(predicted.astype(np.int64))
        result = train_student(train_images, labels[-1], num_classes=num_classes,
                               test_images=test_images, test_labels=test_labels,
                               config=config, seed=seed + r, device=device, progress=progress)
        accuracies.append(result.test_accuracy)
    return SelfTrainingResult(student=result, test_accuracy_per_round=tuple(accuracies),
                              labels_per_round=tuple(labels))
