"""Pipeline-audit reports, built from saved records (``kind: pipeline-audit``) only.

A record holds the claim (``epsilon_claimed``, ``delta``), the bound (``epsilon_lower``,
``confidence``, ``verdict``), ``estimator`` (``many-run`` or ``one-run``), ``side_labels``
(``{"x": ..., "x_prime": ...}``: what each histogram is) and ``score_histogram``:
``{"edges": [...], "x": [...], "x_prime": [...]}``, the counts of the scores on each side (runs
on x and x', or inserted and left-out canaries).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpkd_audit.audit.training import score_histogram
from dpkd_audit.reports.safe_json import clip

__all__ = ["pipeline_audit_markdown", "plot_pipeline_audit", "score_histogram"]

def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.4g}"
    return str(value)


def _what(record: dict[str, Any]) -> str:
    if record.get("estimator") == "one-run":
        return (f"one run, {record['canaries']:,} canaries ({record['correct']:,} / "
                f"{record['guesses']:,} guesses right)")
    return f"{record['runs_per_side']:,} runs per side"


def pipeline_audit_markdown(records: Sequence[dict[str, Any]]) -> str:
    """One Markdown row per pipeline audit: what was audited, claim, bounds, verdict, size.

    Beside Steinke's bound (``epsilon_lower``, the verdict's), one-run records show the f-DP
    bound (``epsilon_lower_fdp``) and the Gaussian estimate (``epsilon_lower_gaussian``); "-"
    where a record has none.

    A closing line says what a bound means: a bound above the claim refutes it; a bound
    below it is not evidence of privacy; each bound holds at its confidence for its own audit.
    """
    lines = ["| pipeline | dataset | mode | audited | claimed eps | delta | eps lower bound | "
             "lower / claimed | f-DP bound | Gaussian estimate | verdict | size | seconds |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in records:
        claimed, lower = float(r["epsilon_claimed"]), float(r["epsilon_lower"])
        seconds = sum(float(v) for v in r.get("seconds", {}).values())
        stage = r.get("stage", "release path (counts, labels, label accuracy)")
        fdp, gauss = r.get("epsilon_lower_fdp"), r.get("epsilon_lower_gaussian")
        lines.append(
            f"| {clip(r['pipeline'])} | {clip(r['dataset'])} | {clip(r['mode'])} | {clip(stage)} | "
            f"{_fmt(claimed)} | "
            f"{_fmt(float(r['delta']))} | {_fmt(lower)} | {lower / claimed:.3f} | "
            f"{'-' if fdp is None else _fmt(float(fdp))} | "
            f"{'-' if gauss is None else _fmt(float(gauss))} | "
            f"{clip(r['verdict'])} | {_what(r)} | {seconds:.0f} |")
    levels = sorted({float(r["confidence"]) for r in records})
    level = f"{levels[0]:.0%}" if len(levels) == 1 else "their stated"
    lines.append("")
    lines.append(f"Bounds at {level} confidence, each for its own audit. A bound above the claim "
                 "refutes it; a bound below the claim is not evidence of privacy (the attack "
                 "may be weak): *inconclusive* means it stayed below half the claim. The f-DP "
                 "bound (one-run audits with delta > 0; Mahloujifar-Melis-Chaudhuri 2025) "
                 "analyses the same guesses against the claim's Gaussian trade-off curve, a "
                 "stronger hypothesis than (epsilon, delta)-DP; the verdict is Steinke's. "
                 "The Gaussian estimate (Agrawal et al. 2026) fits the IN and OUT canary "
                 "scores as two Gaussians: an estimate under that model, not a "
                 "distribution-free bound.")
    return "\n".join(lines)


def plot_pipeline_audit(record: dict[str, Any], path: str | Path) -> Path:
    """Score histograms of the two sides (left) and the bounds against the claim (right).

    The right panel shows the claim, the verdict's lower bound and, where the record has them,
    the f-DP bound and the Gaussian estimate.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = record["score_histogram"]
    edges = np.asarray(hist["edges"], dtype=np.float64)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2),
                                      gridspec_kw={"width_ratios": [2.2, 1]})
    sides = record.get("side_labels", {"x": "x", "x_prime": "x'"})
    left.stairs(hist["x"], edges, fill=True, alpha=0.45, color="tab:red",
                label=clip(sides["x"]))
    left.stairs(hist["x_prime"], edges, fill=True, alpha=0.45, color="tab:blue",
                label=clip(sides["x_prime"]))
    left.set_xlabel(clip(record.get("score_name", "canary score"), 160))
    one_run = record.get("estimator") == "one-run"
    left.set_ylabel("canaries" if one_run else "runs")
    left.set_title(f"one run, {record['canaries']:,} canaries ({record['correct']:,} of "
                   f"{record['guesses']:,} guesses right)" if one_run
                   else f"{record['runs_per_side']:,} runs per side")
    left.legend(fontsize=8)
    claimed, lower = float(record["epsilon_claimed"]), float(record["epsilon_lower"])
    heights = [claimed, lower]
    colors = ["black", "tab:red" if lower > claimed else "tab:green"]
    ticks = ["claimed", f"lower bound\n({float(record['confidence']):.0%})"]
    for key, tick, color in (("epsilon_lower_fdp", "f-DP\nbound", "tab:orange"),
                             ("epsilon_lower_gaussian", "Gaussian\nestimate", "tab:olive")):
        if record.get(key) is not None:
            heights.append(float(record[key]))
            colors.append(color)
            ticks.append(tick)
    positions = list(range(len(heights)))
    right.bar(positions, heights, color=colors, width=0.6)
    for x, h in zip(positions[1:], heights[1:], strict=True):
        right.text(x, h, f"{h:.3g}", ha="center", va="bottom", fontsize=7)
    right.set_xticks(positions, ticks, fontsize=8 if len(ticks) > 2 else None)
    right.set_ylabel("epsilon")
    right.set_title(f"{clip(record['verdict'])}: {lower:.3f} / {claimed:g} = "
                    f"{lower / claimed:.2f}")
    fig.suptitle(f"{clip(record['pipeline'])} {clip(record['dataset'])} {clip(record['mode'])}: "
                 f"{clip(record['estimator'])} audit "
                 f"({clip(record['neighbouring'].split(':')[0])})", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
