"""Events: validation, declared guarantees checked against exact curves, JSON round trips."""

from __future__ import annotations

import math

import attr
import pytest
from dp_accounting import dp_event as _dp
from dp_accounting.rdp import RdpAccountant

from dpkd_audit import events
from dpkd_audit._math.privacy import (
    analytic_gaussian_delta,
    calibrate_analytic_gaussian,
    calibrate_discrete_gaussian,
    discrete_gaussian_delta,
)

ROUND_TRIP = [
    events.PureDpEvent(0.5),
    events.ApproxDpEvent(1.0, 1e-6),
    events.CalibratedGaussianDpEvent(calibrate_analytic_gaussian(1.0, 1e-5), epsilon=1.0,
                                     delta=1e-5),
    events.DiscreteGaussianDpEvent(calibrate_discrete_gaussian(1.0, 1e-5), 1, 1.0, 1e-5),
    events.BitRandomizedResponseDpEvent(0.05, 400, 8),
    events.CollisionDpEvent(0.4, 400, 4, 10),
    events.SelectiveRandomizedResponseDpEvent(1.0, 10),
    events.ShuffledLocalDpEvent(2.0, 60_000),
    events.ShuffledHistogramDpEvent(1.0, 1e-6, 1000, 10),
    events.LaplaceNoisyMaxDpEvent(40.0, 3, votes=[100, 20, 130]),
    events.GaussianNoisyMaxDpEvent(calibrate_analytic_gaussian(1.0, 1e-5, math.sqrt(2)), 10,
                                   1.0, 1e-5),
    _dp.SelfComposedDpEvent(_dp.ComposedDpEvent([_dp.LaplaceDpEvent(2.0),
                                                 events.PureDpEvent(0.1)]), 7),
    _dp.NonPrivateDpEvent(),
    _dp.PoissonSampledDpEvent(0.01, _dp.GaussianDpEvent(1.1)),
]


@pytest.mark.parametrize("event", ROUND_TRIP, ids=lambda e: type(e).__name__)
def test_json_round_trip(event):
    text = events.event_to_json(event)
    back = events.event_from_json(text)
    assert back == event and type(back) is type(event)
    try:
        expected = hash(event)
    except TypeError:  # dp_accounting's ComposedDpEvent holds a list: unhashable by design
        return
    assert hash(back) == expected


def test_loading_refuses_foreign_modules():
    text = events.event_to_json(events.PureDpEvent(0.5)).replace("dpkd_audit.events", "os")
    with pytest.raises(ValueError, match="refusing"):
        events.event_from_json(text)


def test_calibrated_gaussian_is_a_dp_accounting_gaussian():
    sigma = calibrate_analytic_gaussian(1.0, 1e-5)
    event = events.CalibratedGaussianDpEvent(sigma, epsilon=1.0, delta=1e-5)
    rdp = RdpAccountant().compose(event).get_epsilon(1e-5)
    plain = RdpAccountant().compose(_dp.GaussianDpEvent(sigma)).get_epsilon(1e-5)
    assert rdp == plain
    assert rdp >= 1.0  # RDP conversion is never tighter than the exact curve


def test_false_gaussian_claim_is_refused():
    with pytest.raises(ValueError, match="does not give"):
        events.CalibratedGaussianDpEvent(1.0, epsilon=0.5, delta=1e-6)


def test_false_discrete_gaussian_claim_is_refused():
    with pytest.raises(ValueError, match="does not give"):
        events.DiscreteGaussianDpEvent(1.0, 1, 0.5, 1e-6)


@pytest.mark.parametrize(("eps", "delta"), [(0.1, 1e-5), (1.0, 1e-5), (4.0, 1e-9)])
def test_analytic_gaussian_calibration_is_tight(eps, delta):
    sigma = calibrate_analytic_gaussian(eps, delta)
    assert analytic_gaussian_delta(eps, sigma) <= delta
    assert analytic_gaussian_delta(eps, sigma * (1 - 1e-6)) > delta


def test_analytic_gaussian_reference_value():
    # Balle-Wang 2018, Thm 8 evaluated independently with mpmath at sigma = 1, eps = 1.
    import mpmath

    phi = lambda x: (1 + mpmath.erf(x / mpmath.sqrt(2))) / 2  # noqa: E731
    ref = phi(mpmath.mpf(0.5) - 1) - mpmath.e * phi(-mpmath.mpf(0.5) - 1)
    assert analytic_gaussian_delta(1.0, 1.0) == pytest.approx(float(ref), rel=1e-10)


def test_discrete_gaussian_delta_matches_direct_sum():
    import mpmath

    sigma, eps = 2.0, 0.5
    norm = mpmath.nsum(lambda x: mpmath.exp(-x**2 / (2 * sigma**2)), [-mpmath.inf, mpmath.inf])

    def tail(t):
        start = math.floor(t) + 1
        return mpmath.nsum(lambda x: mpmath.exp(-x**2 / (2 * sigma**2)), [start, mpmath.inf]) / norm

    ref = tail(eps * sigma**2 - 0.5) - mpmath.e**eps * tail(eps * sigma**2 + 0.5)
    assert discrete_gaussian_delta(eps, sigma) == pytest.approx(float(ref), rel=1e-9)


@pytest.mark.parametrize(("cls", "kwargs", "name"), [
    (events.PureDpEvent, {"epsilon": 0.0}, "epsilon"),
    (events.PureDpEvent, {"epsilon": math.inf}, "epsilon"),
    (events.ApproxDpEvent, {"epsilon": 1.0, "delta": 1.0}, "delta"),
    (events.BitRandomizedResponseDpEvent, {"epsilon_per_bit": 0.1, "num_bits": 4,
                                           "bits_changed": 5}, "bits_changed"),
    (events.CollisionDpEvent, {"epsilon": 1.0, "domain_size": 10, "cardinality": 0,
                               "bloom_length": 5}, "cardinality"),
    (events.ShuffledLocalDpEvent, {"local_epsilon": 1.0, "num_users": 0}, "num_users"),
    (events.LaplaceNoisyMaxDpEvent, {"noise_scale": 40.0, "num_classes": 3,
                                     "votes": [1, 2]}, "votes"),
])
def test_event_validation(cls, kwargs, name):
    with pytest.raises(ValueError, match=name):
        cls(**kwargs)


def test_events_are_frozen():
    event = events.PureDpEvent(0.5)
    with pytest.raises(attr.exceptions.FrozenInstanceError):
        event.epsilon = 2.0
