"""DP-SGD under the samplers people run: each bound against an independent reference.

References: mpmath's exact Gaussian curve, closed forms (t = 1 and order 2 of random
allocation), exact enumeration of the random-allocation moments in rational-exponent mpmath,
Monte Carlo of the true mixture pairs (fixed seeds; the margins are 6 standard errors, so a
correct bound fails a check with probability below 1e-8), and dp_accounting's PLD.
"""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from dpkd_audit._math.privacy import analytic_gaussian_delta_exact
from dpkd_audit.accountants.dp_sgd import DpSgdAccountant, DpSgdSchedule, dp_sgd_epsilon
from dpkd_audit.accountants.dp_sgd_sampling import (
    RANDOM_ALLOCATION_MAX_ORDER,
    BatchRelation,
    DpSgdSampling,
    gaussian_composition_epsilon,
    random_allocation_epsilon,
    random_allocation_rdp,
    sampling_epsilon,
    shuffle_lower_bound,
)

# --------------------------------------------------------------------------- no amplification


@pytest.mark.parametrize("sigma,epochs,delta,sens", [
    (1.0, 10, 1e-5, 1.0), (0.6, 10, 1e-5, 1.0), (2.0, 3, 1e-14, 2.0), (5.0, 100, 1e-8, 1.0)])
def test_gaussian_composition_is_the_exact_curve(sigma, epochs, delta, sens):
    eps = gaussian_composition_epsilon(sigma, epochs, delta, sensitivity=sens)
    delta_at = float(analytic_gaussian_delta_exact(eps, sigma, sens * math.sqrt(epochs)))
    assert delta_at <= delta * (1 + 1e-9)
    below = float(analytic_gaussian_delta_exact(eps * (1 - 1e-6), sigma,
                                                sens * math.sqrt(epochs)))
    assert below > delta


def test_gaussian_composition_matches_dp_accounting_pld():
    sigma, epochs, delta = 1.0, 10, 1e-5
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dp_event.GaussianDpEvent(sigma), epochs)
    theirs = acc.get_epsilon(delta)
    ours = gaussian_composition_epsilon(sigma, epochs, delta)
    assert ours <= theirs <= ours * 1.01  # their PLD is pessimistic by its discretisation


# --------------------------------------------------------------------------- random allocation

def _exact_log_moment(sigma: float, t: int, alpha: int) -> mpmath.mpf:
    """log E[S^alpha] by enumerating every composition (alpha_1..alpha_t) of alpha."""
    mpmath.mp.dps = 40
    total = mpmath.mpf(0)
    for parts in itertools.product(range(alpha + 1), repeat=t):
        if sum(parts) != alpha:
            continue
        coef = mpmath.factorial(alpha)
        expo = mpmath.mpf(0)
        for a in parts:
            coef /= mpmath.factorial(a)
            expo += mpmath.mpf(a * (a - 1)) / (2 * mpmath.mpf(sigma) ** 2)
        total += coef * mpmath.e ** expo
    return mpmath.log(total)


@pytest.mark.parametrize("sigma,t", [(1.0, 3), (0.7, 4), (2.5, 2)])
def test_random_allocation_remove_moments_by_enumeration(sigma, t):
    orders = np.arange(2, 8)
    remove, _ = random_allocation_rdp(sigma, t, 1, orders)
    for alpha, value in zip(orders, remove, strict=True):
        exact = (_exact_log_moment(sigma, t, int(alpha)) - alpha * mpmath.log(t)) / (alpha - 1)
        assert value == pytest.approx(float(exact), rel=1e-10, abs=1e-13)


def test_random_allocation_with_one_step_is_the_gaussian_mechanism():
    sigma, epochs = 0.8, 7
    orders = np.arange(2, 60)
    remove, _ = random_allocation_rdp(sigma, 1, epochs, orders)
    np.testing.assert_allclose(remove, epochs * orders / (2 * sigma**2), rtol=1e-11)


@pytest.mark.parametrize("sigma,t", [(1.0, 938), (0.6, 235), (3.0, 100_000)])
def test_random_allocation_order_two_closed_form(sigma, t):
    # E[S^2] = t e^{1/sigma^2} + t (t - 1): D_2 = log(1 + (e^{1/sigma^2} - 1) / t)
    remove, _ = random_allocation_rdp(sigma, t, 1, np.array([2]))
    assert remove[0] == pytest.approx(math.log1p(math.expm1(1 / sigma**2) / t), rel=1e-9)


