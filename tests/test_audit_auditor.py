"""The black-box auditor: validity, power, attacks by output type, validation.

Statistical checks use fixed seeds. An audit of a correct mechanism reports a violation with
probability at most 1 - confidence = 5% per audit (the bound is valid); where a test asserts "no
violation" on a correct mechanism with a fixed seed, that is the false-failure rate of the seed
choice (measured rates are far lower, 0.2%-1.2%: see the false-alarm test). Tests asserting
that a broken sampler is flagged use mechanisms whose true epsilon is 2-3x the claim, where the
bound exceeds the claim by many standard deviations (false-failure rate < 1e-6 per seed).
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy import stats

from dpkd_audit.audit import (
    Attack,
    AuditResult,
    Verdict,
    audit_mechanism,
    audit_sampler,
    epsilon_lower_bound,
)
from dpkd_audit.audit.auditor import mechanism_sampler, resolve_attack
from dpkd_audit.audit.event_selection import auto_attacks
from dpkd_audit.audit.outputs import OutputKind
from dpkd_audit.mechanisms import (
    CATALOGUE,
    DiscreteLaplace,
    Gaussian,
    Laplace,
    RandomizedResponse,
)
from dpkd_audit.mechanisms.continuous import TextbookGaussian, TextbookLaplace


def rng_(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def laplace_sampler(scale: float):
    def sample(x, n, rng):
        return x + rng.laplace(0.0, scale, n)
    return sample


def binary_rr(keep: float):
    def sample(x, n, rng):
        return np.where(rng.random(n) < keep, x, 1 - x)
    return sample


# --------------------------------------------------------------------------- power and targets

def test_laplace_threshold_audit_is_tight_and_valid():
    result = audit_sampler(laplace_sampler(1.0), 0.0, 1.0, epsilon=1.0, n=100_000, rng=rng_(1),
                           attack=Attack.THRESHOLD)
    assert not result.violation
    assert 0.95 <= result.epsilon_lower <= 1.0
    assert result.attack is Attack.THRESHOLD
    assert result.event.startswith(("output > ", "output < "))
    assert result.direction in ("x vs x'", "x' vs x")


@pytest.mark.parametrize("seed", [0, 1])
def test_targets_at_a_million_samples_per_side(seed):
    # Issue 4 targets: Laplace eps=1 and 10-ary RR eps=1 give epsilon_lower >= 0.98 at 10^6
    # samples per side (attainable: 0.994 and 0.990). Over 40 seeds: 0.985-0.998 (mean 0.992)
    # and 0.983-1.000 (mean 0.990).
    lap = audit_mechanism(Laplace(epsilon=1.0), n=10**6, rng=rng_(seed), attack=Attack.THRESHOLD)
    rr = audit_mechanism(RandomizedResponse(epsilon=1.0, num_classes=10), n=10**6, rng=rng_(seed))
    for result in (lap, rr):
        assert 0.98 <= result.epsilon_lower <= 1.0
        assert result.seconds < 5.0
    assert rr.attack is Attack.HISTOGRAM and rr.event in ("output in {0}", "output in {1}")


def test_bounds_grow_with_n_on_average():
    # Mean over 8 seeds at 2,000 / 20,000 / 200,000 samples per side; the gaps (about 0.15 and
    # 0.06) are several times the standard error of the means (< 0.02), false-failure < 1e-4.
    means = []
    for n in (2_000, 20_000, 200_000):
        means.append(np.mean([
            audit_sampler(laplace_sampler(1.0), 0.0, 1.0, epsilon=1.0, n=n, rng=rng_(100 + s),
                          attack=Attack.THRESHOLD).epsilon_lower for s in range(8)]))
    assert means[0] < means[1] < means[2] <= 1.0


# --------------------------------------------------------------------------- validity

def binomial_tolerance(runs: int, rate: float, false_failure: float) -> int:
    """Largest violation count allowed: P(Bin(runs, rate) > it) <= false_failure."""
    return int(stats.binom.ppf(1 - false_failure, runs, rate))


#: False-alarm rates measured over 1,000 runs by ``python benchmarks/audit_false_alarms.py``
#: (seeds 5000-5999), rounded up: {confidence: (binary RR, Laplace, Laplace snapped to 2^-10
#: under the default AUTO with float bits)}. The invalid audit that selects and bounds on the
#: same samples measured 4.7% (Laplace, c = 0.95) and 47.3% (c = 0.5). The snapped case runs
#: at c = 0.5 only (the more sensitive level; 0.1% measured at 0.95), to save CI time.
#: The ragged case (issue 31's leaf view: a list of 1-4 answers, each x + Laplace(4) on 2^-16,
#: 1-DP in all, AUTO) measured 0 of 1,000 at both levels; it runs 60 times at c = 0.5 against
#: a pinned 0.5% (each of its audits costs ~0.1 s: the leaf view reads Python lists).
MEASURED_FALSE_ALARMS = {0.95: (0.015, 0.005, None, None), 0.5: (0.18, 0.07, 0.07, 0.005)}


def ragged_answers(x, n, rng):
    """1-4 answers (length independent of x), each x + Laplace(4) on 2^-16: 1-DP in all."""
    lengths = rng.integers(1, 5, n)
    values = np.round((x + rng.laplace(0.0, 4.0, (n, 4))) * 2**16) / 2**16
    return [values[j, :k].tolist() for j, k in enumerate(lengths)]


def snapped_laplace(x, n, rng):
    """A 1-DP Laplace rounded to multiples of 2^-10: its doubles sit on one grid."""
    return np.round((x + rng.laplace(0.0, 1.0, n)) * 1024.0) / 1024.0


@pytest.mark.parametrize("confidence", [0.95, 0.5])
def test_false_alarm_rate_is_the_measured_one(confidence):
    # Mechanisms whose claim is EXACTLY their true epsilon: binary RR (keep 3/4, eps = ln 3;
    # AUTO) and Laplace eps=1 (THRESHOLD over ~1,300 candidate events). Each is audited 1,000
    # times; the test allows the 99.9% binomial quantile of the *measured* rate (far below
    # 1 - confidence), so it fails with probability <= 1e-3 per case if the rate is as measured,
    # and catches a rate several times higher: sample reuse between selection and bound
    # (4.7% and 47.3% for Laplace) fails it almost surely.
    cases = ((binary_rr(0.75), math.log(3), None, 400, 1000),
             (laplace_sampler(1.0), 1.0, Attack.THRESHOLD, 1000, 1000),
             (snapped_laplace, 1.0, None, 1000, 1000),
             (ragged_answers, 1.0, None, 1000, 60))
    for (sampler, eps, attack, n, runs), rate in zip(cases, MEASURED_FALSE_ALARMS[confidence],
                                                     strict=True):
        if rate is None:
            continue
        # the first bound's own rate (what sample reuse would break); the confirmation that a
        # reported violation also needs is tested in test_audit_libraries.py
        flagged = sum(
            audit_sampler(sampler, 0, 1, epsilon=eps, n=n, confidence=confidence,
                          rng=rng_(5000 + i), attack=attack,
                          confirmation_confidence=None).epsilon_lower > eps
            for i in range(runs))
        assert flagged <= binomial_tolerance(runs, rate, 1e-3), (confidence, rate, flagged)
        assert flagged <= runs * (1 - confidence)  # and never above the nominal level


def test_never_flags_a_mechanism_with_more_noise_than_claimed():
    # True epsilon 0.5, claim 1: the bound exceeds 0.5 with probability <= 5% and 1 never.
    for seed in range(5):
        result = audit_sampler(laplace_sampler(2.0), 0.0, 1.0, epsilon=1.0, n=50_000,
                               rng=rng_(seed), attack=Attack.THRESHOLD)
        assert not result.violation and result.epsilon_lower < 0.6


# --------------------------------------------------------------------------- catalogue

#: Samples per side for the catalogue audit (ShuffledRandomizer and ReverseKnnCountRelease
#: sample slowly: 10,000 users / 400 cells per output).
CATALOGUE_N = {"ShuffledRandomizer": 1_000, "ReverseKnnCountRelease": 4_000}


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda e: type(e.example()).__name__)
def test_catalogue_mechanisms_are_never_flagged(entry):
    # The default policy: every applicable attack, float bits included (issue 32: the
    # package's continuous mechanisms are float-safe).
    mech = entry.example()
    name = type(mech).__name__
    assert resolve_attack(None, mech)[0] is Attack.AUTO
    for seed in (0, 1):
        result = audit_mechanism(mech, n=CATALOGUE_N.get(name, 20_000), rng=rng_(seed))
        assert not result.violation, str(result)
        assert result.epsilon_claimed == mech.epsilon and result.delta == mech.delta
        assert result.mechanism == name


#: Samples per side at which each audit configuration's bound exceeds half its claim (so a
#: mechanism running at twice its claimed epsilon is flagged): the scalar Gaussian-type ones
#: need 10^6 (their best events lie in the tails), the others 2 x 10^5.
TWICE_N = {"Gaussian": 1_000_000, "DiscreteGaussian": 1_000_000, "ShuffledHistogram": 400_000,
           "LaplaceNoisyMax": 400_000}


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda e: type(e.example()).__name__)
def test_catalogue_audits_catch_a_mechanism_at_twice_its_claim(entry):
    """The audit configuration, claiming half of what it runs at: must be flagged.

    This is what the never-flagged audits above cannot see (a bound of 0 passes them). The
    samples are the mechanism's own, the claim (epsilon/2, delta) is what a mechanism running
    at twice its claimed epsilon would declare. Deterministic (fixed seed); the bounds at these
    sizes exceed the halved claim by many standard errors (``dpkd audit --all`` at 10^6: every
    audit configuration >= 0.59 of its claim).
    """
    mech = entry.audited()
    name = type(mech).__name__
    result = audit_mechanism(mech, n=TWICE_N.get(name, 200_000), rng=rng_(11))
    sampler, (x, x_prime), _ = mechanism_sampler(mech)
    halved = audit_sampler(sampler, x, x_prime, epsilon=mech.epsilon / 2, delta=mech.delta,
                           n=TWICE_N.get(name, 200_000), rng=rng_(11),
                           attack=resolve_attack(None, mech)[0])
    assert result.verdict is Verdict.CONSISTENT, str(result)
    assert halved.violation, str(halved)


def test_auto_flags_the_floating_point_artefacts_of_textbook_float_samplers():
    # Mironov, CCS 2012: x + Lap(b) computed in doubles reaches inputs-dependent subsets of the
    # doubles. With x = 0 vs x' = 1, outputs in [1/4, 1/2) are multiples of 2^-53 under x' (the
    # sum 1 + z is exact there) while under x about half of them are odd multiples of 2^-54: an
    # event of probability ~4% under x and 0 under x'. The textbook samplers (TextbookLaplace,
    # TextbookGaussian) are flagged by the default policy; DiscreteLaplace and the float-safe
    # Laplace and Gaussian (issue 32) are immune, whatever the attack.
    for mech in (TextbookLaplace(epsilon=1.0), TextbookGaussian(epsilon=1.0, delta=1e-5)):
        assert resolve_attack(None, mech)[0] is Attack.AUTO
        result = audit_mechanism(mech, n=20_000, rng=rng_(3))
        assert result.attack is Attack.FLOAT_BITS and result.violation
        assert result.epsilon_lower > 3.0
    for safe in (DiscreteLaplace(epsilon=1.0), Laplace(epsilon=1.0),
                 Gaussian(epsilon=1.0, delta=1e-5)):
        assert not audit_mechanism(safe, n=20_000, rng=rng_(3)).violation
        if not isinstance(safe, DiscreteLaplace):  # (integer outputs have no float bits)
            assert not audit_mechanism(safe, n=20_000, rng=rng_(3),
                                       attack=Attack.FLOAT_BITS).violation
    real = audit_mechanism(TextbookLaplace(epsilon=1.0), n=20_000, rng=rng_(3),
                           attack=Attack.AUTO_REAL)
    assert real.attack is Attack.THRESHOLD and not real.violation


def test_float_bits_does_not_flag_outputs_snapped_to_a_coarse_grid():
    # Outputs rounded to multiples of 2^-10 (the grid idea of Mironov's snapping mechanism):
    # the low bits carry nothing, and rounding is post-processing of a 1-DP Laplace.
    def snapped(x, n, rng):
        return np.round((x + rng.laplace(0.0, 1.0, n)) * 1024.0) / 1024.0
    for seed in range(3):
        result = audit_sampler(snapped, 0.0, 1.0, epsilon=1.0, n=20_000, rng=rng_(seed),
                               attack=Attack.FLOAT_BITS)
        assert not result.violation


# --------------------------------------------------------------------------- broken samplers

def test_flags_laplace_with_a_third_of_the_noise():
    result = audit_sampler(laplace_sampler(1.0 / 3.0), 0.0, 1.0, epsilon=1.0, n=20_000,
                           rng=rng_(0), attack=Attack.THRESHOLD)
    assert result.violation and 2.5 < result.epsilon_lower <= 3.0


def test_flags_randomized_response_with_a_wrong_keep_probability():
    # Claims ln 3 (keep 3/4) but keeps 0.9: true epsilon ln 9.
    result = audit_sampler(binary_rr(0.9), 0, 1, epsilon=math.log(3), n=20_000, rng=rng_(0))
    assert result.attack is Attack.HISTOGRAM and result.violation
    assert math.log(3) < result.epsilon_lower <= math.log(9)


def test_flags_vector_laplace_with_too_little_noise_by_coordinate_and_classifier():
    # Laplace(1/2) on 5 coordinates, neighbours 1 apart in L1: true epsilon 2, claim 1. The
    # real-valued attacks find the differing coordinate; the classifier alone flags it too.
    # (The default, AUTO, also reads its float bits: see the float-vector test below.)
    def sample(x, n, rng):
        return np.asarray(x) + rng.laplace(0.0, 0.5, (n, 5))
    result = audit_sampler(sample, np.zeros(5), np.eye(5)[0], epsilon=1.0, n=20_000,
                           rng=rng_(0), attack=Attack.AUTO_REAL)
    assert result.attack is Attack.COORDINATE and result.violation
    assert result.event.startswith("coordinate 0")
    assert result.epsilon_lower <= 2.0
    forced = audit_sampler(sample, np.zeros(5), np.eye(5)[0], epsilon=1.0, n=20_000,
                           rng=rng_(0), attack=Attack.CLASSIFIER)
    assert forced.violation and forced.event.startswith("classifier score")
    assert forced.epsilon_lower <= 2.0


def test_flags_broken_samplers_with_tuple_and_structured_outputs():
    def tuples(x, n, rng):
        labels = np.where(rng.random(n) < 0.9, x, rng.integers(0, 3, n))
        return [(int(v), "label") for v in labels]

    def records(x, n, rng):
        out = np.zeros(n, dtype=[("label", "<i8"), ("weight", "<f8")])
        out["label"] = np.where(rng.random(n) < 0.9, x, rng.integers(0, 3, n))
        out["weight"] = 0.5
        return out

    # Keep 0.9 + 0.1/3 vs 0.1/3: true epsilon ln(28), claim 1.
    for sampler in (tuples, records):
        result = audit_sampler(sampler, 0, 1, epsilon=1.0, n=20_000, rng=rng_(0))
        assert result.attack is Attack.HISTOGRAM and result.violation
        assert "(0, " in result.event or "(1, " in result.event
        assert result.epsilon_lower <= math.log(28)


def test_delta_aware_bound():
    # Under x' a "leak" output 2 appears with probability 0.01, never under x: the pair is
    # (0, 0.01)-DP. Claiming delta = 0.01 is correct; claiming delta = 0 is refuted.
    def leaky(x, n, rng):
        out = rng.integers(0, 2, n)
        if x == 1:
            out[rng.random(n) < 0.01] = 2
        return out
    honest = audit_sampler(leaky, 0, 1, epsilon=0.1, delta=0.01, n=50_000, rng=rng_(0))
    assert not honest.violation and honest.delta == 0.01
    refuted = audit_sampler(leaky, 0, 1, epsilon=0.1, delta=0.0, n=50_000, rng=rng_(0))
    assert refuted.violation and refuted.event in ("output in {2}", "output > 1")
    assert refuted.direction == "x' vs x"


# --------------------------------------------------------------------------- result

def test_result_is_frozen_consistent_and_serialisable():
    result = audit_mechanism(RandomizedResponse(epsilon=1.0, num_classes=4), n=10_000,
                             rng=rng_(0))
    assert isinstance(result, AuditResult)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.epsilon_lower = 5.0  # type: ignore[misc]
    assert result.selection_samples + result.bound_samples == result.samples_per_side == 10_000
    hits_x, hits_xp = result.counts
    k1, k0 = (hits_x, hits_xp) if result.direction == "x vs x'" else (hits_xp, hits_x)
    assert result.epsilon_lower == epsilon_lower_bound(k1, result.bound_samples, k0,
                                                       result.bound_samples)
    assert result.epsilon_estimate == pytest.approx(math.log(k1 / k0))
    record = json.loads(json.dumps(result.to_dict()))
    assert record["attack"] == "histogram" and record["mechanism"] == "RandomizedResponse"
    assert "epsilon >=" in str(result)


def test_same_seed_same_result():
    a = audit_sampler(laplace_sampler(1.0), 0.0, 1.0, epsilon=1.0, n=5_000, rng=rng_(7))
    b = audit_sampler(laplace_sampler(1.0), 0.0, 1.0, epsilon=1.0, n=5_000, rng=rng_(7))
    assert dataclasses.replace(a, seconds=0.0) == dataclasses.replace(b, seconds=0.0)


@pytest.mark.parametrize(("sampler", "kind"), [
    (lambda x, n, rng: rng.integers(0, 3, n), OutputKind.SCALAR_INT),
    (lambda x, n, rng: [("a", int(v)) for v in rng.integers(0, 3, n)], OutputKind.OBJECT),
    (lambda x, n, rng: rng.integers(0, 2, (n, 3)), OutputKind.ARRAY),
    (lambda x, n, rng: rng.normal(size=(n, 3)), OutputKind.ARRAY),
    (lambda x, n, rng: rng.normal(size=n), OutputKind.SCALAR_FLOAT),
])
def test_auto_runs_the_attacks_of_the_output_type_and_stays_quiet_on_equal_inputs(sampler,
                                                                                   kind):
    result = audit_sampler(sampler, 0, 0, epsilon=1.0, n=2_000, rng=rng_(0))
    assert result.attack in auto_attacks(kind, float_bits=False)
    assert not result.violation  # identical distributions: any bound is a false alarm
    assert result.verdict is Verdict.INCONCLUSIVE or result.epsilon_lower < 0.5


def _index_and_max(noisy):
    return list(zip(np.argmax(noisy, axis=1).tolist(), np.max(noisy, axis=1).tolist(),
                    strict=True))


@pytest.mark.parametrize(("name", "sampler", "x", "x_prime", "attack"), [
    # (index, noisy value) as Python tuples: true epsilon k eps / 2 = 2.5 for the claim 1
    ("noisy max tuples", lambda x, n, rng: _index_and_max(x + rng.laplace(0, 2.0, (n, 5))),
     np.zeros(5), np.ones(5), None),
    # Laplace with half the claimed noise, clipped to a public range: true epsilon 2
    ("clipped half noise", lambda x, n, rng: np.clip(x + rng.laplace(0, 0.5, n), -1.0, 2.0),
     0.0, 1.0, None),
])
def test_auto_flags_mixed_and_atomic_outputs(name, sampler, x, x_prime, attack):
    """Outputs the histogram attack used to overfit (issue 11): flagged at 2 x 10^5 per side.

    False-failure rate: each bound is far above the claim (about 1.7 and 1.98 against 1 in the
    benchmark at 10^6); missing it needs a failure of the 95% bound's own event, < 5%, and the
    fixed seed makes the outcome deterministic.
    """
    result = audit_sampler(sampler, x, x_prime, epsilon=1.0, n=200_000, rng=rng_(3),
                           attack=attack)
    assert result.violation and result.verdict is Verdict.VIOLATION, (name, result)


def test_rounded_laplace_keeps_the_threshold_power():
    """A correct Laplace rounded to 0.01: every attack competes on held-out data, so a
    threshold-like event (not the overfitted histogram of 0.01-cells) wins and the bound is
    near 1. Rounding puts both inputs' outputs on one grid, so the float bits carry nothing
    beyond their binade (a threshold at a power of 2: it may win, measured 0.992)."""
    result = audit_sampler(lambda x, n, rng: np.round(x + rng.laplace(0, 1.0, n), 2), 0.0, 1.0,
                           epsilon=1.0, n=1_000_000, rng=rng_(5))
    assert not result.violation
    assert result.attack in (Attack.THRESHOLD, Attack.FLOAT_BITS)
    assert result.epsilon_lower >= 0.95
    assert result.verdict is Verdict.CONSISTENT


def test_large_outputs_are_counted_in_chunks(monkeypatch):
    import dpkd_audit.audit.auditor as auditor
    monkeypatch.setattr(auditor, "CHUNK_BYTES", 64 * 100)  # 100 rows of 8 float64 per chunk
    calls = []

    def sample(x, n, rng):
        calls.append(n)
        return np.asarray(x) + rng.laplace(0.0, 0.25, (n, 8))
    result = audit_sampler(sample, np.zeros(8), np.eye(8)[0], epsilon=1.0, n=2_000, rng=rng_(0))
    # selection and bound, then the confirmation of the violation on as many fresh outputs
    assert max(calls[2:]) == 100 and sum(calls) == 2 * 2_000 + 2 * result.bound_samples
    assert result.violation and result.confirmation.confirmed  # true epsilon 4


# --------------------------------------------------------------------------- validation

GOOD = {"epsilon": 1.0, "n": 1_000, "rng": None}


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"epsilon": 0.0}, "epsilon"), ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": math.nan}, "epsilon"), ({"epsilon": math.inf}, "epsilon"),
    ({"delta": 1.0}, "delta"), ({"delta": -0.1}, "delta"), ({"delta": math.nan}, "delta"),
    ({"confidence": 0.0}, "confidence"), ({"confidence": 1.0}, "confidence"),
    ({"confidence": 1.5}, "confidence"),
    ({"n": 10}, "n"), ({"n": 1000.0}, "n"), ({"n": True}, "n"),
    ({"rng": 42}, "rng"), ({"rng": np.random.RandomState(0)}, "rng"),
    ({"attack": "threshold"}, "attack"),
    ({"selection_fraction": 0.0}, "selection_fraction"),
    ({"selection_fraction": 1.0}, "selection_fraction"),
])
def test_audit_sampler_rejects_bad_arguments(kwargs, name):
    args = {**GOOD, "rng": rng_(0), **kwargs}
    with pytest.raises(ValueError, match=name):
        audit_sampler(laplace_sampler(1.0), 0.0, 1.0, **args)


@pytest.mark.parametrize("sampler", [
    lambda x, n, rng: rng.laplace(size=n - 1),
    lambda x, n, rng: rng.laplace(size=(2, n)),
    lambda x, n, rng: np.float64(1.0),
    lambda x, n, rng: 3,
    lambda x, n, rng: "abc",
    lambda x, n, rng: rng.normal(size=n) + 1j,
    lambda x, n, rng: [[1, 2]] * (n - 1) + [{1, 2}],  # a set: unhashable
    lambda x, n, rng: rng.normal(size=(n, 2 if x == 0 else 3)),
    lambda x, n, rng: rng.normal(size=n) if x == 0 else rng.integers(0, 2, n),
])
def test_audit_sampler_rejects_samplers_with_wrong_outputs(sampler):
    with pytest.raises(ValueError, match="sampler"):
        audit_sampler(sampler, 0, 1, epsilon=1.0, n=200, rng=rng_(0))


def test_audit_sampler_rejects_a_non_callable_and_inapplicable_attacks():
    with pytest.raises(ValueError, match="sampler"):
        audit_sampler(None, 0, 1, epsilon=1.0, n=200, rng=rng_(0))  # type: ignore[arg-type]
    ints = lambda x, n, rng: rng.integers(0, 3, n)  # noqa: E731
    with pytest.raises(ValueError, match="FLOAT_BITS"):
        audit_sampler(ints, 0, 1, epsilon=1.0, n=200, rng=rng_(0), attack=Attack.FLOAT_BITS)
    vectors = lambda x, n, rng: rng.normal(size=(n, 2))  # noqa: E731
    with pytest.raises(ValueError, match="THRESHOLD"):
        audit_sampler(vectors, 0, 1, epsilon=1.0, n=200, rng=rng_(0), attack=Attack.THRESHOLD)


def test_audit_mechanism_rejects_objects_without_the_contract():
    class NoNeighbours:
        epsilon = 1.0

        def sample(self, value, n, *, rng):
            return rng.normal(size=n)

    with pytest.raises(ValueError, match="neighbours"):
        audit_mechanism(NoNeighbours(), n=100, rng=rng_(0))

    class BadEpsilon(NoNeighbours):
        epsilon = -1.0

        def neighbours(self):
            return (0.0, 1.0)

    with pytest.raises(ValueError, match=r"mechanism\.epsilon"):
        audit_mechanism(BadEpsilon(), n=100, rng=rng_(0))


def test_controls_are_loaded_lazily():
    import importlib.util
    import subprocess
    import sys

    code = ("import sys, dpkd_audit.audit as a; "
            "print('dpkd_audit.audit.controls' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
    import dpkd_audit.audit as audit
    if importlib.util.find_spec("dpkd_audit.audit.controls") is None:
        with pytest.raises(AttributeError, match="controls"):
            _ = audit.controls
    else:
        assert audit.controls.__name__ == "dpkd_audit.audit.controls"


def test_one_default_policy_for_api_and_command_line():
    """Plain samplers and every package mechanism: AUTO by default (float bits included, issues
    31 and 32); only a control that declares floating-point output is audited with AUTO_REAL,
    said in the result; the suite behind ``dpkd audit`` uses the same rule (it passes no
    attack)."""
    from dpkd_audit.audit import resolve_attack
    from dpkd_audit.audit.controls import HalfNoiseLaplace
    from dpkd_audit.audit.suite import find_target, run_audits

    result = audit_mechanism(Gaussian(epsilon=1.0, delta=1e-5), n=20_000, rng=rng_(3))
    assert not result.violation and result.policy.startswith("auto:")
    control = audit_mechanism(HalfNoiseLaplace(epsilon=1.0), n=2_000, rng=rng_(3))
    assert control.policy.startswith("auto_real") and "Mironov" in control.policy
    plain = audit_sampler(laplace_sampler(1.0), 0.0, 1.0, epsilon=1.0, n=20_000, rng=rng_(3))
    assert plain.policy.startswith("auto:")
    for safe in (DiscreteLaplace(epsilon=1.0), Laplace(epsilon=1.0),
                 TextbookLaplace(epsilon=1.0), TextbookGaussian(epsilon=1.0, delta=1e-5)):
        assert resolve_attack(None, safe)[0] is Attack.AUTO
    assert resolve_attack(Attack.THRESHOLD)[1].endswith("chosen by the caller")
    for name, direct in (("Gaussian", result), ("HalfNoiseLaplace", control)):
        record = next(run_audits([find_target(name)], samples=2_000 if direct is control
                                 else 20_000, confidence=0.95, rng=rng_(3)))
        assert record["policy"] == direct.policy and record["attack"] == direct.attack.value


def test_default_confidence_is_95_percent():
    import inspect

    for func in (audit_sampler, audit_mechanism):
        assert inspect.signature(func).parameters["confidence"].default == 0.95
    result = audit_sampler(laplace_sampler(1.0), 0.0, 1.0, epsilon=1.0, n=2_000, rng=rng_(1))
    assert result.confidence == 0.95
    # the reported bound is the 95% Clopper-Pearson bound of the reported counts
    k_1, k_0 = (result.counts if result.direction == "x vs x'" else result.counts[::-1])
    assert result.epsilon_lower == epsilon_lower_bound(k_1, result.bound_samples, k_0,
                                                       result.bound_samples, confidence=0.95)


def test_verdicts():
    from dpkd_audit.audit.auditor import POWER_FRACTION, verdict_of

    assert verdict_of(0.0, 1.0) is Verdict.INCONCLUSIVE
    assert verdict_of(POWER_FRACTION * 0.99, 1.0) is Verdict.INCONCLUSIVE
    assert verdict_of(POWER_FRACTION, 1.0) is Verdict.CONSISTENT
    assert verdict_of(1.0, 1.0) is Verdict.CONSISTENT
    assert verdict_of(1.0 + 1e-12, 1.0) is Verdict.VIOLATION


def test_a_noiseless_column_beside_noisy_ones_is_flagged():
    """A vector output in which one column is exact (constant per input, different between
    them) among many noisy ones - e.g. an exact count leaked beside released noisy counts -
    is the most telling column of all; it must be found with few samples (it once scored a
    z of 0 because its variance is 0)."""
    def sampler(x, n, rng):
        noisy = rng.laplace(0.0, 2.0, size=(n, 60))
        exact = np.full((n, 1), 17.0 if x else 16.0)
        return np.hstack([noisy, exact, rng.laplace(0.0, 2.0, size=(n, 60))])

    res = audit_sampler(sampler, True, False, epsilon=1.0, n=200, rng=np.random.default_rng(3))
    assert res.violation and res.epsilon_lower > 3.0
    assert res.attack is Attack.COORDINATE
