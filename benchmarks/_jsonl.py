"""One JSON line per measurement, printed and optionally appended to a file (benchmarks)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def jsonl_emitter(out: str | None) -> Callable[[dict[str, Any]], None]:
    """A function that prints a row as one JSON line and, if ``out`` is given, appends it there.

    Each line is flushed as it is written, so a run cut short keeps what it measured.

    Args:
        out: A file to append to, or ``None`` to print only.
    """
    def emit(row: dict[str, Any]) -> None:
        line = json.dumps(row)
        print(line, flush=True)
        if out is not None:
            with open(out, "a") as sink:
                sink.write(line + "\n")

    return emit
