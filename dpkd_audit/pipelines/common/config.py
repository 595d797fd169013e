"""Config helpers shared by the pipelines: the preset names, enum parsing, plain dicts."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, TypeVar

__all__ = ["Preset", "parse_enum", "plain"]

E = TypeVar("E", bound=enum.Enum)


class Preset(enum.StrEnum):
    """Named configurations of a pipeline."""

    #: CPU-sized: runs in minutes on 2 cores.
    SMALL = "small"
    #: GPU-sized: the paper's networks and lengths.
    PAPER = "paper"


def parse_enum(kind: type[E], name: str, value: Any) -> E:
    """``kind(value)``, or a ``ValueError`` naming ``name``, the allowed values and ``value``."""
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise ValueError(f"{name} must be one of {allowed}; got {value!r}") from None


def plain(value: Any) -> Any:
    """JSON-ready form of a (nested) config: enums as values, dataclasses as dicts."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return value
