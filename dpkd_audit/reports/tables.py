"""Markdown built from saved result records only: tables, notes and README pages.

:func:`markdown_table` lays the records out as one row per setup and target epsilon (aggregated
over seeds by :mod:`dpkd_audit.reports.records`), :func:`seconds_note` says what its
``seconds`` column means, :func:`sweep_readme` writes a sweep's page and
:func:`results_overview` the guide's results sections, GUIDE.md (with notes on label accuracy
without noise, teacher accuracy and where the records came from). It never imports the pipelines or
torch: everything comes from the records.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpkd_audit.reports.records import (
    _NOT_DP,
    SETUP_KEYS,
    _aggregate,
    _check_references,
    _check_seconds,
    _check_text,
    _checked,
    _devices,
    _fmt_eps,
    _infinite_or_positive,
    _none_last,
    _Point,
    has_finite_record_level,
    load_records,
)
from dpkd_audit.reports.references import PAPER_REFERENCES, PaperReference, best_baseline
from dpkd_audit.reports.safe_json import clip

__all__ = [
    "COMPACT_COLUMNS",
    "PARTIAL_SECONDS_MARK",
    "TABLE_COLUMNS",
    "markdown_table",
    "results_overview",
    "rst_results",
    "seconds_note",
    "sweep_readme",
    "table_rows",
]


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
    labels = dict(zip(SETUP_KEYS, point.setup, strict=True))["labels"]
    found = [ref for ref in refs
             if ref.matches(method=point.method, dataset=point.dataset, mode=point.mode)
             and (ref.labels == labels if ref.labels is not None
                  else ref.matches(method=point.method, dataset=point.dataset,
                                   mode=point.mode, epsilon=point.epsilon))]
    found.sort(key=lambda ref: (ref.clusters or 0, ref.k or 0, ref.test_accuracy))
    parts = []
    for ref in found:
        text = f"{100.0 * ref.test_accuracy:.2f}"
        if ref.clusters is not None:
            text += f" (s={ref.clusters})"
        parts.append(text)
    return "; ".join(parts) if parts else "-"


def _stage_sets(records: Iterable[Mapping[str, Any]], *,
                by_mode: bool = False) -> dict[Any, list[str]]:
    """Every stage any record times, in order of first appearance, per method.

    With ``by_mode``, per ``(method, mode)``: modes of one method may have stages of their own.
    """
    stages: dict[Any, list[str]] = {}
    for r in records:
        seconds = r.get("seconds")
        key = (str(r["method"]), str(r["mode"])) if by_mode else str(r["method"])
        known = stages.setdefault(key, [])
        if isinstance(seconds, Mapping):
            known.extend(k for k, v in seconds.items()
                         if k != "total" and v is not None and k not in known)
    return stages


def _missing_stages(record: Mapping[str, Any], stages: Mapping[Any, Sequence[str]]) -> list[str]:
    """Stages of the record's method and mode that its ``seconds`` mapping lacks.

    ``stages`` comes from :func:`_stage_sets` with ``by_mode``; none for a plain number.
    """
    seconds = record.get("seconds")
    if not isinstance(seconds, Mapping):
        return []
    return [k for k in stages[(str(record["method"]), str(record["mode"]))]
            if seconds.get(k) is None]


#: Marks a ``seconds`` cell whose records time fewer stages than others of their method and mode.
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

    * ``setup``: representation, preset and ``Q=`` the labels released (``"-"`` when
      absent); ``s``: clusters.
    * epsilons: 4 significant digits; infinity (record-level null / ``"inf"``) is
      ``"∞ (not DP)"``; distinct values over the seeds are listed, comma-separated.
    * ``runs``: the number of records with their seeds.
    * accuracies: in %, 2 decimals; with several runs ``"mean (min–max)"``; ``"-"`` if absent.
    * ``paper test acc (%)``: the reference's test accuracy (2 decimals, with ``s=`` when the
      paper states it) for the same method, dataset, mode and epsilon (or, for a reference
      that states its label count, the same labels / queries), ``"-"`` if none.
    * ``seconds``: mean total wall-clock seconds per run, 1 decimal, followed by
      :data:`PARTIAL_SECONDS_MARK` when a record of the row times fewer stages than other
      records of its method and mode in the table (so its seconds are not comparable;
      :func:`seconds_note` names the stages missing).
    * ``device``: the distinct devices.

    Args:
        records: Result records.
        references: Where to look up paper numbers (default :data:`PAPER_REFERENCES`).

    Returns:
        The table (header, separator, rows), without a trailing newline.
    """
    right = {"s", "k", "target eps", "published eps", "record-level eps", "delta",
             "label acc (%)", "test acc (%)", "paper test acc (%)", "seconds"}
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |",
             "|" + "|".join("---:" if c in right else "---" for c in TABLE_COLUMNS) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |"
              for row in table_rows(records, references=references)]
    return "\n".join(lines)


