"""End-to-end audit of reverse k-NN's release path: many runs with and without one record's label.

The representation, the queries and every private record's k nearest queries are fitted on
public data or are functions of the record itself, so they are fixed across runs
(:func:`~dpkd_audit.pipelines.rknn.pipeline.prepare`, once). What depends on the private
labels is the release path of :func:`~dpkd_audit.pipelines.rknn.pipeline.run`: vote counts ->
mechanism (charged to a fresh ledger of :func:`~dpkd_audit.pipelines.rknn.release.ledger_for`,
as in a run) -> released counts -> noisy argmax labels -> the record's label accuracy. The
student and the rest of the record are functions of these outputs and of public data (tested
in ``tests/test_rknn_pipeline.py``), so an audit of these outputs covers everything a run
publishes.

The neighbouring pair is the relation of the claim: reverse k-NN's release is calibrated to L1
sensitivity 2k, i.e. *replace-one* (one record changes its label: k votes leave one class and
join another). The canary is one private record; ``x`` keeps its label, ``x'`` gives it another
(both chosen by the audit's seed). Each run draws fresh noise; the
:func:`~dpkd_audit.audit.audit_sampler` chooses the event on the first 20% of the runs of each
side and bounds on the rest (exact Clopper-Pearson), so the bound is valid at its confidence.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from dpkd_audit import _validate
from dpkd_audit.audit import AuditResult, audit_sampler
from dpkd_audit.audit.training import MIN_RUNS
from dpkd_audit.data import Splits
from dpkd_audit.mechanisms.rknn import noisy_argmax
from dpkd_audit.pipelines.common.progress import progress_counter
from dpkd_audit.pipelines.rknn.config import RknnConfig
from dpkd_audit.pipelines.rknn.pipeline import Prepared, prepare
from dpkd_audit.pipelines.rknn.release import ledger_for, release_counts

__all__ = [
    "ReleaseAudit",
    "ReleaseCanary",
    "audit_release",
    "choose_canary",
    "release_path_sampler",
]

#: What each run of the audit outputs (all of it is audited together).
OUTPUTS = ("released counts (s x |Y|, as the mechanism returns them)",
           "query labels (noisy argmax, random tie-breaking, as run() draws them)",
           "label accuracy of the public split (a record field)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReleaseCanary:
    """The record whose label differs between the two datasets of the audit.

    Attributes:
        index: Its position in the private split.
        label_x: Its label in ``x`` (its true label).
        label_x_prime: Its label in ``x'``.
        queries: Its k nearest queries (where its votes go).
    """

    index: int
    label_x: int
    label_x_prime: int
    queries: tuple[int, ...]


def choose_canary(prepared: Prepared, *, num_classes: int, seed: int) -> ReleaseCanary:
    """A private record and a second label for it, drawn from ``seed`` (its own Generator)."""
    seed = _validate.check_int("seed", seed, minimum=0)
    rng = np.random.default_rng([seed, 0xCA4A, 1])
    labels = prepared.splits.private_labels
    index = int(rng.integers(labels.size))
    label = int(labels[index])
    other = int((label + 1 + rng.integers(num_classes - 1)) % num_classes)
    return ReleaseCanary(index=index, label_x=label, label_x_prime=other,
                         queries=tuple(int(q) for q in prepared.neighbours[index]))


def release_path_sampler(config: RknnConfig, prepared: Prepared, canary: ReleaseCanary, *,
                         scores: dict[bool, list[float]] | None = None,
                         progress: Any = None) -> Any:
    """``sampler(in_x, n, rng)``: ``n`` independent runs of the release path.

    ``in_x`` True runs on ``x`` (the canary keeps ``label_x``), False on ``x'``. Each run charges
    a fresh ledger of :func:`ledger_for` (as ``dpkd run`` does), releases the counts with
    :func:`release_counts` and draws the labels with :func:`noisy_argmax`; the output row is
    the released counts, the query labels and the public label accuracy. If ``scores`` is given,
    the canary score of every run (the released count of the canary's label minus that of its
    other label, summed over its queries: for the plot) is appended to ``scores[in_x]``.
    """
    splits: Splits = prepared.splits
    num_classes = splits.dataset.num_classes
    assignment = prepared.queries.assignment
    public_truth = splits.public_labels
    queries = np.asarray(canary.queries, dtype=np.int64)

    def sampler(in_x: bool, n: int, rng: np.random.Generator) -> np.ndarray:
        labels = splits.private_labels.copy()
        labels[canary.index] = canary.label_x if in_x else canary.label_x_prime
        rows = []
        for _ in range(n):
            released = release_counts(prepared.neighbours, labels, config=config,
                                      num_classes=num_classes, ledger=ledger_for(config),
                                      rng=rng)
            query_labels = noisy_argmax(released.estimated, rng=rng)
            accuracy = float(np.mean(query_labels[assignment] == public_truth))
            rows.append(np.concatenate([released.estimated.ravel(),
                                        query_labels.astype(np.float64), [accuracy]]))
            if scores is not None:
                est = released.estimated
                scores[bool(in_x)].append(float(np.sum(est[queries, canary.label_x]
                                                       - est[queries, canary.label_x_prime])))
            if progress is not None:
                progress.update(1)
        return np.stack(rows)

    return sampler


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class ReleaseAudit:
    """An end-to-end audit of the reverse k-NN release path.

    Attributes:
        config: The run configuration audited.
        canary: The record whose label differs.
        audit: The auditor's result (bound, event, counts).
        scores: Canary scores of every run on ``x`` (key True) and ``x'`` (False), for plots.
        seconds: Wall-clock seconds (``prepare``: representation, queries, neighbours;
            ``audit``: all runs and the bound).
    """

    config: RknnConfig
    canary: ReleaseCanary
    audit: AuditResult
    scores: dict[bool, np.ndarray]
    seconds: dict[str, float]

    def to_record(self, *, command: str | None = None,
                  provenance: dict[str, Any] | None = None) -> dict[str, Any]:
        """The JSON audit record."""
        cfg = self.config
        audit = self.audit
        return {
            "kind": "pipeline-audit",
            "pipeline": "rknn",
            "estimator": "many-run",
            "dataset": cfg.dataset.value,
            "mode": cfg.mode.value,
            "epsilon_claimed": cfg.epsilon,
            "delta": audit.delta,
            "epsilon_lower": audit.epsilon_lower,
            "confidence": audit.confidence,
            "verdict": audit.verdict.value,
            "neighbouring": ("replace-one: the canary record keeps its label in x and takes "
                             "another in x' (the relation of the claim: L1 sensitivity 2k)"),
            "outputs_audited": list(OUTPUTS),
            "canaries": 1,
            "canary": dataclasses.asdict(self.canary),
            "side_labels": {"x": f"x: canary label {self.canary.label_x}",
                            "x_prime": f"x': canary label {self.canary.label_x_prime}"},
            "runs_per_side": audit.samples_per_side,
            "selection_runs": audit.selection_samples,
            "bound_runs": audit.bound_samples,
            "counts": list(audit.counts),
            "attack": audit.attack.value,
            "event": audit.event,
            "direction": audit.direction,
            "epsilon_estimate": audit.epsilon_estimate,
            "clusters": cfg.clusters,
            "k": cfg.k,
            "seed": cfg.seed,
            "seconds": {k: round(v, 3) for k, v in self.seconds.items()},
            "config": cfg.to_dict(),
            "command": command,
            "provenance": provenance,
        }


def audit_release(config: RknnConfig, *, runs: int, confidence: float = 0.95, seed: int = 0,
                  splits: Splits | None = None, data_dir: Any = None,
                  progress: bool = False) -> ReleaseAudit:
    """Audit the release path of ``config`` with ``runs`` runs per side.

    Args:
        config: The reverse k-NN configuration (mode, epsilon, s, k, dataset).
        runs: Runs per side (an integer >= :data:`~dpkd_audit.audit.training.MIN_RUNS`).
        confidence: Confidence of the bound, in (0, 1).
        seed: Seed of the canary choice and of every run's randomness.
        splits: Already loaded splits (else loaded from ``data_dir``).
        data_dir: Where to look for MNIST / Fashion-MNIST files.
        progress: Progress bars on stderr.

    Raises:
        ValueError: For bad arguments (before any work).
        DatasetNotFoundError: If the dataset files are missing.
    """
    if not isinstance(config, RknnConfig):
        raise ValueError(f"config must be an RknnConfig; got {type(config).__name__}")
    runs = _validate.check_int("runs", runs, minimum=MIN_RUNS)
    confidence = _validate.check_probability("confidence", confidence, open_low=True,
                                             open_high=True)
    seed = _validate.check_int("seed", seed, minimum=0)
    start = time.perf_counter()
    prepared = prepare(config, device="cpu", data_dir=data_dir, splits=splits,
                       progress=progress)
    prepared_seconds = time.perf_counter() - start
    canary = choose_canary(prepared, num_classes=prepared.splits.dataset.num_classes,
                           seed=seed)
    scores: dict[bool, list[float]] = {True: [], False: []}
    start = time.perf_counter()
    with progress_counter(enabled=progress, desc="release-path runs", total=2 * runs,
                          unit="run") as bar:
        sampler = release_path_sampler(config, prepared, canary, scores=scores, progress=bar)
        delta = config.delta if config.mode.is_shuffle else 0.0
        result = audit_sampler(sampler, True, False, epsilon=config.epsilon, delta=delta,
                               n=runs, confidence=confidence,
                               rng=np.random.default_rng([seed, 0xCA4A, 2]),
                               mechanism=f"rknn release path ({config.mode.value})")
    return ReleaseAudit(config=config, canary=canary, audit=result,
                        scores={k: np.asarray(v) for k, v in scores.items()},
                        seconds={"prepare": prepared_seconds,
                                 "audit": time.perf_counter() - start})
