"""What makes two ledgers the same ledger: budget, accountant (with its configuration), relation.

A ledger's *identity* is its budget ``(epsilon, delta)`` and the accountant that turns charges
into a spent epsilon: its class, every constructor argument that changes its results, and its
neighbouring relation. The identity is stored in the file, covered by the chain of digests, and
compared on every open: a ledger reopened with another accountant would report another spent
epsilon for the same charges (a ledger created with basic composition and reopened with RDP
accepted charges until the creator reported 2.8 spent of a budget of 1.0).

:func:`accountant_spec` describes an *empty* accountant as a JSON-able dict;
:func:`accountant_from_spec` rebuilds it, so ``Ledger.open(path)`` can adopt the stored one.
Package accountants are described exactly (exact class, not subclasses). Any other accountant
is described by its importable class name, its relation, and what its optional
``ledger_config()`` method returns (a JSON-able dict of the constructor arguments that change
its results); such an accountant cannot be rebuilt from the file, so it must be passed again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from dpkd_audit.accountants.base import Accountant, NeighboringRelation

__all__ = [
    "BUDGET_RTOL",
    "LedgerIdentity",
    "accountant_from_spec",
    "accountant_spec",
    "canonical_json",
    "describe_accountant",
    "parse_spec",
]

#: Relative slack on the budget comparison, absorbing float rounding of sums such as
#: 10 x 0.1 (an overspend of at most 1e-12 of the budget).
BUDGET_RTOL = 1e-12


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces (floats by ``repr``: exact round trip, inf allowed)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _orders(values: Any) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=float).ravel()]


def _package_classes() -> dict[str, tuple[type, Callable[[Accountant], dict[str, Any]],
                                           Callable[[NeighboringRelation, dict], Accountant]]]:
    """Per package accountant: its class, its configuration, and how to rebuild it."""
    from dpkd_audit.accountants import (
        AdvancedCompositionAccountant,
        OptimalCompositionAccountant,
        PATEAccountant,
        PLDAccountant,
        PureAccountant,
        RDPAccountant,
        ShuffleAccountant,
        ShuffleBound,
    )

    return {
        "PureAccountant": (PureAccountant, lambda a: {}, lambda r, c: PureAccountant(r)),
        "AdvancedCompositionAccountant": (
            AdvancedCompositionAccountant, lambda a: {},
            lambda r, c: AdvancedCompositionAccountant(r)),
        "OptimalCompositionAccountant": (
            OptimalCompositionAccountant, lambda a: {"max_atoms": int(a._max_atoms)},
            lambda r, c: OptimalCompositionAccountant(r, max_atoms=c["max_atoms"])),
        "RDPAccountant": (
            RDPAccountant, lambda a: {"orders": _orders(a.orders), "refine": bool(a._refine)},
            lambda r, c: RDPAccountant(c["orders"], r, refine=c["refine"])),
        "PLDAccountant": (
            PLDAccountant,
            lambda a: {"value_discretization_interval": float(a.value_discretization_interval)},
            lambda r, c: PLDAccountant(r, c["value_discretization_interval"])),
        "ShuffleAccountant": (
            ShuffleAccountant,
            lambda a: {"delta_per_release": float(a.delta_per_release), "bound": a.bound.value},
            lambda r, c: ShuffleAccountant(c["delta_per_release"], bound=ShuffleBound(c["bound"]),
                                           neighboring_relation=r)),
        "PATEAccountant": (
            PATEAccountant,
            lambda a: {"orders": _orders(a.orders), "data_dependent": bool(a.data_dependent)},
            lambda r, c: PATEAccountant(c["orders"], c["data_dependent"],
                                        neighboring_relation=r)),
    }


def accountant_spec(accountant: Accountant) -> dict[str, Any]:
    """Describe an accountant's identity: class, results-changing configuration, relation.

    Args:
        accountant: The (empty) accountant of a ledger.

    Returns:
        ``{"class": ..., "config": {...}, "neighboring_relation": ...}``, JSON-able; package
        accountants are named by their class name, others by ``module:qualname``.

    Raises:
        ValueError: If a custom accountant's ``ledger_config()`` is not a JSON-able dict.
    """
    relation = accountant.neighboring_relation.name
    cls = type(accountant)
    for name, (known, config, _rebuild) in _package_classes().items():
        if cls is known:
            spec = {"class": name, "config": config(accountant), "neighboring_relation": relation}
            return json.loads(canonical_json(spec))
    hook = getattr(accountant, "ledger_config", None)
    custom = hook() if callable(hook) else {}
    if not isinstance(custom, dict):
        raise ValueError(f"accountant.ledger_config() must return a dict; got {custom!r}")
    spec = {"class": f"{cls.__module__}:{cls.__qualname__}", "config": custom,
            "neighboring_relation": relation}
    try:
        return json.loads(canonical_json(spec))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"accountant.ledger_config() must return JSON-able values: {exc}") from exc


def accountant_from_spec(spec: Any) -> Accountant:
    """Rebuild a package accountant from :func:`accountant_spec`'s description.

    Raises:
        ValueError: If ``spec`` is malformed, names a custom (non-package) accountant, or does
            not rebuild to the same description.
    """
    if not (isinstance(spec, dict) and set(spec) == {"class", "config", "neighboring_relation"}
            and isinstance(spec["class"], str) and isinstance(spec["config"], dict)):
        raise ValueError(f"malformed accountant description {spec!r}")
    known = _package_classes().get(spec["class"])
    if known is None:
        raise ValueError(
            f"the stored accountant {spec['class']} is not a dpkd-audit accountant, so it cannot "
            "be rebuilt from the file; pass an equal instance as accountant=")
    try:
        relation = NeighboringRelation[spec["neighboring_relation"]]
        accountant = known[2](relation, spec["config"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"accountant description {describe_accountant(spec)} does not "
                         f"rebuild: {exc}") from exc
    if accountant_spec(accountant) != spec:
        raise ValueError(f"accountant description {describe_accountant(spec)} does not rebuild "
                         "to itself")
    return accountant


def _short(value: Any) -> str:
    if isinstance(value, list) and len(value) > 6:
        digest = hashlib.sha256(canonical_json(value).encode()).hexdigest()[:8]
        return f"[{len(value)} values {value[0]!r}..{value[-1]!r} #{digest}]"
    return repr(value)


def parse_spec(text: str) -> dict[str, Any]:
    """Parse a stored accountant description (a JSON object).

    Raises:
        ValueError: If ``text`` is not JSON or not an object.
    """
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("accountant description is not a JSON object")
    return value


def describe_accountant(spec: dict[str, Any]) -> str:
    """A one-line description, e.g. ``RDPAccountant(orders=[435 values ...], refine=True, ...)``."""
    config = spec.get("config") or {}
    args = [f"{k}={_short(v)}" for k, v in sorted(config.items())]
    args.append(f"neighboring_relation={spec.get('neighboring_relation')}")
    return f"{spec.get('class')}({', '.join(args)})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class LedgerIdentity:
    """A ledger's identity: budget and accountant (with configuration and relation).

    Attributes:
        epsilon: Budget epsilon.
        delta: Budget delta.
        accountant: The accountant's description (:func:`accountant_spec`).
    """

    epsilon: float
    delta: float
    accountant: dict[str, Any]

    @property
    def neighboring_relation(self) -> str:
        """Name of the neighbouring relation (e.g. ``REPLACE_ONE``)."""
        return str(self.accountant.get("neighboring_relation"))

    def describe(self) -> str:
        """E.g. ``epsilon=1.0, delta=0.0, accountant=PureAccountant(...)``."""
        return (f"epsilon={self.epsilon!r}, delta={self.delta!r}, "
                f"accountant={describe_accountant(self.accountant)}")

    def differences(self, other: LedgerIdentity) -> list[str]:
        """What differs from ``other``, as ``"name: self's value != other's value"`` lines."""
        out = []
        for name in ("epsilon", "delta"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if not (mine == theirs or (math.isnan(mine) and math.isnan(theirs))):
                out.append(f"{name}: {mine!r} != {theirs!r}")
        a, b = self.accountant, other.accountant
        if a.get("class") != b.get("class"):
            out.append(f"accountant: {describe_accountant(a)} != {describe_accountant(b)}")
        else:
            for key in sorted(set(a.get("config", {})) | set(b.get("config", {}))):
                x, y = a.get("config", {}).get(key), b.get("config", {}).get(key)
                if x != y:
                    out.append(f"accountant {key}: {_short(x)} != {_short(y)}")
        if a.get("neighboring_relation") != b.get("neighboring_relation"):
            out.append(f"neighboring_relation: {a.get('neighboring_relation')} != "
                       f"{b.get('neighboring_relation')}")
        return out
