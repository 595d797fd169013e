"""Result records: their keys, validation, loading and aggregation over seeds.

A pipeline run writes one JSON record; a sweep writes ``results.jsonl`` (one record per line).
This module reads them back (:func:`load_records`), checks them (:func:`validate_record`) and
holds what the plots (:mod:`dpkd_audit.reports.accuracy`) and the Markdown tables
(:mod:`dpkd_audit.reports.tables`) share: the record keys, :class:`Metric`, the aggregation of
runs over seeds, the selection of paper references and the formatting of epsilons. It never
imports the pipelines or torch: everything comes from the records.

Record keys (see the shared ARCHITECTURE "Pipelines"):

* required: ``method``, ``dataset``, ``mode`` (non-empty strings), ``epsilon`` (the target
  budget, a finite real > 0) and ``test_accuracy`` (a fraction in [0, 1]);
* refused: :data:`EVALUATOR_ONLY_KEYS` (computed from the exact private counts);
* optional (absent or null where a method has no such value): ``label_accuracy``,
  ``cluster_purity`` (public data only), ``teacher_accuracy`` (fractions), ``epsilon_published``
  (> 0, may be infinite), ``epsilon_record_level`` (> 0; infinity may be written as
  ``Infinity``, the string ``"inf"`` or JSON ``null``, since strict JSON has no infinity: **null
  means infinite (not DP)** for this key only), ``delta`` (in [0, 1)), ``clusters``, ``k``,
  ``labels`` (labels or queries released; integers >= 1; ``queries`` is read where
  ``labels`` is absent), ``seed`` (integer),
  ``representation``, ``preset``, ``device`` (strings), ``seconds`` (a number, or a mapping of
  stage to seconds whose ``"total"`` is used; without ``"total"``, the sum of the stages),
  ``shared_stages`` (stages measured once and shared by the runs of a sweep, counted in each)
  and ``provenance`` (package version, git commit, time, library versions: see
  :mod:`dpkd_audit.provenance`); records written before these keys existed are shown with
  what they have. The other keys a report reads (``command``, ``provenance``, ``config``,
  ``charges``, ...) are checked by :data:`~dpkd_audit.reports.record_schema.RESULT_FIELDS`, and
  files are read only if they are regular files of at most :data:`MAX_RECORD_FILE_BYTES`.

Runs are aggregated over seeds: records that agree on method, dataset, mode, the setup keys
(:data:`SETUP_KEYS`) and the target epsilon form one point / one table row, shown as the mean
with the min-max range.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpkd_audit._validate import (
    check_delta,
    check_epsilon,
    check_int,
    check_positive,
    check_probability,
)
from dpkd_audit.reports.record_schema import RESULT_FIELDS, check_fields
from dpkd_audit.reports.references import PaperReference, references_for
from dpkd_audit.reports.safe_json import load_json, read_regular_file

__all__ = [
    "EVALUATOR_ONLY_KEYS",
    "MAX_RECORD_FILE_BYTES",
    "REQUIRED_KEYS",
    "SETUP_KEYS",
    "Metric",
    "load_records",
    "setup_value",
    "validate_record",
]

#: Largest record file read (bytes): the committed sweeps' largest is about 0.6 MB.
MAX_RECORD_FILE_BYTES = 32 * 2**20

#: Keys every record must have.
REQUIRED_KEYS: tuple[str, ...] = ("method", "dataset", "mode", "epsilon", "test_accuracy")
#: Keys that distinguish two setups of the same (method, dataset, mode): runs differing in one of
#: them are never averaged together.
SETUP_KEYS: tuple[str, ...] = ("representation", "clusters", "k", "preset", "labels")

_INFINITY_STRINGS = frozenset({"inf", "+inf", "infinity", "+infinity", "∞"})
_NOT_DP = "∞ (not DP)"

#: Diagnostics computed from the exact private counts: never in a released record.
EVALUATOR_ONLY_KEYS: tuple[str, ...] = ("label_accuracy_without_noise", "query_accuracy")


class Metric(enum.StrEnum):
    """The accuracy a plot shows on its y axis (the record key of the same name)."""

    TEST_ACCURACY = "test_accuracy"
    LABEL_ACCURACY = "label_accuracy"
    CLUSTER_PURITY = "cluster_purity"
    TEACHER_ACCURACY = "teacher_accuracy"

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
                Metric.CLUSTER_PURITY: "cluster purity (public labels)",
                Metric.TEACHER_ACCURACY: "teacher accuracy"}[self]


# --------------------------------------------------------------------------------------------
# Reading and validating records
# --------------------------------------------------------------------------------------------

def _infinite_or_positive(name: str, value: Any, *, null_is_inf: bool) -> float | None:
    if value is None:
        return math.inf if null_is_inf else None
    if isinstance(value, str) and value.strip().lower() in _INFINITY_STRINGS:
        return math.inf
    return check_positive(name, value, allow_inf=True)


def has_finite_record_level(record: Mapping[str, Any]) -> bool:
    """Whether a record states a finite record-level epsilon (absent: ``False``)."""
    if "epsilon_record_level" not in record:
        return False
    value = _infinite_or_positive("epsilon_record_level", record["epsilon_record_level"],
                                  null_is_inf=True)
    return value is not None and math.isfinite(value)


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
        leaked = [key for key in EVALUATOR_ONLY_KEYS if key in record]
        if leaked:
            raise ValueError(
                f"{', '.join(leaked)} must not be in a released record: computed from the "
                "exact private counts without noise, they belong in the evaluator-only file "
                "(evaluator.json / evaluator.jsonl) and are never published")
        for key in ("label_accuracy", "cluster_purity", "teacher_accuracy"):
            if record.get(key) is not None:
                check_probability(key, record[key])
        _infinite_or_positive("epsilon_published", record.get("epsilon_published"),
                              null_is_inf=False)
        _infinite_or_positive("epsilon_record_level", record.get("epsilon_record_level"),
                              null_is_inf=True)
        if record.get("delta") is not None:
            check_delta(record["delta"])
        for key in ("clusters", "k", "labels", "queries"):
            if record.get(key) is not None:
                check_int(key, record[key], minimum=1)
        if record.get("seed") is not None:
            check_int("seed", record["seed"])
        for key in ("representation", "preset", "device"):
            if record.get(key) is not None:
                _check_text(key, record[key])
        _check_seconds(record.get("seconds"))
        check_fields(record, RESULT_FIELDS)
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
        ValueError: For an unknown suffix, no path or no record at all, a file that is not a
            regular file (a FIFO, a device, a symlink loop) or is larger than
            :data:`MAX_RECORD_FILE_BYTES`, or malformed content:
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
        if not os.path.lexists(path):
            raise FileNotFoundError(f"{path}: no such result file")
        raw = read_regular_file(path, max_bytes=MAX_RECORD_FILE_BYTES, what="records")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{path}: not a record file: it is not UTF-8 JSON") from None
        if suffix == ".json":
            record = load_json(text, str(path))
            records.append(validate_record(record, where=f"{path}:1"))
            continue
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            record = load_json(line, str(path), lineno)
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


def setup_value(record: Mapping[str, Any], key: str) -> Any:
    """A record's value of one of :data:`SETUP_KEYS`.

    ``labels`` falls back to ``queries`` (DGD's records name the labels they release so).
    """
    if key == "labels" and record.get("labels") is None:
        return record.get("queries")
    return record.get(key)


def _aggregate(records: Sequence[Mapping[str, Any]]) -> list[_Point]:
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in records:
        setup = tuple(setup_value(r, key) for key in SETUP_KEYS)
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
        elif key == "labels":
            parts.append(f"Q={'-' if value is None else value}")
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
# Formatting
# --------------------------------------------------------------------------------------------

def _fmt_eps(value: float | None) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return _NOT_DP
    return f"{value:.4g}"
