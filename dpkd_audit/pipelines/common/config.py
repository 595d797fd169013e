"""Config helpers shared by the pipelines: the preset names, enum parsing, plain dicts."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, TypeVar

__all__ = ["RUN_FIELDS", "Preset", "parse_enum", "plain", "preset_departures"]

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


#: The fields that say which run a config is, not how it runs: never a departure.
RUN_FIELDS: tuple[str, ...] = ("dataset", "mode", "seed", "epsilon", "queries", "label_epsilon",
                               "preset")


def preset_departures(config: Any) -> list[str]:
    """How ``config`` departs from its own preset for the same run.

    One ``"path: value (preset: value)"`` per changed setting; ``[]`` when the config is the
    preset as it stands.

    The reference is ``type(config).preset_config(config.preset, **run fields)`` (the run
    fields, :data:`RUN_FIELDS`, say which run it is: dataset, mode, seed, epsilon, queries).
    A paper-preset run with shortened stages (``--ensemble-steps 300``, ``--teacher-epochs 3``)
    says so here, and the report marks it.
    """
    run = {name: getattr(config, name) for name in RUN_FIELDS
           if name != "preset" and hasattr(config, name)}
    try:
        reference = type(config).preset_config(config.preset, **run)
    except ValueError as error:  # a run its preset cannot describe: say so, never guess
        return [f"(the {config.preset.value} preset refuses this run: {error})"]
    found: list[str] = []
    _diff(plain(reference), plain(config), "", found)
    return found


def _diff(reference: Any, value: Any, path: str, found: list[str]) -> None:
    if isinstance(reference, dict) and isinstance(value, dict):
        for key in sorted(set(reference) | set(value)):
            _diff(reference.get(key), value.get(key), f"{path}.{key}" if path else str(key),
                  found)
    elif reference != value:
        found.append(f"{path}: {value!r} (preset: {reference!r})")
