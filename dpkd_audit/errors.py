"""Package error classes (all importable from ``dpkd_audit``)."""

from __future__ import annotations

__all__ = ["BudgetExceededError", "LedgerCorruptError", "LedgerError", "LedgerMismatchError"]


class BudgetExceededError(RuntimeError):
    """A ledger refused a charge: composing it would exceed the budget. Nothing was recorded."""


class LedgerError(RuntimeError):
    """A ledger file cannot be used."""


class LedgerCorruptError(LedgerError):
    """The ledger file is damaged or is not a dpkd-audit ledger; it is never silently reset."""


class LedgerMismatchError(LedgerError):
    """The ledger file was created with another budget than the one asked for."""
