"""Privacy accountants: one contract (``compose`` / ``get_epsilon`` / ``get_delta``).

Basic (pure), advanced (Dwork-Rothblum-Vadhan) and optimal (Kairouz-Oh-Viswanath) composition,
RDP, PLD, shuffle and PATE accountants, all on the contract of ``base.Accountant``.
"""

from dpkd_audit.accountants.advanced import (
    AdvancedCompositionAccountant,
    OptimalCompositionAccountant,
    dgd_published_epsilon,
)
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
    "AdvancedCompositionAccountant",
    "BoundKind",
    "Epsilon",
    "NeighboringRelation",
    "OptimalCompositionAccountant",
    "PureAccountant",
    "UnsupportedEventError",
    "dgd_published_epsilon",
    "event_guarantee",
]
