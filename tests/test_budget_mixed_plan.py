"""Several releases on one set of records, composed: ``mixed_budget_table``, ``--plan FILE``."""

from __future__ import annotations

import json

import pytest
from dp_accounting import dp_event as _dp

from dpkd_audit.accountants import PLDAccountant, RDPAccountant
from dpkd_audit.accountants.budget import Plan, PlanKind, budget_table, mixed_budget_table
from dpkd_audit.cli.main import main

LAPLACE = Plan(kind=PlanKind.LAPLACE, noise=40.0, queries=100)
GAUSSIAN = Plan(kind=PlanKind.GAUSSIAN, noise=5.0, queries=10)


@pytest.mark.parametrize("plan", [LAPLACE, GAUSSIAN,
                                  Plan(kind=PlanKind.RANDOMIZED_RESPONSE, noise=1.0, queries=7)])
def test_one_plan_is_the_single_plan_table(plan):
    mixed = mixed_budget_table([plan], delta=1e-5)
    single = budget_table(plan, delta=1e-5)
    assert [(r.accountant, r.epsilon) for r in mixed] == [(r.accountant, r.epsilon)
                                                         for r in single]


def test_rdp_and_pld_rows_compose_every_release_in_one_accountant():
    rows = {r.accountant: r.epsilon for r in mixed_budget_table([LAPLACE, GAUSSIAN],
                                                                delta=1e-5)}
    for name, make in (("RDPAccountant", RDPAccountant), ("PLDAccountant", PLDAccountant)):
        acc = make().compose(_dp.LaplaceDpEvent(40.0), count=100)
        acc.compose(_dp.GaussianDpEvent(5.0), count=10)
        assert rows[name] == pytest.approx(float(acc.get_epsilon(1e-5)), rel=1e-12)
    # more than either plan alone, and basic composition above the curve accountants
    alone = max(r.epsilon for r in budget_table(LAPLACE, delta=1e-5)
                if r.accountant == "RDPAccountant")
    assert rows["RDPAccountant"] > alone
    assert rows["PureAccountant"] >= rows["RDPAccountant"]


def test_refusals_name_the_problem():
    with pytest.raises(ValueError, match="non-empty"):
        mixed_budget_table([], delta=1e-5)
    with pytest.raises(ValueError, match=r"plans\[1\].*queries"):
        mixed_budget_table([LAPLACE, Plan(kind=PlanKind.LAPLACE, noise=1.0)], delta=1e-5)
    sgd = Plan(kind=PlanKind.DP_SGD, noise=1.1, dataset_size=60_000, batch_size=256, epochs=5)
    with pytest.raises(ValueError, match="neighbouring relations"):
        mixed_budget_table([LAPLACE, sgd], delta=1e-5)


def test_cli_plan_file(tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"releases": [
        {"mechanism": "Laplace", "noise": 40, "queries": 100},
        {"mechanism": "gaussian", "noise": 5, "queries": 10}]}))
    assert main(["budget", "--plan", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["accountant"]: r["epsilon"] for r in out["rows"]}
    expected = {r.accountant: r.epsilon for r in mixed_budget_table([LAPLACE, GAUSSIAN],
                                                                    delta=1e-5)}
    assert rows == expected


@pytest.mark.parametrize(("content", "message"), [
    ("not json", "not a JSON file"),
    ('{"releases": []}', "at least one release"),
    ('{"releases": [{"mechanism": "laplac", "noise": 1, "queries": 2}]}', "must be one of"),
    ('{"releases": [{"mechanism": "laplace", "noise": 1}]}', r"releases\[0\].*queries"),
    ('{"releases": [{"mechanism": "laplace", "noise": 1, "queries": 2, "x": 1}]}',
     "unknown keys"),
])
def test_cli_plan_file_errors_name_the_file_and_entry(tmp_path, capsys, content, message):
    path = tmp_path / "plan.json"
    path.write_text(content)
    assert main(["budget", "--plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "--plan" in err and __import__("re").search(message, err), err
