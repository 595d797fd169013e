"""The contract every catalogued mechanism honours (run over ``mechanisms.CATALOGUE``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from dp_accounting import dp_event as _dp

from dpkd_audit import BudgetExceededError, Ledger
from dpkd_audit.accountants import event_guarantee
from dpkd_audit.events import event_from_json, event_to_json
from dpkd_audit.mechanisms import CATALOGUE, Mechanism, Sensitivity

EXAMPLES = [entry.example() for entry in CATALOGUE]
IDS = [type(m).__name__ for m in EXAMPLES]


@pytest.fixture(params=EXAMPLES, ids=IDS)
def mech(request) -> Mechanism:
    return request.param


def test_frozen_keyword_only_dataclass(mech):
    assert dataclasses.is_dataclass(mech)
    first = dataclasses.fields(mech)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(mech, first, getattr(mech, first))
    with pytest.raises(TypeError):
        type(mech)(getattr(mech, first))  # positional arguments are refused


def test_declared_sensitivity_and_reference(mech):
    assert isinstance(mech.sensitivity, Sensitivity)
    assert mech.sensitivity.value > 0
    assert type(mech).reference


# Events whose basic-composition guarantee is deliberately looser than the claim: the shuffled
# event declares the local epsilon0 (post-processing), the amplified claim needs num_users.
CONSERVATIVE_EVENTS = {"ShuffledRandomizer"}


def test_event_is_a_dp_event_whose_guarantee_matches_the_claim(mech):
    event = mech.event
    assert isinstance(event, _dp.DpEvent)
    eps, delta = event_guarantee(event)
    if type(mech).__name__ in CONSERVATIVE_EVENTS:
        assert eps >= mech.epsilon
    else:
        # equal up to the rounding of the noise (which only ever adds noise)
        assert mech.epsilon * (1 - 1e-6) <= eps <= mech.epsilon * (1 + 1e-12)
        assert delta <= mech.delta * (1 + 1e-12)
    assert event_from_json(event_to_json(event)) == event


def test_sample_on_neighbours(mech):
    x, x_prime = mech.neighbours()
    rng = np.random.default_rng(0)
    for value in (x, x_prime):
        out = mech.sample(value, 7, rng=rng)
        assert len(out) == 7


def test_release_charges_the_event_once(mech):
    ledger = Ledger(epsilon=1e6, delta=0.5)
    x, _ = mech.neighbours()
    mech.release(x, rng=np.random.default_rng(1), ledger=ledger)
    charges = ledger.charges()
    assert len(charges) == 1
    assert charges[0].event == mech.event


def test_refused_release_draws_no_randomness(mech):
    ledger = Ledger(epsilon=mech.epsilon / 2, delta=mech.delta / 2 if mech.delta else 0.0)
    rng = np.random.default_rng(2)
    state = rng.bit_generator.state
    x, _ = mech.neighbours()
    with pytest.raises(BudgetExceededError):
        mech.release(x, rng=rng, ledger=ledger)
    assert rng.bit_generator.state == state
    assert ledger.spent().charges == 0


@pytest.mark.parametrize("n", [0, -3, 2.5, "10", True])
def test_sample_rejects_bad_n(mech, n):
    x, _ = mech.neighbours()
    with pytest.raises(ValueError, match="n must be"):
        mech.sample(x, n, rng=np.random.default_rng(0))


def test_randomness_must_be_injected(mech):
    x, _ = mech.neighbours()
    with pytest.raises(ValueError, match="rng"):
        mech.sample(x, 3, rng=np.random.RandomState(0))
    with pytest.raises(ValueError, match="rng"):
        mech.release(x, rng=None)
