"""Progress bars (tqdm on stderr) that the caller can switch off, and stage timers.

Bars are drawn only when asked for *and* stderr is a terminal: redirected to a file or a pipe
(a log, CI, ``2>&1 | tee``), carriage-return redraws would only fill it with partial lines.
Stage messages (``[dpkd] NAME ...``) are whole lines and are printed whenever asked for.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from tqdm.auto import tqdm

__all__ = ["StageTimer", "TailMeans", "bars_enabled", "progress_bar", "progress_counter"]

T = TypeVar("T")


def bars_enabled(enabled: bool) -> bool:
    """Whether to draw progress bars: ``enabled`` and stderr is a terminal."""
    if not enabled:
        return False
    isatty = getattr(sys.stderr, "isatty", None)
    try:
        return bool(isatty()) if callable(isatty) else False
    except (OSError, ValueError):  # a closed or detached stream
        return False


def progress_bar(iterable: Iterable[T], *, enabled: bool, desc: str,
                 total: int | None = None, unit: str = "it") -> Iterable[T]:
    """``iterable`` wrapped in a tqdm bar on stderr when :func:`bars_enabled`, else unchanged."""
    if not bars_enabled(enabled):
        return iterable
    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False,
                dynamic_ncols=True)


def progress_counter(*, enabled: bool, desc: str, total: int, unit: str = "it") -> tqdm:
    """A manually updated tqdm bar on stderr, disabled unless :func:`bars_enabled`.

    A disabled bar accepts ``update``, ``set_postfix`` and ``close`` and draws nothing.
    """
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True,
                disable=not bars_enabled(enabled))


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


class TailMeans:
    """Mean of each named loss term over the last 10% of a loop's steps (at least one).

    Example:
        >>> means = TailMeans(steps=20)
        >>> for step in range(20):
        ...     means.add(step, {"loss": float(step)})
        >>> means.means
        {'loss': 18.5}
    """

    def __init__(self, *, steps: int) -> None:
        self.steps = steps
        self.tail = max(1, steps // 10)
        self.means: dict[str, float] = {}

    def add(self, step: int, terms: Mapping[str, Any]) -> None:
        """Count step ``step``'s terms (tensors or numbers) if it is in the tail."""
        if step >= self.steps - self.tail:
            for name, value in terms.items():
                value = float(value.detach()) if hasattr(value, "detach") else float(value)
                self.means[name] = self.means.get(name, 0.0) + value / self.tail
