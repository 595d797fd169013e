"""Accuracy-versus-epsilon reports built from saved result records only (dicts / JSON lines).

A pipeline run writes one JSON record; a sweep writes ``results.jsonl`` (one record per line).
This module reads them back (:func:`load_records`), plots accuracy against the target epsilon
with the papers' numbers as reference markers (:func:`plot_accuracy`, :func:`accuracy_figure`)
and writes Markdown (:func:`markdown_table`, :func:`sweep_readme`, and
:func:`results_overview` for the README's results section). It never imports the
pipelines or torch: everything comes from the records.

Record keys (see the shared ARCHITECTURE "Pipelines"):

* required: ``method``, ``dataset``, ``mode`` (non-empty strings), ``epsilon`` (the target
  budget, a finite real > 0) and ``test_accuracy`` (a fraction in [0, 1]);
* optional (absent or null where a method has no such value): ``label_accuracy``,
  ``label_accuracy_without_noise`` (fractions), ``epsilon_published`` (> 0, may be infinite),
  ``epsilon_record_level`` (> 0; infinity may be written as ``Infinity``, the string ``"inf"``
  or JSON ``null``, since strict JSON has no infinity: **null means infinite (not DP)** for this
  key only), ``delta`` (in [0, 1)), ``clusters``, ``k`` (integers >= 1), ``seed`` (integer),
  ``representation``, ``preset``, ``device`` (strings), ``seconds`` (a number, or a mapping of
  stage to seconds whose ``"total"`` is used; without ``"total"``, the sum of the stages),
  ``shared_stages`` (stages measured once and shared by the runs of a sweep, counted in each)
  and ``provenance`` (package version, git commit, time, library versions: see
  :mod:`dpkd_audit.provenance`); records written before these keys existed are shown with
  what they have.

Runs are aggregated over seeds: records that agree on method, dataset, mode, the setup keys
(:data:`SETUP_KEYS`) and the target epsilon form one point / one table row, shown as the mean
with the min-max range.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpkd_audit._validate import (
    check_delta,
    check_epsilon,
    check_int,
    check_positive,
    check_probability,
)
from dpkd_audit.reports.references import PAPER_REFERENCES, PaperReference, references_for

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

#: Keys every record must have.
REQUIRED_KEYS: tuple[str, ...] = ("method", "dataset", "mode", "epsilon", "test_accuracy")
#: Keys that distinguish two setups of the same (method, dataset, mode): runs differing in one of
#: them are never averaged together.
SETUP_KEYS: tuple[str, ...] = ("representation", "clusters", "k", "preset")

_INFINITY_STRINGS = frozenset({"inf", "+inf", "infinity", "+infinity", "∞"})
_NOT_DP = "∞ (not DP)"


class Metric(enum.StrEnum):
    """The accuracy a plot shows on its y axis (the record key of the same name)."""

    TEST_ACCURACY = "test_accuracy"
    LABEL_ACCURACY = "label_accuracy"
    LABEL_ACCURACY_WITHOUT_NOISE = "label_accuracy_without_noise"

    @classmethod
    def parse(cls, value: Metric | str) -> Metric:
        """Return the member for ``value`` (a member or its value such as ``"test_accuracy"``).

        Raises:
            ValueError: Naming ``metric``, the allowed values and the value received.
        """
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.strip().lower().replace("-", "_")
            for member in cls:
                if key == member.value:
                    return member
        allowed = ", ".join(repr(m.value) for m in cls)
        raise ValueError(f"metric must be one of {allowed}; got {value!r}")

    @property
    def title(self) -> str:
        """Human-readable name (axis label)."""
        return {Metric.TEST_ACCURACY: "test accuracy",
                Metric.LABEL_ACCURACY: "label accuracy",
                Metric.LABEL_ACCURACY_WITHOUT_NOISE: "label accuracy without noise"}[self]


# --------------------------------------------------------------------------------------------
# Reading and validating records
# --------------------------------------------------------------------------------------------

def _infinite_or_positive(name: str, value: Any, *, null_is_inf: bool) -> float | None:
    if value is None:
        return math.inf if null_is_inf else None
    if isinstance(value, str) and value.strip().lower() in _INFINITY_STRINGS:
        return math.inf
    return check_positive(name, value, allow_inf=True)


def _check_text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string; got {value!r}")
    return value


def _check_seconds(value: Any) -> float | None:
    """Total seconds of a run (``seconds`` is a number or a stage -> seconds mapping)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        stages = {}
        for stage, seconds in value.items():
            if seconds is None:
                continue
            if (isinstance(seconds, bool) or not isinstance(seconds, numbers.Real)
                    or not math.isfinite(seconds) or seconds < 0):
                raise ValueError(f"seconds[{stage!r}] must be a finite real number >= 0; "
                                 f"got {seconds!r}")
            stages[stage] = float(seconds)
        if "total" in stages:
            return stages["total"]
        return sum(stages.values()) if stages else None
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or value < 0):
        raise ValueError("seconds must be a finite real number >= 0 or a mapping of stage to "
                         f"seconds; got {value!r}")
    return float(value)