def table_rows(records: Sequence[Mapping[str, Any]], *,
               references: Sequence[PaperReference] | None = None) -> list[list[str]]:
    """The cells of :func:`markdown_table`'s rows (:data:`TABLE_COLUMNS`, unescaped text).

    Args:
        records: Result records.
        references: Where to look up paper numbers (default :data:`PAPER_REFERENCES`).
    """
    checked = _checked(records)
    refs = list(PAPER_REFERENCES) if references is None else _check_references(references)
    rows = []
    stages = _stage_sets(checked, by_mode=True)
    for p in _aggregate(checked):
        setup = dict(zip(SETUP_KEYS, p.setup, strict=True))
        seconds = [s for s in (_check_seconds(r.get("seconds")) for r in p.records)
                   if s is not None]
        published = [_infinite_or_positive("epsilon_published", r.get("epsilon_published"),
                                           null_is_inf=False) for r in p.records]
        record_level = [_infinite_or_positive("epsilon_record_level",
                                              r.get("epsilon_record_level"), null_is_inf=True)
                        if "epsilon_record_level" in r else None for r in p.records]
        cells = [  # names from records: bounded (clip)
            clip(p.method), clip(p.dataset), clip(p.mode),
            " / ".join([*(clip(setup[k]) + (f" {DEPARTS_MARK}" if k == "preset" and any(
                              r.get("preset_departures") for r in p.records) else "")
                          for k in ("representation", "preset") if setup[k] is not None),
                        *([] if setup["labels"] is None else [f"Q={setup['labels']}"])]) or "-",
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
            _distinct(clip(d) for d in _devices(p.records)),
        ]
        rows.append(cells)
    return rows


#: The columns of :func:`rst_results` (a subset of :data:`TABLE_COLUMNS`, narrow enough for a
#: documentation page; ``s`` and ``k`` only where a record has them).
COMPACT_COLUMNS: tuple[str, ...] = ("dataset", "mode", "setup", "s", "k", "published eps",
                                    "record-level eps", "runs", "test acc (%)",
                                    "paper test acc (%)", "device")


def _rst_cell(text: str) -> str:
    # A lone "-" or a leading "*" / "-" would start a list inside a list-table cell.
    text = " ".join(str(text).split())
    return "\\" + text if text[:1] in "-*+" else text


def rst_results(paths: Sequence[str | os.PathLike[str]], *,
                references: Sequence[PaperReference] | None = None) -> str:
    """A reStructuredText ``list-table`` of result records (:data:`COMPACT_COLUMNS`).

    The documentation site's results page holds one per method (a test keeps it equal to
    this); the full table, with every column and the notes, is :func:`results_overview`.

    Args:
        paths: Result files or folders, as for :func:`results_overview`.
        references: Paper references (default :data:`PAPER_REFERENCES`).

    Returns:
        The table followed by a line naming the folders and their provenance, ending with a
        newline.

    Raises:
        ValueError: For no path, or malformed records (naming file and line).
        FileNotFoundError: For a missing file, or a folder without results.
    """
    if isinstance(paths, str | os.PathLike) or not isinstance(paths, Sequence) or not paths:
        raise ValueError("paths must be a non-empty sequence of result files or folders; "
                         f"got {paths!r}")
    if any(os.fspath(p) == "" for p in paths):  # Path("") is ".": never the current folder
        raise ValueError("paths: an empty path names no file or folder (give . for the current "
                         "folder)")
    files = sorted({_result_file(p) for p in paths}, key=lambda f: f.as_posix())
    per_file = [(f, load_records(f)) for f in files]
    records = [r for _, recs in per_file for r in recs]
    rows = table_rows(records, references=references)
    columns = [c for c in COMPACT_COLUMNS if c not in ("s", "k")
               or any(r[TABLE_COLUMNS.index(c)] != "-" for r in rows)]
    keep = [TABLE_COLUMNS.index(c) for c in columns]
    out = [".. list-table::", "   :header-rows: 1", ""]
    for row in [columns] + [[r[i] for i in keep] for r in rows]:
        out += [f"   {'*' if j == 0 else ' '} - {_rst_cell(c)}" for j, c in enumerate(row)]
    sources = [f"``{f.parent.as_posix()}`` ({len(recs)} run{'s' if len(recs) > 1 else ''}; "
               f"{_provenance_summary(recs)})" for f, recs in per_file]
    out += ["", "Records: " + ", ".join(sources) + ".", ""]
    return "\n".join(out)


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
    per_mode = _stage_sets(checked, by_mode=True)
    lacking = {stage for r in checked for stage in _missing_stages(r, per_mode)}
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
        value = r.get("cluster_purity")
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
    return ("Cluster purity (share of public samples whose label is their cluster's most common "
            "public label: the most any labelling of these queries can reach; public data "
            "only): " + "; ".join(parts) + ".")


