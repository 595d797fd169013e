"""The privacy ledger: every release is charged here before it exists.

Modules: ``core`` (:class:`Ledger`: charges, budgets, the accountant it was opened with),
``store`` (the SQLite file: one open and one path check, locking, crash safety), ``chain``
(the hash chain over charges), ``identity`` (what a ledger is bound to: accountant, neighbouring
relation, budget), ``witness`` (the record outside the file that a keyed ledger existed) and
``migrate`` (reading older files). ``from dpkd_audit.ledger import Ledger`` (or
``from dpkd_audit import Ledger``) is the public way in.
"""

from dpkd_audit.ledger.core import BUDGET_RTOL, Charge, Ledger, SpentBudget

__all__ = ["BUDGET_RTOL", "Charge", "Ledger", "SpentBudget"]
