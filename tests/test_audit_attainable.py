"""The attainable audit bound from a mechanism's privacy-loss tails, against closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event as _dp
from scipy import stats

from dpkd_audit.audit.attainable import attainable_epsilon, loss_tail_events
from dpkd_audit.audit.bounds import optimal_attainable_bound
from dpkd_audit.mechanisms import Laplace, TextbookGaussian


def test_laplace_tails_are_the_closed_form_half_lines():
    # Laplace(1) on the pair 0 / 1: the loss is 1 on y <= 0 (P_x = 1/2, P_x' = e^-1 / 2); the
    # most powerful event of probability 1/2 is that half-line
    n = 100_000
    expected = optimal_attainable_bound(np.array([0.5]), np.array([0.5 * math.exp(-1.0)]), n=n)
    got = attainable_epsilon(Laplace(epsilon=1.0).event, n=n)
    assert got == pytest.approx(expected, abs=2e-3)
    assert got < 1.0


def test_gaussian_matches_the_threshold_family_by_quadrature():
    mech = TextbookGaussian(epsilon=1.0, delta=1e-5)
    sigma = mech.event.noise_multiplier
    t = np.linspace(-10 * sigma, 12 * sigma, 40_001)
    p_x = stats.norm.sf(t, loc=1.0, scale=sigma)  # x' = 1 shifts the mean up
    p_xp = stats.norm.sf(t, loc=0.0, scale=sigma)
    for n in (10_000, 1_000_000):
        closed = optimal_attainable_bound(p_x, p_xp, n=n, delta=1e-5)
        got = attainable_epsilon(mech.event, n=n, delta=1e-5)
        # the PLD rounds losses up to a 1e-4 grid: the figure is at most a little above
        assert closed - 1e-3 <= got <= closed + 5e-3, (n, closed, got)


def test_tails_are_probabilities_and_the_bound_grows_with_n():
    for tail_x, tail_xp in loss_tail_events(_dp.LaplaceDpEvent(2.0)):
        assert np.all((tail_x >= 0) & (tail_x <= 1) & (tail_xp >= 0) & (tail_xp <= tail_x + 1e-12))
        assert np.all(np.diff(tail_x) >= -1e-15)
    event = TextbookGaussian(epsilon=1.0, delta=1e-5).event
    values = [attainable_epsilon(event, n=n, delta=1e-5) for n in (1_000, 100_000, 10_000_000)]
    assert values == sorted(values) and values[-1] < 1.0


@pytest.mark.parametrize("kwargs, match", [({"n": 0}, "n must be"),
                                           ({"n": 10, "delta": 1.5}, "delta")])
def test_bad_input_names_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        attainable_epsilon(_dp.LaplaceDpEvent(1.0), **kwargs)


def test_audit_mechanism_reports_the_attainable_bound_beside_its_own():
    import numpy as np

    from dpkd_audit.audit import audit_mechanism

    mech = TextbookGaussian(epsilon=1.0, delta=1e-5)
    result = audit_mechanism(mech, n=50_000, rng=np.random.default_rng(0), attainable=True)
    assert result.epsilon_attainable == pytest.approx(
        attainable_epsilon(mech.event, n=result.bound_samples, delta=1e-5), rel=1e-12)
    # a Gaussian (1, 1e-5) audit at this size cannot reach half its claim: the attainable
    # bound says so, and the audit reaches most of it
    assert result.epsilon_attainable < 0.6
    assert result.epsilon_lower >= 0.7 * result.epsilon_attainable
    assert "attainable" in str(result) and "epsilon_attainable" in result.to_dict()
    assert audit_mechanism(mech, n=5_000, rng=np.random.default_rng(0)).epsilon_attainable \
        is None


def test_audit_table_shows_the_attainable_column_when_records_have_it():
    import numpy as np

    from dpkd_audit.audit.suite import find_target, run_audits
    from dpkd_audit.reports.audit import audit_markdown_table

    records = list(run_audits([find_target("Laplace")], samples=5_000, confidence=0.95,
                              rng=np.random.default_rng(0)))
    assert records[0]["epsilon_attainable"] is not None
    assert "| attainable |" in audit_markdown_table(records)
    old = [{k: v for k, v in records[0].items() if k != "epsilon_attainable"}]
    assert "attainable" not in audit_markdown_table(old)
