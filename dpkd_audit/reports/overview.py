"""The tables of ``dpkd report``: accuracy, budgets, audits and provenance, every number sourced.

A report is a list of blocks (headings, paragraphs, figures, :class:`Table`) rendered to Markdown
and HTML by :mod:`dpkd_audit.reports.overview_render`. Each table cell that shows a number from
the records is a :class:`Cell` that names the records it came from (``source:line``) and the key
it shows, so that the HTML carries them as ``data-src`` / ``data-key`` attributes and a reader -
or a test - can trace every number back to a record.

Runs are grouped into *series*: records of one method, dataset and mode whose configurations
agree apart from the seed and the swept budget (``epsilon``, ``queries``); within a series, runs
at the same (published epsilon, record-level epsilon, labels) are one point (seeds: mean and
min-max).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dpkd_audit.reports.budgets import ACCOUNTANTS, plan_budget
from dpkd_audit.reports.collect import RecordKind, SourcedRecord, of_kind
from dpkd_audit.reports.records import _fmt_eps
from dpkd_audit.reports.references import PaperReference, references_for
from dpkd_audit.reports.safe_json import MAX_TEXT_CHARS, clip

__all__ = [
    "Cell",
    "Point",
    "Series",
    "Table",
    "accuracy_table",
    "audit_tables",
    "budget_tables",
    "number_of",
    "provenance_table",
    "series_of",
]

#: Configuration keys that a sweep varies or that only reseed a run: records differing only in
#: these belong to one series.
SWEPT_KEYS: frozenset[str] = frozenset({"seed", "split_seed", "epsilon", "queries"})
_NOT_DP = "∞ (not DP)"


@dataclasses.dataclass(frozen=True)
class Cell:
    """One table cell.

    Attributes:
        text: What is shown.
        refs: ``source:line`` of the records the value comes from (empty for labels), or
            ``paper: SOURCE`` for a paper's figure.
        key: The record key shown (``test_accuracy``, ``epsilon_record_level``, ``seconds``,
            ``budget:RDP``...); ``None`` for text that is not a number of the records.
        aggregate: How several records make the value: ``"mean"``, ``"count"`` (how many
            records), or ``"same"`` (they agree).
    """

    text: str
    refs: tuple[str, ...] = ()
    key: str | None = None
    aggregate: str = "same"

    def __post_init__(self) -> None:
        # text from records: names are cut at 80 characters before, free text here
        object.__setattr__(self, "text", clip(self.text, MAX_TEXT_CHARS))
        if self.text == "-":  # no value: nothing to trace
            object.__setattr__(self, "refs", ())
            object.__setattr__(self, "key", None)


@dataclasses.dataclass(frozen=True)
class Table:
    """A table: a caption, column names, rows of cells and notes printed under it."""

    caption: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    notes: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Point:
    """Runs of a series at one budget (several seeds)."""

    epsilon_published: float | None
    epsilon_record_level: float
    labels: int | None
    runs: tuple[SourcedRecord, ...]

    @property
    def accuracies(self) -> list[float]:
        """Test accuracies of the runs (fractions)."""
        return [float(r.record["test_accuracy"]) for r in self.runs]

    @property
    def refs(self) -> tuple[str, ...]:
        """``source:line`` of the runs."""
        return tuple(r.ref for r in self.runs)


@dataclasses.dataclass(frozen=True)
class Series:
    """One line of an accuracy plot: a method, dataset, mode and configuration."""

    method: str
    dataset: str
    mode: str
    setup: str
    points: tuple[Point, ...]

    @property
    def label(self) -> str:
        """Legend label."""
        return f"{self.method} {self.mode}" + (f" ({self.setup})" if self.setup else "")

    @property
    def ablation(self) -> bool:
        """Whether every run comes from an ``ablations/`` folder (drawn in a figure of its own)."""
        return all("/ablations/" in f"/{r.source}" for p in self.points for r in p.runs)


# --------------------------------------------------------------------------------------------
# Reading values
# --------------------------------------------------------------------------------------------

def record_level(record: Mapping[str, Any]) -> float:
    """The record-level epsilon (``inf`` where null / infinite / absent: not DP)."""
    value = record.get("epsilon_record_level")
    if value is None or (isinstance(value, str) and "inf" in value.lower()):
        return math.inf
    return float(value)


def published(record: Mapping[str, Any]) -> float:
    """The published epsilon (the paper's accounting), else the target ``epsilon``."""
    value = record.get("epsilon_published")
    return float(record["epsilon"]) if value is None else float(value)


def labels_of(record: Mapping[str, Any]) -> int | None:
    """Labels / queries released (``labels``, else ``queries``)."""
    value = record.get("labels", record.get("queries"))
    return None if value is None else int(value)


def seconds_of(record: Mapping[str, Any]) -> float | None:
    """Total seconds of a run (a number, or a mapping's ``total``, else its sum)."""
    value = record.get("seconds")
    if isinstance(value, Mapping):
        if "total" in value:
            return float(value["total"])
        return float(sum(float(v) for v in value.values()))
    return None if value is None else float(value)


def number_of(record: Mapping[str, Any], key: str) -> float | None:
    """The number a cell with ``key`` shows for one record (``inf`` for not DP)."""
    if key == "epsilon_record_level":
        return record_level(record)
    if key == "epsilon_published":
        return published(record)
    if key == "seconds":
        return seconds_of(record)
    if key == "labels":
        value = labels_of(record)
        return None if value is None else float(value)
    if key.startswith("budget:"):
        budget = plan_budget(record)
        return None if budget is None else budget.epsilons.get(key.split(":", 1)[1])
    value: Any = record
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    if value is None:
        return None
    return float(value)


def _fmt_pct(values: Sequence[float]) -> str:
    mean = statistics.fmean(values)
    text = f"{100 * mean:.2f}"
    if len(values) > 1 and max(values) > min(values):
        text += f" ({100 * min(values):.2f}-{100 * max(values):.2f})"
    return text


def _fmt_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _config_key(record: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    config = record.get("config")
    if not isinstance(config, Mapping):
        config = {k: record.get(k) for k in ("representation", "clusters", "k", "preset")}
    flat = _flatten({k: v for k, v in config.items() if k not in SWEPT_KEYS})
    return json.dumps(flat, sort_keys=True, default=str), flat


def _flatten(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, Mapping):
            out.update(_flatten(item, name + "."))
        else:
            out[name] = item
    return out


def _setup_text(flat: Mapping[str, Any], differing: Sequence[str],
                runs: Sequence[SourcedRecord]) -> str:
    """A series' setup in words.

    An ablation's folder name, else ``key=value`` of the (at most two) differing keys, else the
    runs' folders ("as in mnist-sound and mnist-sound-seed1").
    """
    folders = sorted({r.source.split("/")[-2] for r in runs if "/" in r.source})
    if any("/ablations/" in f"/{r.source}" for r in runs) and folders:
        return "ablation: " + ", ".join(f.replace("-", " ") for f in folders)
    if not differing:
        return ""
    if len(differing) <= 2 and all(flat.get(k) is not None for k in differing):
        return ", ".join(f"{k.rsplit('.', 1)[-1]}={_short(flat[k])}" for k in differing)
    if not folders:
        return "other configuration"
    return "as in " + " and ".join(folders) if len(folders) <= 2 \
        else f"as in {folders[0]} and {len(folders) - 1} other folders"


def _short(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def series_of(records: Sequence[SourcedRecord]) -> list[Series]:
    """The result records grouped into series (see the module docstring), sorted."""
    results = of_kind(records, RecordKind.RESULT)
    groups: dict[tuple[str, str, str], dict[str, list[SourcedRecord]]] = {}
    flats: dict[str, dict[str, Any]] = {}
    for r in results:
        triple = (str(r.record["method"]), str(r.record["dataset"]), str(r.record["mode"]))
        key, flat = _config_key(r.record)
        flats[key] = flat
        groups.setdefault(triple, {}).setdefault(key, []).append(r)
    out = []
    for triple in sorted(groups):
        configs = groups[triple]
        keys = sorted({k for c in configs for k in flats[c]})
        differing = [k for k in keys if len({json.dumps(flats[c].get(k), default=str)
                                             for c in configs}) > 1]
        for config in sorted(configs, key=lambda c: _setup_text(flats[c], differing,
                                                                configs[c])):
            points: dict[tuple[Any, ...], list[SourcedRecord]] = {}
            for r in configs[config]:
                pkey = (float(f"{published(r.record):.10g}"),
                        float(f"{record_level(r.record):.10g}"), labels_of(r.record))
                points.setdefault(pkey, []).append(r)
            ordered = sorted(points.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2] or 0))
            out.append(Series(  # names from records, bounded for legends, titles and cells
                method=clip(triple[0]), dataset=clip(triple[1]), mode=clip(triple[2]),
                setup=clip(_setup_text(flats[config], differing, configs[config])),
                points=tuple(Point(epsilon_published=k[0], epsilon_record_level=k[1],
                                   labels=k[2], runs=tuple(v)) for k, v in ordered)))
    return out


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------

def paper_match(series: Series, point: Point) -> PaperReference | None:
    """The paper's figure for a point: same labels where the paper states them, else epsilon."""
    for ref in references_for(series.method, series.dataset, mode=series.mode):
        if ref.labels is not None:
            if point.labels == ref.labels:
                return ref
        elif point.epsilon_published is not None and math.isclose(
                ref.epsilon, point.epsilon_published, rel_tol=1e-6):
            return ref
    return None


#: A run this many points (or more) below its paper figure is flagged in the table and caption.
BELOW_PAPER_POINTS = 10.0


def accuracy_table(series: Sequence[Series], dataset: str, *, ablations: bool = False) -> Table:
    """Accuracy against both epsilons, one row per point of the ``dataset``'s series.

    ``ablations``: the table of the ablation series (else of the others).
    """
    rows = []
    below = 0
    for s in series:
        if s.dataset != dataset or s.ablation != ablations:
            continue
        for p in s.points:
            refs = p.refs
            ref = paper_match(s, p)
            gap = None if ref is None else \
                100 * (sum(p.accuracies) / len(p.accuracies) - ref.test_accuracy)
            flagged = gap is not None and gap <= -BELOW_PAPER_POINTS
            below += flagged
            rows.append((
                Cell(s.method), Cell(s.mode), Cell(s.setup or "-"),
                Cell("-" if p.labels is None else f"{p.labels:,}", refs, "labels"),
                Cell(_fmt_eps(p.epsilon_published), refs, "epsilon_published"),
                Cell(_fmt_eps(p.epsilon_record_level), refs, "epsilon_record_level"),
                Cell(_fmt_pct(p.accuracies) + (" far below paper" if flagged else ""), refs,
                     "test_accuracy", "mean"),
                Cell(str(len(p.runs)), refs, "runs", "count"),
                Cell("-" if ref is None else f"{100 * ref.test_accuracy:.1f}",
                     () if ref is None else (f"paper: {ref.source} @ epsilon {ref.epsilon:g}",),
                     None if ref is None else "paper")))
    kind = "ablations" if ablations else "accuracy and epsilon"
    caption = f"{kind[0].upper()}{kind[1:]} ({dataset})"
    if below:
        caption += (f": {below} point{'s' if below > 1 else ''} {BELOW_PAPER_POINTS:g} or more "
                    "points below the paper's figure (marked far below paper)")
    return Table(
        caption=caption,
        columns=("method", "mode", "setup", "labels / queries", "epsilon (published)",
                 "epsilon (record level)", "test accuracy %", "runs", "paper %"),
        rows=tuple(rows),
        notes=("Test accuracy: mean over the runs (seeds), min-max in brackets. "
               "Epsilon (published): the method's paper's accounting; epsilon (record level): "
               f"what the run guarantees for one private record ({_NOT_DP}: a step was fitted to "
               "private data without noise). Paper %: the paper's figure at the same labels "
               "(or epsilon); a paper's figure is drawn at the epsilon the paper states, which "
               "can differ from the run's (DGD: the paper's 1 and 10 against the 1.314 and 11.9 "
               "its own formula gives for 27 and 1,300 queries). On the left panel a sound run "
               "sits at what the paper's accounting says of its labels: DP-DFD's per-label "
               "epsilon (10 in the sound preset, whatever the record-level target), DGD's "
               "query epsilon; on the right at its record-level epsilon. A mean "
               f"{BELOW_PAPER_POINTS:g} or "
               "more points below the paper's figure is marked far below paper.",))


def budget_tables(records: Sequence[SourcedRecord]) -> list[Table]:
    """Per method: each distinct plan, and its epsilon under every accountant."""
    results = of_kind(records, RecordKind.RESULT)
    methods = sorted({str(r.record["method"]) for r in results})
    tables = []
    for method in methods:
        plans: dict[tuple[Any, ...], list[SourcedRecord]] = {}
        for r in results:
            if r.record["method"] != method or not r.record.get("charges"):
                continue
            key = (str(r.record["dataset"]), str(r.record["mode"]),
                   json.dumps(r.record["charges"], sort_keys=True), r.record.get("delta"))
            plans.setdefault(key, []).append(r)
        rows, notes, relations = [], {}, set()
        for key in sorted(plans, key=lambda k: (k[0], k[1], _plan_order(plans[k][0]))):
            runs = plans[key]
            budget = plan_budget(runs[0].record)
            if budget is None:
                continue
            relations.add(budget.relation)
            refs = tuple(r.ref for r in runs)
            cells = [Cell(clip(key[0])), Cell(clip(key[1])),
                     Cell(_or_dash(labels_of(runs[0].record)), refs, "labels"),
                     Cell(budget.plan),
                     Cell(f"{budget.delta:g}", refs, "delta"),
                     Cell(_fmt_eps(record_level(runs[0].record)), refs, "epsilon_record_level")]
            for _, short in ACCOUNTANTS:
                value = budget.epsilons[short]
                if value is None:
                    notes[f"{short}: {budget.notes[short]}"] = None
                    cells.append(Cell("n/a"))
                else:
                    cells.append(Cell(_fmt_eps(value) if math.isfinite(value) else "∞",
                                      refs, f"budget:{short}"))
            cells.append(Cell(str(len(runs)), refs, "runs", "count"))
            rows.append(tuple(cells))
        if not rows:
            continue
        tables.append(Table(
            caption=f"Budgets: {clip(method)}",
            columns=("dataset", "mode", "labels / queries", "plan (ledger charges)", "delta",
                     "epsilon (record level)", *(s for _, s in ACCOUNTANTS), "runs"),
            rows=tuple(rows),
            notes=(f"Each accountant composes the run's private charges at its delta "
                   f"({', '.join(sorted(relations))} neighbours); a NOT DP charge makes the "
                   "record-level epsilon infinite whatever they say of the private releases. "
                   "Not applicable: " + ("; ".join(notes) if notes else "none") + ".",)))
    return tables


def _plan_order(record: SourcedRecord) -> tuple[float, float]:
    return (labels_of(record.record) or 0, float(record.record["epsilon"]))


def _or_dash(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _optional_bound(rec: Mapping[str, Any], refs: tuple[str, ...], key: str) -> Cell:
    """A one-run analysis's figure (traced to ``key``), or "-" where the record has none."""
    value = rec.get(key)
    if value is None:
        return Cell("-")
    return Cell(f"{float(value):.4g}", refs, key)


def audit_tables(records: Sequence[SourcedRecord]) -> list[Table]:
    """The mechanism audits and the pipeline audits (claimed vs lower bound)."""
    tables = []
    mechanisms = of_kind(records, RecordKind.MECHANISM_AUDIT)
    if mechanisms:
        rows = []
        for r in mechanisms:
            rec, refs = r.record, (r.ref,)
            rows.append((
                Cell(clip(rec["mechanism"]) + (" (control)" if rec.get("control") else "")),
                Cell(str(rec.get("configuration") or "-")),
                Cell(_fmt_eps(float(rec["epsilon_claimed"])), refs, "epsilon_claimed"),
                Cell(f"{float(rec['epsilon_lower']):.4g}", refs, "epsilon_lower"),
                Cell(str(rec["verdict"])),
                Cell(str(rec.get("attack") or "-")),
                Cell(_or_dash(rec.get("samples_per_side")), refs, "samples_per_side")))
        tables.append(Table(
            caption="Audits of the mechanisms (dpkd audit)",
            columns=("mechanism", "configuration", "claimed epsilon", "lower bound",
                     "verdict", "attack", "samples per side"),
            rows=tuple(rows),
            notes=("Lower bound: one-sided Clopper-Pearson at the record's confidence (95%) on "
                   "samples not used to choose the event. A violation (bound above the claim, "
                   "confirmed on fresh samples) "
                   "is expected only of the controls, broken on purpose.",)))
    pipelines = of_kind(records, RecordKind.PIPELINE_AUDIT)
    if pipelines:
        rows = []
        for r in pipelines:
            rec, refs = r.record, (r.ref,)
            size = (f"{rec['canaries']:,} canaries" if rec.get("estimator") == "one-run"
                    else f"{rec.get('runs_per_side', '-')} runs per side")
            key = "canaries" if rec.get("estimator") == "one-run" else "runs_per_side"
            rows.append((
                Cell(clip(rec["pipeline"])), Cell(clip(rec["dataset"])), Cell(clip(rec["mode"])),
                Cell(clip(rec.get("stage") or "-")),
                Cell(_fmt_eps(float(rec["epsilon_claimed"])), refs, "epsilon_claimed"),
                Cell(f"{float(rec['epsilon_lower']):.4g}", refs, "epsilon_lower"),
                _optional_bound(rec, refs, "epsilon_lower_fdp"),
                _optional_bound(rec, refs, "epsilon_lower_gaussian"),
                Cell(str(rec["verdict"])), Cell(size, refs, key)))
        tables.append(Table(
            caption="Audits of whole pipelines (dpkd audit-run)",
            columns=("pipeline", "dataset", "mode", "what is audited", "claimed epsilon",
                     "lower bound", "f-DP bound", "Gaussian estimate", "verdict", "size"),
            rows=tuple(rows),
            notes=("Lower bound: Clopper-Pearson (many runs) or Steinke-Nasr-Jagielski (one "
                   "run), distribution-free; it gives the verdict. f-DP bound: the same "
                   "one-run guesses against the claim's Gaussian trade-off curve "
                   "(Mahloujifar-Melis-Chaudhuri 2025), a stronger hypothesis. Gaussian "
                   "estimate: IN and OUT canary scores fitted as two Gaussians (Agrawal et al. "
                   "2026), an estimate under that model, not a bound. '-': not computed for "
                   "that audit.",
                   "Inconclusive: the bound stayed below half the claim; for a run whose "
                   "record-level epsilon is infinite that is not evidence of privacy.")))
    return tables


def provenance_table(records: Sequence[SourcedRecord]) -> Table:
    """Where each record came from: command, device, commit, time, seconds."""
    rows = []
    for r in records:
        rec = r.record
        prov = rec.get("provenance") if isinstance(rec.get("provenance"), Mapping) else {}
        commit = prov.get("git_commit")
        commit_text = "-" if not commit else str(commit)[:7] + (
            " (dirty)" if prov.get("git_dirty") else "")
        what = (f"{clip(rec['method'])} {clip(rec['dataset'])} {clip(rec['mode'])}"
                if r.kind is RecordKind.RESULT else
                f"audit {clip(rec['pipeline'])} {clip(rec['dataset'])} {clip(rec['mode'])}"
                if r.kind is RecordKind.PIPELINE_AUDIT else f"audit {clip(rec['mechanism'])}")
        seconds = seconds_of(rec)
        rows.append((Cell(r.ref), Cell(what), Cell(str(rec.get("command") or "-")),
                     Cell(clip(rec.get("device") or (
                         f"not recorded (platform {clip(prov['platform'])})"
                         if prov.get("platform") else "-"))),
                     Cell(commit_text, (r.ref,), None if not commit else "provenance.git_commit"),
                     Cell(str(prov.get("created_utc") or "-"), (r.ref,),
                          "provenance.created_utc" if prov.get("created_utc") else None),
                     Cell(_fmt_seconds(seconds), (r.ref,) if seconds is not None else (),
                          "seconds" if seconds is not None else None)))
    return Table(caption="Provenance of every record",
                 columns=("record", "run", "command", "device", "commit", "created (UTC)",
                          "seconds"),
                 rows=tuple(rows),
                 notes=("Commands as recorded; a sweep's command is in its sweep.json where the "
                        "record has none.",))


def devices(records: Iterable[SourcedRecord]) -> list[str]:
    """Distinct devices named by the records."""
    return sorted({clip(r.record["device"]) for r in records if r.record.get("device")})
