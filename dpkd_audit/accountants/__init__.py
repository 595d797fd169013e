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
from dpkd_audit.accountants.calibration import CalibrationError, calibrate_noise, max_queries
from dpkd_audit.accountants.pate import PATEAccountant, PATEReport
from dpkd_audit.accountants.pld.accountant import PLDAccountant
from dpkd_audit.accountants.pure import PureAccountant, event_guarantee
from dpkd_audit.accountants.rdp.accountant import RDPAccountant, rdp_curve, register_rdp_curve
from dpkd_audit.accountants.shuffle import (
    ShuffleAccountant,
    ShuffleBound,
    closed_form_epsilon,
    numerical_epsilon,
)

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
