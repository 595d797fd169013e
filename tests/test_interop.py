"""Converting this package's events to dp_accounting's: exact where claimed, sound always."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event as _dp
from dp_accounting.rdp import RdpAccountant as DpaRDP

from dpkd_audit.accountants import NeighboringRelation, RDPAccountant, UnsupportedEventError
from dpkd_audit.events import (
    ApproxDpEvent,
    BitRandomizedResponseDpEvent,
    CalibratedGaussianDpEvent,
    CollisionDpEvent,
    DiscreteGaussianDpEvent,
    GaussianNoisyMaxDpEvent,
    LaplaceNoisyMaxDpEvent,
    PureDpEvent,
    SelectiveRandomizedResponseDpEvent,
    ShuffledHistogramDpEvent,
    ShuffledLocalDpEvent,
)
from dpkd_audit.interop import NoEquivalentEventError, binary_randomized_response, to_dp_accounting

DELTA = 1e-6
REPLACE = NeighboringRelation.REPLACE_ONE  # the relation our events are declared for


def only_dp_accounting(event):
    """Every node of the tree is one of dp_accounting's own classes."""
    assert type(event).__module__ == _dp.__name__, event
    for child in ("event",):
        if hasattr(event, child) and isinstance(getattr(event, child), _dp.DpEvent):
            only_dp_accounting(getattr(event, child))
    for sub in getattr(event, "events", []) or []:
        only_dp_accounting(sub)


EXACT = [  # converted events whose RDP curve equals ours
    CalibratedGaussianDpEvent(2.0, epsilon=3.0, delta=1e-5),
    LaplaceNoisyMaxDpEvent(20.0, 10),
    GaussianNoisyMaxDpEvent(40.0, 10, epsilon=1.0, delta=1e-3),
    BitRandomizedResponseDpEvent(0.1, 100, 4),
    PureDpEvent(0.7),
    _dp.ComposedDpEvent([PureDpEvent(0.3), _dp.SelfComposedDpEvent(_dp.LaplaceDpEvent(3.0), 5)]),
]
DOMINATING = [  # converted events at least as distinguishable as the originals
    CollisionDpEvent(1.0, 100, 2, 20),
    SelectiveRandomizedResponseDpEvent(2.0, 10),
    ShuffledLocalDpEvent(1.5, 1000),
    DiscreteGaussianDpEvent(5.0, 1, epsilon=1.0, delta=1e-3),
    ApproxDpEvent(0.4, 0.0),
]


@pytest.mark.parametrize("event", EXACT, ids=lambda e: type(e).__name__)
def test_exact_conversions_give_the_same_rdp(event):
    converted = to_dp_accounting(event)
    only_dp_accounting(converted)
    ours = RDPAccountant().compose(event).get_epsilon(DELTA)
    theirs = DpaRDP(neighboring_relation=REPLACE).compose(converted).get_epsilon(DELTA)
    mine_on_converted = RDPAccountant().compose(converted).get_epsilon(DELTA)
    assert float(mine_on_converted) == pytest.approx(float(ours), rel=1e-9)
    # dp_accounting optimises over a coarser order grid: never below ours
    assert theirs >= float(ours) * (1 - 1e-9)


@pytest.mark.parametrize("event", DOMINATING, ids=lambda e: type(e).__name__)
def test_dominating_conversions_never_understate(event):
    converted = to_dp_accounting(event)
    only_dp_accounting(converted)
    for delta in (1e-3, 1e-6, 1e-9):
        ours = float(RDPAccountant().compose(event, count=50).get_epsilon(delta))
        theirs = float(RDPAccountant().compose(converted, count=50).get_epsilon(delta))
        assert theirs >= ours * (1 - 1e-9)
        reference = DpaRDP(neighboring_relation=REPLACE).compose(
            _dp.SelfComposedDpEvent(converted, 50)).get_epsilon(delta)
        assert reference >= ours * (1 - 1e-9)


def test_binary_randomized_response_has_exactly_that_epsilon():
    for eps in (1e-6, 0.3, 2.0, 50.0, 700.0):
        event = binary_randomized_response(eps)
        p = event.noise_parameter
        assert math.log((1 - p / 2) / (p / 2)) == pytest.approx(eps, rel=1e-12)
    with pytest.raises(ValueError, match="epsilon"):
        binary_randomized_response(math.inf)


def test_dp_accounting_events_pass_through_and_wrappers_are_rebuilt():
    plain = _dp.PoissonSampledDpEvent(0.01, _dp.GaussianDpEvent(1.1))
    assert to_dp_accounting(plain) == plain
    wrapped = _dp.SampledWithoutReplacementDpEvent(1000, 10, LaplaceNoisyMaxDpEvent(10.0, 10))
    converted = to_dp_accounting(wrapped)
    assert isinstance(converted, _dp.SampledWithoutReplacementDpEvent)
    assert converted.event == _dp.SelfComposedDpEvent(_dp.LaplaceDpEvent(10.0), 2)


@pytest.mark.parametrize("event", [
    ApproxDpEvent(0.5, 1e-6),
    ShuffledHistogramDpEvent(1.0, 1e-6, 1000, 10),
    _dp.ComposedDpEvent([PureDpEvent(0.1), ApproxDpEvent(0.5, 1e-6)]),
], ids=lambda e: type(e).__name__)
def test_events_without_equivalent_are_refused_by_name(event):
    with pytest.raises(NoEquivalentEventError, match=r"ApproxDpEvent|ShuffledHistogramDpEvent"):
        to_dp_accounting(event)
    assert issubclass(NoEquivalentEventError, UnsupportedEventError)


def test_foreign_event_types_are_refused():
    class Foreign(_dp.DpEvent):
        pass

    with pytest.raises(NoEquivalentEventError, match="Foreign"):
        to_dp_accounting(Foreign())


def test_the_relations_the_docstring_advises_give_our_figures():
    """dp_accounting's RDP under REPLACE_ONE and its PLD under ADD_OR_REMOVE_ONE give our
    Gaussian figures; its PLD under REPLACE_ONE doubles the sensitivity (the documented
    caution: it fails if dp_accounting changes this)."""
    from dp_accounting.pld import PLDAccountant as DpaPLD
    from dp_accounting.privacy_accountant import NeighboringRelation as DpaRelation

    from dpkd_audit.accountants import PLDAccountant

    event = _dp.SelfComposedDpEvent(_dp.GaussianDpEvent(1.0), 10)
    ours_pld, ours_rdp = PLDAccountant(), RDPAccountant()
    ours_pld.compose(event)
    ours_rdp.compose(event)
    theirs = {}
    for name, accountant in (
            ("rdp_replace", DpaRDP(neighboring_relation=DpaRelation.REPLACE_ONE)),
            ("pld_add_remove", DpaPLD(DpaRelation.ADD_OR_REMOVE_ONE)),
            ("pld_replace", DpaPLD(DpaRelation.REPLACE_ONE))):
        accountant.compose(event)
        theirs[name] = accountant.get_epsilon(1e-5)
    assert theirs["rdp_replace"] == pytest.approx(ours_rdp.get_epsilon(1e-5), rel=1e-3)
    assert theirs["pld_add_remove"] == pytest.approx(ours_pld.get_epsilon(1e-5), rel=1e-3)
    assert theirs["pld_replace"] > 2 * ours_pld.get_epsilon(1e-5)
