"""The plan a run used, read back from its record, and its epsilon under every accountant.

Every pipeline record carries ``charges``: the privacy events its ledger was charged, in order
(``{"event": <event JSON>, "count": n, "label": ...}``). :func:`plan_budget` decodes them
(:func:`dpkd_audit.events.event_from_json`'s format) and composes the differentially private ones
with each accountant of the package, at the record's delta, under the neighbouring relation of
the method's record-level ledger (:data:`METHOD_RELATIONS`). A ``NonPrivateDpEvent`` (a step
fitted to private data without noise) is counted apart: the run's record-level epsilon is then
infinite whatever the accountants say of the private releases.

An accountant that cannot evaluate an event (pure-DP accountants and DP-SGD's subsampled
Gaussian, RDP and a shuffled histogram) gives "n/a" with the reason; no figure is invented.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from typing import Any

from dp_accounting import dp_event as _dp

from dpkd_audit import accountants as _accountants
from dpkd_audit.accountants.base import NeighboringRelation, UnsupportedEventError
from dpkd_audit.events import event_from_json

__all__ = ["ACCOUNTANTS", "METHOD_RELATIONS", "PlanBudget", "charges_of", "plan_budget"]

#: The accountants of a budget table, in column order, with their short names.
ACCOUNTANTS: tuple[tuple[str, str], ...] = (
    ("PureAccountant", "pure"),
    ("AdvancedCompositionAccountant", "advanced"),
    ("OptimalCompositionAccountant", "optimal"),
    ("RDPAccountant", "RDP"),
    ("PLDAccountant", "PLD"),
)

#: The neighbouring relation of each method's record-level ledger (``ledger_for`` of
#: ``pipelines/rknn/release.py``: the accountants' default, replace-one; DP-DFD's and DGD's
#: record-level ledgers: add/remove-one, as DP-SGD's accounting requires).
#: tests/test_report_budgets.py checks these against the pipelines.
METHOD_RELATIONS: dict[str, NeighboringRelation] = {
    "rknn": NeighboringRelation.REPLACE_ONE,
    "dpdfd": NeighboringRelation.ADD_OR_REMOVE_ONE,
    "dgd": NeighboringRelation.ADD_OR_REMOVE_ONE,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlanBudget:
    """A run's plan and what each accountant makes of it.

    Attributes:
        plan: One line: the charges, each ``count x label``.
        non_private: Charges that are not differentially private (``NonPrivateDpEvent``).
        delta: The delta the epsilons are at (the record's).
        relation: The neighbouring relation used.
        epsilons: Accountant short name -> epsilon of the private charges composed (``None``
            where the accountant cannot evaluate them; see ``notes``).
        notes: Accountant short name -> why there is no figure.
    """

    plan: str
    non_private: int
    delta: float
    relation: str
    epsilons: dict[str, float | None]
    notes: dict[str, str]

    @property
    def record_level_infinite(self) -> bool:
        """Whether a non-private step makes the record-level epsilon infinite."""
        return self.non_private > 0


def charges_of(record: Mapping[str, Any]) -> list[tuple[_dp.DpEvent, int, str]]:
    """``(event, count, label)`` of each charge of ``record`` (empty where it has none).

    Raises:
        ValueError: For a charge that is not an object with a decodable ``event`` and a count
            >= 1.
    """
    charges = record.get("charges") or []
    if not isinstance(charges, list):
        raise ValueError(f"charges must be a list; got {type(charges).__name__}")
    out = []
    for i, charge in enumerate(charges, start=1):
        if not isinstance(charge, Mapping) or "event" not in charge:
            raise ValueError(f"charge {i} must be an object with an 'event'; got {charge!r}")
        count = charge.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"charge {i}: count must be an integer >= 1; got {count!r}")
        try:
            event = event_from_json(json.dumps(charge["event"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"charge {i}: its event cannot be decoded ({exc})") from None
        out.append((event, count, str(charge.get("label", type(event).__name__))))
    return out


def _plan_text(charges: list[tuple[_dp.DpEvent, int, str]]) -> str:
    """Charges as ``count x label``; runs of identical labels are merged (DP-DFD's stages)."""
    merged: list[list[Any]] = []
    for event, count, label in charges:
        key = label
        if isinstance(event, _dp.NonPrivateDpEvent):
            key = "NOT DP: " + label
        if " " in label and label.split(" ", 1)[0] == "stage" and ":" in label:
            key = "stages:" + label.split(":", 1)[1].strip()
        if merged and merged[-1][0] == key:
            merged[-1][1] += count
            merged[-1][2] += 1
        else:
            merged.append([key, count, 1])
    parts = []
    for key, count, pieces in merged:
        if key.startswith("stages:"):
            parts.append(f"{pieces} stages: {key[len('stages:'):]}")
        else:
            text = key if len(key) <= 90 else key[:87] + "..."
            parts.append(text if count == 1 else f"{count} x {text}")
    return "; ".join(parts)


_CACHE: dict[str, PlanBudget] = {}


def plan_budget(record: Mapping[str, Any]) -> PlanBudget | None:
    """The plan of ``record`` and its epsilon under each of :data:`ACCOUNTANTS`.

    ``None`` when the record has no ``charges`` (records written before they were kept).

    Raises:
        ValueError: For malformed charges, or a method whose relation is not known.
    """
    charges = charges_of(record)
    if not charges:
        return None
    method = str(record.get("method", ""))
    if method not in METHOD_RELATIONS:
        raise ValueError(f"method must be one of {', '.join(METHOD_RELATIONS)} to know its "
                         f"neighbouring relation; got {method!r}")
    relation = METHOD_RELATIONS[method]
    delta = float(record.get("delta") or 0.0)
    key = json.dumps([record.get("charges"), delta, relation.name], sort_keys=True)
    if key in _CACHE:
        return _CACHE[key]
    private = [(e, c) for e, c, _ in charges if not isinstance(e, _dp.NonPrivateDpEvent)]
    epsilons: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for name, short in ACCOUNTANTS:
        if not private:
            epsilons[short], notes[short] = None, "no private release"
            continue
        try:
            acc = getattr(_accountants, name)(neighboring_relation=relation)
            for event, count in private:
                acc.compose(event, count=count)
            epsilon = float(acc.get_epsilon(delta))
        except (UnsupportedEventError, ValueError) as exc:
            epsilons[short] = None
            notes[short] = _reason(exc)
            continue
        epsilons[short] = epsilon if math.isfinite(epsilon) else math.inf
    budget = PlanBudget(plan=_plan_text(charges),
                        non_private=sum(c for e, c, _ in charges
                                        if isinstance(e, _dp.NonPrivateDpEvent)),
                        delta=delta, relation=relation.name.lower().replace("_", "-"),
                        epsilons=epsilons, notes=notes)
    _CACHE[key] = budget
    return budget


def _reason(exc: Exception) -> str:
    text = str(exc).split(" (", 1)[0] if isinstance(exc, UnsupportedEventError) else str(exc)
    return text if len(text) <= 120 else text[:117] + "..."
