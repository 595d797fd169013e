"""The model a data-free generator is fitted to: trained without noise, or with DP-SGD.

DP-DFD's teacher and DGD's baseline play the same part: in ``published`` mode a model trained on
the private split without noise (:func:`~dpkd_audit.pipelines.common.teacher.train_teacher`);
in ``sound`` mode a DP-SGD model (its event charged before the first step,
:func:`~dpkd_audit.pipelines.common.dp_teacher.train_dp_teacher`), through which feature
statistics of the private data are then released with the Gaussian mechanism, charged to the
same ledger before the noisy sum exists
(:func:`~dpkd_audit.pipelines.common.dp_statistics.release_feature_statistics`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from dpkd_audit.data import Dataset
from dpkd_audit.ledger import Ledger
from dpkd_audit.mechanisms import Gaussian
from dpkd_audit.pipelines.common.dp_statistics import (
    FeatureStatistics,
    StatisticsConfig,
    release_feature_statistics,
)
from dpkd_audit.pipelines.common.dp_teacher import DpSgdConfig, DpSgdPlan, train_dp_teacher
from dpkd_audit.pipelines.common.progress import StageTimer
from dpkd_audit.pipelines.common.teacher import TeacherConfig, train_teacher

__all__ = ["fit_dp_source", "fit_source"]


def fit_source(dataset: Dataset, *, config: TeacherConfig, role: str, timer: StageTimer,
               seed: int, device: torch.device, progress: bool) -> tuple[nn.Module, float]:
    """Train the published mode's model without noise, timed as stage ``role``.

    Returns:
        The model (eval mode) and its test accuracy.
    """
    with timer.stage(role):
        trained = train_teacher(
            dataset.train_images, dataset.train_labels, num_classes=dataset.num_classes,
            test_images=dataset.test_images, test_labels=dataset.test_labels,
            config=config, seed=seed, device=device, progress=progress, desc=role)
    return trained.model.eval(), trained.test_accuracy


def fit_dp_source(dataset: Dataset, *, config: TeacherConfig, dp_sgd: DpSgdConfig,
                  plan: DpSgdPlan, statistics: StatisticsConfig, mechanism: Gaussian | None,
                  ledger: Ledger, rng: np.random.Generator, role: str, timer: StageTimer,
                  seed: int, device: torch.device, progress: bool
                  ) -> tuple[nn.Module, float, FeatureStatistics | None]:
    """Train the sound mode's DP-SGD model, then release feature statistics through it.

    Args:
        dataset: The private split (train) and the test split.
        config: The DP model's architecture.
        dp_sgd: DP-SGD hyper-parameters.
        plan: Their calibrated plan (charged before the first step).
        statistics: The release's clipping and layout.
        mechanism: The release's Gaussian mechanism, or ``None`` for no release.
        ledger: Charged for DP-SGD and the release, each before its output exists.
        rng: Source of the release's noise.
        role: Stage name and what the ledger label calls the model (``"teacher"``,
            ``"baseline"``); the release is timed as ``"statistics"``.
        timer: Times the stages.
        seed: Seed (>= 0) of the model and its mini-batches.
        device: Where the model trains.
        progress: Progress bars and stage messages.

    Returns:
        The model (eval mode), its test accuracy and the generator's statistics term (``None``
        without a release).
    """
    with timer.stage(role):
        dp = train_dp_teacher(
            dataset.train_images, dataset.train_labels, num_classes=dataset.num_classes,
            test_images=dataset.test_images, test_labels=dataset.test_labels, teacher=config,
            config=dp_sgd, plan=plan, ledger=ledger, seed=seed, device=device,
            progress=progress)
    model = dp.model
    term = None
    if mechanism is not None:
        with timer.stage("statistics"):
            reference = release_feature_statistics(
                model, dataset.train_images, config=statistics, mechanism=mechanism,
                ledger=ledger, rng=rng, device=device,
                label=f"feature statistics through the DP {role} (Gaussian, sigma / C = "
                      f"{mechanism.sigma / statistics.clip_norm:.6g}, "
                      f"scale {statistics.scale.value})")
        term = FeatureStatistics(model, reference)
    return model.eval(), dp.test_accuracy, term
