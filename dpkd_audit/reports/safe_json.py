r"""Records are input: JSON read with clear refusals instead of tracebacks (issue 33).

A record file may come from anywhere (a colleague, an old version, a hostile edit). What
:func:`load_json` refuses, naming the file and line:

- malformed JSON, and JSON nested deeper than :data:`MAX_DEPTH` (Python's parser raises
  ``RecursionError`` on ~100,000 levels; nothing a record holds is deeper than a few);
- ``NaN`` anywhere (no record field means "not a number"; ``Infinity`` stays allowed: the
  record-level epsilon of a published method is infinite);
- strings that are not valid Unicode text (a lone surrogate such as ``\ud800``, which
  matplotlib and the HTML writer cannot encode).

:func:`read_regular_file` is how every input file is read (records, ``dpkd budget --plan``): a
regular file only (a FIFO would block, ``/dev/zero`` never ends, a symlink loop never resolves),
at most a stated number of bytes, each refusal one ``ValueError`` naming the file and the cause.
:func:`clip` bounds a string read from a file before it reaches a figure or a table, and
:func:`safe_file_part` turns a name read from a record into a file-name part that cannot leave
the output folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_LABEL_CHARS", "MAX_TEXT_CHARS", "clip", "load_json",
           "read_regular_file", "safe_file_part"]

#: Deepest nesting of arrays and objects accepted in a record.
MAX_DEPTH = 64
#: JSON strings (skipped) and brackets (counted) for the depth pre-check. A string is matched
#: as runs of plain characters between escapes (``"[^"\\]*(?:\\.[^"\\]*)*"``), not one character
#: per alternation: on a 20 MB string the latter took 7 s and 2.3 GB of backtracking state.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


#: Longest name from a record (a method, dataset, mechanism...) shown in a figure or a table
#: (longer ones end in "...").
MAX_LABEL_CHARS = 80
#: Longest free text from a record shown in a table cell (a command, an attack's description:
#: 281 characters at most in reports/).
MAX_TEXT_CHARS = 300

#: What a file that is not a regular one is, by its type bits (for the refusal).
_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def _not_regular(mode: int) -> str | None:
    """What a file of ``mode`` is when it is not a regular file, else ``None``."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _FILE_KINDS if test(mode)), "not a regular file")


def read_regular_file(path: str | os.PathLike[str], *, max_bytes: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``, or a ``ValueError`` saying why not.

    The file (a symlink is followed) is ``stat``-ed before it is opened: a FIFO, socket,
    device (``/dev/zero``, ``/dev/full``) or folder is refused by its type, a larger file by its
    size, a symlink loop or a missing file by the system's reason. It is then opened with
    ``O_NONBLOCK`` (a file replaced by a FIFO after the check cannot block the open), checked
    again on the open descriptor, and read up to ``max_bytes + 1`` bytes (a file that grows
    past the cap is refused too).

    Args:
        path: The file.
        max_bytes: Most bytes accepted.
        what: What the file is, at the start of every message (e.g. ``"--plan"``).

    Raises:
        ValueError: ``"{what}: {path} ..."`` naming the cause.
    """
    name = os.fspath(path)
    if name == "":
        raise ValueError(f"{what}: the path is empty (name a file)")
    try:
        info = os.stat(name)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"{what}: cannot read {name} ({reason})") from None
    kind = _not_regular(info.st_mode)
    if kind is not None:
        raise ValueError(f"{what}: {name} is {kind}, not a regular file; only regular files "
                         "are read")
    if info.st_size > max_bytes:
        raise ValueError(f"{what}: {name} has {info.st_size:,} bytes, more than the "
                         f"{max_bytes:,} accepted")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(name, flags)
    except OSError as exc:
        raise ValueError(f"{what}: cannot read {name} ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        kind = _not_regular(os.fstat(fh.fileno()).st_mode)
        if kind is not None:  # replaced between the stat and the open
            raise ValueError(f"{what}: {name} is {kind}, not a regular file; only regular "
                             "files are read")
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise ValueError(f"{what}: cannot read {name} ({exc.strerror or exc})") from None
    if len(data) > max_bytes:
        raise ValueError(f"{what}: {name} has more than the {max_bytes:,} bytes accepted")
    return data


def clip(text: object, limit: int = MAX_LABEL_CHARS) -> str:
    """``str(text)`` of at most ``limit`` characters: longer text ends in "..." (an ellipsis).

    Every string read from a record passes through it before a figure or a table shows it, so
    that a 20 MB name costs a label of ``limit`` characters, not minutes in matplotlib.
    """
    text = text if isinstance(text, str) else str(text)
    return text if len(text) <= limit else text[:max(limit - 3, 1)] + "..."


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
                raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels (no record or "
                                 "plan is)")
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
            raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels (no record or plan "
                             "is)")
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
    file. ``x/../../ESCAPED`` becomes ``x_.._.._ESCAPED-<hash>``: one file inside the folder. A
    name longer than 60 characters is cut to 60, with the hash of the whole name appended (a
    file name stays far below the system's 255 bytes).
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", name[:200]).lstrip(".") or "_"
    if cleaned != name or len(cleaned) > 60:  # long names: a bounded file name, told apart
        digest = hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:8]
        cleaned = f"{cleaned[:60]}-{digest}"
    return cleaned
