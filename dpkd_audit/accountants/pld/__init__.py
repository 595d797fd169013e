"""Privacy loss distribution accounting (dp_accounting's PLD, with our own dominating pairs).

Modules: ``accountant`` (:class:`PLDAccountant`: composition and evaluation), ``specs`` (each
event's PLD specification: which pessimistic PMF stands for it), ``exact`` (exact PMFs built on
a lattice: subsampled and shuffled mechanisms) and ``evaluation`` (epsilon and delta of a
composed PMF, with the fallbacks that stay upper bounds).
"""

from dpkd_audit.accountants.pld.accountant import (
    DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
    PLDAccountant,
    laplace_delta,
    laplace_epsilon,
)

__all__ = ["DEFAULT_VALUE_DISCRETIZATION_INTERVAL", "PLDAccountant", "laplace_delta",
           "laplace_epsilon"]