def validate_record(record: Any, *, where: str = "record") -> dict[str, Any]:
    """Check one result record and return it (unchanged).

    Args:
        record: The record (a mapping, see the module docstring for its keys).
        where: Where the record came from, put at the start of error messages (e.g.
            ``"results.jsonl:3"``).

    Returns:
        ``record`` itself.

    Raises:
        ValueError: ``"{where}: ..."`` naming the missing keys, or the bad key, the allowed
            range and the value received.
    """
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: a record must be a JSON object (mapping); "
                         f"got {type(record).__name__}")
    missing = [key for key in REQUIRED_KEYS if key not in record]
    if missing:
        raise ValueError(
            f"{where}: record is missing required key(s) {', '.join(map(repr, missing))} "
            f"(required: {', '.join(REQUIRED_KEYS)})")
    try:
        for key in ("method", "dataset", "mode"):
            _check_text(key, record[key])
        check_epsilon(record["epsilon"])
        check_probability("test_accuracy", record["test_accuracy"])
        for key in ("label_accuracy", "label_accuracy_without_noise"):
            if record.get(key) is not None:
                check_probability(key, record[key])
        _infinite_or_positive("epsilon_published", record.get("epsilon_published"),
                              null_is_inf=False)
        _infinite_or_positive("epsilon_record_level", record.get("epsilon_record_level"),
                              null_is_inf=True)
        if record.get("delta") is not None:
            check_delta(record["delta"])
        for key in ("clusters", "k"):
            if record.get(key) is not None:
                check_int(key, record[key], minimum=1)
        if record.get("seed") is not None:
            check_int("seed", record["seed"])
        for key in ("representation", "preset", "device"):
            if record.get(key) is not None:
                _check_text(key, record[key])
        _check_seconds(record.get("seconds"))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return record  # type: ignore[return-value]


def load_records(path_or_paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
                 ) -> list[dict[str, Any]]:
    """Read result records from ``.json`` files (one record each) and ``.jsonl`` files.

    A ``.jsonl`` file holds one record per line (blank lines are skipped). Records keep the
    order of the files and of the lines.

    Args:
        path_or_paths: A path or an iterable of paths.

    Returns:
        The validated records (plain dicts, as parsed).

    Raises:
        FileNotFoundError: If a file does not exist.
        ValueError: For an unknown suffix, no path or no record at all, or malformed content:
            the message starts with ``"FILE:LINE:"`` (bad JSON, a line that is not an object,
            a missing required key, a value out of range).
    """
    if isinstance(path_or_paths, str | os.PathLike):
        paths = [Path(path_or_paths)]
    else:
        paths = [Path(p) for p in path_or_paths]
    if not paths:
        raise ValueError("path_or_paths must name at least one .json or .jsonl file; got none")
    records: list[dict[str, Any]] = []
    for path in paths:
        suffix = path.suffix.lower()
        if suffix not in (".json", ".jsonl"):
            raise ValueError(f"{path}: result files must end in .json (one record) or .jsonl "
                             f"(one record per line); got suffix {path.suffix!r}")
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such result file")
        text = path.read_text(encoding="utf-8")
        if suffix == ".json":
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{exc.lineno}: malformed JSON ({exc.msg}, column "
                                 f"{exc.colno})") from None
            records.append(validate_record(record, where=f"{path}:1"))
            continue
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: malformed JSON ({exc.msg}, column "
                                 f"{exc.colno})") from None
            records.append(validate_record(record, where=f"{path}:{lineno}"))
    if not records:
        raise ValueError(f"no records in {', '.join(map(str, paths))}")
    return records


