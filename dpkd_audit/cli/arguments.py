"""Argument types shared by the ``dpkd`` subcommands (argparse ``type=`` callables).

Each raises ``argparse.ArgumentTypeError`` with what was expected and what was received, so that
argparse prints one line naming the flag and exits with status 2 before any work.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence

__all__ = ["choice_list", "fraction", "int_at_least", "non_negative_float", "positive_float"]


def positive_float(text: str) -> float:
    """A finite real number > 0."""
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from exc
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite real number >= 0."""
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from exc
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A real number in [0, 1)."""
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from exc
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1), got {text!r}")
    return value


def int_at_least(minimum: int) -> Callable[[str], int]:
    """The type of an integer >= ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got "
                                             f"{text!r}") from exc
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}")
        return value
    return parse


def choice_list(allowed: Sequence[str], *, name: str = "modes") -> Callable[[str], list[str]]:
    """The type of a comma-separated, non-empty list of ``allowed`` values."""
    allowed = list(allowed)

    def parse(text: str) -> list[str]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        if not values or any(v not in allowed for v in values):
            raise argparse.ArgumentTypeError(f"{name} must be among {allowed}; got {text!r}")
        return values
    return parse


def add_executor_arguments(p: argparse.ArgumentParser) -> None:
    """``--executor {local,ray}`` and ``--address`` (see :mod:`dpkd_audit.executor`)."""
    from dpkd_audit.executor import ExecutorKind

    p.add_argument("--executor", choices=[k.value for k in ExecutorKind], default="local",
                   help="where independent pieces run: local (this process, default) or ray "
                        "(Ray tasks; pip install -e \".[distributed]\")")
    p.add_argument("--address", help="--executor ray: the Ray cluster to join (e.g. auto or "
                                      "ray://HOST:10001); default: a local Ray instance")
