"""The contract every accountant of the package honours (shared, like dp_accounting's test)."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event as _dp

from dpkd_audit import accountants
from dpkd_audit.accountants import Accountant, BoundKind, Epsilon, UnsupportedEventError
from dpkd_audit.events import PureDpEvent

# name -> factory of an empty accountant; every accountant exported by the package is listed.
FACTORIES = {
    name: getattr(accountants, name)
    for name in ("PureAccountant", "AdvancedCompositionAccountant",
                 "OptimalCompositionAccountant", "RDPAccountant", "PLDAccountant")
    if hasattr(accountants, name)
}
DELTA = 1e-6


class MysteryDpEvent(_dp.DpEvent):
    """An event no accountant knows."""


@pytest.fixture(params=sorted(FACTORIES))
def make(request):
    return FACTORIES[request.param]


# Accountants for one family of events only (tested in their own files).
SPECIALISED = {"ShuffleAccountant", "PATEAccountant"}


def test_every_general_accountant_is_under_contract():
    exported = {name for name in accountants.__all__
                if name.endswith("Accountant") and name != "Accountant"}
    assert exported - SPECIALISED == set(FACTORIES)
    for factory in FACTORIES.values():
        assert issubclass(factory, Accountant)


def test_empty_is_zero(make):
    eps = make().get_epsilon(DELTA)
    assert isinstance(eps, Epsilon) and float(eps) == pytest.approx(0.0, abs=1e-9)
    assert isinstance(eps.kind, BoundKind) and eps.method


def test_unknown_event_is_named_and_refused_without_change(make):
    acc = make().compose(PureDpEvent(0.5))
    before = float(acc.get_epsilon(DELTA))
    with pytest.raises(UnsupportedEventError, match="MysteryDpEvent"):
        acc.compose(_dp.ComposedDpEvent([PureDpEvent(1.0), MysteryDpEvent()]))
    assert float(acc.get_epsilon(DELTA)) == before


def test_non_private_is_infinite(make):
    assert math.isinf(make().compose(_dp.NonPrivateDpEvent()).get_epsilon(DELTA))


def test_count_fold_and_one_by_one_agree(make):
    event = PureDpEvent(0.1)
    one = make()
    for _ in range(25):
        one.compose(event)
    folded = make().compose(_dp.SelfComposedDpEvent(event, 25))
    counted = make().compose(event, count=25)
    values = [float(a.get_epsilon(DELTA)) for a in (one, folded, counted)]
    assert values[0] == pytest.approx(values[1], rel=1e-6)
    assert values[1] == pytest.approx(values[2], rel=1e-6)


def test_never_above_basic_composition(make):
    eps = float(make().compose(PureDpEvent(0.1), count=100).get_epsilon(DELTA))
    assert eps <= 10.0 * (1 + 1e-9)


def test_neighboring_relation_is_fixed(make):
    acc = make(neighboring_relation=accountants.NeighboringRelation.REPLACE_ONE)
    assert acc.neighboring_relation is accountants.NeighboringRelation.REPLACE_ONE
