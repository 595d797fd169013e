"""Every positive control is flagged and no correct mechanism is, over several seeds.

False-alarm rate: each audit's bound is valid at 95% (a correct mechanism is flagged with
probability <= 5% per audit, in practice far less: see tests/test_audit_auditor.py, where the
measured rate is 0.1-1.2% for mechanisms audited exactly at their true epsilon). The package's
mechanisms are audited on their worst-case pairs with claims at or above their true epsilon, so
this file's 3 seeds x 16 correct mechanisms fail spuriously with probability well under 1e-2
given those measured rates (fixed seeds: the outcome is deterministic in CI). Seed 0 runs by
default; seeds 1 and 2 (23 s each) are marked slow and run with ``-m slow``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpkd_audit.audit.suite import audit_targets, find_target, run_audits, with_epsilon
from dpkd_audit.mechanisms import Laplace, ShuffledRandomizer


@pytest.fixture(scope="module")
def targets():
    return audit_targets(include_controls=True)


@pytest.mark.parametrize("seed", [0, pytest.param(1, marks=pytest.mark.slow),
                                  pytest.param(2, marks=pytest.mark.slow)])
def test_controls_flagged_and_correct_mechanisms_not(targets, seed):
    rng = np.random.default_rng(seed)
    # controls are cheap to sample: 4x more samples keeps the marginal ones (sparse vector
    # releasing noisy values: true loss about 1.5 on its pair) clearly flagged
    records = [*run_audits([t for t in targets if not t.control], samples=100_000,
                           confidence=0.95, rng=rng, max_values=2_000_000),
               *run_audits([t for t in targets if t.control], samples=400_000,
                           confidence=0.95, rng=rng, max_values=8_000_000)]
    ordered = [t for t in targets if not t.control] + [t for t in targets if t.control]
    assert len(records) == len(targets)
    for target, record in zip(ordered, records, strict=True):
        assert record["mechanism"] == target.name
        if target.control:
            assert record["violation"], record
        else:
            assert not record["violation"], record


def test_lower_bounds_stay_below_true_epsilon_of_controls(targets):
    # At 99.99% confidence each bound exceeds the true epsilon with probability <= 1e-4: this
    # test's false-failure rate is <= 1e-3 over the controls with a finite true epsilon.
    rng = np.random.default_rng(7)
    controls = [t for t in targets if t.control]
    for record in run_audits(controls, samples=100_000, confidence=0.9999, rng=rng,
                             max_values=2_000_000):
        true_eps = record["true_epsilon"]
        if true_eps is not None and math.isfinite(true_eps):
            assert record["epsilon_lower"] <= true_eps, record


def test_find_target_and_with_epsilon():
    assert find_target("half-noise-laplace").name == "HalfNoiseLaplace"
    with pytest.raises(ValueError, match="unknown mechanism"):
        find_target("no-such-thing")
    assert with_epsilon(Laplace(epsilon=1.0), 0.5).epsilon == 0.5
    from dpkd_audit.mechanisms import RandomizedResponse

    shuffled = ShuffledRandomizer(local=RandomizedResponse(epsilon=1.0, num_classes=4),
                                  num_users=50)
    assert with_epsilon(shuffled, 2.0).local.epsilon == 2.0
