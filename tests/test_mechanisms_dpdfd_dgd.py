"""DP-DFD selective randomized response and DGD latent-code Laplace perturbation.

Statistical tests use fixed seeds; each states its false-failure rate (the probability, over
seeds, that a correct implementation fails it).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event as _dp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats
from stats_helpers import chi_square_pvalue

from dpkd_audit.accountants.pure import PureAccountant, event_guarantee
from dpkd_audit.events import SelectiveRandomizedResponseDpEvent
from dpkd_audit.mechanisms.base import Norm
from dpkd_audit.mechanisms.dgd import LatentCodeLaplace
from dpkd_audit.mechanisms.selective_rr import SelectiveRandomizedResponse

ALPHA = 1e-4  # significance of every chi-square / KS test below: false-failure rate 1e-4 each

BAD_EPSILONS = [0, 0.0, -1.0, math.nan, math.inf, "1", None, True]


def srr_reference_pmf(eps: float, label: int, probs: np.ndarray, t: float) -> np.ndarray:
    """Algorithm 1 of DP-DFD written out directly (independent of the implementation)."""
    k = probs.size
    members = [c for c in range(k) if probs[c] > t]
    if len(members) < 2:
        order = sorted(range(k), key=lambda c: (-probs[c], c))
        members = order[:2]
    m = len(members)
    pmf = np.zeros(k)
    if label in members:
        for c in members:
            pmf[c] = (math.exp(eps) if c == label else 1.0) / (math.exp(eps) + m - 1)
    else:
        for c in members:
            pmf[c] = 1.0 / m
    return pmf


# =================================================================== selective randomized response
@pytest.mark.parametrize("eps", BAD_EPSILONS)
def test_srr_rejects_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        SelectiveRandomizedResponse(epsilon=eps, num_classes=10)


@pytest.mark.parametrize("k", [1, 0, -2, 10.0, "10", None, True])
def test_srr_rejects_bad_num_classes(k):
    with pytest.raises(ValueError, match="num_classes"):
        SelectiveRandomizedResponse(epsilon=1.0, num_classes=k)


@pytest.mark.parametrize("t", [0, 0.0, 1.0, -0.1, 1.5, math.nan, math.inf, "0.1"])
def test_srr_rejects_bad_threshold(t):
    with pytest.raises(ValueError, match="threshold"):
        SelectiveRandomizedResponse(epsilon=1.0, num_classes=10, threshold=t)


SRR = SelectiveRandomizedResponse(epsilon=1.0, num_classes=4)
GOOD_PROBS = np.array([0.1, 0.2, 0.3, 0.4])


@pytest.mark.parametrize("label", [-1, 4, 100, 1.0, "1", None, True, np.float64(2.0)])
def test_srr_rejects_bad_teacher_label(label):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="teacher_label"):
        SRR.sample((label, GOOD_PROBS), 3, rng=rng)
    with pytest.raises(ValueError, match="teacher_label"):
        SRR.release((label, GOOD_PROBS), rng=rng)
    with pytest.raises(ValueError, match="teacher_label"):
        SRR.output_pmf(label, GOOD_PROBS)


@pytest.mark.parametrize("probs", [
    [0.5, 0.5, 0.0],                       # wrong length
    [0.2, 0.2, 0.2, 0.2, 0.2],
    [[0.1, 0.2, 0.3, 0.4]],                # 2-d for a single value
    0.25,
    [0.5, 0.5, 0.5, -0.5],                 # negative
    [0.1, 0.2, 0.3, 0.3],                  # sums to 0.9
    [0.1, 0.2, 0.3, 0.4 + 1e-5],           # off by more than 1e-6
    [math.nan, 0.2, 0.3, 0.5],
    [math.inf, 0.0, 0.0, 0.0],
    ["a", "b", "c", "d"],
])
def test_srr_rejects_bad_student_probs(probs):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="student_probs"):
        SRR.sample((0, probs), 3, rng=rng)
    with pytest.raises(ValueError, match="student_probs"):
        SRR.output_pmf(0, probs)


@pytest.mark.parametrize("value", [0, [0], (0, GOOD_PROBS, 1), "ab", None])
def test_srr_rejects_values_that_are_not_pairs(value):
    with pytest.raises(ValueError, match="value must be a pair"):
        SRR.sample(value, 3, rng=np.random.default_rng(0))


def test_srr_accepts_sum_within_tolerance_and_numpy_labels():
    probs = np.array([0.1, 0.2, 0.3, 0.4 + 5e-7])
    assert SRR.output_pmf(np.int32(3), probs).sum() == pytest.approx(1.0)
    assert SRR.output_pmf(np.array(3), probs).sum() == pytest.approx(1.0)


@pytest.mark.parametrize("labels,probs,match", [
    (np.array([0, 1]), np.tile(GOOD_PROBS, (3, 1)), "teacher_labels"),       # m mismatch
    (np.array([0.0, 1.0, 2.0]), np.tile(GOOD_PROBS, (3, 1)), "teacher_labels"),  # floats
    (np.array([[0, 1, 2]]), np.tile(GOOD_PROBS, (3, 1)), "teacher_labels"),   # 2-d labels
    (np.array([0, 1, 4]), np.tile(GOOD_PROBS, (3, 1)), "teacher_labels"),     # out of range
    (np.array([0, -1, 2]), np.tile(GOOD_PROBS, (3, 1)), "teacher_labels"),
    (np.array([0, 1, 2]), GOOD_PROBS, "student_probs"),                        # 1-d probs
    (np.array([0, 1, 2]), np.tile([0.5, 0.5, 0.0], (3, 1)), "student_probs"),  # wrong k
    (np.array([0, 1, 2]), np.array([GOOD_PROBS, GOOD_PROBS, [0.5, 0.5, 0.5, 0.5]]),
     "student_probs"),                                                         # one bad row
    (np.zeros(0, dtype=int), np.zeros((0, 4)), "student_probs"),               # no rows
])
def test_srr_batch_rejects_bad_input(labels, probs, match):
    with pytest.raises(ValueError, match=match):
        SRR.randomize_batch(labels, probs, rng=np.random.default_rng(0))


def test_srr_rejects_bad_rng():
    with pytest.raises(ValueError, match="rng"):
        SRR.randomize_batch(np.array([0]), GOOD_PROBS[None], rng=np.random.RandomState(0))
    with pytest.raises(ValueError, match="rng"):
        SRR.sample((0, GOOD_PROBS), 2, rng=None)


def test_srr_parameters_event_and_sensitivity():
    mech = SelectiveRandomizedResponse(epsilon=2.5, num_classes=10)
    assert mech.threshold == pytest.approx(0.05)  # 1 / (2 k) (NOTES.md decision)
    assert mech.guarantee.is_pure and mech.delta == 0.0
    assert mech.sensitivity.value == 1 and mech.sensitivity.norm is Norm.RECORDS
    event = mech.event
    assert isinstance(event, SelectiveRandomizedResponseDpEvent)
    assert event.num_classes == 10 and event_guarantee(event) == (2.5, 0.0)
    assert PureAccountant().compose(event, count=4).get_epsilon(0.0) == pytest.approx(10.0)
    assert SelectiveRandomizedResponse(epsilon=1.0, num_classes=10, threshold=0.3).threshold == 0.3


def test_srr_selected_set_rule():
    mech = SelectiveRandomizedResponse(epsilon=1.0, num_classes=5)  # threshold 0.1
    assert mech.selected_classes([0.05, 0.3, 0.05, 0.45, 0.15]).tolist() == [
        False, True, False, True, True]
    # |I| = 1 -> the student's top two.
    assert mech.selected_classes([0.02, 0.9, 0.02, 0.03, 0.03]).tolist() == [
        False, True, False, True, False]
    # Exactly at the threshold is not above it.
    assert mech.selected_classes([0.1, 0.6, 0.1, 0.1, 0.1]).tolist() == [
        True, True, False, False, False]
    # |I| = 0 (custom threshold) with ties: the smallest indices win.
    strict = SelectiveRandomizedResponse(epsilon=1.0, num_classes=5, threshold=0.9)
    assert strict.selected_classes(np.full(5, 0.2)).tolist() == [True, True, False, False, False]
    # Row-wise on a matrix.
    matrix = mech.selected_classes([[0.05, 0.3, 0.05, 0.45, 0.15], [0.02, 0.9, 0.02, 0.03, 0.03]])
    assert matrix.sum(axis=1).tolist() == [3, 2]


def test_srr_output_pmf_hand_computed():
    mech = SelectiveRandomizedResponse(epsilon=math.log(3.0), num_classes=5)  # e^eps = 3
    probs = [0.05, 0.3, 0.05, 0.45, 0.15]  # I = {1, 3, 4}
    assert mech.output_pmf(3, probs) == pytest.approx([0, 0.2, 0, 0.6, 0.2])  # 3/(3+2), 1/5
    assert mech.output_pmf(0, probs) == pytest.approx([0, 1 / 3, 0, 1 / 3, 1 / 3])
    huge = SelectiveRandomizedResponse(epsilon=800.0, num_classes=5)  # no overflow
    assert huge.output_pmf(3, probs) == pytest.approx([0, 0, 0, 1, 0])


@st.composite
def srr_cases(draw):
    k = draw(st.integers(2, 12))
    weights = draw(st.lists(st.one_of(st.just(0.0), st.floats(0.0, 1.0)), min_size=k,
                            max_size=k).filter(lambda w: sum(w) > 1e-3))
    probs = np.array(weights) / math.fsum(weights)
    eps = draw(st.floats(0.01, 12.0))
    return k, probs, eps


@settings(max_examples=300, deadline=None)
@given(case=srr_cases())
def test_srr_max_ratio_over_teacher_labels_is_exp_eps(case):
    k, probs, eps = case
    mech = SelectiveRandomizedResponse(epsilon=eps, num_classes=k)
    pmfs = np.array([mech.output_pmf(a, probs) for a in range(k)])
    support = pmfs[0] > 0
    assert np.all((pmfs > 0) == support)  # the same support I for every teacher label
    assert np.allclose(pmfs.sum(axis=1), 1.0)
    for a in range(k):
        assert pmfs[a] == pytest.approx(srr_reference_pmf(eps, a, probs, 1 / (2 * k)))
    log_pmfs = np.log(pmfs[:, support])
    max_loss = (log_pmfs[:, None, :] - log_pmfs[None, :, :]).max()
    # <= eps always; = eps since two teacher labels in I always exist (|I| >= 2).
    assert max_loss <= eps + 1e-9
    assert max_loss == pytest.approx(eps, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("label,probs", [
    (3, [0.05, 0.3, 0.05, 0.45, 0.15]),   # label in I, |I| = 3
    (0, [0.05, 0.3, 0.05, 0.45, 0.15]),   # label outside I: uniform on I
    (4, [0.02, 0.9, 0.02, 0.03, 0.03]),   # |I| = 1 -> top two {1, 3}; label outside
    (1, [0.2, 0.2, 0.2, 0.2, 0.2]),       # I = everything
])
def test_srr_sample_matches_exact_pmf(label, probs):
    mech = SelectiveRandomizedResponse(epsilon=1.3, num_classes=5)
    samples = mech.sample((label, probs), 100_000, rng=np.random.default_rng(11))
    assert samples.shape == (100_000,) and samples.dtype == np.int64
    # False-failure rate: ALPHA = 1e-4 (chi-square goodness of fit, fixed seed).
    assert chi_square_pvalue(samples, mech.output_pmf(label, probs)) > ALPHA


def test_srr_batch_matches_single_in_distribution():
    mech = SelectiveRandomizedResponse(epsilon=1.3, num_classes=5)
    cases = [(3, [0.05, 0.3, 0.05, 0.45, 0.15]), (0, [0.05, 0.3, 0.05, 0.45, 0.15]),
             (4, [0.02, 0.9, 0.02, 0.03, 0.03]), (1, [0.2, 0.2, 0.2, 0.2, 0.2])]
    reps = 50_000
    labels = np.tile([c[0] for c in cases], reps)          # interleaved rows
    probs = np.tile(np.array([c[1] for c in cases]), (reps, 1))
    out = mech.randomize_batch(labels, probs, rng=np.random.default_rng(12))
    assert out.shape == labels.shape and out.dtype == np.int64
    for i, (label, p) in enumerate(cases):
        # False-failure rate: 4 tests at ALPHA = 1e-4 each.
        assert chi_square_pvalue(out[i::len(cases)], mech.output_pmf(label, p)) > ALPHA


def test_srr_release_neighbours_and_determinism():
    mech = SelectiveRandomizedResponse(epsilon=0.7, num_classes=10)
    value = (3, np.full(10, 0.1))
    out = mech.release(value, rng=np.random.default_rng(5))
    assert type(out) is int and 0 <= out < 10
    a = mech.sample(value, 50, rng=np.random.default_rng(9))
    assert np.array_equal(a, mech.sample(value, 50, rng=np.random.default_rng(9)))
    (la, pa), (lb, pb) = mech.neighbours()
    assert (la, lb) == (0, 1) and np.array_equal(pa, pb)
    assert mech.selected_classes(pa).tolist() == [True, True] + [False] * 8
    p, q = mech.output_pmf(la, pa), mech.output_pmf(lb, pb)
    assert math.log(p[0] / q[0]) == pytest.approx(0.7)
    assert p[0] == pytest.approx(math.exp(0.7) / (math.exp(0.7) + 1))


# =================================================================== DGD latent-code Laplace
@pytest.mark.parametrize("eps", BAD_EPSILONS)
def test_latent_rejects_bad_epsilon(eps):
    with pytest.raises(ValueError, match="epsilon"):
        LatentCodeLaplace(epsilon=eps, latent_dim=32)


@pytest.mark.parametrize("dim", [0, -1, 32.0, "32", None, True])
def test_latent_rejects_bad_latent_dim(dim):
    with pytest.raises(ValueError, match="latent_dim"):
        LatentCodeLaplace(epsilon=1.0, latent_dim=dim)


@pytest.mark.parametrize("clip", [0, 0.0, -1.0, math.nan, math.inf, "1"])
def test_latent_rejects_bad_clip(clip):
    with pytest.raises(ValueError, match="clip"):
        LatentCodeLaplace(epsilon=1.0, latent_dim=4, clip=clip)


@pytest.mark.parametrize("codes", [
    np.zeros(3), np.zeros(5), np.zeros((2, 3)), np.zeros((2, 2, 4)), 0.5, np.zeros((0, 4)),
    [math.nan, 0, 0, 0], [math.inf, 0, 0, 0], ["a", "b", "c", "d"],
])
def test_latent_rejects_bad_codes(codes):
    mech = LatentCodeLaplace(epsilon=1.0, latent_dim=4)
    with pytest.raises(ValueError, match="codes"):
        mech.sample(codes, 2, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="codes"):
        mech.release(codes, rng=np.random.default_rng(0))


def test_latent_paper_parameters_and_event():
    mech = LatentCodeLaplace(epsilon=0.01, latent_dim=32)  # DGD: c = 32, eps1 = 0.01
    # 2c / eps1, and at most 1/512 more for the float-safe grid (issue 32)
    assert 6400.0 <= mech.scale <= 6400.0 * (1 + 1 / 512 + 1e-6)
    assert mech.sensitivity.value == 64 and mech.sensitivity.norm is Norm.L1
    assert isinstance(mech.event, _dp.DiscreteLaplaceDpEvent)
    # one row of c = 32 coordinates: grid sensitivity floor(64 / g) + 32, g = 2^-8
    assert mech.grid.granularity == 2.0 ** -8 and mech.event.sensitivity == 64 * 256 + 32
    assert event_guarantee(mech.event) == pytest.approx((0.01, 0.0), rel=1e-6)
    assert mech.event.noise_parameter * mech.event.sensitivity <= 0.01
    wide = LatentCodeLaplace(epsilon=0.5, latent_dim=8, clip=3.0)
    assert wide.sensitivity.value == pytest.approx(48.0)
    assert 96.0 <= wide.scale <= 96.0 * (1 + 1 / 512 + 1e-6)
    doc = " ".join(LatentCodeLaplace.__doc__.split())
    assert "ONE synthetic image" in doc and "no record-level guarantee" in doc


def test_latent_noise_is_laplace_ks():
    mech = LatentCodeLaplace(epsilon=2.0, latent_dim=4, clip=0.5)  # scale 2
    code = np.array([0.3, -0.2, 0.0, 0.5])
    out = mech.sample(code, 5_000, rng=np.random.default_rng(21))
    assert out.shape == (5_000, 4)
    noise = (out - code).ravel()
    # False-failure rate: ALPHA = 1e-4 (KS test against Laplace(0, 2), fixed seed).
    assert stats.kstest(noise, "laplace", args=(0.0, 2.0)).pvalue > ALPHA


def test_latent_clipping_then_noise_ks():
    mech = LatentCodeLaplace(epsilon=1.0, latent_dim=3, clip=1.0)  # scale 6
    codes = np.array([[5.0, -7.0, 0.25], [1.0, -1.0, 1e9]])  # one synthetic sample per row
    np.testing.assert_array_equal(mech.normalise(codes), [[1.0, -1.0, 0.25], [1.0, -1.0, 1.0]])
    out = mech.sample(codes, 4_000, rng=np.random.default_rng(22))
    assert out.shape == (4_000, 2, 3)
    noise = (out - mech.normalise(codes)).ravel()
    # False-failure rate: ALPHA = 1e-4 (KS against Laplace(0, 6) after clipping, fixed seed).
    # Without clipping the residuals would be shifted by up to 1e9: the test fails.
    assert stats.kstest(noise, "laplace", args=(0.0, 6.0)).pvalue > ALPHA
    single = mech.release(codes, rng=np.random.default_rng(23))
    assert single.shape == (2, 3)


def test_latent_codes_are_float_safe():
    """Issue 32: every output is on a power-of-two grid; the float-bits audit finds nothing."""
    from dpkd_audit.audit import Attack, audit_mechanism

    mech = LatentCodeLaplace(epsilon=1.0, latent_dim=2)
    out = mech.sample(np.array([0.3, -0.7]), 2_000, rng=np.random.default_rng(2))
    assert np.all(np.mod(out, mech.grid.granularity) == 0)
    result = audit_mechanism(mech, n=50_000, rng=np.random.default_rng(3),
                             attack=Attack.FLOAT_BITS)
    assert not result.violation


def test_latent_neighbours_span_the_sensitivity():
    mech = LatentCodeLaplace(epsilon=0.5, latent_dim=6, clip=2.0)
    lo, hi = mech.neighbours()
    np.testing.assert_array_equal(lo, -2.0 * np.ones(6))
    np.testing.assert_array_equal(hi, 2.0 * np.ones(6))
    assert np.abs(hi - lo).sum() == pytest.approx(mech.sensitivity.value)
    # Exact privacy loss of the Laplace densities at any output: sum_i (|y-lo|-|y-hi|)/b <= eps.
    y = np.random.default_rng(1).uniform(-50, 50, size=(1000, 6))
    loss = (np.abs(y - lo) - np.abs(y - hi)).sum(axis=1) / mech.scale
    assert loss.max() <= 0.5 + 1e-12
    y_far = np.full(6, 10.0)
    assert (np.abs(y_far - lo) - np.abs(y_far - hi)).sum() / mech.scale == pytest.approx(
        0.5, rel=1 / 256)  # the float-safe grid's noise is at most 1/512 larger


def test_srr_batch_charges_the_ledger_before_drawing_and_never_on_bad_input():
    from dp_accounting import dp_event as _dp

    from dpkd_audit.errors import BudgetExceededError
    from dpkd_audit.ledger import Ledger

    mech = SelectiveRandomizedResponse(epsilon=1.0, num_classes=4)
    labels, probs = np.array([0, 1, 2]), np.tile(GOOD_PROBS, (3, 1))
    ledger = Ledger(epsilon=5.0)
    rng = np.random.default_rng(3)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="teacher_labels"):   # invalid: nothing charged
        mech.randomize_batch(labels[:2], probs, rng=rng, ledger=ledger)
    assert ledger.charges() == []
    out = mech.randomize_batch(labels, probs, rng=rng, ledger=ledger, label="stage 1")
    (charge,) = ledger.charges()
    assert charge.label == "stage 1"
    assert charge.event == _dp.SelfComposedDpEvent(mech.event, 3)
    assert np.array_equal(out, mech.randomize_batch(labels, probs,
                                                    rng=_restored(state)))
    state = rng.bit_generator.state
    with pytest.raises(BudgetExceededError):                  # 3 + 3 > 5: refused, no draw
        mech.randomize_batch(labels, probs, rng=rng, ledger=ledger)
    assert len(ledger.charges()) == 1 and rng.bit_generator.state == state


def _restored(state):
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return rng
