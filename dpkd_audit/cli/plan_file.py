"""``dpkd budget --plan FILE``: the plan file, read and checked against its schema on load.

The file is input from anywhere, so it is read the way records are
(:func:`~dpkd_audit.reports.safe_json.read_regular_file`: a regular file of at most
:data:`MAX_PLAN_BYTES`; a FIFO, ``/dev/zero`` or a symlink loop is refused by name) and parsed
with a nesting limit (:func:`~dpkd_audit.reports.safe_json.load_json`: 64 levels, no NaN).
Then every field of every release is checked *before* anything is computed from it: its type
(a boolean is never a number: ``"epsilon": true`` is refused, not read as 1), and its range, the
message naming the file, the release, the field, the allowed range and the value received::

    {"releases": [{"mechanism": "laplace", "epsilon": 0.1, "queries": 100},
                  {"mechanism": "gaussian", "noise": 5, "queries": 10}]}
"""

from __future__ import annotations

import argparse
import math
import numbers
import sys
from collections.abc import Callable, Mapping
from typing import Any

from dpkd_audit.cli.names import PLAN_KINDS, name_type

__all__ = ["MAX_PLAN_BYTES", "MAX_PLAN_RELEASES", "PLAN_FIELDS", "read_plan_file"]

#: Largest plan file read (bytes); a release takes about 60.
MAX_PLAN_BYTES = 2**20
#: Most releases one plan may hold.
MAX_PLAN_RELEASES = 1000
#: Smallest epsilon of a release: the smallest normal double, so that the noise it sets
#: (Laplace scale = 1 / epsilon) is finite.
MIN_PLAN_EPSILON = sys.float_info.min


def _number(value: Any) -> bool:
    """A JSON number: an int or a float, never a boolean (``true`` is not 1)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    """A JSON integer (``3``, not ``3.0``, not ``true``)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _positive_real(value: Any) -> bool:
    return _number(value) and math.isfinite(value) and value > 0


def _count(minimum: int) -> tuple[str, Callable[[Any], bool]]:
    return (f"an integer >= {minimum}", lambda v: _integer(v) and v >= minimum)


#: Each field of a release: (what it must be, the test). ``mechanism`` is checked apart.
PLAN_FIELDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "noise": ("a finite number > 0", _positive_real),
    "epsilon": (f"a finite number >= {MIN_PLAN_EPSILON:.3g} (> 0)",
                lambda v: _positive_real(v) and v >= MIN_PLAN_EPSILON),
    "queries": _count(1),
    "sampling_probability": ("a number in (0, 1]", lambda v: _number(v) and 0 < v <= 1),
    "classes": _count(2),
    "users": _count(1),
    "dataset_size": _count(1),
    "batch_size": _count(1),
    "epochs": _count(1),
}


def _shown(value: Any) -> str:
    """``value`` as the message shows it: JSON spelling, at most 60 characters."""
    if value is True or value is False or value is None:
        return {True: "true", False: "false", None: "null"}[value]
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(value: Any) -> str:
    """The JSON type of ``value`` (for "got a string")."""
    for kind, name in ((bool, "a boolean"), (str, "a string"), (list, "a list"),
                       (Mapping, "an object")):
        if isinstance(value, kind):
            return name
    return "a number" if _number(value) else type(value).__name__


def read_plan_file(path: str) -> list[dict[str, Any]]:
    """The releases of a plan file, each a dict of checked fields (``mechanism`` spelled out).

    Args:
        path: The file given to ``--plan``.

    Returns:
        One dict per release: ``mechanism`` (a :data:`~dpkd_audit.cli.names.PLAN_KINDS` value)
        and the fields given, every one of the type and in the range of :data:`PLAN_FIELDS`.

    Raises:
        ValueError: ``"--plan FILE..."`` naming what is wrong: the file (not a regular file,
            too large, not UTF-8 JSON, nested too deep), the layout, or a release's field (its
            allowed range and the value received). Nothing is computed before.
    """
    from dpkd_audit.reports.safe_json import load_json, read_regular_file

    raw = read_regular_file(path, max_bytes=MAX_PLAN_BYTES, what="--plan")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"--plan: {path} is not a JSON file (not UTF-8 text)") from None
    try:
        data = load_json(text, path)
    except ValueError as exc:
        raise ValueError(f"--plan: {path} is not a JSON file: {exc}") from None
    releases = data.get("releases") if isinstance(data, dict) else None
    if not isinstance(releases, list) or not releases:
        raise ValueError(f'--plan: {path} must hold {{"releases": [...]}} with at least one '
                         "release")
    if len(releases) > MAX_PLAN_RELEASES:
        raise ValueError(f"--plan {path}: releases must hold at most {MAX_PLAN_RELEASES:,} "
                         f"releases; got {len(releases):,}")
    return [_release(entry, f"--plan {path}, releases[{i}]") for i, entry in enumerate(releases)]


def _release(entry: Any, where: str) -> dict[str, Any]:
    """One release checked: its keys, its mechanism and every field's type and range."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: must be an object; got {_type_name(entry)}, "
                         f"{_shown(entry)}")
    allowed = {"mechanism", *PLAN_FIELDS}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown} (allowed: "
                         f"{', '.join(sorted(allowed))})")
    mechanism = entry.get("mechanism")
    try:
        if not isinstance(mechanism, str):
            raise argparse.ArgumentTypeError("not a string")
        kind = name_type(PLAN_KINDS, "mechanism")(mechanism)
    except argparse.ArgumentTypeError:
        raise ValueError(f"{where}: mechanism must be one of {', '.join(PLAN_KINDS)}; got "
                         f"{_shown(mechanism)}") from None
    checked: dict[str, Any] = {"mechanism": kind}
    for name, (what, test) in PLAN_FIELDS.items():
        if name not in entry or entry[name] is None:
            continue
        value = entry[name]
        if not test(value):
            got = _shown(value) if _number(value) else f"{_type_name(value)}, {_shown(value)}"
            raise ValueError(f"{where}: {name} must be {what}; got {got}")
        checked[name] = value
    return checked
