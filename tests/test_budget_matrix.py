"""Every plan x every inverse x extreme parameters: a row or an error naming the parameter.

The matrix covers each plan kind with noise at the floating-point extremes and in between, one
and many queries, delta 0, 1e-14 and 0.5 (1e-5 is everywhere else in the suite), and targets
from 1e-6 to 1e3. Each call must finish
quickly and either return rows (an epsilon that is a number >= 0 or infinity, or "n/a" with a
reason) or raise a ``ValueError`` whose message starts with the name of the plan's parameter at
fault. The CLI maps those names to its flags (tested at the end).
"""

from __future__ import annotations

import itertools
import math
import time

import pytest

from dpkd_audit.accountants.budget import MAX_LOCAL_EPSILON, Plan, PlanKind, budget_table, solve
from dpkd_audit.cli.main import main

NOISES = (1e-300, 0.5, 1e300)
COUNTS = (1, 1000)
DELTAS = (0.0, 1e-14, 0.5)
#: Solving bisects where epsilon jumps to 0 at delta = 0.5 (slow with PLD): covered once below.
SOLVE_DELTAS = (0.0, 1e-14)
TARGETS = (1e-6, 1e3)
PARAMETERS = {"noise", "queries", "epochs", "delta", "target_epsilon", "num_users",
              "sampling_probability", "dataset_size", "batch_size"}
#: Seconds one call may take on a loaded 2-core machine (the slowest, ~25 s, is solving a
#: subsampled Gaussian's noise with PLD where epsilon drops to 0 at delta = 0.5: Brent's method
#: meets a jump and bisects, ~1 s per evaluation).
LIMIT = 60.0


def make_plan(kind, noise=None, count=None):
    extra = {}
    if kind is PlanKind.SUBSAMPLED_GAUSSIAN:
        extra["sampling_probability"] = 0.01
    if kind is PlanKind.SHUFFLE:
        extra["num_users"] = 10_000
    if kind is PlanKind.DP_SGD:
        return Plan(kind=kind, noise=noise, epochs=count, dataset_size=6000, batch_size=64)
    return Plan(kind=kind, noise=noise, queries=count, **extra)


def check_rows(rows):
    assert rows
    for row in rows:
        if row.epsilon is None:
            assert row.note, row
        else:
            assert not math.isnan(row.epsilon) and row.epsilon >= 0, row
            assert row.method and row.kind, row
        if row.solved is not None:
            assert not math.isnan(row.solved) and row.solved >= 0, row


def outcome(call):
    start = time.perf_counter()
    try:
        check_rows(call())
    except ValueError as exc:
        name = str(exc).split(" ", 1)[0]
        assert name in PARAMETERS, f"error does not name a parameter: {exc}"
    assert time.perf_counter() - start < LIMIT


def plan_or_error(kind, noise, count):
    try:
        return make_plan(kind, noise, count)
    except ValueError as exc:  # e.g. a randomized-response epsilon beyond e^700
        assert kind is PlanKind.RANDOMIZED_RESPONSE and noise > MAX_LOCAL_EPSILON
        assert str(exc).startswith("noise")
        return None


@pytest.mark.parametrize("kind", list(PlanKind), ids=lambda k: k.value)
def test_table_matrix(kind):
    for noise, count, delta in itertools.product(NOISES, COUNTS, DELTAS):
        plan = plan_or_error(kind, noise, count)
        if plan is not None:
            outcome(lambda plan=plan, delta=delta: budget_table(plan, delta=delta))


@pytest.mark.parametrize("kind", [
    pytest.param(k, marks=pytest.mark.slow) if k is PlanKind.SUBSAMPLED_GAUSSIAN else k
    for k in PlanKind], ids=lambda k: k.value)
def test_solve_noise_matrix(kind):
    for count, delta, target in itertools.product(COUNTS, SOLVE_DELTAS, TARGETS):
        plan = make_plan(kind, None, count)
        outcome(lambda plan=plan, delta=delta, target=target:
                solve(plan, target_epsilon=target, delta=delta))


@pytest.mark.parametrize("kind", list(PlanKind), ids=lambda k: k.value)
def test_solve_count_matrix(kind):
    for noise, delta, target in itertools.product(NOISES, SOLVE_DELTAS, TARGETS):
        plan = plan_or_error(kind, noise, None)
        if plan is not None:
            outcome(lambda plan=plan, delta=delta, target=target:
                    solve(plan, target_epsilon=target, delta=delta, max_queries=10**5))


