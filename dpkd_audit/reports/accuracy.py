"""Accuracy-versus-epsilon plots built from saved result records only (dicts / JSON lines).

:func:`accuracy_figure` builds the figure of accuracy against the target epsilon, with the
papers' numbers as reference markers, and :func:`plot_accuracy` saves it as a PNG. The records
are read, checked and aggregated over seeds by :mod:`dpkd_audit.reports.records`; the Markdown
tables are in :mod:`dpkd_audit.reports.tables`. It never imports the pipelines or torch
(matplotlib is imported when a figure is built): everything comes from the records.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpkd_audit._validate import check_int

# The public names of records.py and tables.py are re-exported (they lived here until the split).
from dpkd_audit.reports.records import (
    REQUIRED_KEYS,
    SETUP_KEYS,
    Metric,
    _aggregate,
    _check_references,
    _check_text,
    _checked,
    _default_references,
    _devices,
    _fmt_eps,
    _Point,
    _setup_label,
    _varying_setup,
    has_finite_record_level,
    load_records,
    validate_record,
)
from dpkd_audit.reports.references import (
    BENCHMARKED_METHODS,
    RECORD_LEVEL_BASELINES,
    PaperReference,
    best_benchmark,
)
from dpkd_audit.reports.safe_json import clip
from dpkd_audit.reports.tables import (
    PARTIAL_SECONDS_MARK,
    TABLE_COLUMNS,
    markdown_table,
    results_overview,
    seconds_note,
    sweep_readme,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "PARTIAL_SECONDS_MARK",
    "REQUIRED_KEYS",
    "SETUP_KEYS",
    "TABLE_COLUMNS",
    "Metric",
    "accuracy_figure",
    "load_records",
    "markdown_table",
    "plot_accuracy",
    "results_overview",
    "seconds_note",
    "sweep_readme",
    "validate_record",
]


# --------------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------------

#: Marker shapes, one per series, so that series stay apart where their points coincide.
_MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
_LABELS = SETUP_KEYS.index("labels")



def mean_and_spread(values: Sequence[float]) -> tuple[float, float, float]:
    """The mean of accuracies in percent, and its distances down to the min and up to the max.

    The mean is clamped into ``[min, max]`` (a float sum of equal values can land a rounding
    error above them: three seeds at 0.1 gave a "negative" upper distance that matplotlib
    refuses), so both distances are never negative.
    """
    low, high = 100.0 * min(values), 100.0 * max(values)
    mean = min(max(100.0 * sum(values) / len(values), low), high)
    return mean, mean - low, high - mean

def _series_of(points: Sequence[_Point]) -> tuple[dict[tuple[Any, ...], list[_Point]],
                                                   set[tuple[str, str, str]],
                                                   set[tuple[str, str, str]]]:
    """Points grouped into plotted lines, and which (method, dataset, mode) merge label counts.

    Returns the lines, the triples with a line that merges label counts and the triples whose
    label counts are kept apart. A line is one setup. Where the label count is the only setup
    key that varies along a line and it differs at every epsilon (DGD's query counts, one per
    budget), the points make one line over epsilon annotated with ``Q=``; where two label
    counts share an epsilon (an ablation), they stay separate lines, never averaged or joined.
    """
    def without_labels(p: _Point) -> tuple[Any, ...]:
        return (*p.triple, p.setup[:_LABELS] + p.setup[_LABELS + 1:])

    groups: dict[tuple[Any, ...], list[_Point]] = {}
    for p in points:
        groups.setdefault(without_labels(p), []).append(p)
    series: dict[tuple[Any, ...], list[_Point]] = {}
    annotated: set[tuple[str, str, str]] = set()
    split: set[tuple[str, str, str]] = set()
    for key, pts in groups.items():
        labels = {p.setup[_LABELS] for p in pts}
        epsilons = [p.epsilon for p in pts]
        if len(labels) > 1 and len(set(epsilons)) == len(epsilons):
            series[key] = sorted(pts, key=lambda p: p.epsilon)
            annotated.add(pts[0].triple)
        else:
            if len(labels) > 1:
                split.add(pts[0].triple)
            for p in pts:
                series.setdefault(p.series, []).append(p)
    return series, annotated, split


#: Line styles of a mode's setups (first setup solid); label-accuracy curves are dashed.
_SETUP_LINESTYLES: tuple[Any, ...] = ("-", "-.", ":", (0, (5, 1, 1, 1, 1, 1)))
#: Largest offset between neighbouring series along x, in decades (0.02: 4.7% of epsilon).
_DODGE_DECADES = 0.02


def _fmt_list(values: Iterable[float]) -> str:
    return ", ".join(_fmt_eps(v) for v in values)


def _paper_label(triple: tuple[str, str, str], drawn: Sequence[PaperReference],
                 ours: set[int]) -> str:
    """Legend label of a paper group, naming the paper's s where it differs from ours."""
    label = "paper: " + " ".join(triple)
    by_clusters: dict[int, list[float]] = {}
    for ref in sorted(drawn, key=lambda r: r.epsilon):
        if ref.clusters is not None:
            by_clusters.setdefault(ref.clusters, []).append(ref.epsilon)
    if not by_clusters or set(by_clusters) == ours:
        return label
    if len(by_clusters) == 1:
        paper = f"s={next(iter(by_clusters))}"
    else:
        paper = ", ".join(f"s={s} at eps {_fmt_list(eps)}"
                          for s, eps in sorted(by_clusters.items(), key=lambda kv: kv[1][0]))
    mine = f"; ours s={', '.join(str(s) for s in sorted(ours))}" if ours else ""
    return f"{label} ({paper}{mine})"