def _baseline_note(records: Sequence[Mapping[str, Any]]) -> str | None:
    """Record-level runs beside the best record-level method of their paper's comparison table.

    Runs with a finite record-level epsilon, against the most accurate method at the same or a
    smaller epsilon (:data:`~dpkd_audit.reports.references.RECORD_LEVEL_BASELINES`).
    """
    rows = []
    for point in _aggregate(_checked(records)):
        finite = [r for r in point.records if has_finite_record_level(r)]
        if not finite:
            continue
        baseline = best_baseline(point.method, point.dataset, point.epsilon)
        if baseline is None:
            continue
        ours = 100.0 * sum(float(r["test_accuracy"]) for r in finite) / len(finite)
        rows.append(f"{point.method} {point.dataset} {point.mode} eps={point.epsilon:g}: "
                    f"{ours:.2f}% vs {baseline.name} {100.0 * baseline.test_accuracy:.2f}% "
                    f"(eps={baseline.epsilon:g}, delta={baseline.delta:g})")
    if not rows:
        return None
    return ("Record-level runs against the best record-level method of the paper's own "
            "comparison table at the same or a smaller epsilon: " + "; ".join(rows) + ".")


def _teacher_note(records: Sequence[Mapping[str, Any]]) -> str | None:
    """Teacher test accuracy beside the student's, for methods that train a teacher."""
    rows = []
    for r in sorted(records, key=lambda r: _none_last(
            (r["method"], r["dataset"], r["mode"], float(r["epsilon"]), r.get("seed")))):
        teacher = r.get("teacher_accuracy")
        if teacher is None:
            continue
        seed = "" if r.get("seed") is None else f", seed {r['seed']}"
        rows.append(f"{r['method']} {r['dataset']} {r['mode']} eps={float(r['epsilon']):g}"
                    f"{seed}: teacher {100.0 * float(teacher):.2f}% / student "
                    f"{100.0 * float(r['test_accuracy']):.2f}%")
    if not rows:
        return None
    return ("Teacher and student test accuracy (the teacher's is the ceiling the student "
            "approaches; a published teacher is not private): " + "; ".join(rows) + ".")


#: Appended to a row's preset when a record of the row departs from it (:func:`_departures_note`).
DEPARTS_MARK = "(changed)"


def _departures_note(records: Sequence[Mapping[str, Any]]) -> str | None:
    """The settings in which runs depart from their preset (records' ``preset_departures``)."""
    rows = []
    for r in sorted(records, key=lambda r: _none_last(
            (r["method"], r["dataset"], r["mode"], float(r["epsilon"]), r.get("seed")))):
        departures = r.get("preset_departures")
        if not departures:
            continue
        seed = "" if r.get("seed") is None else f", seed {r['seed']}"
        rows.append(f"{r['method']} {r['dataset']} {r['mode']} eps={float(r['epsilon']):g}"
                    f"{seed}: " + ", ".join(clip(d) for d in departures))
    if not rows:
        return None
    return (f"Runs that depart from their preset (marked {DEPARTS_MARK} beside it: a stage cut "
            "short or a setting changed, compared with the preset for the same run): "
            + "; ".join(rows) + ".")


