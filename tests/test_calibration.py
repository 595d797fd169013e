"""Calibration: the returned parameter always meets the target, and is (nearly) the best one."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event as _dp
from hypothesis import given, settings
from hypothesis import strategies as st

from dpkd_audit.accountants import PureAccountant
from dpkd_audit.accountants.calibration import CalibrationError, calibrate_noise, max_queries


def laplace_plan(queries):
    return lambda scale: PureAccountant().compose(_dp.LaplaceDpEvent(scale), count=queries)


@settings(derandomize=True, max_examples=30)
@given(queries=st.integers(1, 5000), target=st.floats(0.01, 50))
def test_noise_meets_target_and_is_tight(queries, target):
    scale = calibrate_noise(laplace_plan(queries), target_epsilon=target, rtol=1e-9)
    assert laplace_plan(queries)(scale).get_epsilon(0.0) <= target
    assert scale == pytest.approx(queries / target, rel=1e-8)  # closed form k / eps


@settings(derandomize=True, max_examples=30)
@given(eps0=st.floats(1e-3, 2), target=st.floats(0.01, 100))
def test_max_queries_matches_floor(eps0, target):
    def plan(k):
        return PureAccountant().compose(_dp.LaplaceDpEvent(1 / eps0), count=k)

    k = max_queries(plan, target_epsilon=target)
    assert k == 0 or plan(k).get_epsilon(0.0) <= target
    assert plan(k + 1).get_epsilon(0.0) > target


def test_dgd_plan_fits_1300_lnmax_queries_in_65():
    from dpkd_audit.events import LaplaceNoisyMaxDpEvent

    def plan(k):
        return PureAccountant().compose(LaplaceNoisyMaxDpEvent(40.0, 10), count=k)

    assert max_queries(plan, target_epsilon=65.0) == 1300


def test_impossible_plan_is_a_clear_error():
    with pytest.raises(CalibrationError, match="impossible"):
        calibrate_noise(laplace_plan(10), target_epsilon=1e-9, upper=100.0)


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"target_epsilon": 0.0}, "target_epsilon"), ({"target_epsilon": math.nan}, "target_epsilon"),
    ({"target_epsilon": 1.0, "target_delta": 1.0}, "target_delta"),
    ({"target_epsilon": 1.0, "lower": 2.0, "upper": 1.0}, "upper"),
])
def test_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        calibrate_noise(laplace_plan(1), **kwargs)