def test_random_allocation_add_bound_is_above_monte_carlo():
    # the add direction's Jensen bound must exceed the true D_alpha(Q || P) (seed fixed)
    sigma, t, alpha = 1.0, 4, 3
    rng = np.random.default_rng(12)
    y = rng.normal(0.0, sigma, size=(400_000, t))
    ratio = t / np.exp((y - 0.5) / sigma**2).sum(axis=1)  # Q/P under Q
    values = ratio ** (alpha - 1)
    mean, se = values.mean(), values.std() / math.sqrt(values.size)
    truth_hi = math.log(mean + 6 * se) / (alpha - 1)
    truth_lo = math.log(mean - 6 * se) / (alpha - 1)
    _, add = random_allocation_rdp(sigma, t, 1, np.array([alpha]))
    assert add[0] >= truth_lo
    assert add[0] == pytest.approx((alpha + t - 1) / (2 * t * sigma**2))
    assert truth_hi > 0  # the estimate is a real divergence, not a degenerate zero


def test_random_allocation_never_above_the_no_amplification_bound():
    for sigma, t, epochs in [(1.0, 938, 10), (0.6, 235, 10), (5.0, 4, 1), (0.3, 10, 3)]:
        eps, _ = random_allocation_epsilon(sigma, t, epochs, 1e-5)
        assert eps <= gaussian_composition_epsilon(sigma, epochs, 1e-5) + 1e-12


def test_random_allocation_refuses_bad_orders():
    with pytest.raises(ValueError, match="orders"):
        random_allocation_rdp(1.0, 4, 1, np.array([1]))
    with pytest.raises(ValueError, match="orders"):
        random_allocation_rdp(1.0, 4, 1, np.array([RANDOM_ALLOCATION_MAX_ORDER + 1]))
    with pytest.raises(ValueError, match="steps_per_epoch"):
        random_allocation_rdp(1.0, 0, 1, np.array([2]))


# --------------------------------------------------------------------------- shuffle lower bound

def test_shuffle_lower_bound_with_one_batch_is_the_gaussian_mechanism():
    # t = 1: the max statistic is the batch sum itself: N(2) vs N(1) is exactly sensitivity 1
    for sigma, epochs in [(1.0, 1), (1.0, 10), (0.5, 4)]:
        upper = gaussian_composition_epsilon(sigma, epochs, 1e-5)
        lower = shuffle_lower_bound(sigma, 1, epochs, 1e-5)
        assert upper - 0.02 <= lower <= upper


@pytest.mark.parametrize("sigma,t,epochs", [(1.0, 938, 10), (0.6, 235, 10), (0.8, 6, 10),
                                            (1.0, 4, 1), (2.0, 50, 3)])
def test_shuffle_lower_bound_below_upper_bound(sigma, t, epochs):
    for relation in (BatchRelation.ZERO_OUT, BatchRelation.REPLACE_ONE):
        lower = shuffle_lower_bound(sigma, t, epochs, 1e-5, relation=relation)
        upper = gaussian_composition_epsilon(sigma, epochs, 1e-5,
                                             sensitivity=relation.sensitivity)
        assert 0.0 <= lower <= upper


def _mixture_log_ratio(y: np.ndarray, sigma: float, s_p: float, s_q: float) -> np.ndarray:
    """log P/Q of y under P = mean_tau N(s_p e_tau), Q = mean_tau N(s_q e_tau) (exact)."""
    def log_mix(shift: float) -> np.ndarray:
        return np.logaddexp.reduce((shift * y - shift**2 / 2) / sigma**2, axis=1)
    return log_mix(s_p) - log_mix(s_q)


def test_shuffle_lower_bound_is_below_the_true_pair_by_monte_carlo():
    # one epoch, t = 4: delta of the true mixture pair at the lower bound's epsilon must be
    # >= the target (else the lower bound would claim a violation that is not there)
    sigma, t, delta = 1.0, 4, 1e-3
    lower = shuffle_lower_bound(sigma, t, 1, delta)
    rng = np.random.default_rng(7)
    n = 400_000
    tau = rng.integers(t, size=n)
    y = rng.normal(0.0, sigma, size=(n, t))
    y[np.arange(n), tau] += 2.0  # P: the record's batch at +2, the empty slot at +1 under Q
    loss = _mixture_log_ratio(y, sigma, 2.0, 1.0)
    terms = -np.expm1(np.minimum(lower - loss, 0.0))
    mean, se = terms.mean(), terms.std() / math.sqrt(n)
    assert lower > 0
    assert mean + 6 * se >= delta


