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

from dpkd_audit.reports.accuracy import mean_and_spread
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
from dpkd_audit.reports.references import (
    BENCHMARKED_METHODS,
    RECORD_LEVEL_BASELINES,
    best_benchmark,
)
from dpkd_audit.reports.safe_json import clip, safe_file_part

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
    alt: str = ""  # an image's description (the file name when empty)


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
    the record-level methods the papers compare with (their Table I). When three or more points
    sit at :data:`HIGH_BAND` % or above, a second row draws the same with the y axis enlarged on
    them (MNIST's 94-99% band is a pile-up on a 0-100 axis); the legend is below the panels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    chosen = [s for s in series if s.dataset == dataset]
    if not chosen:
        raise ValueError(f"no result record of dataset {dataset!r}")
    means = [100 * sum(p.accuracies) / len(p.accuracies) for s in chosen for p in s.points]
    high = [m for m in means if m >= HIGH_BAND]
    # a second row zooms on the high band when several points crowd it (MNIST: 90-100%)
    band = (math.floor(min(high)) - 1.0, 100.5) if len(high) >= 3 else None
    rows = 2 if band is not None else 1
    fig, axes = plt.subplots(rows, 2, figsize=(9.5, 4.2 * rows + 2.6), sharex="col",
                             squeeze=False)
    finite = [p.epsilon_record_level for s in chosen for p in s.points
              if math.isfinite(p.epsilon_record_level)]
    pub = [p.epsilon_published for s in chosen for p in s.points
           if p.epsilon_published is not None and math.isfinite(p.epsilon_published)]
    hi = max(finite + pub + [1.0])
    has_inf = any(not math.isfinite(p.epsilon_record_level) for s in chosen for p in s.points)
    inf_x = hi * 10 ** 0.8
    right_end = inf_x * 3 if has_inf else hi * 3  # no empty "inf" column
    lo = min([v for v in finite + pub if v > 0] + [hi]) / 3
    for row, (left, right) in enumerate(axes):
        _draw_accuracy_row(left, right, chosen, dataset, inf_x=inf_x, legend=row == 0)
        left.set_ylabel("test accuracy (%)" if row == 0 else "test accuracy (%), zoomed")
        if row == 0:
            left.set_ylim(0, 100)
            left.set_title("vs published epsilon (the papers' accounting)", fontsize=10)
            right.set_title("vs record-level epsilon (one private record)", fontsize=10)
        else:
            left.set_ylim(*band)
        for ax in (left, right):
            ax.set_xscale("log")
            ax.grid(alpha=0.3, which="both")
            ax.tick_params(labelsize=9)
            # plain numbers at powers of ten only (no "4x10^-1" minor labels on short ranges)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        if has_inf:
            right.axvline(hi * 10 ** 0.4, color="tab:gray", lw=0.8, ls="--")
        right.sharey(left)
        right.set_xlim(lo, right_end)
        left.set_xlim(lo, hi * 3)
    left, right = axes[-1]
    if has_inf:
        ticks = [t for t in right.get_xticks() if lo <= t <= hi * 10 ** 0.3]
        right.set_xticks([*ticks, inf_x])
        right.set_xticklabels([f"{t:g}" for t in ticks] + ["inf\n(not DP)"])
        right.set_xlim(lo, right_end)
    left.set_xlabel("epsilon (published)")
    right.set_xlabel("epsilon (record level)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    h2, l2 = axes[0][1].get_legend_handles_labels()
    fig.suptitle(f"Test accuracy vs epsilon: {dataset} (mean over seeds, bars min-max)"
                 + ("" if band is None else f"; lower row: {band[0]:g}-100% enlarged"),
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.02 + 0.035 * math.ceil(len(labels + l2) / 2) / rows, 1, 1))
    fig.legend(handles + h2, labels + l2, loc="lower center", ncol=2, fontsize=8.5,
               frameon=False)
    return fig


#: Accuracy (%) from which points count as crowding the top of the axis (a zoomed row).
HIGH_BAND = 90.0


def _draw_accuracy_row(left: Any, right: Any, chosen: Sequence[Series], dataset: str, *,
                       inf_x: float, legend: bool) -> None:
    """One row of :func:`accuracy_panels`: every series on both epsilons, paper figures."""
    import matplotlib.pyplot as plt

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
            spread = [mean_and_spread(a) for a in acc]
            y = [m for m, _, _ in spread]
            err = [[d for _, d, _ in spread], [u for _, _, u in spread]]
            ax.errorbar(x, y, yerr=err, color=color, marker=marker, capsize=3, lw=1.4,
                        label=s.label if ax is left and legend else None,
                        ls="-" if ax is left or all(v != inf_x for v in x) else ":")
        for p in s.points:
            ref = paper_match(s, p)
            if ref is not None:
                left.scatter([ref.epsilon], [100 * ref.test_accuracy], marker="*", s=160,
                             facecolors="none", edgecolors=color, zorder=5,
                             label=(f"paper: {s.method} {s.mode}"
                                    if legend and f"{s.method}{s.mode}" not in drawn_refs
                                    else None))
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
                      label="best record-level method of the papers' Table I"
                      if n == 0 and legend else None)
        right.annotate(b.name, (b.epsilon, 100 * b.test_accuracy), fontsize=8,
                       color="tab:gray", xytext=(4, -10), textcoords="offset points")
    if any(s.method in BENCHMARKED_METHODS and math.isfinite(p.epsilon_record_level)
           for s in chosen for p in s.points):
        for n, b in enumerate(best_benchmark(dataset)):
            right.scatter([b.epsilon], [100 * b.test_accuracy], marker="P", s=60,
                          color="black", zorder=4,
                          label="DPImageBench, best without public data (delta 1.67e-6)"
                          if n == 0 and legend else None)
            right.annotate(b.name, (b.epsilon, 100 * b.test_accuracy), fontsize=8,
                           color="black", xytext=(4, 4), textcoords="offset points")


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _audit_size(record: dict[str, Any]) -> str:
    """``"one run, 1,000 canaries"`` or ``"many runs"``: tells two audits of one stage apart."""
    if record.get("estimator") == "one-run" and "canaries" in record:
        return f"one run, {record['canaries']:,} canaries"
    return "many runs" if record.get("estimator") == "many-run" else \
        clip(record.get("estimator") or "")


