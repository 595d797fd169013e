r"""Records are input: JSON read with clear refusals instead of tracebacks (issue 33).

A record file may come from anywhere (a colleague, an old version, a hostile edit). What
:func:`load_json` refuses, naming the file and line:

- malformed JSON, and JSON nested deeper than :data:`MAX_DEPTH` (Python's parser raises
  ``RecursionError`` on ~100,000 levels; nothing a record holds is deeper than a few);
- ``NaN`` anywhere (no record field means "not a number"; ``Infinity`` stays allowed: the
  record-level epsilon of a published method is infinite);
- strings that are not valid Unicode text (a lone surrogate such as ``\ud800``, which
  matplotlib and the HTML writer cannot encode).

:func:`safe_file_part` turns a name read from a record into a file-name part that cannot leave
the output folder.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "load_json", "safe_file_part"]

#: Deepest nesting of arrays and objects accepted in a record.
MAX_DEPTH = 64
#: JSON strings (skipped) and brackets (counted) for the depth pre-check.
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _reject_nan(name: str) -> float:
    if name == "NaN":
        raise ValueError("NaN is not a value any record field may hold")
    return float(name)  # Infinity, -Infinity


def _check(value: Any, where: str) -> None:
    """Depth and text checks, iteratively (a recursive walk would fail on the depth itself)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"{where}: a string is not valid Unicode text (a lone "
                                 f"surrogate such as \\ud800): {item[:40]!r}") from None
            continue
        if isinstance(item, dict | list):
            if depth > MAX_DEPTH:
                raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels; not a record")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def load_json(text: str, source: str, line: int = 1) -> Any:
    """Parse one JSON document of a record file, or raise ``ValueError`` naming file and line.

    Args:
        text: The document (one line of a ``.jsonl`` file, or a whole ``.json`` file).
        source: The file, for the message.
        line: The line ``text`` starts on (a syntax error is reported at its own line).
    """
    where = f"{source}:{line}"
    depth = running = 0
    for match in _TOKENS.finditer(text):  # a cheap pre-check: no RecursionError
        token = match.group()
        if token[0] == '"':  # brackets inside strings do not nest
            continue
        running += 1 if token in "[{" else -1
        depth = max(depth, running)
        if depth > MAX_DEPTH:
            raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels; not a record")
    try:
        value = json.loads(text, parse_constant=_reject_nan)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}:{line + exc.lineno - 1}: malformed JSON ({exc.msg}, column "
                         f"{exc.colno})") from None
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    _check(value, where)
    return value


def safe_file_part(name: str) -> str:
    """``name`` as a file-name part: letters, digits, ``.``, ``_`` and ``-`` only, no leading dot.

    Anything else (``/``, ``..``, spaces, control characters) is replaced by ``_``; a name that
    changed gets 8 hex digits of its SHA-256 appended, so two different names never share a
    file. ``x/../../ESCAPED`` becomes ``x_.._.._ESCAPED-<hash>``: one file inside the folder.
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "_"
    if cleaned != name:
        digest = hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:8]
        cleaned = f"{cleaned[:60]}-{digest}"
    return cleaned