def test_shuffle_lower_bound_falls_with_more_noise_and_more_batches():
    a = shuffle_lower_bound(0.8, 6, 10, 1e-5)
    b = shuffle_lower_bound(1.6, 6, 10, 1e-5)
    c = shuffle_lower_bound(0.8, 600, 10, 1e-5)
    assert a > b and a > c


def test_shuffle_lower_bound_refuses_add_remove():
    with pytest.raises(ValueError, match="relation"):
        shuffle_lower_bound(1.0, 4, 1, 1e-5, relation=BatchRelation.ADD_OR_REMOVE_ONE)


# --------------------------------------------------------------------------- dispatch

def test_poisson_is_the_pld_accounting():
    schedule = DpSgdSchedule(dataset_size=60_000, batch_size=256)
    bound = sampling_epsilon(schedule, sampling=DpSgdSampling.POISSON, noise_multiplier=1.0,
                             epochs=3, delta=1e-5)
    expected = dp_sgd_epsilon(schedule, noise_multiplier=1.0, epochs=3, delta=1e-5,
                              accountant=DpSgdAccountant.PLD)
    assert bound.epsilon == pytest.approx(float(expected)) == bound.epsilon_poisson  # PLD wins
    assert bound.tight and bound.epsilon_lower is None


def test_shuffle_reports_loose_bound_with_lower_bound_and_poisson_below():
    schedule = DpSgdSchedule(dataset_size=60_000, batch_size=64)
    bound = sampling_epsilon(schedule, sampling=DpSgdSampling.SHUFFLE, noise_multiplier=1.0,
                             epochs=10, delta=1e-5)
    assert not bound.tight and "loose" in bound.note
    assert bound.epsilon_poisson < bound.epsilon_lower < bound.epsilon
    assert bound.relation is BatchRelation.ZERO_OUT
    record = bound.to_dict()
    assert record["sampling"] == "shuffle" and record["relation"] == "zero-out"


def test_sequential_is_exact_and_replace_one_doubles_the_sensitivity():
    schedule = DpSgdSchedule(dataset_size=1_000, batch_size=100)
    zero = sampling_epsilon(schedule, sampling=DpSgdSampling.SEQUENTIAL, noise_multiplier=2.0,
                            epochs=5, delta=1e-6)
    repl = sampling_epsilon(schedule, sampling=DpSgdSampling.SEQUENTIAL, noise_multiplier=2.0,
                            epochs=5, delta=1e-6, relation=BatchRelation.REPLACE_ONE)
    assert zero.tight
    assert repl.epsilon == pytest.approx(gaussian_composition_epsilon(1.0, 5, 1e-6))
    assert repl.epsilon > zero.epsilon


def test_balls_in_bins_is_add_remove_and_loose():
    schedule = DpSgdSchedule(dataset_size=1_000, batch_size=250)
    bound = sampling_epsilon(schedule, sampling=DpSgdSampling.BALLS_IN_BINS,
                             noise_multiplier=1.0, epochs=1, delta=1e-5)
    assert bound.relation is BatchRelation.ADD_OR_REMOVE_ONE and not bound.tight
    with pytest.raises(ValueError, match="relation"):
        sampling_epsilon(schedule, sampling=DpSgdSampling.BALLS_IN_BINS, noise_multiplier=1.0,
                         epochs=1, delta=1e-5, relation=BatchRelation.ZERO_OUT)


@pytest.mark.parametrize("kwargs,match", [
    ({"sampling": "shuffle"}, "sampling must be a DpSgdSampling"),
    ({"noise_multiplier": 0.0}, "noise_multiplier"),
    ({"epochs": 0}, "epochs"),
    ({"delta": 0.0}, "delta"),
])
def test_bad_input_is_named(kwargs, match):
    args = {"sampling": DpSgdSampling.SHUFFLE, "noise_multiplier": 1.0, "epochs": 1,
            "delta": 1e-5, **kwargs}
    with pytest.raises(ValueError, match=match):
        sampling_epsilon(DpSgdSchedule(dataset_size=100, batch_size=10), **args)


def test_parse_names_the_allowed_samplers():
    assert DpSgdSampling.parse("balls-in-bins") is DpSgdSampling.BALLS_IN_BINS
    with pytest.raises(ValueError, match="poisson, shuffle, sequential, balls-in-bins"):
        DpSgdSampling.parse("random")


