"""The fields every one-run audit record shares (pipelines' audits and users' own trainings)."""

from __future__ import annotations

from typing import Any

from dpkd_audit.audit.training import OneRunBound

__all__ = ["one_run_fields"]


def one_run_fields(bound: OneRunBound) -> dict[str, Any]:
    """The bound's part of a ``pipeline-audit`` record (``dpkd report`` reads these keys).

    Steinke's bound (``epsilon_lower``, the verdict's), the f-DP bound and the Gaussian
    estimate side by side, with the counts they come from.
    """
    return {
        "kind": "pipeline-audit",
        "estimator": "one-run",
        "delta": bound.delta,
        "epsilon_lower": bound.epsilon_lower,
        # the same guesses through the claim's Gaussian trade-off curve (issue 34;
        # Mahloujifar-Melis-Chaudhuri 2025): None when delta = 0
        "epsilon_lower_fdp": bound.epsilon_lower_fdp,
        # the scores, not the guesses, through Gaussian fits of the inserted and left-out
        # canaries (Agrawal et al. 2026): an estimate under the Gaussian model, not a
        # distribution-free bound; None when delta = 0
        "epsilon_lower_gaussian": bound.epsilon_lower_gaussian,
        "gaussian_fit": None if bound.gaussian is None else bound.gaussian.to_dict(),
        "confidence": bound.confidence,
        "verdict": bound.verdict,
        "canaries": bound.canaries,
        "included": bound.included,
        "guesses": bound.guesses,  # made in all: guesses_in + guesses_out
        "guesses_in": bound.guesses_in,  # on the highest scores
        "guesses_out": bound.guesses_out,  # on the lowest scores (0: "in" only)
        "correct": bound.correct,
        "p_value_at_claim": bound.p_value_at_claim,
        "runs_per_side": 1,
    }