def _classes_note(records: Sequence[Mapping[str, Any]]) -> str | None:
    """The classes a student misses (records with a ``classes`` block, e.g. DP-DFD's)."""
    rows = []
    for r in sorted(records, key=lambda r: _none_last(
            (r["method"], r["dataset"], r["mode"], float(r["epsilon"]), r.get("seed")))):
        classes = r.get("classes")
        if not isinstance(classes, Mapping) or not isinstance(classes.get("lost"), Mapping):
            continue
        seed = "" if r.get("seed") is None else f", seed {r['seed']}"
        for c, cause in classes["lost"].items():
            try:
                student = 100.0 * float(classes["student_recall"][int(c)])
                teacher = 100.0 * float(classes["teacher_recall"][int(c)])
                figures = f"student {student:.1f}%, teacher {teacher:.1f}%; "
            except (KeyError, IndexError, TypeError, ValueError):
                figures = ""
            rows.append(f"{r['method']} {r['dataset']} {r['mode']} eps={float(r['epsilon']):g}"
                        f"{seed}: class {c} ({figures}{cause}{_left_release(r, classes, c)})")
    if not rows:
        return None
    return ("Classes a student misses (test recall under a quarter of the teacher's; "
            "`classes` in each record): " + "; ".join(rows) + ".")


def _left_release(record: Mapping[str, Any], classes: Mapping[str, Any], c: str) -> str:
    """``"; last released at stage s of T"`` when class ``c`` left the release early.

    The record's cause names one reason (the first that its counts show); a class the
    generator rarely makes can also have left every candidate set at stage 1, and the stored
    ``last_released_stage`` says so. Empty when the cause already names the stage, the class
    was released in the second half of the stages, or the figures are missing.
    """
    try:
        last = int(classes["last_released_stage"][int(c)])
        stages = int(record["stages"])
    except (KeyError, IndexError, TypeError, ValueError):
        return ""
    cause = str(classes["lost"][c])
    if "stage" in cause or "never released" in cause or stages < 1 or 2 * last > stages:
        return ""
    if last == 0:
        return "; never released"
    return (f"; last released at stage {last} of {stages}: a class in no candidate set is "
            "never released again")


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

    This is what the guide's results sections hold (GUIDE.md; ``dpkd results PATH...`` prints
    it, and a test keeps the guide equal to it): :func:`markdown_table` of all the records, what the
    columns and seconds mean (:func:`seconds_note`), the cluster purity, and a
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
    if any(os.fspath(p) == "" for p in paths):  # Path("") is ".": never the current folder
        raise ValueError("paths: an empty path names no file or folder (give . for the current "
                         "folder)")
    files = sorted({_result_file(p) for p in paths}, key=lambda f: f.as_posix())
    per_file = [(f, load_records(f)) for f in files]
    records = [r for _, recs in per_file for r in recs]
    out = [markdown_table(records, references=references), "",
           f"{_COLUMNS_NOTE} {seconds_note(records)}", ""]
    for note in (_purity_note(records), _teacher_note(records), _classes_note(records),
                 _baseline_note(records), _departures_note(records)):
        if note:
            out += [note, ""]
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
        plot_name: Relative path of the PNG (from
            :func:`~dpkd_audit.reports.accuracy.plot_accuracy`) beside the page, linked as an
            image; ``None`` for no link.
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

    devices = [clip(d) for d in _devices(checked)]
    methods = sorted({clip(r["method"]) for r in checked})
    datasets = sorted({clip(r["dataset"]) for r in checked})
    fence = "````" if "```" in command else "```"
    out = [f"# {title.strip()}", "", "Produced by:", "", f"{fence}bash", command.strip(), fence, ""]
    made_by = [c for c in dict.fromkeys(str(r["command"]).strip() for r in checked
                                        if r.get("command")) if c != command.strip()]
    if made_by:  # e.g. a page rebuilt by --resume from records an earlier command made
        out += ["The records were made by:", "", f"{fence}bash", *made_by, fence, ""]
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
    for note in (_teacher_note(checked), _classes_note(checked), _baseline_note(checked),
                 _departures_note(checked)):
        if note:
            out += [note, ""]
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