# --------------------------------------------------------------------------------------------
# Aggregation over seeds
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Point:
    """Runs of one setup at one target epsilon (usually one per seed)."""

    method: str
    dataset: str
    mode: str
    setup: tuple[Any, ...]  # values of SETUP_KEYS
    epsilon: float
    records: tuple[Mapping[str, Any], ...]

    @property
    def triple(self) -> tuple[str, str, str]:
        return (self.method, self.dataset, self.mode)

    @property
    def series(self) -> tuple[Any, ...]:
        return (self.method, self.dataset, self.mode, self.setup)

    def values(self, key: str) -> list[float]:
        return [float(r[key]) for r in self.records if r.get(key) is not None]


def _none_last(values: Sequence[Any]) -> tuple[tuple[bool, Any], ...]:
    return tuple((v is None, "" if v is None else v) for v in values)


def _checked(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    if isinstance(records, Mapping) or not isinstance(records, Sequence):
        raise ValueError("records must be a sequence of record mappings; "
                         f"got {type(records).__name__}")
    if not records:
        raise ValueError("records must not be empty")
    return [validate_record(r, where=f"records[{i}]") for i, r in enumerate(records)]


def _aggregate(records: Sequence[Mapping[str, Any]]) -> list[_Point]:
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in records:
        setup = tuple(r.get(key) for key in SETUP_KEYS)
        key = (r["method"], r["dataset"], r["mode"], setup, float(f"{float(r['epsilon']):.12g}"))
        groups.setdefault(key, []).append(r)
    points = []
    for (method, dataset, mode, setup, epsilon), runs in groups.items():
        runs.sort(key=lambda r: _none_last([r.get("seed")]))
        points.append(_Point(method, dataset, mode, setup, epsilon, tuple(runs)))
    points.sort(key=lambda p: (p.method, p.dataset, p.mode, _none_last(p.setup), p.epsilon))
    return points


def _setup_label(point_setup: tuple[Any, ...], varying: Sequence[int]) -> str:
    parts = []
    for i in varying:
        key, value = SETUP_KEYS[i], point_setup[i]
        if key == "clusters":
            parts.append(f"s={'-' if value is None else value}")
        elif key == "k":
            parts.append(f"k={'-' if value is None else value}")
        elif key == "preset":
            parts.append(f"preset {value or '-'}")
        else:
            parts.append(str(value or "-"))
    return ", ".join(parts)


def _varying_setup(points: Sequence[_Point]) -> dict[tuple[str, str, str], list[int]]:
    """For each (method, dataset, mode), the setup positions whose values differ."""
    setups: dict[tuple[str, str, str], set[tuple[Any, ...]]] = {}
    for p in points:
        setups.setdefault(p.triple, set()).add(p.setup)
    return {triple: [i for i in range(len(SETUP_KEYS)) if len({s[i] for s in values}) > 1]
            for triple, values in setups.items()}


def _devices(records: Iterable[Mapping[str, Any]]) -> list[str]:
    return sorted({str(r["device"]) for r in records if r.get("device") is not None})


def _default_references(records: Sequence[Mapping[str, Any]]) -> list[PaperReference]:
    """The :data:`PAPER_REFERENCES` of the (method, dataset, mode) triples in ``records``."""
    triples = sorted({(str(r["method"]), str(r["dataset"]), str(r["mode"])) for r in records})
    refs: list[PaperReference] = []
    for method, dataset, mode in triples:
        refs.extend(ref for ref in references_for(method, dataset, mode=mode) if ref not in refs)
    return refs


def _check_references(references: Any) -> list[PaperReference]:
    if isinstance(references, PaperReference) or not isinstance(references, Iterable):
        raise ValueError("references must be a sequence of PaperReference (or None for the "
                         f"matching PAPER_REFERENCES); got {type(references).__name__}")
    refs = list(references)
    for i, ref in enumerate(refs):
        if not isinstance(ref, PaperReference):
            raise ValueError(f"references[{i}] must be a PaperReference; "
                             f"got {type(ref).__name__}")
    return refs


# --------------------------------------------------------------------------------------------
# Plot
# --------------------------------------------------------------------------------------------

#: Marker shapes, one per series, so that series stay apart where their points coincide.
_MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
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
                    show_label_accuracy: bool = False) -> Figure:
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
            ``metric`` is not already the label accuracy).

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
    varying = _varying_setup(points)
    series: dict[tuple[Any, ...], list[_Point]] = {}
    for p in points:
        series.setdefault(p.series, []).append(p)

    palette = list(colormaps["tab10"].colors)
    triple_colors: dict[tuple[str, str, str], Any] = {}

    def color_for(triple: tuple[str, str, str]) -> Any:
        if triple not in triple_colors:
            triple_colors[triple] = palette[len(triple_colors) % len(palette)]
        return triple_colors[triple]

    curves = [(metric, None, "")]
    if show_label_accuracy and metric is not Metric.LABEL_ACCURACY:
        curves.append((Metric.LABEL_ACCURACY, "--", " (label acc)"))

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
        name = " ".join(triple)
        setup = _setup_label(pts[0].setup, varying[triple])
        if setup:
            name = f"{name} [{setup}]"
        marker = _MARKERS[index % len(_MARKERS)]
        factor = dodge.get(key, 1.0)
        for curve_metric, linestyle, suffix in curves:
            drawn = curve_points(pts, curve_metric)
            if not drawn:
                continue
            xs = [x * factor for x, _ in drawn]
            ys = [100.0 * sum(v) / len(v) for _, v in drawn]
            lo = [y - 100.0 * min(v) for y, (_, v) in zip(ys, drawn, strict=True)]
            hi = [100.0 * max(v) - y for y, (_, v) in zip(ys, drawn, strict=True)]
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
    if not handles:
        raise ValueError(f"no record and no reference has a value for metric {metric.value!r}")

    datasets = sorted({str(r["dataset"]) for r in checked})
    ax.set_xscale("log")
    ax.set_xlabel("target epsilon (log scale)")
    ax.set_ylabel(f"{metric.title} (%)" if len(curves) == 1 else "accuracy (%): solid "
                  f"{metric.title}, dashed label accuracy")
    ax.set_title(title or f"{metric.title.capitalize()} vs epsilon ({', '.join(datasets)})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(handles, [h.get_label() for h in handles], fontsize=8, loc="best")
    devices = _devices(checked)
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


def plot_accuracy(records: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], *,
                  references: Sequence[PaperReference] | None = None,
                  title: str | None = None,
                  metric: Metric | str = Metric.TEST_ACCURACY,
                  show_label_accuracy: bool = False, dpi: int = 120) -> Path:
    """Plot accuracy against the target epsilon and save it as a PNG.

    See :func:`accuracy_figure` for what is drawn and for the arguments.

    Args:
        records: Result records.
        path: Where to write the PNG (must end in ``.png``; parent folders are created).
        references: Paper references (``None``: the matching :data:`PAPER_REFERENCES`).
        title: Figure title.
        metric: The accuracy on the y axis.
        show_label_accuracy: Also draw label accuracy as dashed lines.
        dpi: Resolution of the PNG (an integer in [50, 600]).

    Returns:
        ``path`` as a ``Path``.
    """
    path = Path(path)
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must end in .png; got {str(path)!r}")
    dpi = check_int("dpi", dpi, minimum=50, maximum=600)
    fig = accuracy_figure(records, references=references, title=title, metric=metric,
                          show_label_accuracy=show_label_accuracy)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    return path


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------

