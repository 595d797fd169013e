"""dpkd-audit: differential-privacy accounting and auditing for private knowledge distillation.

The top level exports the ledger and its errors; mechanisms, accountants and auditors live in
their subpackages (``dpkd_audit.mechanisms``, ``dpkd_audit.accountants``, ``dpkd_audit.audit``).
"""

import importlib.metadata as _metadata

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

try:  # one source of truth: the version in pyproject.toml, as installed
    __version__ = _metadata.version("dpkd-audit")
except _metadata.PackageNotFoundError:  # pragma: no cover - imported from an uninstalled tree
    __version__ = "0+unknown"

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