def _dodge_factors(xs_by_series: Mapping[tuple[Any, ...], set[float]],
                   ) -> dict[tuple[Any, ...], float]:
    """Multiplicative x offsets for the series that share an epsilon with another series."""
    counts: dict[float, int] = {}
    for xs in xs_by_series.values():
        for x in xs:
            counts[x] = counts.get(x, 0) + 1
    crowded = [key for key, xs in xs_by_series.items() if any(counts[x] > 1 for x in xs)]
    n = len(crowded)
    if n < 2:
        return {}
    step = min(_DODGE_DECADES, 0.1 / (n - 1))  # the whole spread stays within 0.1 decade
    return {key: 10.0 ** (step * (i - (n - 1) / 2)) for i, key in enumerate(crowded)}


def accuracy_figure(records: Sequence[Mapping[str, Any]], *,
                    references: Sequence[PaperReference] | None = None,
                    title: str | None = None,
                    metric: Metric | str = Metric.TEST_ACCURACY,
                    show_label_accuracy: bool = False,
                    dashed_metric: Metric | str | None = None) -> Figure:
    """Build the accuracy-versus-epsilon figure (not saved; see :func:`plot_accuracy`).

    x is the target epsilon (log scale), y the accuracy in %. Each series (one per method,
    dataset, mode and setup, see :data:`SETUP_KEYS`; the legend names the setup keys that vary)
    is a line through its epsilons in increasing order; where several runs (seeds) share an
    epsilon, the marker is their mean and an error bar spans min to max.

    * **Colour**: one per (method, dataset, mode), shared by its series, its label-accuracy
      curve and its paper markers.
    * **Telling series apart**: every series has its own marker shape; a mode's setups after
      the first get their own line style (label-accuracy curves are dashed); series that share
      an epsilon with another series are offset along x by a few percent of epsilon (at most
      0.1 decade in all), so that coinciding points stay visible. A footnote says so.
    * **Record-level baselines**: for runs with a finite record-level epsilon, grey hollow
      diamonds at the best record-level method of the method's paper's own comparison table
      at each epsilon (:data:`~dpkd_audit.reports.references.RECORD_LEVEL_BASELINES`).
    * **Paper references**: hollow stars at their exact epsilon, one legend entry per group,
      ``"paper: METHOD DATASET MODE"``; where the paper's number of queries s differs from the
      records' it is named: ``"paper: rknn mnist central (s=10 at eps 0.01, s=40 at eps 0.04,
      0.1; ours s=100)"``.

    A footnote names the device when all records share one (the devices otherwise).

    Args:
        records: Result records (validated with :func:`validate_record`).
        references: Paper references to draw; ``None`` draws the :data:`PAPER_REFERENCES` of
            the (method, dataset, mode) triples in ``records`` (no marker for a mode the records
            do not have); an empty sequence draws none; given ones are all drawn.
        title: Figure title (default ``"Test accuracy vs epsilon (DATASETS)"``).
        metric: The accuracy on the y axis (:class:`Metric` or its value).
        show_label_accuracy: Also draw the label accuracy of each series as a dashed line (when
            ``metric`` is not already the label accuracy); the same as
            ``dashed_metric="label_accuracy"``.
        dashed_metric: A second accuracy drawn dashed for each series (e.g.
            ``"teacher_accuracy"`` for methods that train a teacher); not with
            ``show_label_accuracy``.

    Returns:
        A ``matplotlib.figure.Figure`` with an Agg canvas (no pyplot state involved). Series
        legend labels are the line labels; references start with ``"paper: "``.

    Raises:
        ValueError: For empty or invalid records, a bad ``metric`` / ``references`` / ``title``,
            or when no record and no reference has a value for ``metric``.
    """
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    checked = _checked(records)
    metric = Metric.parse(metric)
    if title is not None:
        _check_text("title", title)
    if not isinstance(show_label_accuracy, bool):
        raise ValueError(f"show_label_accuracy must be a bool; got {show_label_accuracy!r}")
    refs = (_default_references(checked) if references is None
            else _check_references(references))

    points = _aggregate(checked)
    series, annotated, split = _series_of(points)
    varying = _varying_setup(points)
    for triple in annotated - split:  # the legend need not name Q: the points say it
        varying[triple] = [i for i in varying[triple] if SETUP_KEYS[i] != "labels"]

    palette = list(colormaps["tab10"].colors)
    triple_colors: dict[tuple[str, str, str], Any] = {}

    def color_for(triple: tuple[str, str, str]) -> Any:
        if triple not in triple_colors:
            triple_colors[triple] = palette[len(triple_colors) % len(palette)]
        return triple_colors[triple]

    if show_label_accuracy:
        if dashed_metric is not None:
            raise ValueError("give show_label_accuracy or dashed_metric, not both")
        dashed_metric = Metric.LABEL_ACCURACY
    dashed = None if dashed_metric is None else Metric.parse(dashed_metric)
    curves = [(metric, None, "")]
    if dashed is not None and dashed is not metric:
        short = {Metric.LABEL_ACCURACY: "label acc", Metric.TEACHER_ACCURACY: "teacher"}
        curves.append((dashed, "--", f" ({short.get(dashed, dashed.title)})"))

    def curve_points(pts: Sequence[_Point], curve_metric: Metric) -> list[tuple[float, list]]:
        return [(p.epsilon, values) for p in pts if (values := p.values(curve_metric.value))]

    dodge = _dodge_factors({key: {x for x, _ in curve_points(pts, metric)}
                            for key, pts in series.items()})
    setup_index: dict[tuple[Any, ...], int] = {}
    triple_setups: dict[tuple[str, str, str], int] = {}
    for key, pts in series.items():
        triple = pts[0].triple
        setup_index[key] = triple_setups.get(triple, 0)
        triple_setups[triple] = setup_index[key] + 1

    fig = Figure(figsize=(7.5, 5.0))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    handles: list[Any] = []  # legend entries in drawing order (series first, then papers)
    any_spread = False
    ours_clusters: dict[tuple[str, str, str], set[int]] = {}
    for index, (key, pts) in enumerate(series.items()):
        triple = pts[0].triple
        ours_clusters.setdefault(triple, set()).update(
            int(r["clusters"]) for p in pts for r in p.records if r.get("clusters") is not None)
        name = " ".join(clip(part) for part in triple)  # names from records: bounded
        setup = clip(_setup_label(pts[0].setup, varying[triple]))
        if setup:
            name = f"{name} [{setup}]"
        marker = _MARKERS[index % len(_MARKERS)]
        factor = dodge.get(key, 1.0)
        for curve_metric, linestyle, suffix in curves:
            drawn = curve_points(pts, curve_metric)
            if not drawn:
                continue
            xs = [x * factor for x, _ in drawn]
            spread = [mean_and_spread(v) for _, v in drawn]
            ys = [m for m, _, _ in spread]
            lo = [d for _, d, _ in spread]
            hi = [u for _, _, u in spread]
            style = dict(color=color_for(triple), marker=marker, markersize=6,
                         linestyle=linestyle or _SETUP_LINESTYLES[
                             setup_index[key] % len(_SETUP_LINESTYLES)],
                         markerfacecolor="none" if linestyle else color_for(triple),
                         label=name + suffix)
            if any(lo) or any(hi) or any(len(p.records) > 1 for p in pts):
                any_spread = True
                handles.append(ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, **style))
            else:
                handles.extend(ax.plot(xs, ys, **style))
            if triple in annotated and not linestyle:
                at = {p.epsilon: p for p in pts}
                for (x, _), xd, y in zip(drawn, xs, ys, strict=True):
                    ax.annotate(f"Q={at[x].setup[_LABELS]}", (xd, y), textcoords="offset points",
                                xytext=(4, 6), fontsize=7, color=color_for(triple))

    any_paper = False
    ref_groups: dict[tuple[str, str, str], list[PaperReference]] = {}
    for ref in refs:
        ref_groups.setdefault((ref.method, ref.dataset, ref.mode), []).append(ref)
    for triple, group in ref_groups.items():
        drawn_refs = sorted((ref for ref in group if getattr(ref, metric.value, None) is not None),
                            key=lambda ref: ref.epsilon)
        if not drawn_refs:
            continue
        any_paper = True
        handles.extend(ax.plot(
            [ref.epsilon for ref in drawn_refs],
            [100.0 * getattr(ref, metric.value) for ref in drawn_refs], linestyle="none",
            marker="*", markersize=15, markerfacecolor="none", markeredgewidth=1.5,
            markeredgecolor=color_for(triple), color=color_for(triple),
            label=_paper_label(triple, drawn_refs, ours_clusters.get(triple, set())),
            zorder=4))
    if metric is Metric.TEST_ACCURACY:
        handles.extend(_draw_baselines(ax, checked))
    if not handles:
        raise ValueError(f"no record and no reference has a value for metric {metric.value!r}")

    datasets = sorted({clip(r["dataset"]) for r in checked})
    ax.set_xscale("log")
    ax.set_xlabel("target epsilon (log scale)")
    ax.set_ylabel(f"{metric.title} (%)" if len(curves) == 1 else "accuracy (%): solid "
                  f"{metric.title}, dashed {curves[-1][0].title}")
    ax.set_title(clip(title or f"{metric.title.capitalize()} vs epsilon "
                      f"({', '.join(datasets)})", 200))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="best")
    devices = [clip(d) for d in _devices(checked)]
    notes = []
    if len(devices) == 1:
        notes.append(f"device: {devices[0]}")
    elif devices:
        notes.append(f"devices: {'; '.join(devices)}")
    if any_spread:
        notes.append("markers: mean over seeds; bars: min to max")
    if dodge:
        notes.append(f"series sharing an epsilon are offset along x (by at most "
                     f"{100.0 * (max(dodge.values()) - 1.0):.1f}%) to stay visible"
                     + ("; stars at the paper's epsilon" if any_paper else ""))
    if notes:
        fig.text(0.01, 0.01, "   ".join(notes), fontsize=7, ha="left", va="bottom")
    fig.tight_layout(rect=(0.0, 0.03 if notes else 0.0, 1.0, 1.0))
    return fig


