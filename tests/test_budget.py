"""Budget planning and ``dpkd budget``."""

from __future__ import annotations

import json

import pytest

from dpkd_audit.accountants.budget import Plan, PlanKind, budget_table, solve
from dpkd_audit.cli.main import main


def rows_by_name(rows):
    return {r.accountant: r for r in rows}


def test_dgd_plan_table_orders_accountants():
    rows = rows_by_name(budget_table(Plan(kind=PlanKind.LAPLACE_NOISY_MAX, noise=40.0,
                                          queries=1300), delta=1e-5))
    pure = rows["PureAccountant"].epsilon
    advanced = rows["AdvancedCompositionAccountant"].epsilon
    optimal = rows["OptimalCompositionAccountant"].epsilon
    assert pure == pytest.approx(65.0)
    assert pure >= advanced >= optimal
    for row in rows.values():
        if row.epsilon is not None:
            assert row.method and row.kind


def test_solving_for_queries_never_exceeds_the_target():
    for row in solve(Plan(kind=PlanKind.LAPLACE_NOISY_MAX, noise=40.0), target_epsilon=10.0,
                     delta=1e-5):
        if row.solved is not None and row.solved > 0:
            assert row.epsilon <= 10.0
            # one more query would not fit
            more = budget_table(Plan(kind=PlanKind.LAPLACE_NOISY_MAX, noise=40.0,
                                     queries=int(row.solved) + 1), delta=1e-5)
            assert rows_by_name(more)[row.accountant].epsilon > 10.0


def test_solving_for_noise_meets_the_target():
    for row in solve(Plan(kind=PlanKind.LAPLACE, queries=100), target_epsilon=2.0, delta=1e-6):
        if row.solved is not None:
            table = budget_table(Plan(kind=PlanKind.LAPLACE, noise=row.solved, queries=100),
                                 delta=1e-6)
            assert rows_by_name(table)[row.accountant].epsilon <= 2.0


def test_local_epsilon_plans_solve_for_the_largest_epsilon():
    rows = rows_by_name(solve(Plan(kind=PlanKind.RANDOMIZED_RESPONSE, queries=100),
                              target_epsilon=10.0, delta=1e-5))
    assert rows["PureAccountant"].solved == pytest.approx(0.1, rel=1e-5)
    assert rows["PureAccountant"].solved <= 0.1
    assert rows["OptimalCompositionAccountant"].solved > rows["PureAccountant"].solved


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"kind": PlanKind.SUBSAMPLED_GAUSSIAN, "noise": 1.0, "queries": 10}, "sampling_probability"),
    ({"kind": PlanKind.SHUFFLE, "noise": 1.0, "queries": 1}, "num_users"),
    ({"kind": "laplace", "noise": 1.0}, "kind"),
    ({"kind": PlanKind.LAPLACE, "noise": -1.0}, "noise"),
    ({"kind": PlanKind.LAPLACE, "queries": 0}, "queries"),
])
def test_bad_plans(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Plan(**kwargs)


def test_cli_table_and_json(capsys):
    assert main(["budget", "laplace-noisy-max", "--noise", "40", "--queries", "1300",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = [r["accountant"] for r in out["rows"]]
    assert "PureAccountant" in names and "OptimalCompositionAccountant" in names
    assert main(["budget", "laplace-noisy-max", "--noise", "40", "--target-epsilon", "10"]) == 0
    assert "solved queries" in capsys.readouterr().out


def test_cli_impossible_or_incomplete_plans(capsys):
    assert main(["budget", "laplace", "--noise", "1"]) == 2
    assert "--queries" in capsys.readouterr().err
    assert main(["budget", "shuffle", "--noise", "1", "--queries", "1"]) == 2
    assert "--users is required" in capsys.readouterr().err


def test_a_budget_never_prints_zero_or_a_traceback_at_extreme_parameters(capsys):
    """Issue 65, items 5 and 6: 10^30 classes (the event's parameter rounded to 1 and every
    accountant printed 0 for ten releases at epsilon 1) and a subnormal Laplace scale
    (ZeroDivisionError) are refused by name; the largest exact class count is still priced."""
    from dpkd_audit.cli.main import main

    assert main(["budget", "randomized-response", "--epsilon", "1", "--queries", "10",
                 "--classes", str(10**30)]) == 2
    assert "num_classes" in capsys.readouterr().err
    assert main(["budget", "laplace", "--noise", "1e-320", "--queries", "5"]) == 2
    assert "--noise must be at least" in capsys.readouterr().err
    from dpkd_audit._math.randomized_response import _rr_event_guarantee, rr_noise_parameter

    for k in (2, 10, 10**6, 10**9):
        p = rr_noise_parameter(1.0, k)
        assert 1.0 <= _rr_event_guarantee(p, k) <= 1.0 + 1e-6


def test_the_tightest_valid_answer_is_named():
    from dpkd_audit.accountants.budget import tightest

    evaluation = budget_table(Plan(kind=PlanKind.LAPLACE_NOISY_MAX, noise=40.0, queries=1300),
                              delta=1e-5)
    best = tightest(evaluation)
    finite = [r.epsilon for r in evaluation if r.epsilon is not None]
    assert best is not None and best.epsilon == min(finite)
    noise = Plan(kind=PlanKind.GAUSSIAN, noise=None, queries=100)
    rows = solve(noise, target_epsilon=1.0, delta=1e-5)
    assert tightest(rows, noise).solved == min(r.solved for r in rows if r.solved is not None)
    count = Plan(kind=PlanKind.LAPLACE, noise=2.0, queries=None)
    rows = solve(count, target_epsilon=5.0, delta=1e-5)
    assert tightest(rows, count).solved == max(r.solved for r in rows if r.solved is not None)
    assert tightest([]) is None
