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

#: Names the top level exports from :mod:`dpkd_audit.ledger`, imported on first use (PEP 562):
#: the ledger pulls in dp_accounting and scipy (about 2 s), which ``dpkd budget`` and
#: ``dpkd audit`` do not need to start.
_LEDGER_NAMES = frozenset({"Charge", "Ledger", "SpentBudget"})


def __getattr__(name: str):
    if name in _LEDGER_NAMES:
        from dpkd_audit import ledger

        return getattr(ledger, name)
    if name == "__version__":  # read on first use: importlib.metadata costs ~40 ms to import
        globals()["__version__"] = version = _installed_version()
        return version
    raise AttributeError(f"module 'dpkd_audit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _LEDGER_NAMES | {"__version__"})


def _installed_version() -> str:
    """One source of truth: the version in pyproject.toml, as installed."""
    import importlib.metadata as _metadata

    try:
        return _metadata.version("dpkd-audit")
    except _metadata.PackageNotFoundError:  # pragma: no cover - imported from an uninstalled tree
        return "0+unknown"

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
