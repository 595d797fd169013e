"""dpkd-audit: differential-privacy accounting and auditing for private knowledge distillation.

The top level exports the ledger and its errors; mechanisms, accountants and auditors live in
their subpackages (``dpkd_audit.mechanisms``, ``dpkd_audit.accountants``, ``dpkd_audit.audit``).
"""

from dpkd_audit.errors import (
    BudgetExceededError,
    LedgerAccessError,
    LedgerCorruptError,
    LedgerError,
    LedgerKeyError,
    LedgerMismatchError,
    LedgerVersionError,
)
from dpkd_audit.ledger import Charge, Ledger, SpentBudget

__version__ = "0.1.0"

__all__ = [
    "BudgetExceededError",
    "Charge",
    "Ledger",
    "LedgerAccessError",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerKeyError",
    "LedgerMismatchError",
    "LedgerVersionError",
    "SpentBudget",
    "__version__",
]
