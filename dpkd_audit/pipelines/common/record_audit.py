"""Record-level one-run audit of a whole distillation pipeline with mislabeled canaries.

The pipeline (DP-DFD or DGD, either mode) runs once, through its own ``run``, on its private
split with ``m`` mislabeled record canaries (:class:`~dpkd_audit.training_audit.canaries.
RecordCanaries`), each inserted with probability 1/2; the released student is then scored on
every canary image: ``log p(wrong label) - log p(true label)`` (higher: the student learnt the
canary's wrong label, i.e. it was in the private set). The one-run bound of Steinke, Nasr and
Jagielski 2023 is tested against the epsilon the run claims: the paper's published epsilon in
``published`` mode, the record-level target in ``sound`` mode.

A bound above the published epsilon refutes the paper's claim at the record level; a bound
below it is **not** evidence of privacy (a black-box attack on a distilled student is weak),
and the record says so.
"""

from __future__ import annotations

import dataclasses
import math
import time
from types import ModuleType
from typing import Any

import numpy as np
import torch

from dpkd_audit import _validate
from dpkd_audit.audit.training import OneRunBound, one_run_bound, resolve_guesses
from dpkd_audit.pipelines.common.loading import LoadedData
from dpkd_audit.training_audit.canaries import RecordCanaries
from dpkd_audit.training_audit.records import one_run_fields

__all__ = ["RecordAudit", "audit_record_level", "student_scores"]


def student_scores(student: torch.nn.Module, images: np.ndarray, true_labels: np.ndarray,
                   wrong_labels: np.ndarray) -> np.ndarray:
    """``log p(wrong) - log p(true)`` of the student on each canary image (float64)."""
    x = torch.from_numpy(np.array(images, dtype=np.uint8)).float().div_(255.0).unsqueeze(1)
    device = next(student.parameters()).device
    student.eval()
    with torch.inference_mode():
        logp = torch.cat([torch.log_softmax(student(x[i:i + 1024].to(device)).float(), dim=1)
                          for i in range(0, x.shape[0], 1024)]).cpu().numpy()
    rows = np.arange(logp.shape[0])
    scores = logp[rows, wrong_labels].astype(np.float64) - logp[rows, true_labels]
    if not np.all(np.isfinite(scores)):
        raise FloatingPointError("the student's canary scores are not finite; please report "
                                 "this bug")
    return scores


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class RecordAudit:
    """A record-level one-run audit of a pipeline.

    Attributes:
        claim: The epsilon tested (published or record-level target) and what it is.
        bound: The one-run bound and its counts.
        scores: Every canary's score.
        included: Which canaries were inserted.
        test_accuracy: The student's test accuracy in the audited run.
        run_record: The run's own record (its epsilons, accuracies, seconds).
        seconds: Wall-clock seconds of the run and the scoring.
    """

    claim: str
    bound: OneRunBound
    scores: np.ndarray
    included: np.ndarray
    test_accuracy: float
    run_record: dict[str, Any]
    seconds: float

    def to_record(self) -> dict[str, Any]:
        """The audit's fields of a pipeline-audit record (the caller adds the pipeline's)."""
        bound = self.bound
        run = self.run_record
        return {
            **one_run_fields(bound),
            "stage": "whole pipeline (released student)",
            "epsilon_claimed": bound.epsilon_claimed,
            "claim_note": self.claim,
            "epsilon_published": run.get("epsilon_published"),
            "epsilon_record_level": run.get("epsilon_record_level"),
            "neighbouring": ("add/remove-one: each mislabeled canary record is in the private "
                             "set with probability 1/2"),
            "attack": "black-box: log p(wrong label) - log p(true label) of the released "
                      "student on each canary image",
            "test_accuracy": self.test_accuracy,
            "run_seconds": run.get("seconds"),
            "seconds": {"run and scoring": round(self.seconds, 3)},
        }


def audit_record_level(pipeline: ModuleType, config: Any, *, data: LoadedData,
                       canaries: RecordCanaries, guesses: int,
                       guesses_out: int | None = None, confidence: float = 0.95,
                       device: torch.device | str = "cpu",
                       progress: bool = False) -> RecordAudit:
    """Run ``pipeline`` once with mislabeled canaries and bound its epsilon.

    Args:
        pipeline: :mod:`dpkd_audit.pipelines.dpdfd` or :mod:`dpkd_audit.pipelines.dgd` (its
            ``run``, ``ledger_for`` and ``label_rng`` are used as ``dpkd run`` uses them).
        config: The run's configuration.
        data: The loaded dataset (canaries are taken from its private split).
        canaries: The canaries.
        guesses: Guesses on each side, fixed in advance (in [1, count / 2]); with
            ``guesses_out``, the "in" guesses on the highest scores only.
        guesses_out: The "out" guesses on the lowest scores (default: ``guesses``; 0: "in"
            guesses only), checked with ``guesses`` by
            :func:`~dpkd_audit.audit.training.resolve_guesses` (each in [0,
            count], not both 0, their sum at most the count).
        confidence: Confidence of the bound, in (0, 1).
        device: Where the pipeline runs.
        progress: Progress bars and stage messages.

    Raises:
        ValueError: For bad arguments (before any work).
    """
    if not isinstance(canaries, RecordCanaries):
        raise ValueError(f"canaries must be RecordCanaries; got {type(canaries).__name__}")
    if guesses is None:
        raise ValueError("guesses must be an integer (the guesses on each side, or the 'in' "
                         "guesses with guesses_out); got None")
    guesses_in, guesses_out = resolve_guesses(canaries.count, guesses, guesses_out)
    confidence = _validate.check_probability("confidence", confidence, open_low=True,
                                             open_high=True)
    start = time.perf_counter()
    dataset, images, true_labels, wrong = canaries.insert(data.dataset)
    result = pipeline.run(config, ledger=pipeline.ledger_for(config),
                          rng=pipeline.label_rng(config), device=device,
                          data=LoadedData(dataset=dataset, seconds=data.seconds),
                          progress=progress)
    run_record = result.to_record()
    published = float(result.epsilon_published)
    if math.isinf(float(result.epsilon_record_level)):
        claim_value = published
        claim = ("the paper's published epsilon (the run's record-level epsilon is infinite: "
                 "a non-private step exists); a bound above it refutes the published claim at "
                 "the record level, a bound below it is not evidence of privacy")
    else:
        claim_value = float(result.epsilon_record_level)
        claim = ("the run's record-level epsilon (its ledger); a bound below it is not "
                 "evidence of privacy")
    # the record's delta (a larger delta only weakens the bound, never makes it invalid)
    delta = float(run_record.get("delta") or 0.0)
    scores = student_scores(result.student, images, true_labels, wrong)
    included = canaries.included
    bound = one_run_bound(scores, included, epsilon=claim_value, delta=delta,
                          guesses_in=guesses_in, guesses_out=guesses_out,
                          confidence=confidence)
    return RecordAudit(claim=claim, bound=bound, scores=scores, included=included,
                       test_accuracy=float(result.test_accuracy), run_record=run_record,
                       seconds=time.perf_counter() - start)