def test_tiny_delta_stays_finite_and_ordered():
    schedule = DpSgdSchedule(dataset_size=10_000, batch_size=100)
    for sampling in DpSgdSampling:
        bound = sampling_epsilon(schedule, sampling=sampling, noise_multiplier=1.5, epochs=2,
                                 delta=1e-14)
        assert math.isfinite(bound.epsilon) and bound.epsilon > 0
        if bound.epsilon_lower is not None:
            assert bound.epsilon_lower <= bound.epsilon


# --------------------------------------------------------------------------- budget and CLI

def test_budget_plan_with_a_sampler_gives_its_rows():
    from dpkd_audit.accountants.budget import Plan, PlanKind, budget_table, solve

    plan = Plan(kind=PlanKind.DP_SGD, noise=1.0, dataset_size=60_000, batch_size=64, epochs=10,
                sampling=DpSgdSampling.SHUFFLE)
    rows = budget_table(plan, delta=1e-5)
    assert [r.kind for r in rows] == ["upper bound (loose)", "lower bound", "not a bound here"]
    assert rows[2].epsilon < rows[1].epsilon < rows[0].epsilon
    with pytest.raises(ValueError, match="no accountant event"):
        plan.event()
    solved = solve(Plan(kind=PlanKind.DP_SGD, dataset_size=60_000, batch_size=64, epochs=10,
                        sampling=DpSgdSampling.SEQUENTIAL), target_epsilon=8.0, delta=1e-5)
    (row,) = solved
    assert row.epsilon <= 8.0 and row.solved == pytest.approx(1.898, abs=1e-3)
    assert gaussian_composition_epsilon(row.solved * (1 - 1e-4), 10, 1e-5) > 8.0
    epochs = solve(Plan(kind=PlanKind.DP_SGD, noise=2.0, dataset_size=1_000, batch_size=100,
                        sampling=DpSgdSampling.BALLS_IN_BINS), target_epsilon=3.0, delta=1e-5)
    (row,) = epochs
    e = int(row.solved)
    assert random_allocation_epsilon(2.0, 10, e, 1e-5)[0] <= 3.0
    assert random_allocation_epsilon(2.0, 10, e + 1, 1e-5)[0] > 3.0


def test_budget_refuses_samplers_where_they_do_not_apply():
    from dpkd_audit.accountants.budget import Plan, PlanKind, mixed_budget_table

    with pytest.raises(ValueError, match="apply only to a dp-sgd plan"):
        Plan(kind=PlanKind.GAUSSIAN, noise=1.0, queries=3, sampling=DpSgdSampling.SHUFFLE)
    shuffled = Plan(kind=PlanKind.DP_SGD, noise=1.0, dataset_size=100, batch_size=10,
                    epochs=1, sampling=DpSgdSampling.SHUFFLE)
    with pytest.raises(ValueError, match="no accountant event to compose"):
        mixed_budget_table([shuffled], delta=1e-5)


def test_cli_budget_sampling(capsys):
    import json

    from dpkd_audit.cli.main import main

    assert main(["budget", "dp-sgd", "--dataset-size", "60000", "--batch-size", "64",
                 "--epochs", "10", "--noise", "1", "--sampling", "shuffle", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["sampling"] == "shuffle"
    kinds = [r["kind"] for r in out["rows"]]
    assert kinds == ["upper bound (loose)", "lower bound", "not a bound here"]
    assert main(["budget", "laplace", "--noise", "1", "--queries", "2",
                 "--sampling", "shuffle"]) == 2
    assert "--sampling applies only to the dp-sgd plan" in capsys.readouterr().err
    assert main(["budget", "dp-sgd", "--dataset-size", "100", "--batch-size", "10",
                 "--epochs", "1", "--noise", "1", "--sampling", "poisson",
                 "--relation", "zero-out"]) == 2
    assert "relation" in capsys.readouterr().err


def test_one_draw_with_replacement_is_poisson_subsampling():
    # B = 1 weighted draw a step: the worst record joins with probability p, exactly Poisson
    # subsampling at q = p; the mixture PLD must agree with the Poisson accounting
    from dpkd_audit.accountants.dp_sgd import poisson_epsilon
    from dpkd_audit.accountants.dp_sgd_sampling import with_replacement_epsilon

    ours = with_replacement_epsilon(1.0, 1, 0.01, 1000, 1e-5)
    poisson = float(poisson_epsilon(0.01, 1.0, 1000, 1e-5))
    assert ours == pytest.approx(poisson, rel=0.02)
    # more draws a step can only leak more, and a larger share more still
    assert with_replacement_epsilon(1.0, 4, 0.01, 1000, 1e-5) > ours
    assert with_replacement_epsilon(1.0, 1, 0.05, 1000, 1e-5) > ours
