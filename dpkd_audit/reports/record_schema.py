"""The fields a report reads from a record, checked when the record is read (issue 65).

A record file is input: every field that :mod:`dpkd_audit.reports` formats, compares or draws is
checked here, once, when :func:`~dpkd_audit.reports.collect.collect` (``dpkd report``) or
:func:`~dpkd_audit.reports.records.load_records` reads it, so that a wrong type (``"seconds":
[]``, a list where a count belongs) is one ``ValueError`` naming the file, the line, the field,
what it must be and what it is, never a ``TypeError`` deep in a table or a figure.

Fields a report does not read are not checked (records of newer versions keep working); a field
that is absent or ``null`` is "not recorded" unless it is required.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from dpkd_audit.reports.safe_json import clip

__all__ = ["MECHANISM_AUDIT_FIELDS", "PIPELINE_AUDIT_FIELDS", "RESULT_FIELDS", "VERDICTS",
           "Field", "check_fields"]

#: The verdicts a record may state (one vocabulary in JSON, HTML, tables and the CLI).
VERDICTS: tuple[str, ...] = ("violation", "consistent", "inconclusive", "unconfirmed")


@dataclasses.dataclass(frozen=True)
class Field:
    """One checked field.

    Attributes:
        allowed: What the value must be, in words (the message says it).
        test: Whether a (non-null) value is allowed.
        required: Whether the field must be present and not null.
    """

    allowed: str
    test: Callable[[Any], bool]
    required: bool = False


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _integer(minimum: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= minimum


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _seconds(value: Any) -> bool:
    """A finite number >= 0, or a mapping of stage name to one (or null)."""
    def ok(v: Any) -> bool:
        return _real(v) and math.isfinite(v) and v >= 0
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and (v is None or ok(v)) for k, v in value.items())
    return ok(value)


def _provenance(value: Any) -> bool:
    if not isinstance(value, Mapping):
        return False
    texts = ("git_commit", "created_utc", "platform", "package_version")
    return (all(value.get(k) is None or isinstance(value[k], str) for k in texts)
            and (value.get("git_dirty") is None or isinstance(value["git_dirty"], bool)))


def _histogram(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(value.get(k), list) and all(_real(x) for x in value[k])
        for k in ("edges", "x", "x_prime"))


_TEXT = Field("a non-empty string", _text)
_REQUIRED_TEXT = Field("a non-empty string", _text, required=True)
_NUMBER = Field("a number", _real)
_COUNT = Field("an integer >= 0", _integer(0))
_SECONDS = Field("a finite number >= 0, or a mapping of stage name to one", _seconds)
_PROVENANCE = Field("an object whose git_commit, created_utc, platform and package_version are "
                    "strings and git_dirty a boolean", _provenance)

#: Fields of both kinds of audit record (``dpkd audit``, ``dpkd audit-run``).
_AUDIT_FIELDS: dict[str, Field] = {
    "epsilon_claimed": Field("a number > 0", lambda v: _real(v) and v > 0, required=True),
    "epsilon_lower": Field("a finite number >= 0 (an audit's lower bound)",
                           lambda v: _real(v) and math.isfinite(v) and v >= 0, required=True),
    "verdict": Field(f"one of {', '.join(VERDICTS)}", lambda v: v in VERDICTS, required=True),
    "epsilon_estimate": _NUMBER, "epsilon_attainable": _NUMBER, "true_epsilon": _NUMBER,
    "epsilon_lower_fdp": _NUMBER, "epsilon_lower_gaussian": _NUMBER,
    "confidence": Field("a number in (0, 1)", lambda v: _real(v) and 0 < v < 1),
    "delta": Field("a number in [0, 1)", lambda v: _real(v) and 0 <= v < 1),
    "seconds": _SECONDS, "command": _TEXT, "device": _TEXT, "provenance": _PROVENANCE,
    "attack": _TEXT,
}

#: Fields of a mechanism audit (``dpkd audit``) that reports read.
MECHANISM_AUDIT_FIELDS: dict[str, Field] = {
    **_AUDIT_FIELDS,
    "mechanism": _REQUIRED_TEXT,
    "configuration": _TEXT, "policy": _TEXT,
    "control": Field("a boolean", lambda v: isinstance(v, bool)),
    "samples_per_side": Field("an integer >= 1", _integer(1)),
    "inputs": Field("a list of two inputs", lambda v: isinstance(v, list) and len(v) == 2),
    "design": Field("an object", lambda v: isinstance(v, Mapping)),
    "family_error": Field("an object", lambda v: isinstance(v, Mapping)),
}

#: Fields of a pipeline audit (``dpkd audit-run``, ``kind: pipeline-audit``) that reports read.
PIPELINE_AUDIT_FIELDS: dict[str, Field] = {
    **_AUDIT_FIELDS,
    "pipeline": _REQUIRED_TEXT, "dataset": _REQUIRED_TEXT, "mode": _REQUIRED_TEXT,
    "stage": _TEXT, "estimator": _TEXT, "score_name": _TEXT, "neighbouring": _TEXT,
    "canaries": _COUNT, "correct": _COUNT, "guesses": _COUNT, "runs_per_side": _COUNT,
    "side_labels": Field("an object with the strings x and x_prime", lambda v: isinstance(
        v, Mapping) and all(isinstance(v.get(k), str) for k in ("x", "x_prime"))),
    "score_histogram": Field("an object with the number lists edges, x and x_prime",
                             _histogram),
}

#: Fields of a result record that reports read besides those of
#: :func:`~dpkd_audit.reports.records.validate_record`.
RESULT_FIELDS: dict[str, Field] = {
    "command": _TEXT, "provenance": _PROVENANCE,
    "config": Field("an object", lambda v: isinstance(v, Mapping)),
    "charges": Field("a list of charges", lambda v: isinstance(v, list)),
    "shared_stages": Field("a list of stage names", lambda v: isinstance(v, list) and all(
        isinstance(s, str) for s in v)),
    "preset_departures": Field("a list of strings", lambda v: isinstance(v, list) and all(
        isinstance(s, str) for s in v)),
    "stages": Field("an integer >= 1", _integer(1)),
    "classes": Field("an object", lambda v: isinstance(v, Mapping)),
}


def check_fields(record: Mapping[str, Any], fields: Mapping[str, Field]) -> None:
    """Check the ``fields`` of ``record``.

    Raises:
        ValueError: ``"NAME must be ALLOWED; got VALUE"`` for the first field that is missing
            (required) or wrong (the value shown at most 60 characters long).
    """
    for name, field in fields.items():
        value = record.get(name)
        if value is None:
            if field.required:
                raise ValueError(f"{name} must be {field.allowed}; "
                                 f"{'got null' if name in record else 'it is missing'}")
            continue
        if not field.test(value):
            raise ValueError(f"{name} must be {field.allowed}; got {clip(repr(value), 60)}")
