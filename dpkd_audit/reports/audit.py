"""Audit reports built from saved audit records (dicts / JSON lines), never from live objects.

A record has at least ``mechanism``, ``epsilon_claimed`` and ``epsilon_lower``; optional keys:
``verdict`` (``violation`` / ``consistent`` / ``inconclusive``; derived from the bound when
absent), ``epsilon_estimate`` (the point estimate on the bounding samples), ``violation``,
``samples_per_side``, ``seconds``, ``attack``, ``policy``, ``control`` and ``true_epsilon``
(positive controls).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpkd_audit.audit.auditor import verdict_of
from dpkd_audit.reports.safe_json import MAX_TEXT_CHARS, clip

__all__ = ["audit_figure", "audit_markdown_table", "plot_audit", "record_verdict"]

def _fmt(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf"
        return f"{value:.{digits}g}"
    return str(value)


def record_verdict(record: dict[str, Any]) -> str:
    """``violation``, ``consistent`` or ``inconclusive`` (a bound of 0 is never "ok").

    The record's own verdict when it has one, else the auditor's rule
    (:func:`~dpkd_audit.audit.auditor.verdict_of`) applied to its bound and claim.
    """
    if record.get("verdict"):
        return str(record["verdict"])
    return verdict_of(float(record["epsilon_lower"]), float(record["epsilon_claimed"])).value


#: The verdicts as the records write them (one vocabulary in JSON, HTML, tables and the CLI).
_VERDICT_TEXT = {"violation": "violation", "consistent": "consistent",
                 "inconclusive": "inconclusive (no power)",
                 "unconfirmed": "unconfirmed (no violation)"}


def audit_markdown_table(records: Sequence[dict[str, Any]]) -> str:
    """A Markdown table: claimed epsilon, lower bound, ratio, verdict, samples, seconds.

    Records that name the inputs audited get an ``inputs`` column (their types included: a
    library may dispatch on them); a record with a bound of its real-valued design (float bits
    excluded) gets a second row for it. With more than one record, a last line says what holds
    jointly over the table.
    """
    attainable = any(r.get("epsilon_attainable") is not None for r in records)
    inputs = any(r.get("inputs") for r in records)
    lines = ["| mechanism | claimed eps | eps lower bound | lower / claimed | "
             + ("attainable | " if attainable else "")
             + "verdict | attack | " + ("inputs | " if inputs else "")
             + "samples per side | seconds |",
             "|---|---:|---:|---:|" + ("---:|" if attainable else "") + "---|---|"
             + ("---|" if inputs else "") + "---:|---:|"]

    def row(r: dict[str, Any], name: str) -> str:
        claimed, lower = float(r["epsilon_claimed"]), float(r["epsilon_lower"])
        best = r.get("epsilon_attainable")
        pair = r.get("inputs")
        return (f"| {name} | {_fmt(claimed)} | {_fmt(lower)} | "
                f"{_fmt(lower / claimed if claimed else math.inf, 3)} | "
                + (f"{_fmt(best) if best is not None else '-'} | " if attainable else "")
                + f"{_VERDICT_TEXT.get(record_verdict(r), clip(record_verdict(r)))} | "
                + f"{clip(r.get('attack', '-'), MAX_TEXT_CHARS)} | "
                + (f"{clip(pair[0])} vs {clip(pair[1])} | " if inputs and pair else
                   ("- | " if inputs else ""))
                + f"{_fmt(r.get('samples_per_side'))} | {_fmt(r.get('seconds'), 3)} |")

    for r in records:
        name = f"{clip(r['mechanism'])} (control)" if r.get("control") else clip(r["mechanism"])
        lines.append(row(r, name))
        design = r.get("design")
        if design:
            lines.append(row({**design, "seconds": None}, f"{name}: real-valued design"))
    if len(records) > 1:
        confidence = records[0].get("confidence")
        level = f"{float(confidence):.0%}" if confidence is not None else "its confidence"
        lines.append("")
        family = records[0].get("family_error")
        if family:
            lines.append(
                f"Each bound holds at {level} for its own audit. A violation is reported only "
                f"when a confirmation on fresh samples passes at "
                f"{float(family['confirmation_confidence']):.4%}: the chance that any correct "
                f"mechanism of these {family['audits']} audits is reported violated is at "
                f"most {float(family['error']):.0%} (Bonferroni).")
        else:
            lines.append(f"Each bound holds at {level} for its own audit, not jointly: over "
                         f"{len(records)} audits of correct mechanisms, about "
                         f"{len(records)} x (1 - confidence) false alarms are expected at "
                         "most.")
    return "\n".join(lines)


def plot_audit(records: Sequence[dict[str, Any]], path: str | Path, *,
               title: str = "Claimed vs empirical epsilon") -> Path:
    """Write :func:`audit_figure` as a PNG at ``path`` (parent folders are created)."""
    import matplotlib.pyplot as plt

    fig = audit_figure(records, title=clip(title, 200))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


#: Optional one-run figures drawn beside the (Steinke) lower bound: marker, colour, legend.
_ONE_RUN_EXTRAS = {
    "epsilon_lower_fdp": ("D", "tab:orange", "f-DP one-run bound (Gaussian trade-off)"),
    "epsilon_lower_gaussian": ("*", "tab:olive", "Gaussian one-run estimate (not a bound)"),
}


def audit_figure(records: Sequence[dict[str, Any]], *,
                 title: str = "Claimed vs empirical epsilon") -> Any:
    """Claimed epsilon against the audited lower bound (a matplotlib figure, log-scale epsilon).

    Package mechanisms come first, then the positive controls (a separating line between the
    groups); per row: the claim (black bar), the lower bound (filled dot: blue consistent,
    red violation; hollow grey: inconclusive, a bound of 0 drawn at the left edge), the
    point estimate (a line right from the bound), for controls the true epsilon (cross) and, for
    one-run audits that have them, the f-DP bound (``epsilon_lower_fdp``, orange diamond) and
    the Gaussian estimate (``epsilon_lower_gaussian``, olive star) just below the bound's row.
    One row per audit (epsilon across), the legend below the axes.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    if not records:
        raise ValueError("records must not be empty")
    ordered = ([r for r in records if not r.get("control")]
               + [r for r in records if r.get("control")])
    names = [clip(r["mechanism"]) for r in ordered]  # a name from a record: bounded
    x = list(range(len(ordered)))
    claimed = [float(r["epsilon_claimed"]) for r in ordered]
    lower = [float(r["epsilon_lower"]) for r in ordered]
    positive = [v for v in lower + claimed if math.isfinite(v) and v > 0]
    for r in ordered:
        for key in ("true_epsilon", *_ONE_RUN_EXTRAS):
            value = r.get(key)
            if value is not None and math.isfinite(float(value)) and float(value) > 0:
                positive.append(float(value))
    bottom, top = min(positive) / 3.0, max(positive) * 3.0
    # one row per audit, epsilon across: readable at any count and page width
    fig, ax = plt.subplots(figsize=(9.0, max(3.6, 0.34 * len(ordered) + 2.2)))
    ax.set_xscale("log")
    ax.scatter(claimed, x, marker="|", s=300, color="black", zorder=3, label="claimed epsilon")
    for i, r in enumerate(ordered):
        verdict = record_verdict(r)
        if not math.isfinite(lower[i]):
            ax.scatter([top / 1.5], [i], marker=">", color="tab:red", s=60, zorder=4,
                       label="lower bound = inf (violation)")
            continue
        if verdict == "inconclusive":
            shown = max(lower[i], bottom * 1.05)
            ax.scatter([shown], [i], facecolors="none", edgecolors="tab:gray", s=40, zorder=4,
                       label="lower bound, inconclusive (0 at the left edge)")
        else:
            color = "tab:red" if verdict == "violation" else "tab:blue"
            estimate = r.get("epsilon_estimate")
            if estimate is not None and math.isfinite(float(estimate)) \
                    and float(estimate) > lower[i]:
                ax.plot([lower[i], min(float(estimate), top)], [i, i], color=color, lw=2,
                        alpha=0.5)
            ax.scatter([lower[i]], [i], color=color, zorder=4, s=36,
                       label=("lower bound, violation" if verdict == "violation"
                              else "lower bound, consistent"))
        true_eps = r.get("true_epsilon")
        if true_eps is not None and math.isfinite(float(true_eps)):
            ax.scatter([float(true_eps)], [i], marker="x", color="tab:purple", zorder=3,
                       label="true epsilon (controls)")
        for offset, key in zip((0.18, 0.36), _ONE_RUN_EXTRAS, strict=True):
            value = r.get(key)
            if value is None or not math.isfinite(float(value)):
                continue
            marker, color, label = _ONE_RUN_EXTRAS[key]
            ax.scatter([max(float(value), bottom * 1.05)], [i + offset], marker=marker,
                       color=color, s=34, zorder=4, label=label)
    controls = sum(1 for r in ordered if r.get("control"))
    if 0 < controls < len(ordered):
        split = len(ordered) - controls - 0.5
        ax.axhline(split, color="tab:gray", lw=1, ls="--")
        ax.text(bottom * 1.1, split + 0.3, "positive controls (broken on purpose)", fontsize=8,
                va="top", ha="left", color="tab:gray")
    ax.set_yticks(x)
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()  # first audit on top
    ax.set_xlabel("epsilon (log scale)")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlim(bottom, top)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3, which="both")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    # below the axes: it never covers a point (a bound of 0 sits at the left edge)
    ax.legend(unique.values(), unique.keys(), fontsize=8, loc="upper center",
              bbox_to_anchor=(0.5, -0.09 - 0.3 / max(len(ordered), 1)), ncol=2, frameon=False)
    fig.tight_layout()
    return fig
