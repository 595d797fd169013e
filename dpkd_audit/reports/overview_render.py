"""``dpkd report``: figures, Markdown and a self-contained HTML page from result records.

:func:`build_report` reads records (:func:`~dpkd_audit.reports.collect.collect`), draws the
figures (PNG, beside the page), and writes ``index.html`` (no network: inline CSS, images beside
it, a few lines of inline script that only mark on ``<body>`` whether every figure loaded) and
``report.md`` with the same tables. Every number of a table comes from a record named in its
cell (``data-src`` / ``data-key`` in the HTML; see :mod:`dpkd_audit.reports.overview`).
"""

from __future__ import annotations

import dataclasses
import html
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dpkd_audit.reports.audit import audit_figure
from dpkd_audit.reports.collect import RecordKind, SourcedRecord, collect, of_kind
from dpkd_audit.reports.overview import (
    Series,
    Table,
    accuracy_table,
    audit_tables,
    budget_tables,
    devices,
    paper_match,
    provenance_table,
    series_of,
)
from dpkd_audit.reports.references import RECORD_LEVEL_BASELINES
from dpkd_audit.reports.safe_json import safe_file_part

__all__ = ["Block", "ReportFiles", "accuracy_panels", "build_report", "render_html",
           "render_markdown"]

_MARKERS = ("o", "s", "^", "D", "v", "P", "X")  # 7 shapes x 20 colours: distinct pairs
_DATASET_ORDER = ("mnist", "fashion-mnist", "digits")


@dataclasses.dataclass(frozen=True)
class Block:
    """A piece of the page: ``kind`` is ``h1``, ``h2``, ``p``, ``img`` or ``table``."""

    kind: str
    text: str = ""
    table: Table | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReportFiles:
    """What :func:`build_report` wrote."""

    html: Path
    markdown: Path
    figures: tuple[Path, ...]
    records: int


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------

