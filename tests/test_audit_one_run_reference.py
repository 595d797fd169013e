"""The one-run analyses equal google-deepmind/jax_privacy's on the same counts (issue 34).

``jax_privacy.auditing`` implements Steinke-Nasr-Jagielski's p-value and epsilon bound
(``_one_run_p_value``, ``_epsilon_one_run``) and the f-DP recursion of
Mahloujifar-Melis-Chaudhuri with abstention and a cap (``_epsilon_one_run_fdp``). jax-privacy is
not a dependency of this package (it pulls jax): these tests run where it is installed (``pip
install jax-privacy``) and are skipped otherwise, CI included; ``benchmarks/README.md`` records
a run. Deterministic (no sampling), so no false-failure rate.

Tolerances: the p-values are the same closed form (relative 1e-9); both epsilon searches stop
at xtol 1e-6 (absolute 1e-5); the f-DP bound's Gaussian calibration is computed differently
(ours Balle-Wang's analytic Gaussian by root finding, theirs ``dp_accounting.get_sigma_gaussian``)
and agreed within 3e-7 on these counts (jax-privacy 2.0.0), so absolute 1e-5 there too.
"""

from __future__ import annotations

import pytest

from dpkd_audit.audit.one_run_fdp import one_run_fdp_epsilon
from dpkd_audit.audit.training import _one_run_epsilon, one_run_p_value

reference = pytest.importorskip("jax_privacy.auditing")

#: (canaries m, guesses k, correct c, delta): the issue's figures (1,000 canaries, 100 guesses,
#: 99 / 70 right), the 100,000-canary audits (991 of 1,000; DGD 977 at an earlier claim), small
#: and pure ones.
COUNTS = [
    (1000, 100, 99, 1e-5),
    (1000, 100, 70, 1e-5),
    (1000, 100, 95, 1e-5),
    (100_000, 1000, 991, 1e-5),
    (100_000, 1000, 977, 1e-5),
    (100_000, 2000, 1942, 1e-5),
    (200, 20, 20, 1e-3),
    (1000, 100, 95, 0.0),
    (50, 10, 9, 0.0),
]


@pytest.mark.parametrize(("m", "k", "c", "delta"), COUNTS)
@pytest.mark.parametrize("epsilon", [0.0, 0.5, 2.0, 4.0])
def test_steinke_p_value_equals_jax_privacy(m, k, c, delta, epsilon):
    ours = one_run_p_value(m, k, c, epsilon, delta)
    theirs = float(reference._one_run_p_value(m, k, c, epsilon, delta))
    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize(("m", "k", "c", "delta"), COUNTS)
def test_steinke_epsilon_equals_jax_privacy(m, k, c, delta):
    ours = _one_run_epsilon(m, k, c, delta, 0.05)
    theirs = float(reference._epsilon_one_run(0.0, m, k, c, 0.05, delta))
    assert ours == pytest.approx(theirs, abs=1e-5)


@pytest.mark.parametrize(("m", "k", "c", "delta"), [x for x in COUNTS if x[3] > 0])
def test_fdp_epsilon_equals_jax_privacy(m, k, c, delta):
    ours = one_run_fdp_epsilon(m, k, c, delta=delta, confidence=0.95)
    theirs = float(reference._epsilon_one_run_fdp(1e-6, m, k, c, 0.05, delta))
    assert ours == pytest.approx(theirs, abs=1e-5)
