"""Finding and sorting the records a report is built from.

``dpkd report`` reads result records only: the pipelines' ``results.jsonl`` / ``result.json``,
the mechanism audits' ``results.json`` (``dpkd audit --all``) and the pipeline audits'
``audit.json`` (``dpkd audit-run``). :func:`collect` walks files and folders, reads every record
with the file and line it came from (:class:`SourcedRecord`), and sorts it into a
:class:`RecordKind`; anything else is refused with the file, the line and what is missing, before
any figure is drawn. Only regular files are read, at most
:data:`~dpkd_audit.reports.records.MAX_RECORD_FILE_BYTES` each (a FIFO named ``results.jsonl``,
a symlink to ``/dev/zero`` or to itself is refused by name, never waited on or read forever), and
every field a report reads is checked by :mod:`~dpkd_audit.reports.record_schema`.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpkd_audit.reports.record_schema import (
    MECHANISM_AUDIT_FIELDS,
    PIPELINE_AUDIT_FIELDS,
    check_fields,
)
from dpkd_audit.reports.records import MAX_RECORD_FILE_BYTES, REQUIRED_KEYS, validate_record
from dpkd_audit.reports.safe_json import load_json, read_regular_file

__all__ = ["RECORD_FILES", "RecordKind", "SourcedRecord", "collect"]

#: File names a folder is searched for (recursively).
RECORD_FILES: tuple[str, ...] = ("results.jsonl", "result.json", "results.json", "audit.json")

#: Keys of a mechanism audit record (``dpkd audit``).
_MECHANISM_AUDIT_KEYS: tuple[str, ...] = ("mechanism", "epsilon_claimed", "epsilon_lower",
                                          "verdict")
#: Keys of a pipeline audit record (``dpkd audit-run``), besides ``kind``.
_PIPELINE_AUDIT_KEYS: tuple[str, ...] = ("pipeline", "dataset", "mode", "epsilon_claimed",
                                         "epsilon_lower", "verdict")


class RecordKind(enum.StrEnum):
    """What a record is."""

    #: A pipeline run (``dpkd run`` / ``dpkd sweep``): accuracy at a budget.
    RESULT = "result"
    #: An audit of one mechanism (``dpkd audit``): claimed epsilon vs an empirical lower bound.
    MECHANISM_AUDIT = "mechanism-audit"
    #: An audit of a whole pipeline (``dpkd audit-run``).
    PIPELINE_AUDIT = "pipeline-audit"


@dataclasses.dataclass(frozen=True, kw_only=True)
class SourcedRecord:
    """One record with where it came from.

    Attributes:
        kind: :class:`RecordKind`.
        record: The record as read (results are checked by
            :func:`~dpkd_audit.reports.records.validate_record`).
        source: The file, as given or relative to the ``base`` of :func:`collect`.
        line: 1-based line of a JSON-lines file, or 1-based index in a JSON list; 1 for a file
            holding one JSON object.
    """

    kind: RecordKind
    record: Mapping[str, Any]
    source: str
    line: int

    @property
    def ref(self) -> str:
        """``"source:line"``, the reference printed next to every number of a report."""
        return f"{self.source}:{self.line}"


def _classify(record: Any, where: str) -> RecordKind:
    """The kind of ``record``, its fields checked (:mod:`~dpkd_audit.reports.record_schema`)."""
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: a record must be a JSON object; got {type(record).__name__}")
    if record.get("kind") == RecordKind.PIPELINE_AUDIT.value:
        missing = [k for k in _PIPELINE_AUDIT_KEYS if k not in record]
        if missing:
            raise ValueError(f"{where}: pipeline-audit record without {', '.join(missing)}")
        _check(record, PIPELINE_AUDIT_FIELDS, where)
        if record.get("estimator") == "one-run" and record.get("canaries") is None:
            raise ValueError(f"{where}: canaries must be an integer >= 0 in a one-run audit; "
                             "it is missing")
        return RecordKind.PIPELINE_AUDIT
    if all(k in record for k in _MECHANISM_AUDIT_KEYS):
        _check(record, MECHANISM_AUDIT_FIELDS, where)
        return RecordKind.MECHANISM_AUDIT
    if all(k in record for k in REQUIRED_KEYS):
        return RecordKind.RESULT
    missing = [k for k in REQUIRED_KEYS if k not in record]
    raise ValueError(f"{where}: not a result record (missing {', '.join(missing)}), a mechanism "
                     f"audit ({', '.join(_MECHANISM_AUDIT_KEYS)}) or a pipeline audit "
                     "(kind 'pipeline-audit')")


def _check(record: Mapping[str, Any], fields: Mapping[str, Any], where: str) -> None:
    try:
        check_fields(record, fields)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _read(path: Path) -> list[tuple[int, Any]]:
    raw = read_regular_file(path, max_bytes=MAX_RECORD_FILE_BYTES, what="records")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        what = ("an SQLite database (a ledger? see `dpkd ledger`)"
                if raw.startswith(b"SQLite format 3\0") else "a binary file")
        raise ValueError(f"{path}: not a record file: it is {what}, not UTF-8 JSON; records are "
                         "results.jsonl, result.json, results.json or audit.json files (or "
                         "folders holding them)") from None
    if path.suffix == ".jsonl":
        out = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                out.append((number, load_json(line, str(path), number)))
        return out
    data = load_json(text, str(path))
    if isinstance(data, list):
        return list(enumerate(data, start=1))
    return [(1, data)]


def _resolved(path: Path) -> Path | None:
    """``path`` resolved, or ``None`` where it cannot be (a symlink loop)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