def test_issue_cases():
    # dpkd budget gaussian --queries 100 --target-epsilon 1: used to crash in the noise search
    rows = solve(make_plan(PlanKind.GAUSSIAN, None, 100), target_epsilon=1.0, delta=1e-5)
    assert all(r.epsilon is not None and r.epsilon <= 1.0 for r in rows)
    # dpkd budget laplace --noise 1e-300 --queries 10: used to overflow in the optimal
    # accountant; every accountant now answers (PLD refuses the grid, with a reason)
    rows = {r.accountant: r for r in budget_table(make_plan(PlanKind.LAPLACE, 1e-300, 10),
                                                  delta=1e-5)}
    assert rows["OptimalCompositionAccountant"].epsilon == pytest.approx(1e301)
    # dpkd budget shuffle --noise 1 --users 10000 --queries 3: reported infinity (delta / 2 per
    # release); delta is now split evenly over the releases
    rows = {r.accountant: r for r in budget_table(make_plan(PlanKind.SHUFFLE, 1.0, 3),
                                                  delta=1e-5)}
    shuffle = rows["ShuffleAccountant"].epsilon
    assert math.isfinite(shuffle) and shuffle < 0.2
    from dpkd_audit.accountants.shuffle import numerical_epsilon

    assert shuffle == pytest.approx(3 * numerical_epsilon(1.0, 10_000, 1e-5 / 3), rel=1e-12)


def test_solving_where_epsilon_drops_to_zero():
    # At delta = 0.5 a small target is met with epsilon exactly 0 once the noise is large
    # enough: the noise search meets a jump and must still return a noise that meets it.
    rows = solve(make_plan(PlanKind.SUBSAMPLED_GAUSSIAN, None, 10), target_epsilon=1e-6,
                 delta=0.5)
    check_rows(rows)
    assert all(r.epsilon <= 1e-6 for r in rows if r.epsilon is not None)


def test_gaussian_plans_refuse_delta_zero_by_name():
    for kind in (PlanKind.GAUSSIAN, PlanKind.SUBSAMPLED_GAUSSIAN, PlanKind.DP_SGD):
        with pytest.raises(ValueError, match=r"^delta must be in \(0, 1\)"):
            budget_table(make_plan(kind, 1.0, 10), delta=0.0)


@pytest.mark.parametrize(("argv", "flag"), [
    (["gaussian", "--noise", "3", "--queries", "5", "--delta", "0"], "--delta"),
    (["randomized-response", "--noise", "1e300", "--queries", "5"], "--noise"),
    (["shuffle", "--noise", "1", "--queries", "5"], "--users"),
    (["subsampled-gaussian", "--noise", "1", "--queries", "5"], "--sampling-probability"),
    (["laplace", "--noise", "1"], "--queries"),
    (["laplace", "--noise", "1", "--queries", "3", "--delta", "1.5"], "--delta"),
])
def test_cli_errors_name_the_flag(capsys, argv, flag):
    assert main(["budget", *argv]) == 2
    err = capsys.readouterr().err
    assert flag in err and "Traceback" not in err


def test_cli_extreme_noise_gives_rows(capsys):
    assert main(["budget", "laplace", "--noise", "1e-300", "--queries", "10"]) == 0
    out = capsys.readouterr().out
    assert "OptimalCompositionAccountant" in out and "1e+301" in out


def test_astronomical_counts_and_targets_are_bounded():
    # 10^20 queries: the exact accountants refuse by name, the others answer, quickly
    start = time.perf_counter()
    rows = {r.accountant: r for r in budget_table(make_plan(PlanKind.LAPLACE, 1.0, 10**20),
                                                  delta=1e-5)}
    assert rows["PureAccountant"].epsilon == pytest.approx(1e20)
    assert rows["RDPAccountant"].epsilon < 1e20
    assert "1e+12" in rows["OptimalCompositionAccountant"].note
    assert "PLD grid" in rows["PLDAccountant"].note
    # a target of 1e300 stops at the query search's limit, and says so
    rows = solve(make_plan(PlanKind.LAPLACE, 1.0, None), target_epsilon=1e300, delta=1e-5,
                 max_queries=1000)
    assert all(r.solved == 1000 and "stops at" in r.note for r in rows)
    assert time.perf_counter() - start < LIMIT
