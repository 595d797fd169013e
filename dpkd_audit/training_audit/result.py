"""What an audit of a user's DP-SGD training found, as a result object and a record."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dpkd_audit.accountants.dp_sgd_sampling import SamplingBound
from dpkd_audit.audit.auditor import AuditResult, verdict_of
from dpkd_audit.audit.training import (
    OneRunAnalysis,
    OneRunBound,
    one_run_analyses,
    one_run_guesses,
    score_histogram,
)
from dpkd_audit.training_audit.config import AuditConfig
from dpkd_audit.training_audit.records import one_run_fields
from dpkd_audit.training_audit.sampler_check import Mismatch, SamplerReport

__all__ = ["OpacusAuditResult"]


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class OpacusAuditResult:
    """A one-run audit of a user's DP-SGD training.

    Attributes:
        config: The audit's configuration.
        report: The sampler check made before the first step.
        runtime_mismatches: Mismatches seen while training (fixed-size batches under a
            Poisson loader).
        bound: The one-run analyses (Steinke, f-DP, Gaussian), tested against
            ``epsilon_claimed``.
        scores: Every canary's log-likelihood-ratio score.
        included: Which canaries were inserted.
        steps: Optimizer steps taken (logical steps: noise added).
        epochs_run: ``ceil(steps / steps_per_epoch)``.
        epsilon_opacus: What the engine's accountant reports for the steps taken (``None``
            without an engine).
        epsilon_poisson: The Poisson accounting of the steps taken (PLD, or RDP where
            tighter), at the rate the accountant uses.
        sampler_bound: The bound of the sampler that ran, for the epochs run (``None`` when
            no bound is known).
        canary_rows: Canary rows added over all steps (inserted canaries only).
        batch_sizes: The real batch size of every clipping pass.
        seconds: Wall-clock seconds from attaching to finishing.
        seconds_audit: Of which spent in the canaries' hooks.
        test_accuracy: The model's test accuracy, when given.
        device: Where the canaries' coordinates lived.
        participation: ``poisson`` or ``allocation`` (one slot per epoch).
        sum_scores: Each canary's coordinate, initial minus final value (a comparison score).
        independent: The inserted and the left-out canaries' scores as independent runs of one
            canary's mechanism (:func:`~dpkd_audit.audit.training.many_run_bound`: a threshold
            chosen on half of each side, exact Clopper-Pearson bounds on the other half). Valid
            when the canaries' coordinates are independent given their inclusion, as the
            dedicated coordinates are (each has its own participation draws and its own
            noise, and nothing reads them back); ``None`` for ``placement="model"``, where
            real gradients tie the coordinates together.
    """

    config: AuditConfig
    report: SamplerReport
    runtime_mismatches: tuple[Mismatch, ...]
    bound: OneRunBound
    scores: np.ndarray = dataclasses.field(repr=False)
    included: np.ndarray = dataclasses.field(repr=False)
    steps: int
    epochs_run: int
    epsilon_opacus: float | None
    epsilon_poisson: float
    sampler_bound: SamplingBound | None
    canary_rows: int
    batch_sizes: np.ndarray = dataclasses.field(repr=False)
    seconds: float
    seconds_audit: float
    test_accuracy: float | None
    device: str
    participation: str
    sum_scores: np.ndarray = dataclasses.field(repr=False)
    independent: AuditResult | None = None

    @property
    def epsilon_claimed(self) -> float:
        """The claim tested: Opacus's reported epsilon (or the Poisson accounting)."""
        return self.bound.epsilon_claimed

    @property
    def epsilon_lower(self) -> float:
        """Steinke et al.'s lower bound (the verdict's)."""
        return self.bound.epsilon_lower

    @property
    def mismatches(self) -> tuple[Mismatch, ...]:
        """Every mismatch: before the first step and while training."""
        return (*self.report.mismatches, *self.runtime_mismatches)

    def verdicts(self) -> dict[str, dict[str, str | None]]:
        """Each analysis against Opacus's claim and against the bound of what ran.

        ``{"steinke": {"claim": ..., "sampler_bound": ...}, "fdp": ..., "gaussian": ...,
        "independent": ...}``; ``None`` where an analysis or a bound is missing.
        """
        run = None if self.sampler_bound is None else self.sampler_bound.epsilon
        claim = self.bound.epsilon_claimed
        figures = {"steinke": self.bound.epsilon_lower, "fdp": self.bound.epsilon_lower_fdp,
                   "gaussian": self.bound.epsilon_lower_gaussian,
                   "independent": None if self.independent is None
                   else self.independent.epsilon_lower}
        out: dict[str, dict[str, str | None]] = {}
        for name, lower in figures.items():
            out[name] = {
                "claim": None if lower is None else verdict_of(lower, claim).value,
                "sampler_bound": None if lower is None or run is None or not math.isfinite(run)
                else verdict_of(lower, run).value}
        return out

    def summary(self) -> str:
        """A few lines for the terminal."""
        b = self.bound
        run = self.sampler_bound
        lines = [
            f"one-run audit of {self.config.name} ({self.config.dataset}): {self.steps} steps, "
            f"{self.report.sampler.value} sampling, {b.canaries:,} canaries "
            f"({b.correct:,} of {b.guesses:,} guesses right)",
            f"  claimed epsilon {b.epsilon_claimed:.4g} at delta {b.delta:g} "
            f"({'Opacus accountant' if self.epsilon_opacus is not None else 'Poisson PLD'})"
            + ("" if run is None else f"; bound of the sampler that ran {run.epsilon:.4g}"
               + ("" if run.tight else " (loose)")),
            f"  Steinke {b.epsilon_lower:.4g} | f-DP {_show(b.epsilon_lower_fdp)} | "
            f"Gaussian estimate {_show(b.epsilon_lower_gaussian)} at {b.confidence:.0%}: "
            f"{b.verdict} against the claim",
            *([] if self.independent is None else [
                f"  independent coordinates (many runs): {self.independent.epsilon_lower:.4g}: "
                f"{self.independent.verdict.value} against the claim"]),
            f"  audit hooks {self.seconds_audit:.2f} s of {self.seconds:.1f} s",
        ]
        for m in self.mismatches:
            lines.append(f"  mismatch [{m.kind.value}]")
        return "\n".join(lines)

    def to_record(self, *, command: str | None = None) -> dict[str, Any]:
        """The ``pipeline-audit`` record (``dpkd report`` reads it), provenance included."""
        from dpkd_audit.provenance import provenance

        b = self.bound
        guesses = one_run_guesses(self.scores, guesses_in=b.guesses_in or 0,
                                  guesses_out=b.guesses_out or 0)
        truth = np.where(self.included, 1, -1)
        sum_guesses = one_run_guesses(self.sum_scores, guesses_in=b.guesses_in or 0,
                                      guesses_out=b.guesses_out or 0)
        run = self.sampler_bound
        record: dict[str, Any] = {
            **one_run_fields(b),
            "pipeline": self.config.name,
            "dataset": self.config.dataset,
            "mode": f"dp-sgd ({self.report.sampler.value} sampling)",
            "stage": "DP-SGD training (user loop, OpacusAudit)",
            "epsilon_claimed": b.epsilon_claimed,
            "claim_note": ("epsilon_claimed is what the engine's accountant reports for the "
                           "steps taken" if self.epsilon_opacus is not None else
                           "epsilon_claimed is the Poisson accounting of the steps taken (no "
                           "engine given)") + "; a bound below it is not evidence of privacy",
            "epsilon_opacus": _finite(self.epsilon_opacus),
            "epsilon_poisson": _finite(self.epsilon_poisson),
            "sampler_bound": None if run is None else run.to_dict(),
            "verdicts": self.verdicts(),
            # the canaries' coordinates as independent runs (see the attribute's docstring)
            "epsilon_lower_independent": None if self.independent is None
            else self.independent.epsilon_lower,
            "independent": None if self.independent is None else {
                "epsilon_lower": self.independent.epsilon_lower,
                "counts": list(self.independent.counts), "event": self.independent.event,
                "samples_per_side": self.independent.samples_per_side,
                "bound_samples": self.independent.bound_samples,
                "note": ("lower bound valid when the canaries' coordinates are independent "
                         "given their inclusion (dedicated coordinates: own participation "
                         "draws, own noise, never read back); a threshold chosen on half of "
                         "each side, exact Clopper-Pearson bounds on the rest")},
            "analyses": one_run_analyses(b, OneRunAnalysis.ALL),
            "neighbouring": ("add/remove-one (Poisson) or zero-out (fixed-size batches): each "
                             "Dirac gradient canary is a record added with probability 1/2 "
                             "(Steinke, Nasr, Jagielski 2023)"),
            "attack": ("white-box Dirac gradient canaries on dedicated coordinates, score = "
                       "log-likelihood ratio of every step's noisy gradient on the canary's "
                       f"coordinate ({self.participation} participation)"
                       if self.config.placement.value == "dedicated" else
                       "white-box Dirac gradient canaries on the model's own coordinates "
                       "(real gradients add to the readings), log-likelihood-ratio score"),
            "canary_placement": self.config.placement.value,
            "participation": self.participation,
            "crowd": self.config.crowd and self.participation == "allocation",
            "canary_rows": self.canary_rows,
            "correct_with_sum_score": int(np.count_nonzero(sum_guesses == truth)),
            "correct_check": int(np.count_nonzero(guesses == truth)),
            "sampler_check": self.report.to_dict(),
            "mismatches": [m.to_dict() for m in self.mismatches],
            "steps": self.steps,
            "epochs_run": self.epochs_run,
            "noise_multiplier": self.report.noise_multiplier,
            "sampling_probability": self.report.sample_rate,
            "batch_sizes": {"mean": float(np.mean(self.batch_sizes)) if self.batch_sizes.size
                            else None,
                            "min": int(self.batch_sizes.min()) if self.batch_sizes.size else None,
                            "max": int(self.batch_sizes.max()) if self.batch_sizes.size
                            else None},
            "test_accuracy": self.test_accuracy,
            # wall-clock of the training the audit was attached to (its hooks included)
            "seconds": {"train": round(self.seconds, 3)},
            "seconds_audit_hooks": round(self.seconds_audit, 3),
            "device": self.device,
            "config": {k: (v.value if hasattr(v, "value") else v)
                       for k, v in dataclasses.asdict(self.config).items()},
            "audit_seed": self.config.seed,
            "command": command if command is not None else " ".join(sys.argv),
            "provenance": provenance(),
            "score_name": "canary score: log-likelihood ratio of the canary's coordinate over "
                          "every step's noisy gradient",
            "side_labels": {"x": "inserted canaries", "x_prime": "canaries left out"},
            "score_histogram": score_histogram(self.scores[self.included],
                                               self.scores[~self.included]),
        }
        return record

    def save(self, out: str | Path, *, command: str | None = None) -> Path:
        """Write ``audit.json`` (the record) under ``out``; returns its path.

        ``dpkd report OUT`` turns it into a table and a figure beside the pipelines' audits.
        """
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "audit.json"
        text = json.dumps(self.to_record(command=command), indent=2, allow_nan=False)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(text + "\n", encoding="utf-8")
        tmp.replace(path)
        return path


def _show(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
