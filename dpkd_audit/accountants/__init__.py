"""Privacy accountants: one contract (``compose`` / ``get_epsilon`` / ``get_delta``).

General accountants (any event with the structure they need):

- :class:`PureAccountant`: basic composition of per-release guarantees;
- :class:`AdvancedCompositionAccountant`: Dwork-Rothblum-Vadhan advanced composition;
- :class:`OptimalCompositionAccountant`: exact optimal composition (Kairouz-Oh-Viswanath);
- :class:`RDPAccountant`: Renyi DP with exact curves and a finely optimised order;
- :class:`PLDAccountant`: privacy loss distributions (dp_accounting backend, verified).

Specialised ones: :class:`ShuffleAccountant` (Feldman-McMillan-Talwar amplification) and
:class:`PATEAccountant` (PATE data-dependent analysis). :mod:`.calibration` inverts any of them;
:mod:`.budget` evaluates a plan with all of them.
"""

from __future__ import annotations

from dpkd_audit._lazy import lazy_attributes

#: Where each exported name lives. The names are imported on first access (PEP 562), so that
#: importing one accountant (``dpkd_audit.accountants.pld`` for ``dpkd audit``, the five of
#: ``dpkd budget``) does not load all of them (PATE, shuffle, calibration, ...).
_EXPORTS: dict[str, str] = {
    "AdvancedCompositionAccountant": "advanced",
    "OptimalCompositionAccountant": "advanced",
    "dgd_published_epsilon": "advanced",
    "Accountant": "base",
    "BoundKind": "base",
    "Epsilon": "base",
    "NeighboringRelation": "base",
    "UnsupportedEventError": "base",
    "CalibrationError": "calibration",
    "calibrate_noise": "calibration",
    "max_queries": "calibration",
    "PATEAccountant": "pate",
    "PATEReport": "pate",
    "PLDAccountant": "pld.accountant",
    "PureAccountant": "pure",
    "event_guarantee": "pure",
    "RDPAccountant": "rdp.accountant",
    "rdp_curve": "rdp.accountant",
    "register_rdp_curve": "rdp.accountant",
    "ShuffleAccountant": "shuffle",
    "ShuffleBound": "shuffle",
    "closed_form_epsilon": "shuffle",
    "numerical_epsilon": "shuffle",
}

__all__ = [
    "Accountant",
    "AdvancedCompositionAccountant",
    "BoundKind",
    "CalibrationError",
    "Epsilon",
    "NeighboringRelation",
    "OptimalCompositionAccountant",
    "PATEAccountant",
    "PATEReport",
    "PLDAccountant",
    "PureAccountant",
    "RDPAccountant",
    "ShuffleAccountant",
    "ShuffleBound",
    "UnsupportedEventError",
    "calibrate_noise",
    "closed_form_epsilon",
    "dgd_published_epsilon",
    "event_guarantee",
    "max_queries",
    "numerical_epsilon",
    "rdp_curve",
    "register_rdp_curve",
]


__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, globals())
