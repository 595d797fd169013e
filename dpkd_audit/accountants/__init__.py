"""Privacy accountants: one contract (``compose`` / ``get_epsilon`` / ``get_delta``).

Basic (pure) composition is implemented here; advanced, optimal, RDP, PLD, shuffle and PATE
accountants follow the same contract (see ``base.Accountant``).
"""

from dpkd_audit.accountants.base import (
    Accountant,
    BoundKind,
    Epsilon,
    NeighboringRelation,
    UnsupportedEventError,
)
from dpkd_audit.accountants.pure import PureAccountant, event_guarantee

__all__ = [
    "Accountant",
    "BoundKind",
    "Epsilon",
    "NeighboringRelation",
    "PureAccountant",
    "UnsupportedEventError",
    "event_guarantee",
]