def _draw_baselines(ax: Any, records: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Record-level reference points: the papers' baselines and DPImageBench's best.

    Grey diamonds: the best record-level method of each paper's own table, per epsilon
    (:data:`~dpkd_audit.reports.references.RECORD_LEVEL_BASELINES`); black crosses:
    DPImageBench's best method without public data on the dataset
    (:func:`~dpkd_audit.reports.references.best_benchmark`; for DP-DFD and DGD, whose
    students see no public data). Drawn for the (method, dataset) pairs that have runs with a
    finite record-level epsilon (sound variants).
    """
    pairs = sorted({(str(r["method"]), str(r["dataset"])) for r in records
                    if has_finite_record_level(r)})
    handles = []
    for method, dataset in pairs:
        pool = [b for b in RECORD_LEVEL_BASELINES if b.method.lower() == method.lower()
                and b.dataset.lower() == dataset.lower()]
        best = {}
        for b in pool:
            if b.epsilon not in best or b.test_accuracy > best[b.epsilon].test_accuracy:
                best[b.epsilon] = b
        if not best:
            continue
        shown = [best[e] for e in sorted(best)]
        names = ", ".join(dict.fromkeys(b.name for b in shown))
        handles.extend(ax.plot(
            [b.epsilon for b in shown], [100.0 * b.test_accuracy for b in shown],
            linestyle="none", marker="D", markersize=7, markerfacecolor="none",
            markeredgecolor="0.35", color="0.35", zorder=4,
            label=f"best record-level method in the {method} paper's table, {dataset} "
                  f"({names})"))
    for dataset in sorted({d for m, d in pairs if m.lower() in BENCHMARKED_METHODS}):
        shown = best_benchmark(dataset)
        if shown:
            handles.extend(ax.plot(
                [b.epsilon for b in shown], [100.0 * b.test_accuracy for b in shown],
                linestyle="none", marker="P", markersize=8, color="0.1", zorder=4,
                label=f"DPImageBench, best without public data, {dataset} "
                      f"({', '.join(dict.fromkeys(b.name for b in shown))}; delta 1.67e-6, "
                      "best of 3 classifiers)"))
    return handles


def plot_accuracy(records: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], *,
                  references: Sequence[PaperReference] | None = None,
                  title: str | None = None,
                  metric: Metric | str = Metric.TEST_ACCURACY,
                  show_label_accuracy: bool = False, dashed_metric: Metric | str | None = None,
                  dpi: int = 120) -> Path:
    """Plot accuracy against the target epsilon and save it as a PNG.

    See :func:`accuracy_figure` for what is drawn and for the arguments.

    Args:
        records: Result records.
        path: Where to write the PNG (must end in ``.png``; parent folders are created).
        references: Paper references (``None``: the matching :data:`PAPER_REFERENCES`).
        title: Figure title.
        metric: The accuracy on the y axis.
        show_label_accuracy: Also draw label accuracy as dashed lines.
        dashed_metric: Another accuracy drawn dashed (see :func:`accuracy_figure`).
        dpi: Resolution of the PNG (an integer in [50, 600]).

    Returns:
        ``path`` as a ``Path``.
    """
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must end in .png; got {str(path)!r}")
    dpi = check_int("dpi", dpi, minimum=50, maximum=600)
    fig = accuracy_figure(records, references=references, title=title, metric=metric,
                          show_label_accuracy=show_label_accuracy,
                          dashed_metric=dashed_metric)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    return path
