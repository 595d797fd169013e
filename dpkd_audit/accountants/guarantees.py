"""Shared base of the accountants that only use each release's declared (epsilon, delta).

The advanced (Dwork-Rothblum-Vadhan) and optimal (Kairouz-Oh-Viswanath) composition
accountants bound the adaptive composition of *any* mechanisms with the per-release guarantees
``(eps_i, delta_i)`` of :func:`dpkd_audit.accountants.pure.event_guarantee`.
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit.accountants.base import Accountant
from dpkd_audit.accountants.pure import event_guarantee

__all__ = ["GuaranteeAccountant", "check_target_epsilon"]


def check_target_epsilon(value: object) -> float:
    """Return a target epsilon as a float, requiring a real number >= 0 (inf allowed)."""
    if (isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer))
            or math.isnan(value) or value < 0):
        raise ValueError(f"target_epsilon must be a real number >= 0; got {value!r}")
    return float(value)


class GuaranteeAccountant(Accountant):
    """Every leaf must declare a finite per-release (epsilon, delta) guarantee."""

    def _check_leaf(self, event: _dp.DpEvent) -> None:
        guarantee = event_guarantee(event)
        if guarantee is None:
            raise self._unsupported(event, "no per-release (epsilon, delta) guarantee is known")
        eps, delta = guarantee
        if not (math.isfinite(eps) and eps >= 0 and 0 <= delta < 1):
            raise self._unsupported(
                event, f"its guarantee (epsilon={eps!r}, delta={delta!r}) is not a finite "
                "epsilon >= 0 with delta in [0, 1)")

    def _groups(self) -> list[tuple[float, float, int]]:
        """The history as sorted (epsilon, delta, count) triples, one per distinct guarantee."""
        merged: dict[tuple[float, float], int] = {}
        for event, count in self._counts.items():
            eps, delta = event_guarantee(event)  # type: ignore[misc]
            key = (float(eps), float(delta))
            merged[key] = merged.get(key, 0) + count
        return sorted((eps, delta, k) for (eps, delta), k in merged.items())
