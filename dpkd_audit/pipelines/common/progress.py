"""Progress bars (tqdm on stderr) that the caller can switch off, and stage timers."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

__all__ = ["StageTimer", "progress_bar"]

T = TypeVar("T")


def progress_bar(iterable: Iterable[T], *, enabled: bool, desc: str,
                 total: int | None = None, unit: str = "it") -> Iterable[T]:
    """``iterable`` wrapped in a tqdm bar on stderr when ``enabled``, unchanged otherwise."""
    if not enabled:
        return iterable
    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False,
                dynamic_ncols=True)


class StageTimer:
    """Wall-clock seconds per named stage, in the order the stages ran.

    Example:
        >>> timer = StageTimer(verbose=False)
        >>> with timer.stage("fit"):
        ...     pass
        >>> list(timer.seconds)
        ['fit']
    """

    def __init__(self, *, verbose: bool) -> None:
        self.seconds: dict[str, float] = {}
        self._verbose = verbose

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the ``with`` block as stage ``name`` (a repeated name adds up)."""
        if self._verbose:
            print(f"[dpkd] {name} ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.seconds[name] = self.seconds.get(name, 0.0) + elapsed
            if self._verbose:
                print(f"[dpkd] {name}: {elapsed:.1f} s", file=sys.stderr, flush=True)

    @property
    def total(self) -> float:
        """Sum of all stages."""
        return sum(self.seconds.values())
