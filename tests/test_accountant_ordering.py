"""Cross-accountant identities (pure >= advanced >= optimal >= PLD, RDP >= PLD); ledgers."""

from __future__ import annotations

import numpy as np
import pytest
from dp_accounting import dp_event as _dp
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkd_audit import BudgetExceededError, Ledger
from dpkd_audit.accountants import (
    AdvancedCompositionAccountant,
    OptimalCompositionAccountant,
    PLDAccountant,
    PureAccountant,
    RDPAccountant,
)
from dpkd_audit.events import CollisionDpEvent, LaplaceNoisyMaxDpEvent, PureDpEvent
from dpkd_audit.mechanisms import Gaussian, ReverseKnnCountRelease

# PLD is a pessimistic discretisation of the exact curve: allow it to sit this far above the
# exact optimal composition (value_discretization_interval 1e-4, k <= 500 compositions).
PLD_SLACK = 5e-3

PURE_EVENTS = st.sampled_from([
    lambda e: PureDpEvent(e),
    lambda e: _dp.LaplaceDpEvent(1.0 / e),
    lambda e: CollisionDpEvent(e, 100, 2, 10),
    lambda e: LaplaceNoisyMaxDpEvent(2.0 / e, 10),
])


@settings(derandomize=True, max_examples=25, deadline=None)
@given(make=PURE_EVENTS, eps=st.floats(0.01, 1.0), k=st.integers(1, 500),
       delta=st.sampled_from([1e-3, 1e-6, 1e-9]))
def test_accountant_ordering_on_pure_events(make, eps, k, delta):
    event = make(eps)
    values = {cls.__name__: float(cls().compose(event, count=k).get_epsilon(delta))
              for cls in (PureAccountant, AdvancedCompositionAccountant,
                          OptimalCompositionAccountant, RDPAccountant, PLDAccountant)}
    tol = 1e-9 * values["PureAccountant"]
    assert values["PureAccountant"] + tol >= values["AdvancedCompositionAccountant"]
    assert values["AdvancedCompositionAccountant"] + tol >= values["OptimalCompositionAccountant"]
    # For Laplace and noisy max the PLD uses the real mechanism (tighter than its pure epsilon);
    # for generic pure events it is the exact dominating pair: never below optimal - slack.
    assert values["OptimalCompositionAccountant"] + PLD_SLACK >= values["PLDAccountant"]
    assert values["RDPAccountant"] + tol >= values["PLDAccountant"] - 1e-9


@pytest.mark.parametrize("factory", [PureAccountant, RDPAccountant, PLDAccountant,
                                     OptimalCompositionAccountant])
def test_ledger_works_with_every_general_accountant(tmp_path, factory):
    path = tmp_path / f"{factory.__name__}.sqlite"
    mech = ReverseKnnCountRelease(epsilon=0.5, k=1, num_queries=4, num_classes=3)
    counts = np.zeros((4, 3), dtype=np.int64)
    ledger = Ledger(epsilon=3.0, delta=1e-5, accountant=factory(), path=path)
    released = 0
    with pytest.raises(BudgetExceededError):
        for _ in range(100):
            mech.release(counts, rng=np.random.default_rng(released), ledger=ledger)
            released += 1
    spent = ledger.spent()
    assert float(spent.epsilon) <= 3.0 * (1 + 1e-12)
    assert spent.epsilon.method
    # a resumed ledger with the same accountant agrees and still refuses
    again = Ledger(epsilon=3.0, delta=1e-5, accountant=factory(), path=path)
    assert again.spent().charges == released
    with pytest.raises(BudgetExceededError):
        mech.release(counts, rng=np.random.default_rng(0), ledger=again)
    if factory is PureAccountant:
        assert released == 6
    else:  # tighter accountants fit more releases into the same budget
        assert released >= 6


def test_gaussian_ledger_with_rdp_fits_more_than_basic_composition():
    mech = Gaussian(epsilon=0.5, delta=1e-7)
    counts = {}
    for factory in (PureAccountant, RDPAccountant):
        ledger = Ledger(epsilon=4.0, delta=1e-5, accountant=factory())
        n = 0
        try:
            while n < 1000:
                mech.release(0.0, rng=np.random.default_rng(n), ledger=ledger)
                n += 1
        except BudgetExceededError:
            pass
        counts[factory.__name__] = n
    assert counts["PureAccountant"] == 8
    assert counts["RDPAccountant"] > 2 * counts["PureAccountant"]
