"""Basic composition: contract, identities and reference values."""

from __future__ import annotations

import math

import mpmath
import pytest
from dp_accounting import dp_event as _dp
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkd_audit.accountants import (
    BoundKind,
    Epsilon,
    NeighboringRelation,
    PureAccountant,
    UnsupportedEventError,
    event_guarantee,
)
from dpkd_audit.events import (
    ApproxDpEvent,
    BitRandomizedResponseDpEvent,
    CollisionDpEvent,
    LaplaceNoisyMaxDpEvent,
    PureDpEvent,
)


def test_empty_accountant_is_zero():
    eps = PureAccountant().get_epsilon(1e-5)
    assert eps == 0.0 and isinstance(eps, Epsilon)
    assert eps.kind is BoundKind.UPPER_BOUND and eps.method == "basic composition"
    assert PureAccountant().get_delta(0.0) == 0.0


def test_non_private_event_makes_epsilon_infinite():
    acc = PureAccountant().compose(PureDpEvent(0.1)).compose(_dp.NonPrivateDpEvent())
    assert math.isinf(acc.get_epsilon(0.5))
    assert acc.is_non_private


def test_unknown_event_is_refused_by_name_and_leaves_state_unchanged():
    acc = PureAccountant().compose(PureDpEvent(0.25))
    bad = _dp.ComposedDpEvent([PureDpEvent(1.0), _dp.GaussianDpEvent(1.0)])
    with pytest.raises(UnsupportedEventError, match="GaussianDpEvent"):
        acc.compose(bad)
    assert acc.get_epsilon(0.0) == pytest.approx(0.25)  # the PureDpEvent(1.0) was not applied
    assert not acc.supports(bad)
    assert acc.supports(PureDpEvent(1.0))


def test_noop_event_costs_nothing():
    assert PureAccountant().compose(_dp.NoOpDpEvent()).get_epsilon(0.0) == 0.0


@settings(derandomize=True, max_examples=40)
@given(eps=st.floats(1e-4, 5.0), k=st.integers(1, 200))
def test_k_one_by_one_equals_k_fold_equals_count(eps, k):
    event = _dp.LaplaceDpEvent(1.0 / eps)
    one_by_one = PureAccountant()
    for _ in range(k):
        one_by_one.compose(event)
    folded = PureAccountant().compose(_dp.SelfComposedDpEvent(event, k))
    counted = PureAccountant().compose(event, count=k)
    values = [a.get_epsilon(0.0) for a in (one_by_one, folded, counted)]
    assert values[0] == pytest.approx(k * eps, rel=1e-12)
    assert values[0] == pytest.approx(values[1], rel=1e-12)
    assert values[1] == values[2]


def test_grouping_keeps_one_entry_per_distinct_event():
    acc = PureAccountant()
    for _ in range(10_000):
        acc.compose(PureDpEvent(1e-4))
    assert len(acc._counts) == 1
    assert acc.get_epsilon(0.0) == pytest.approx(1.0, rel=1e-12)


def test_deltas_add_and_gate_epsilon():
    acc = PureAccountant().compose(ApproxDpEvent(0.5, 1e-6), count=3)
    assert acc.get_epsilon(3e-6) == pytest.approx(1.5)
    assert math.isinf(acc.get_epsilon(2e-6))
    assert acc.get_delta(1.5) == pytest.approx(3e-6)
    assert acc.get_delta(1.4) == 1.0


def test_randomized_response_event_matches_closed_form():
    # k-ary RR keeping the input w.p. e^eps/(e^eps+k-1): dp_accounting's noise parameter
    # p = k/(e^eps+k-1). Reference: ln of the ratio of keep and switch probabilities, in mpmath.
    eps, k = 0.7, 10
    p = k / (math.exp(eps) + k - 1)
    got = event_guarantee(_dp.RandomizedResponseDpEvent(p, k))[0]
    keep = 1 - mpmath.mpf(p) + mpmath.mpf(p) / k
    other = mpmath.mpf(p) / k
    assert got == pytest.approx(float(mpmath.log(keep / other)), rel=1e-12)


def test_discrete_laplace_event():
    assert event_guarantee(_dp.DiscreteLaplaceDpEvent(0.05, 8))[0] == pytest.approx(0.4)


def test_our_events_declare_their_guarantees():
    assert event_guarantee(BitRandomizedResponseDpEvent(0.05, 400, 8)) == (0.4, 0.0)
    assert event_guarantee(CollisionDpEvent(0.4, 400, 4, 10)) == (0.4, 0.0)
    assert event_guarantee(LaplaceNoisyMaxDpEvent(40.0, 10))[0] == pytest.approx(0.05)


def test_dgd_published_pure_total():
    # 1,300 LNMax queries at scale 40: basic composition gives 1300 * 0.05 = 65.
    acc = PureAccountant().compose(LaplaceNoisyMaxDpEvent(40.0, 10), count=1300)
    assert acc.get_epsilon(0.0) == pytest.approx(65.0)


def test_neighbouring_relation_is_fixed_and_validated():
    acc = PureAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE)
    assert acc.neighboring_relation is NeighboringRelation.ADD_OR_REMOVE_ONE
    with pytest.raises(ValueError, match="neighboring_relation"):
        PureAccountant("replace")


@pytest.mark.parametrize("count", [0, -1, 1.5, "2", True])
def test_bad_count(count):
    with pytest.raises(ValueError, match="count"):
        PureAccountant().compose(PureDpEvent(0.1), count=count)


@pytest.mark.parametrize("value", [-0.1, 1.5, math.nan])
def test_bad_target_delta(value):
    with pytest.raises(ValueError, match="target_delta"):
        PureAccountant().get_epsilon(value)


def test_copy_is_independent():
    acc = PureAccountant().compose(PureDpEvent(0.1))
    twin = acc.copy().compose(PureDpEvent(0.2))
    assert acc.get_epsilon(0.0) == pytest.approx(0.1)
    assert twin.get_epsilon(0.0) == pytest.approx(0.3)


def test_incremental_sums_equal_fsum_over_the_distinct_events():
    """Issue 33: the sums are updated per composed event (O(1) per charge); they must equal
    math.fsum of count * epsilon (and delta) over the distinct events, however they were
    composed, copied and grown, with values chosen to make naive summation round."""
    import math
    import random

    from dpkd_audit.events import ApproxDpEvent

    rnd = random.Random(3)
    acc = PureAccountant()
    history: dict = {}
    for step in range(3_000):
        eps = rnd.choice([1e-17, 0.1, 1.0 / 3.0, 1e15, 2.5e-8]) * (1 + rnd.random())
        event = rnd.choice([PureDpEvent(eps), ApproxDpEvent(eps, rnd.random() * 1e-9)])
        count = rnd.randint(1, 3)
        acc.compose(event, count=count)
        history[event] = history.get(event, 0) + count
        if step % 500 == 0:
            acc = acc.copy()  # copies carry the sums
    want_eps = math.fsum(n * e.epsilon for e, n in history.items())
    want_delta = math.fsum(n * getattr(e, "delta", 0.0) for e, n in history.items())
    assert acc.totals() == (want_eps, want_delta)
    # a copy is independent of its source
    before = acc.totals()
    acc.copy().compose(PureDpEvent(5.0))
    assert acc.totals() == before
    # a total beyond the doubles is inf (an upper bound), never an error or NaN
    huge = PureAccountant().compose(PureDpEvent(1e308), count=3)
    assert huge.totals()[0] == math.inf