def _fmt_eps(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return _NOT_DP
    return f"{value:.4g}"


def _fmt_delta(value: float) -> str:
    return "0" if value == 0 else f"{value:.3g}"


def _fmt_pct(values: Sequence[float]) -> str:
    if not values:
        return "-"
    mean = 100.0 * sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.2f}"
    return f"{mean:.2f} ({100.0 * min(values):.2f}–{100.0 * max(values):.2f})"


def _distinct(formatted: Iterable[str]) -> str:
    seen = list(dict.fromkeys(formatted))
    return ", ".join(seen) if seen else "-"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _runs(point: _Point) -> str:
    seeds = [r.get("seed") for r in point.records]
    known = [str(s) for s in seeds if s is not None]
    n = len(point.records)
    if not known:
        return str(n)
    return f"{n} (seed{'s' if len(known) > 1 else ''} {', '.join(known)})"


def _paper_cell(point: _Point, refs: Sequence[PaperReference]) -> str:
    found = [ref for ref in refs if ref.matches(method=point.method, dataset=point.dataset,
                                                mode=point.mode, epsilon=point.epsilon)]
    found.sort(key=lambda ref: (ref.clusters or 0, ref.k or 0, ref.test_accuracy))
    parts = []
    for ref in found:
        text = f"{100.0 * ref.test_accuracy:.2f}"
        if ref.clusters is not None:
            text += f" (s={ref.clusters})"
        parts.append(text)
    return "; ".join(parts) if parts else "-"


