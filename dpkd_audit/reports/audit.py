"""Audit reports built from saved audit records (dicts / JSON lines), never from live objects.

A record has at least ``mechanism``, ``epsilon_claimed`` and ``epsilon_lower``; optional keys:
``epsilon_estimate`` (the point estimate on the bounding samples), ``violation``,
``samples_per_side``, ``seconds``, ``attack``, ``true_epsilon`` (positive controls).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["audit_markdown_table", "plot_audit"]


def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        return f"{value:.{digits}g}"
    return str(value)


def audit_markdown_table(records: Sequence[dict[str, Any]]) -> str:
    """A Markdown table: claimed epsilon, lower bound, ratio, verdict, samples, seconds."""
    lines = ["| mechanism | claimed eps | eps lower bound | lower / claimed | verdict | attack | "
             "samples per side | seconds |", "|---|---:|---:|---:|---|---|---:|---:|"]
    for r in records:
        claimed, lower = float(r["epsilon_claimed"]), float(r["epsilon_lower"])
        verdict = "VIOLATION" if r.get("violation", lower > claimed) else "ok"
        lines.append(
            f"| {r['mechanism']} | {_fmt(claimed)} | {_fmt(lower)} | "
            f"{_fmt(lower / claimed if claimed else math.inf, 3)} | {verdict} | "
            f"{r.get('attack', '-')} | {_fmt(r.get('samples_per_side'))} | "
            f"{_fmt(r.get('seconds'), 3)} |")
    return "\n".join(lines)


def plot_audit(records: Sequence[dict[str, Any]], path: str | Path, *,
               title: str = "Claimed vs empirical epsilon") -> Path:
    """Plot claimed epsilon against the audited lower bound, one column per mechanism (PNG).

    The bar of each mechanism runs from the lower bound (at the stated confidence) up to the
    point estimate on the bounding samples, when the record has one; a red lower bound is above
    the claim (a violation).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not records:
        raise ValueError("records must not be empty")
    path = Path(path)
    names = [str(r["mechanism"]) for r in records]
    x = list(range(len(records)))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(records) + 2), 4.8))
    claimed = [float(r["epsilon_claimed"]) for r in records]
    lower = [float(r["epsilon_lower"]) for r in records]
    finite = [v for v in lower + claimed if math.isfinite(v)]
    top = max(finite) if finite else 1.0
    ceiling = top * 1.15 + 1e-9  # where infinite lower bounds are drawn (with an arrow)
    ax.scatter(x, claimed, marker="_", s=500, color="black", zorder=3, label="claimed epsilon")
    for i, r in enumerate(records):
        if not math.isfinite(lower[i]):
            ax.scatter([i], [ceiling], marker="^", color="tab:red", s=60, zorder=4,
                       label="lower bound = inf")
            ax.annotate("inf", (i, ceiling), textcoords="offset points", xytext=(6, -3),
                        fontsize=8, color="tab:red")
            continue
        violation = bool(r.get("violation", lower[i] > claimed[i]))
        color = "tab:red" if violation else "tab:blue"
        estimate = r.get("epsilon_estimate")
        if estimate is not None and math.isfinite(float(estimate)) and estimate > lower[i]:
            ax.plot([i, i], [lower[i], float(estimate)], color=color, lw=2, alpha=0.6)
        ax.scatter([i], [lower[i]], color=color, zorder=4, s=36,
                   label="lower bound (violation)" if violation else "lower bound")
        true_eps = r.get("true_epsilon")
        if true_eps is not None and math.isfinite(float(true_eps)):
            ax.scatter([i], [float(true_eps)], marker="x", color="tab:gray", zorder=3,
                       label="true epsilon (controls)")
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("epsilon")
    ax.set_ylim(0, top * 1.3 + 1e-9)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

