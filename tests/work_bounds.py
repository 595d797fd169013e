"""Work bounds for "this must stay cheap" tests, instead of wall-clock limits.

A wall-clock limit is either loose enough to pass on a loaded CI machine (and then misses a
10x regression) or flaky. What these tests guard is the *amount of work*: how many times an
expensive kernel runs (count its calls) and how much memory an algorithm needs (its arrays are
its work: an exact composition that stopped windowing allocates the whole support).
:func:`peak_bytes` measures the latter with tracemalloc, which numpy reports its buffers to.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

MB = 1 << 20


def peak_bytes(fn: Callable[[], Any]) -> tuple[Any, int]:
    """Run ``fn``; return its result and the peak of memory allocated while it ran."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        result = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, peak