def accuracy_panels(series: Sequence[Series], dataset: str) -> Any:
    """Accuracy against the published epsilon (left) and the record-level epsilon (right).

    One line per series (method, mode, configuration), markers at the mean over seeds with a
    min-max bar; runs whose record-level epsilon is infinite are drawn in a column of their own
    at the right edge of the right panel, labelled "inf (not DP)", never dropped. Paper figures
    are hollow stars on the left panel (the papers' accounting); on the right, grey diamonds are
    the record-level methods the papers compare with (their Table I).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = [s for s in series if s.dataset == dataset]
    if not chosen:
        raise ValueError(f"no result record of dataset {dataset!r}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    finite = [p.epsilon_record_level for s in chosen for p in s.points
              if math.isfinite(p.epsilon_record_level)]
    pub = [p.epsilon_published for s in chosen for p in s.points
           if p.epsilon_published is not None and math.isfinite(p.epsilon_published)]
    hi = max(finite + pub + [1.0])
    inf_x = hi * 10 ** 0.8
    colors = [plt.get_cmap("tab20")(k) for k in (0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 1, 3, 5, 7,
                                                 9, 11, 13, 15, 17, 19)]
    drawn_refs: set[str] = set()
    for i, s in enumerate(chosen):
        color, marker = colors[i % len(colors)], _MARKERS[i % len(_MARKERS)]
        for ax, xs in ((left, [p.epsilon_published for p in s.points]),
                       (right, [p.epsilon_record_level if math.isfinite(p.epsilon_record_level)
                                else inf_x for p in s.points])):
            order = sorted(range(len(xs)), key=lambda j: xs[j])
            x = [xs[j] for j in order]
            acc = [s.points[j].accuracies for j in order]
            y = [100 * sum(a) / len(a) for a in acc]
            err = [[y[k] - 100 * min(acc[k]) for k in range(len(y))],
                   [100 * max(acc[k]) - y[k] for k in range(len(y))]]
            ax.errorbar(x, y, yerr=err, color=color, marker=marker, capsize=3, lw=1.4,
                        label=s.label if ax is left else None,
                        ls="-" if ax is left or all(v != inf_x for v in x) else ":")
        for p in s.points:
            ref = paper_match(s, p)
            if ref is not None:
                left.scatter([ref.epsilon], [100 * ref.test_accuracy], marker="*", s=160,
                             facecolors="none", edgecolors=color, zorder=5,
                             label=(f"paper: {s.method} {s.mode}"
                                    if f"{s.method}{s.mode}" not in drawn_refs else None))
                drawn_refs.add(f"{s.method}{s.mode}")
    baselines = [b for b in RECORD_LEVEL_BASELINES if b.dataset == dataset
                 and any(b.method == s.method for s in chosen)]
    best: dict[float, Any] = {}
    for b in baselines:
        if b.epsilon not in best or b.test_accuracy > best[b.epsilon].test_accuracy:
            best[b.epsilon] = b
    for n, b in enumerate(sorted(best.values(), key=lambda b: b.epsilon)):
        right.scatter([b.epsilon], [100 * b.test_accuracy], marker="D", s=50,
                      facecolors="none", edgecolors="tab:gray", zorder=4,
                      label="best record-level method of the papers' Table I" if n == 0 else None)
        right.annotate(b.name, (b.epsilon, 100 * b.test_accuracy), fontsize=7,
                       color="tab:gray", xytext=(4, -10), textcoords="offset points")
    for ax, title in ((left, "vs published epsilon (the papers' accounting)"),
                      (right, "vs record-level epsilon (one private record)")):
        ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3, which="both")
    right.axvline(hi * 10 ** 0.4, color="tab:gray", lw=0.8, ls="--")
    ticks = [t for t in right.get_xticks() if t <= hi * 10 ** 0.3]
    right.set_xticks([*ticks, inf_x])
    right.set_xticklabels([f"{t:g}" for t in ticks] + ["inf\n(not DP)"])
    lo = min([v for v in finite + pub if v > 0] + [hi]) / 3
    right.set_xlim(lo, inf_x * 3)
    left.set_xlim(lo, hi * 3)
    left.set_ylabel("test accuracy (%)")
    left.set_xlabel("epsilon (published)")
    right.set_xlabel("epsilon (record level)")
    left.set_ylim(0, 100)
    handles, labels = left.get_legend_handles_labels()
    h2, l2 = right.get_legend_handles_labels()
    fig.suptitle(f"Test accuracy vs epsilon: {dataset} (mean over seeds, bars min-max)",
                 fontsize=11)
    fig.tight_layout()
    fig.legend(handles + h2, labels + l2, loc="center left", bbox_to_anchor=(1.0, 0.5),
               fontsize=8, frameon=False)
    return fig


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _pipeline_audit_points(records: Sequence[SourcedRecord]) -> list[dict[str, Any]]:
    return [{"mechanism": f"{r.record['pipeline']} {r.record['dataset']} {r.record['mode']}"
                          f" ({r.record.get('estimator', '')})",
             "epsilon_claimed": r.record["epsilon_claimed"],
             "epsilon_lower": r.record["epsilon_lower"], "verdict": r.record["verdict"],
             **{key: r.record[key] for key in ("epsilon_lower_fdp", "epsilon_lower_gaussian")
                if r.record.get(key) is not None}}
            for r in records]


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

def _md(text: str) -> str:
    """Text from records made inert in Markdown, which passes raw HTML through (issue 33)."""
    return html.escape(text, quote=False)


def _md_cell(text: str) -> str:
    return _md(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(blocks: Sequence[Block]) -> str:
    """Markdown of ``blocks`` (figures as image links beside the file); text HTML-escaped."""
    out: list[str] = []
    for b in blocks:
        if b.kind == "h1":
            out.append(f"# {_md(b.text)}\n")
        elif b.kind == "h2":
            out.append(f"## {_md(b.text)}\n")
        elif b.kind == "p":
            out.append(_md(b.text) + "\n")
        elif b.kind == "img":
            out.append(f"![{b.text}]({b.text})\n")
        elif b.kind == "table" and b.table is not None:
            t = b.table
            out.append(f"**{_md(t.caption)}**\n")
            out.append("| " + " | ".join(_md_cell(c) for c in t.columns) + " |")
            out.append("|" + "|".join("---" for _ in t.columns) + "|")
            for row in t.rows:
                out.append("| " + " | ".join(_md_cell(c.text) for c in row) + " |")
            out.append("")
            out.extend(f"{_md(note)}\n" for note in t.notes)
    return "\n".join(out).rstrip() + "\n"


_CSS = """body{font-family:system-ui,sans-serif;max-width:1280px;margin:2em auto;padding:0 1em;
color:#222}table{border-collapse:collapse;margin:.5em 0 1em;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}th{background:#f3f3f3}
td[data-key]{text-align:right;font-variant-numeric:tabular-nums}img{max-width:100%}
caption{text-align:left;font-weight:600;padding:4px 0}.note{color:#555;font-size:13px}
code{font-size:12px}"""

# Marks on <body> whether every figure loaded and how many load errors happened; no network.
_SCRIPT = """window.addEventListener('error',function(){var b=document.body;
b.dataset.errors=String(Number(b.dataset.errors||0)+1);},true);
window.addEventListener('load',function(){var im=document.images,n=0;
for(var i=0;i<im.length;i++){if(im[i].complete&&im[i].naturalWidth>0){n++;}}
document.body.dataset.figures=im.length;document.body.dataset.figuresLoaded=n;});"""


def _html_cell(cell: Any, tag: str = "td") -> str:
    attrs = ""
    if cell.key is not None:
        attrs += f' data-key="{html.escape(cell.key)}"'
        attrs += f' data-src="{html.escape(" ".join(cell.refs))}"'
        if cell.aggregate != "same":
            attrs += f' data-aggregate="{html.escape(cell.aggregate)}"'
    text = html.escape(cell.text)
    return f"<{tag}{attrs}>{text}</{tag}>"


def render_html(blocks: Sequence[Block], *, title: str) -> str:
    """A self-contained HTML page of ``blocks``."""
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{html.escape(title)}</title>", f"<style>{_CSS}</style>",
             f"<script>{_SCRIPT}</script></head><body>"]
    for b in blocks:
        if b.kind in ("h1", "h2"):
            parts.append(f"<{b.kind}>{html.escape(b.text)}</{b.kind}>")
        elif b.kind == "p":
            parts.append(f"<p>{html.escape(b.text)}</p>")
        elif b.kind == "img":
            parts.append(f'<p><img src="{html.escape(b.text)}" alt="{html.escape(b.text)}">'
                         "</p>")
        elif b.kind == "table" and b.table is not None:
            t = b.table
            parts.append(f"<table><caption>{html.escape(t.caption)}</caption><thead><tr>"
                         + "".join(f"<th>{html.escape(c)}</th>" for c in t.columns)
                         + "</tr></thead><tbody>")
            parts.extend("<tr>" + "".join(_html_cell(c) for c in row) + "</tr>"
                         for row in t.rows)
            parts.append("</tbody></table>")
            parts.extend(f'<p class="note">{html.escape(n)}</p>' for n in t.notes)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------

#: File names of the figures (beside the page); accuracy figures: ``accuracy-DATASET.png``.
_MECHANISMS_PNG, _PIPELINES_PNG = "audit-mechanisms.png", "audit-pipelines.png"


def _accuracy_png(dataset: str) -> str:
    # the dataset name comes from records: never a path (issue 33: "x/../../ESCAPED")
    return f"accuracy-{safe_file_part(dataset)}.png"


def report_blocks(records: Sequence[SourcedRecord], *, title: str, intro: str,
                  series: Sequence[Series] | None = None) -> list[Block]:
    """The page's blocks, figures by their file names.

    ``series`` is :func:`series_of` of ``records`` where already computed.
    """
    series = series_of(records) if series is None else series
    results = of_kind(records, RecordKind.RESULT)
    datasets = sorted({s.dataset for s in series},
                      key=lambda d: (_DATASET_ORDER.index(d) if d in _DATASET_ORDER else 99, d))
    counts = {k: len(of_kind(records, k)) for k in RecordKind}
    blocks = [Block("h1", title), Block("p", intro), Block("p", (
        f"Built from {len(records)} records in {len({r.source for r in records})} files: "
        f"{counts[RecordKind.RESULT]} pipeline runs, {counts[RecordKind.MECHANISM_AUDIT]} "
        f"mechanism audits, {counts[RecordKind.PIPELINE_AUDIT]} pipeline audits. Devices: "
        f"{', '.join(devices(records)) or 'not recorded'}. Every number in a table comes from "
        "the record(s) named in the provenance table (the HTML page carries them on each cell "
        "as data-src and data-key)."))]
    if results:
        blocks.append(Block("h2", "Accuracy versus epsilon"))
        for dataset in datasets:
            blocks.append(Block("img", _accuracy_png(dataset)))
            blocks.append(Block("table", table=accuracy_table(series, dataset)))
        blocks.append(Block("h2", "Budgets: each run's plan under every accountant"))
        blocks.extend(Block("table", table=t) for t in budget_tables(records))
    audits = audit_tables(records)
    if audits:
        blocks.append(Block("h2", "Audits: claimed epsilon versus empirical lower bound"))
        for table in audits:
            blocks.append(Block("img", _MECHANISMS_PNG if table.caption.startswith(
                "Audits of the mechanisms") else _PIPELINES_PNG))
            blocks.append(Block("table", table=table))
    blocks.append(Block("h2", "Provenance"))
    blocks.append(Block("table", table=provenance_table(records)))
    return blocks


def build_report(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
                 base: str | os.PathLike[str] | None = None, title: str = "dpkd-audit report",
                 intro: str = "", prepare: Callable[[], Any] | None = None) -> ReportFiles:
    """Read the records in ``paths`` and write the report into ``out``.

    Writes ``out/index.html``, ``out/report.md`` and the PNGs (``accuracy-DATASET.png``,
    ``audit-mechanisms.png``, ``audit-pipelines.png``). ``out`` itself is never searched for
    records.

    Raises:
        ValueError: For missing paths, malformed or unknown records, or no record (before
            anything is written).
    """
    out_dir = Path(out)
    records = collect(paths, base=base, skip=out_dir)
    series = series_of(records)
    # every table (budgets included) is computed before anything is written
    blocks = report_blocks(records, title=title, intro=intro, series=series)
    if prepare is not None:
        prepare()
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*out_dir.glob("accuracy-*.png"), *out_dir.glob("audit-*.png")]:
        stale.unlink()  # figures of an earlier build that this one may not redraw
    written = [_save(accuracy_panels(series, dataset), out_dir / _accuracy_png(dataset))
               for dataset in sorted({s.dataset for s in series})]
    mechanisms = of_kind(records, RecordKind.MECHANISM_AUDIT)
    if mechanisms:
        fig = audit_figure([dict(r.record) for r in mechanisms],
                           title="Mechanisms: claimed epsilon vs audited lower bound")
        written.append(_save(fig, out_dir / _MECHANISMS_PNG))
    pipelines = of_kind(records, RecordKind.PIPELINE_AUDIT)
    if pipelines:
        fig = audit_figure(_pipeline_audit_points(pipelines),
                           title="Whole pipelines: claimed epsilon vs audited lower bound")
        written.append(_save(fig, out_dir / _PIPELINES_PNG))
    html_path = out_dir / "index.html"
    html_path.write_text(render_html(blocks, title=title), encoding="utf-8")
    md_path = out_dir / "report.md"
    md_path.write_text(render_markdown(blocks), encoding="utf-8")
    return ReportFiles(html=html_path, markdown=md_path, figures=tuple(written),
                       records=len(records))
