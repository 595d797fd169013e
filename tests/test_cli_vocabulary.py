"""``dpkd``'s vocabulary and polish (issue 36): your own sampler from the CLI, one verdict
vocabulary, one spelling of mechanism names, budget flags, errors that name the flag, start-up."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from dpkd_audit.cli.main import main
from dpkd_audit.cli.names import (
    ATTACKS,
    BATCH_RELATIONS,
    ONE_RUN_ANALYSES,
    PLAN_KINDS,
    SAMPLINGS,
    TEACHER_ARCHITECTURES,
)

SAMPLERS = textwrap.dedent("""
    from dpkd_audit.mechanisms import Laplace

    _LAPLACE = Laplace(epsilon=1.0)


    def laplace(x, n, rng):
        return _LAPLACE.sample(x, n, rng=rng)


    laplace.epsilon = 1.0
    laplace.neighbours = (0.0, 1.0)


    def broken(x, n, rng):  # claims epsilon 1 with a quarter of the noise
        return x + rng.laplace(scale=0.25, size=n)


    class Mine:
        epsilon = 1.0

        def sample(self, x, n, *, rng):
            return _LAPLACE.sample(x, n, rng=rng)

        def neighbours(self):
            return 0.0, 1.0


    NOT_CALLABLE = 3
""")


@pytest.fixture
def samplers(tmp_path, monkeypatch):
    (tmp_path / "my_samplers.py").write_text(SAMPLERS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_samplers", raising=False)
    return tmp_path / "my_samplers.py"


def test_audit_your_own_sampler_a_correct_laplace_passes(samplers, capsys):
    assert main(["audit", "my_samplers:laplace", "--samples", "20000"]) == 0
    out = capsys.readouterr().out
    assert "| my_samplers:laplace | 1 |" in out and "| consistent |" in out


def test_audit_your_own_sampler_a_broken_one_is_flagged(samplers, capsys):
    assert main(["audit", "my_samplers:broken", "--epsilon", "1", "--neighbours", "0", "1",
                 "--samples", "20000", "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert record["verdict"] == "violation" and record["epsilon_lower"] > 1
    assert record["mechanism"] == "my_samplers:broken" and record["epsilon_claimed"] == 1


def test_audit_a_class_by_file_path(samplers, capsys):
    assert main(["audit", f"{samplers}:Mine", "--samples", "20000", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["verdict"] == "consistent" and "neighbours" not in record["configuration"]


@pytest.mark.parametrize(("target", "extra", "message"), [
    ("no_such_module:f", [], "cannot import module 'no_such_module'"),
    ("my_samplers:nope", [], "has no attribute 'nope'"),
    ("my_samplers:NOT_CALLABLE", [], "NOT_CALLABLE is a int, not a sampler"),
    ("my_samplers:broken", [], "--epsilon is required"),
    ("my_samplers:broken", ["--epsilon", "1"], "--neighbours X X' is required"),
    ("missing_file.py:f", [], "no file missing_file.py"),
])
def test_audit_your_own_sampler_errors_name_the_flag(samplers, capsys, target, extra, message):
    assert main(["audit", target, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_package_mechanisms_refuse_the_sampler_only_flags(capsys):
    assert main(["audit", "Laplace", "--delta", "0.1"]) == 2
    assert "--delta applies to your own sampler" in capsys.readouterr().err


def test_one_verdict_vocabulary_and_hints_in_flag_form(capsys):
    assert main(["audit", "Laplace", "--samples", "20000"]) == 0
    out = capsys.readouterr().out
    assert "| consistent |" in out and "no violation" not in out
    # a control audited as a real-valued design: the hint is a flag, not an enum member
    assert main(["audit", "half-noise-laplace", "--samples", "20000"]) == 1
    out = capsys.readouterr().out
    assert "| violation |" in out and "--attack float-bits" in out
    assert "Attack.FLOAT_BITS" not in out


def test_mechanism_names_are_spelled_one_way_in_budget_and_audit(capsys):
    outputs = []
    for name in ("laplace", "Laplace", "LAPLACE"):
        assert main(["budget", name, "--noise", "1", "--queries", "10", "--json"]) == 0
        outputs.append(json.loads(capsys.readouterr().out))
    assert outputs[0] == outputs[1] == outputs[2]
    assert main(["budget", "Randomized_Response", "--noise", "1", "--queries", "3",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plan"]["mechanism"] == "randomized-response"
    records = []
    for name in ("laplace", "Laplace", "LAPLACE"):
        assert main(["audit", name, "--samples", "20000", "--json"]) == 0
        records.append(json.loads(capsys.readouterr().out))
    assert {r["mechanism"] for r in records} == {"Laplace"}
    with pytest.raises(SystemExit):
        main(["budget", "lapl", "--noise", "1", "--queries", "1"])
    assert "unknown mechanism 'lapl'" in capsys.readouterr().err


def test_the_cli_name_lists_match_the_enums():
    from dpkd_audit.accountants.budget import PlanKind
    from dpkd_audit.accountants.dp_sgd_sampling import BatchRelation, DpSgdSampling
    from dpkd_audit.audit.attacks import Attack
    from dpkd_audit.audit.training import OneRunAnalysis

    assert PLAN_KINDS == tuple(k.value for k in PlanKind)
    assert set(ATTACKS) == {a.value for a in Attack}
    assert ONE_RUN_ANALYSES == tuple(a.value for a in OneRunAnalysis)
    assert SAMPLINGS == tuple(s.value for s in DpSgdSampling)
    assert BATCH_RELATIONS == tuple(r.value for r in BatchRelation)
    from dpkd_audit.pipelines.common.teacher import TeacherArchitecture

    assert TEACHER_ARCHITECTURES == tuple(a.value for a in TeacherArchitecture)


def test_budget_takes_a_per_release_epsilon(capsys):
    assert main(["budget", "laplace", "--epsilon", "2", "--queries", "10", "--json"]) == 0
    by_epsilon = json.loads(capsys.readouterr().out)
    assert main(["budget", "laplace", "--noise", "0.5", "--queries", "10", "--json"]) == 0
    by_noise = json.loads(capsys.readouterr().out)
    assert by_epsilon["rows"] == by_noise["rows"] and by_epsilon["plan"]["noise"] == 0.5
    assert by_epsilon["rows"][0]["epsilon"] == pytest.approx(20.0)  # basic composition
    assert main(["budget", "gaussian", "--epsilon", "1", "--queries", "10"]) == 2
    assert "give --noise" in capsys.readouterr().err
    assert main(["budget", "laplace", "--epsilon", "1", "--noise", "1", "--queries", "1"]) == 2
    assert "--noise or --epsilon, not both" in capsys.readouterr().err


def test_an_unknown_flag_prints_the_subcommands_own_usage(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["budget", "laplace", "--noise", "1", "--queries", "2", "--bogus", "3"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "usage: dpkd budget" in err and "--epsilon" in err and "--bogus 3" in err


def test_report_of_a_ledger_says_it_is_not_a_record_file(tmp_path, capsys):
    from dpkd_audit.ledger import Ledger

    path = tmp_path / "ledger.sqlite"
    Ledger(epsilon=1.0, path=path).close()
    assert main(["report", str(path), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "not a record file" in err and "SQLite" in err and "codec" not in err


def test_an_unwritable_out_is_refused_before_the_data_stage(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DPKD_DATA_DIR", raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for argv in (["run", "rknn", "--epsilon", "1"], ["sweep", "rknn", "--epsilons", "1"],
                 ["audit-run", "rknn", "--epsilon", "1"]):
        code = main([*argv, "--dataset", "fashion-mnist", "--data-dir", str(tmp_path / "none"),
                     "--out", str(blocker / "out"), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and "--out" in err and "is a file" in err, (argv, err)
        assert "train-images" not in err  # the data were never looked for


def test_budget_and_audit_parsers_import_no_accountant():
    """Building the parser (and --help) imports neither dp_accounting nor the accountants."""
    code = ("import sys; from dpkd_audit.cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.startswith(('dp_accounting', "
            "'dpkd_audit.accountants', 'scipy', 'torch'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