def _pipeline_audit_points(records: Sequence[SourcedRecord]) -> list[dict[str, Any]]:
    return [{"mechanism": f"{clip(r.record['pipeline'])} {clip(r.record['dataset'])} "
                          f"{clip(r.record['mode'])} ({_audit_size(r.record)})",
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
            out.append(f"![{_md(b.alt or b.text)}]({b.text})\n")
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
document.body.dataset.figures=im.length;document.body.dataset.figuresLoaded=n;
var w=document.documentElement.clientWidth,s=0;for(var j=0;j<im.length;j++){
if(im[j].getBoundingClientRect().right>w+1){s++;}}document.body.dataset.figuresOverflowing=s;
document.body.dataset.smallestFigureScale=Math.min.apply(null,Array.prototype.map.call(im,
function(x){return x.naturalWidth?x.width/x.naturalWidth:1;})).toFixed(3);});"""


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
            parts.append(f'<p><img src="{html.escape(b.text)}" '
                         f'alt="{html.escape(b.alt or b.text)}"></p>')
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


def _accuracy_png(dataset: str, *, ablations: bool = False) -> str:
    # the dataset name comes from records: never a path (issue 33: "x/../../ESCAPED")
    return f"accuracy-{safe_file_part(dataset)}{'-ablations' if ablations else ''}.png"


def _accuracy_alt(dataset: str, series: Sequence[Series], *, ablations: bool) -> str:
    chosen = [s for s in series if s.dataset == dataset and s.ablation == ablations]
    return (f"{'Ablations' if ablations else 'Test accuracy'} on {dataset} against the published "
            f"epsilon (left panel) and the record-level epsilon (right panel): "
            f"{len(chosen)} line{'s' if len(chosen) != 1 else ''} ("
            + "; ".join(s.label for s in chosen) + "); paper figures as hollow stars; runs "
            "that are not differentially private at the record level in the column marked inf.")


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
            blocks.append(Block("img", _accuracy_png(dataset),
                                alt=_accuracy_alt(dataset, series, ablations=False)))
            blocks.append(Block("table", table=accuracy_table(series, dataset)))
        ablated = [d for d in datasets if any(s.dataset == d and s.ablation for s in series)]
        if ablated:
            blocks.append(Block("h2", "Ablations"))
            for dataset in ablated:
                blocks.append(Block("img", _accuracy_png(dataset, ablations=True),
                                    alt=_accuracy_alt(dataset, series, ablations=True)))
                blocks.append(Block("table", table=accuracy_table(series, dataset,
                                                                  ablations=True)))
        blocks.append(Block("h2", "Budgets: each run's plan under every accountant"))
        blocks.extend(Block("table", table=t) for t in budget_tables(records))
    audits = audit_tables(records)
    if audits:
        blocks.append(Block("h2", "Audits: claimed epsilon versus empirical lower bound"))
        for table in audits:
            mechanisms = table.caption.startswith("Audits of the mechanisms")
            blocks.append(Block(
                "img", _MECHANISMS_PNG if mechanisms else _PIPELINES_PNG,
                alt=("Claimed epsilon and the audited lower bound of each "
                     + ("mechanism" if mechanisms else "pipeline audit")
                     + ", one row each; a bound above its claim refutes the claim.")))
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
    written = []
    for dataset in sorted({s.dataset for s in series}):
        for ablations in (False, True):
            chosen = [s for s in series if s.ablation == ablations]
            if any(s.dataset == dataset for s in chosen):
                written.append(_save(accuracy_panels(chosen, dataset),
                                     out_dir / _accuracy_png(dataset, ablations=ablations)))
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
