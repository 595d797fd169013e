"""One-run audit of a sound variant's DP-SGD model with white-box gradient canaries.

The DP-SGD teacher of DP-DFD's ``sound`` mode and the DP-SGD baseline of DGD's are trained
exactly as in a run (:func:`~dpkd_audit.pipelines.common.dp_teacher.train_dp_teacher`, the plan
the pipeline calibrates for its target, charged to a fresh ledger of the pipeline's), with ``m``
Dirac gradient canaries (:mod:`~dpkd_audit.training_audit.canaries`), each inserted with
probability 1/2. The one-run bound of Steinke, Nasr and Jagielski 2023
(:func:`~dpkd_audit.audit.training.one_run_bound`) is then tested against the epsilon of the
DP-SGD event alone (its share of the run's target; PLD accounting, add/remove-one, the
run's delta). The numbers of guesses, "in" on the highest scores and "out" on the lowest, are
fixed before training (:func:`resolve_guesses`); they may differ, and either may be 0. The
simulation of ``benchmarks/one_run_design.py`` found "in" guesses on the top scores far more
often right than "out" guesses on the bottom ones on the MNIST DP-SGD schedules, so that only
many canaries (50,000-100,000) with "in" guesses only reach its targets. At the default 1,000
canaries the symmetric default still did best on digits (DP-DFD sound, eps 10, seed 0: 50 + 50
guesses 95 right, Steinke 2.17; 100 "in" 93, 1.92; 100 "out" 90, 1.63).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch

from dpkd_audit import _validate
from dpkd_audit.accountants.dp_sgd import DpSgdAccountant
from dpkd_audit.audit.training import (
    OneRunBound,
    default_guesses,
    one_run_bound,
    one_run_guesses,
    resolve_guesses,
)
from dpkd_audit.data import Dataset
from dpkd_audit.ledger import Ledger
from dpkd_audit.pipelines.common.dp_teacher import DpSgdConfig, DpSgdPlan, train_dp_teacher
from dpkd_audit.pipelines.common.teacher import TeacherConfig
from dpkd_audit.training_audit.canaries import GradientCanaries
from dpkd_audit.training_audit.records import one_run_fields

# default_guesses and resolve_guesses live in dpkd_audit.audit.training (numpy only, shared with
# the record-level audit); re-exported here, where they were first defined
__all__ = ["DpSgdAudit", "audit_dp_sgd", "default_guesses", "resolve_guesses"]


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class DpSgdAudit:
    """A one-run audit of a DP-SGD stage.

    Attributes:
        role: ``"teacher"`` (DP-DFD) or ``"baseline"`` (DGD).
        plan: The calibrated DP-SGD plan that ran.
        epsilon_dp_sgd: The DP-SGD event's own epsilon at the plan's delta (PLD): the claim.
        bound: The one-run bound and its counts.
        scores: Every canary's score.
        included: Which canaries were inserted.
        canary_rows: Canary gradient rows added over all steps.
        test_accuracy: The model's test accuracy (the canaries perturb it a little).
        seconds: Training seconds.
        correct_with_sum_score: The right guesses the sum-of-updates score (initial minus
            final weight, the score before issue 34) would have made with the same guess
            counts: a comparison, not a second bound.
        placement: Where the canaries' coordinates were
            (:class:`~dpkd_audit.training_audit.canaries.CanaryPlacement`).
    """

    role: str
    plan: DpSgdPlan
    epsilon_dp_sgd: float
    bound: OneRunBound
    scores: np.ndarray
    included: np.ndarray
    canary_rows: int
    test_accuracy: float
    seconds: float
    correct_with_sum_score: int | None = None
    placement: str = "dedicated"

    def to_record(self) -> dict[str, Any]:
        """The audit's fields of a pipeline-audit record (the caller adds the pipeline's)."""
        bound = self.bound
        return {
            **one_run_fields(bound),
            "stage": f"DP-SGD {self.role}",
            "epsilon_claimed": self.epsilon_dp_sgd,
            "epsilon_target": self.plan.target_epsilon,
            "neighbouring": ("add/remove-one: each Dirac gradient canary is a record added "
                             "with probability 1/2 (Steinke, Nasr, Jagielski 2023)"),
            "claim_note": ("epsilon_claimed is the DP-SGD event's own epsilon (PLD, add/remove-"
                           "one) - its share of the run's record-level target epsilon_target; "
                           "a bound below it is not evidence of privacy"),
            "canary_rows": self.canary_rows,
            "attack": ("white-box Dirac gradient canaries, score = log-likelihood ratio of "
                       "each step's update of the canary's coordinate (subsampled Gaussian)"),
            # dedicated: coordinates no real record's gradient touches (CanaryTap, issue 34)
            "canary_placement": self.placement,
            "correct_with_sum_score": self.correct_with_sum_score,
            "plan": {"noise_multiplier": self.plan.noise_multiplier,
                     "sampling_probability": self.plan.schedule.sampling_probability,
                     "steps": self.plan.steps, "dataset_size": self.plan.schedule.dataset_size},
            "test_accuracy": self.test_accuracy,
            "seconds": {"train": round(self.seconds, 3)},
        }


def audit_dp_sgd(dataset: Dataset, *, role: str, teacher: TeacherConfig, dp_sgd: DpSgdConfig,
                 plan: DpSgdPlan, ledger: Ledger, canaries: GradientCanaries,
                 guesses: int | None = None, guesses_out: int | None = None,
                 confidence: float = 0.95, seed: int = 0, device: torch.device | str = "cpu",
                 progress: bool = False) -> DpSgdAudit:
    """Train the DP-SGD model with gradient canaries and bound its epsilon from one run.

    Args:
        dataset: The private split (train) and the test split.
        role: What the pipeline calls the model (``"teacher"``, ``"baseline"``).
        teacher: Its architecture.
        dp_sgd: DP-SGD hyper-parameters.
        plan: The plan the pipeline calibrated (charged to ``ledger`` before the first step).
        ledger: A fresh ledger of the pipeline's.
        canaries: The gradient canaries.
        guesses: Guesses on each side (default :func:`default_guesses`), fixed in advance;
            with ``guesses_out``, the "in" guesses on the highest scores only.
        guesses_out: The "out" guesses on the lowest scores (default: ``guesses``; 0: "in"
            guesses only). The counts, checked by :func:`resolve_guesses`: with
            ``guesses_out``, each in [0, canaries], not both 0, their sum at most the
            canaries; ``guesses`` alone in [1, canaries // 2].
        confidence: Confidence of the bound, in (0, 1).
        seed: Seed of the model and its mini-batches (as the pipeline's ``config.seed``).
        device: Where to train.
        progress: A progress bar over the steps.

    Raises:
        ValueError: For bad arguments (before any work).
    """
    if not isinstance(canaries, GradientCanaries):
        raise ValueError(f"canaries must be GradientCanaries; got {type(canaries).__name__}")
    guesses_in, guesses_out = resolve_guesses(canaries.count, guesses, guesses_out)
    confidence = _validate.check_probability("confidence", confidence, open_low=True,
                                             open_high=True)
    accountant = DpSgdAccountant.PLD.make()
    accountant.compose(plan.event)
    claim = float(accountant.get_epsilon(plan.delta))
    result = train_dp_teacher(
        dataset.train_images, dataset.train_labels, num_classes=dataset.num_classes,
        test_images=dataset.test_images, test_labels=dataset.test_labels, teacher=teacher,
        config=dp_sgd, plan=plan, ledger=ledger, seed=seed, device=device, progress=progress,
        canaries=canaries)
    start = time.perf_counter()
    included = canaries.included
    bound = one_run_bound(result.canary_scores, included, epsilon=claim, delta=plan.delta,
                          guesses_in=guesses_in, guesses_out=guesses_out,
                          confidence=confidence)
    sum_guesses = one_run_guesses(result.canary_sum_scores, guesses_in=guesses_in,
                                  guesses_out=guesses_out)
    sum_correct = int(np.count_nonzero(sum_guesses == np.where(included, 1, -1)))
    return DpSgdAudit(role=role, plan=plan, epsilon_dp_sgd=claim, bound=bound,
                      correct_with_sum_score=sum_correct, placement=canaries.placement.value,
                      scores=np.asarray(result.canary_scores), included=included,
                      canary_rows=result.canary_samples, test_accuracy=result.test_accuracy,
                      seconds=result.seconds + time.perf_counter() - start)
