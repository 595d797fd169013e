"""Package error classes (all importable from ``dpkd_audit.errors``).

Ledger errors form one tree, so a caller (or the command line) can catch :class:`LedgerError`
and know that the ledger refused to be used, with a message naming the file and the cause:

- :class:`LedgerCorruptError`: the file is damaged, altered, replaced, or not a ledger;
- :class:`LedgerMismatchError`: a sound ledger, but created for another budget or accountant;
- :class:`LedgerKeyError`: the file's MAC key is missing, wrong, or the file has none;
- :class:`LedgerAccessError`: the file cannot be read or written (missing directory, read-only
  file, full disk, I/O error, lock timeout, not a regular file); its content is not known to be
  damaged;
- :class:`LedgerVersionError`: a ledger written by another version of dpkd-audit.
"""

from __future__ import annotations

__all__ = [
    "BudgetExceededError",
    "LedgerAccessError",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerKeyError",
    "LedgerMismatchError",
    "LedgerVersionError",
]


class BudgetExceededError(RuntimeError):
    """A ledger refused a charge: composing it would exceed the budget. Nothing was recorded."""


class LedgerError(RuntimeError):
    """A ledger file cannot be used (the message names the file and the cause)."""


class LedgerCorruptError(LedgerError):
    """The ledger file is damaged, altered or not a dpkd-audit ledger; it is never reset."""


class LedgerMismatchError(LedgerError):
    """The ledger file was created with another budget, accountant or neighbouring relation."""


class LedgerKeyError(LedgerError):
    """The ledger's MAC key is missing or wrong, or a key was given for a file without a MAC."""


class LedgerAccessError(LedgerError):
    """The ledger file cannot be read or written (permissions, disk, locks, file type)."""


class LedgerVersionError(LedgerError):
    """The ledger file was written by another version of dpkd-audit (see ``Ledger.migrate``)."""