def _files(path: Path, skip: Path | None) -> list[Path]:
    """The record files of ``path``: itself unless it is a folder (then read as a file)."""
    if not path.is_dir():
        return [path]  # read_regular_file refuses what is not a regular file
    found = []
    for root, dirs, names in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".")
                         and (skip is None or _resolved(Path(root, d)) != skip))
        found.extend(Path(root, n) for n in sorted(names) if n in RECORD_FILES)
    return found


def _identity(path: Path) -> Any:
    """What tells two names of one file apart (device and inode), else the name itself."""
    try:
        info = path.stat()
    except OSError:
        return str(path)
    return (info.st_dev, info.st_ino)


def _relative(path: Path, base: Path | None) -> str:
    if base is not None:
        resolved, root = _resolved(path), _resolved(base)
        if resolved is not None and root is not None:
            try:
                return resolved.relative_to(root).as_posix()
            except ValueError:
                pass
    return path.as_posix()


def collect(paths: Iterable[str | os.PathLike[str]], *, base: str | os.PathLike[str] | None = None,
            skip: str | os.PathLike[str] | None = None) -> list[SourcedRecord]:
    """Every record in ``paths`` (files, or folders searched for :data:`RECORD_FILES`).

    Args:
        paths: Record files and folders.
        base: Sources are written relative to it where they lie under it (the repository root
            for the committed report, so that it reads the same on every machine).
        skip: A folder not searched (the report's own output folder).

    Returns:
        The records, in the order of ``paths``, then file name, then line; a file named twice is
        read once.

    Raises:
        ValueError: For an empty or missing path, a file that is not a regular file or is
            larger than :data:`~dpkd_audit.reports.records.MAX_RECORD_FILE_BYTES`, a file that
            is not JSON, a record of no known kind (naming its file and line, and the keys it
            lacks), a field of the wrong type or range (naming file, line and field), or no
            record at all.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise ValueError("records: give at least one file or folder")
    if any(os.fspath(p) == "" for p in paths):  # Path("") is "."
        raise ValueError("records: an empty path names no file or folder (give . for the "
                         "current folder)")
    paths = [Path(p) for p in paths]
    base_path = Path(base) if base is not None else None
    skip_path = _resolved(Path(skip)) if skip is not None else None
    seen: set[Any] = set()
    out: list[SourcedRecord] = []
    for path in paths:
        if not os.path.lexists(path):
            raise ValueError(f"records: {str(path)!r} does not exist")
        for file in _files(path, skip_path):
            identity = _identity(file)
            if identity in seen:
                continue
            seen.add(identity)
            entries = _read(file)  # refuses what is not a regular file, before anything else
            source = _relative(file, base_path)
            for line, record in entries:
                where = f"{source}:{line}"
                kind = _classify(record, where)
                if kind is RecordKind.RESULT:
                    record = validate_record(record, where=where)
                out.append(SourcedRecord(kind=kind, record=record, source=source, line=line))
    if not out:
        raise ValueError(f"records: no record found in {', '.join(map(str, paths))} (looked for "
                         f"{', '.join(RECORD_FILES)})")
    return out


def of_kind(records: Sequence[SourcedRecord], kind: RecordKind) -> list[SourcedRecord]:
    """The records of one kind, in order."""
    return [r for r in records if r.kind is kind]