def _stage_sets(records: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per method, every stage any of its records times, in order of first appearance."""
    stages: dict[str, list[str]] = {}
    for r in records:
        seconds = r.get("seconds")
        known = stages.setdefault(str(r["method"]), [])
        if isinstance(seconds, Mapping):
            known.extend(k for k, v in seconds.items()
                         if k != "total" and v is not None and k not in known)
    return stages


def _missing_stages(record: Mapping[str, Any], stages: Mapping[str, Sequence[str]]) -> list[str]:
    """Stages of the record's method that its ``seconds`` mapping lacks (none for a number)."""
    seconds = record.get("seconds")
    if not isinstance(seconds, Mapping):
        return []
    return [k for k in stages[str(record["method"])] if seconds.get(k) is None]


#: Marks a ``seconds`` cell whose records time fewer stages than others of their method.
PARTIAL_SECONDS_MARK = "†"

#: Column headers of :func:`markdown_table`.
TABLE_COLUMNS: tuple[str, ...] = (
    "method", "dataset", "mode", "setup", "s", "k", "target eps", "published eps",
    "record-level eps", "delta", "runs", "label acc (%)", "test acc (%)", "paper test acc (%)",
    "seconds", "device",
)


def markdown_table(records: Sequence[Mapping[str, Any]], *,
                   references: Sequence[PaperReference] | None = None) -> str:
    """A Markdown table with one row per setup and target epsilon, aggregated over seeds.

    Rows are sorted by method, dataset, mode, setup (:data:`SETUP_KEYS`; missing values last)
    and target epsilon, so the table does not depend on the order of the records. Columns are
    :data:`TABLE_COLUMNS`:

    * ``setup``: representation and preset (``"-"`` when absent); ``s``: clusters.
    * epsilons: 4 significant digits; infinity (record-level null / ``"inf"``) is
      ``"∞ (not DP)"``; distinct values over the seeds are listed, comma-separated.
    * ``runs``: the number of records with their seeds.
    * accuracies: in %, 2 decimals; with several runs ``"mean (min–max)"``; ``"-"`` if absent.
    * ``paper test acc (%)``: the reference's test accuracy (2 decimals, with ``s=`` when the
      paper states it) for the same method, dataset, mode and epsilon, ``"-"`` if none.
    * ``seconds``: mean total wall-clock seconds per run, 1 decimal, followed by
      :data:`PARTIAL_SECONDS_MARK` when a record of the row times fewer stages than other
      records of its method in the table (so its seconds are not comparable;
      :func:`seconds_note` names the stages missing).
    * ``device``: the distinct devices.

    Args:
        records: Result records.
        references: Where to look up paper numbers (default :data:`PAPER_REFERENCES`).

    Returns:
        The table (header, separator, rows), without a trailing newline.
    """
    checked = _checked(records)
    refs = list(PAPER_REFERENCES) if references is None else _check_references(references)
    right = {"s", "k", "target eps", "published eps", "record-level eps", "delta",
             "label acc (%)", "test acc (%)", "paper test acc (%)", "seconds"}
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |",
             "|" + "|".join("---:" if c in right else "---" for c in TABLE_COLUMNS) + "|"]
    stages = _stage_sets(checked)
    for p in _aggregate(checked):
        setup = dict(zip(SETUP_KEYS, p.setup, strict=True))
        seconds = [s for s in (_check_seconds(r.get("seconds")) for r in p.records)
                   if s is not None]
        published = [_infinite_or_positive("epsilon_published", r.get("epsilon_published"),
                                           null_is_inf=False) for r in p.records]
        record_level = [_infinite_or_positive("epsilon_record_level",
                                              r.get("epsilon_record_level"), null_is_inf=True)
                        if "epsilon_record_level" in r else None for r in p.records]
        cells = [
            p.method, p.dataset, p.mode,
            " / ".join(str(setup[k]) for k in ("representation", "preset")
                       if setup[k] is not None) or "-",
            "-" if setup["clusters"] is None else str(setup["clusters"]),
            "-" if setup["k"] is None else str(setup["k"]),
            _fmt_eps(p.epsilon),
            _distinct(_fmt_eps(v) for v in published),
            _distinct(_fmt_eps(v) for v in record_level),
            _distinct(_fmt_delta(float(r["delta"])) for r in p.records
                      if r.get("delta") is not None),
            _runs(p),
            _fmt_pct(p.values("label_accuracy")),
            _fmt_pct(p.values("test_accuracy")),
            _paper_cell(p, refs),
            (f"{sum(seconds) / len(seconds):.1f}" if seconds else "-")
            + (f" {PARTIAL_SECONDS_MARK}" if seconds and any(
                _missing_stages(r, stages) for r in p.records) else ""),
            _distinct(_devices(p.records)),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def seconds_note(records: Sequence[Mapping[str, Any]]) -> str:
    """What the ``seconds`` column of :func:`markdown_table` means for these records.

    Names the stages the totals add up (per method), the stages that sweeps share (from the
    records' ``shared_stages``), and, where some records time fewer stages than others of their
    method (records written before every stage was timed), which stages they lack: those rows
    carry :data:`PARTIAL_SECONDS_MARK`.

    Args:
        records: Result records.

    Returns:
        One paragraph, without a trailing newline.
    """
    checked = _checked(records)
    stages = _stage_sets(checked)
    timed = {m: v for m, v in stages.items() if v}
    text = ("*seconds*: the mean over a row's runs of each run's total wall-clock seconds, the "
            "sum of the stages it depends on")
    if timed:
        text += " (" + "; ".join(f"{m}: {', '.join(v)}" if len(timed) > 1 else ", ".join(v)
                                 for m, v in sorted(timed.items())) + ")"
    shared = list(dict.fromkeys(stage for r in checked for stage in r.get("shared_stages") or ()))
    if shared:
        text += (f". Stages a sweep computes once and shares ({', '.join(shared)}) are counted "
                 "in every row that uses them, so a row's seconds are what its run costs on its "
                 "own")
    text += "."
    lacking = {stage for r in checked for stage in _missing_stages(r, stages)}
    missing = [stage for v in stages.values() for stage in v if stage in lacking]
    missing = list(dict.fromkeys(missing))
    if missing:
        text += (f" {PARTIAL_SECONDS_MARK}: the records of these rows time fewer stages (they "
                 f"lack {', '.join(missing)}), so their seconds are not comparable with the "
                 "other rows'.")
    return text


def _provenance_summary(records: Sequence[Mapping[str, Any]]) -> str:
    """The code that wrote the records, from their ``provenance`` (what is there)."""
    found: dict[str, None] = {}
    without = 0
    for r in records:
        prov = r.get("provenance")
        if not isinstance(prov, Mapping):
            without += 1
            continue
        parts = [f"dpkd-audit {prov.get('package_version') or '(version unknown)'}"]
        commit = prov.get("git_commit")
        if isinstance(commit, str) and commit:
            parts.append(f"commit {commit[:10]}" + (" with local changes"
                                                    if prov.get("git_dirty") else ""))
        else:
            parts.append("no git commit")
        created = prov.get("created_utc")
        if isinstance(created, str) and created:
            parts.append(created[:10])
        found[", ".join(parts)] = None
    if not found:
        return "no provenance recorded"
    text = "; ".join(found)
    if without:
        text += f"; {without} run{'s' if without > 1 else ''} without provenance"
    return text


_COLUMNS_NOTE = (
    "Accuracies in % (2 decimals): the mean over the runs (seeds) of a row, with the (min–max) "
    "range when there are several. *target eps* is the budget the run was configured for, "
    "*published eps* the one the method's paper accounting states, *record-level eps* the "
    "guarantee the privacy ledger proves for one private record "
    f"({_NOT_DP}: a step that is not differentially private exists).")


def _purity_note(records: Sequence[Mapping[str, Any]]) -> str | None:
    groups: dict[tuple[Any, ...], list[float]] = {}
    for r in records:
        value = r.get("label_accuracy_without_noise")
        if value is not None:
            key = (str(r["method"]), str(r["dataset"]),
                   *(r.get(k) for k in ("representation", "preset", "clusters", "k")))
            groups.setdefault(key, []).append(float(value))
    if not groups:
        return None
    parts = []
    for (method, dataset, representation, preset, clusters, k), values in sorted(
            groups.items(), key=lambda kv: _none_last(kv[0])):
        setup = ", ".join(v for v in (
            " / ".join(str(x) for x in (representation, preset) if x is not None) or None,
            None if clusters is None else f"s={clusters}",
            None if k is None else f"k={k}") if v)
        distinct = sorted({round(100.0 * v, 2) for v in values})
        value = (f"{distinct[0]:.2f}%" if len(distinct) == 1 else
                 f"{_fmt_pct(values)} %")
        parts.append(f"{method} {dataset}" + (f" ({setup})" if setup else "") + f": {value}")
    return ("Label accuracy without noise (every query labelled by its exact vote: the most the "
            "private labels can reach with these queries): " + "; ".join(parts) + ".")


def _result_file(path: str | os.PathLike[str]) -> Path:
    path = Path(path)
    if path.is_dir():
        for name in ("results.jsonl", "result.json"):
            if (path / name).is_file():
                return path / name
        raise FileNotFoundError(f"{path}: no results.jsonl or result.json in this folder")
    return path


def results_overview(paths: Sequence[str | os.PathLike[str]], *,
                     references: Sequence[PaperReference] | None = None) -> str:
    """Markdown overview of several result files: one table, what it means, where it came from.

    This is what the README's results section holds (``dpkd results PATH...`` prints it, and a
    test keeps the README equal to it): :func:`markdown_table` of all the records, what the
    columns and seconds mean (:func:`seconds_note`), the label accuracy without noise, and a
    link to each result folder with the provenance of its records (or that none is recorded).

    Args:
        paths: Result files (``.jsonl`` / ``.json``) or folders holding ``results.jsonl`` (or
            ``result.json``). Links are the folders as given (relative paths stay relative);
            the order does not matter (sources are sorted).
        references: Paper references (default :data:`PAPER_REFERENCES`).

    Returns:
        The Markdown, ending with a newline.

    Raises:
        ValueError: For no path, or malformed records (naming file and line).
        FileNotFoundError: For a missing file, or a folder without results.
    """
    if isinstance(paths, str | os.PathLike) or not isinstance(paths, Sequence) or not paths:
        raise ValueError("paths must be a non-empty sequence of result files or folders; "
                         f"got {paths!r}")
    files = sorted({_result_file(p) for p in paths}, key=lambda f: f.as_posix())
    per_file = [(f, load_records(f)) for f in files]
    records = [r for _, recs in per_file for r in recs]
    out = [markdown_table(records, references=references), "",
           f"{_COLUMNS_NOTE} {seconds_note(records)}", ""]
    purity = _purity_note(records)
    if purity:
        out += [purity, ""]
    sources = []
    for f, recs in per_file:
        folder = f.parent.as_posix()
        link = folder + "/" if folder not in ("", ".") else "./"
        runs = f"{len(recs)} run{'s' if len(recs) > 1 else ''}"
        sources.append(f"[`{f.parent.name or f.name}`]({link}) ({runs}; "
                       f"{_provenance_summary(recs)})")
    out += ["Records: " + ", ".join(sources) + ". Each folder's README gives the command that "
            "produced it.", ""]
    return "\n".join(out)


def sweep_readme(records: Sequence[Mapping[str, Any]], *, command: str, title: str,
                 plot_name: str | None = "accuracy.png",
                 references: Sequence[PaperReference] | None = None) -> str:
    """A Markdown page for a sweep: title, command, devices, plot link, table, paper sources.

    Args:
        records: Result records of the sweep.
        command: The command line that produced the records (shown in a code block).
        title: Page title (a level-1 heading).
        plot_name: Relative path of the PNG (from :func:`plot_accuracy`) beside the page, linked
            as an image; ``None`` for no link.
        references: Paper references for the table and the sources list (default:
            :data:`PAPER_REFERENCES`; the sources list shows those of the records' (method,
            dataset, mode) triples).

    Returns:
        The page, ending with a newline.

    Raises:
        ValueError: For invalid records, an empty ``command`` / ``title``, or a ``plot_name``
            that is absolute or a URL.
    """
    checked = _checked(records)
    _check_text("command", command)
    _check_text("title", title)
    if plot_name is not None:
        _check_text("plot_name", plot_name)
        if Path(plot_name).is_absolute() or "://" in plot_name or plot_name.startswith("/"):
            raise ValueError(f"plot_name must be a relative path (e.g. 'accuracy.png'); "
                             f"got {plot_name!r}")
    refs = list(PAPER_REFERENCES) if references is None else _check_references(references)
    triples = {(str(r["method"]).lower(), str(r["dataset"]).lower(), str(r["mode"]).lower())
               for r in checked}
    shown = [ref for ref in refs
             if (ref.method.lower(), ref.dataset.lower(), ref.mode.lower()) in triples]

    devices = _devices(checked)
    methods = sorted({str(r["method"]) for r in checked})
    datasets = sorted({str(r["dataset"]) for r in checked})
    fence = "````" if "```" in command else "```"
    out = [f"# {title.strip()}", "", "Produced by:", "", f"{fence}bash", command.strip(), fence, ""]
    if len(devices) == 1:
        out.append(f"Device: `{devices[0]}`.")
    elif devices:
        out.append("Devices: " + ", ".join(f"`{d}`" for d in devices) + ".")
    else:
        out.append("Device: not recorded.")
    out += ["", f"{len(checked)} runs; methods: {', '.join(methods)}; datasets: "
                f"{', '.join(datasets)}.", "", f"Code: {_provenance_summary(checked)}.", ""]
    if plot_name is not None:
        out += [f"![Accuracy versus epsilon]({plot_name})", ""]
    out += ["## Results", "", markdown_table(checked, references=refs), "",
            f"{_COLUMNS_NOTE} {seconds_note(checked)}", ""]
    if shown:
        out += ["## Paper references", ""]
        for ref in shown:
            extra = []
            if ref.label_accuracy is not None:
                extra.append(f"label {100.0 * ref.label_accuracy:.2f}%")
            if ref.clusters is not None:
                extra.append(f"s={ref.clusters}")
            if ref.k is not None:
                extra.append(f"k={ref.k}")
            detail = f" ({', '.join(extra)})" if extra else ""
            out.append(f"- {ref.method} / {ref.dataset} / {ref.mode}, eps={_fmt_eps(ref.epsilon)}"
                       f": test {100.0 * ref.test_accuracy:.2f}%{detail}. Source: {ref.source}.")
        out.append("")
    return "\n".join(out)
