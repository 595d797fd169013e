"""The ``dpkd`` command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dpkd_audit import Ledger
from dpkd_audit.cli.main import main
from dpkd_audit.events import PureDpEvent


def test_help_lists_subcommands():
    out = subprocess.run([sys.executable, "-m", "dpkd_audit.cli.main", "--help"],
                         capture_output=True, text=True, check=True).stdout
    for command in ("demo", "mechanisms", "ledger"):
        assert command in out


def test_mechanisms_table_lists_every_catalogued_mechanism(capsys):
    from dpkd_audit.mechanisms import catalogue

    assert main(["mechanisms", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["mechanism"] for r in rows] == [r["mechanism"] for r in catalogue()]
    assert len(rows) >= 14


def test_ledger_show(tmp_path, capsys):
    path = tmp_path / "l.sqlite"
    with Ledger(epsilon=2.0, path=path) as ledger:
        ledger.charge(PureDpEvent(0.5), label="first release")
    assert main(["ledger", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["budget_epsilon"] == 2.0
    assert shown["spent_epsilon"] == pytest.approx(0.5)
    assert shown["charges"][0]["label"] == "first release"
    assert main(["ledger", str(path)]) == 0
    assert "remaining 1.5" in capsys.readouterr().out


def test_ledger_show_missing_and_foreign_files(tmp_path, capsys):
    assert main(["ledger", str(tmp_path / "missing.sqlite")]) == 2
    assert "no ledger" in capsys.readouterr().err
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a ledger")
    assert main(["ledger", str(foreign)]) == 2
    assert "refusing" in capsys.readouterr().err


def test_demo_runs_on_embedded_digits_and_charges_the_ledger(tmp_path, capsys):
    path = tmp_path / "demo.sqlite"
    assert main(["demo", "--epsilon", "1.0", "--ledger", str(path), "--budget", "1.5",
                 "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["ledger_spent_epsilon"] <= 1.0 + 1e-12
    assert record["label_accuracy"] > 0.8  # digits clusters are fairly pure; noise is small
    # a second run would need another 1.0: the resumed ledger refuses it
    assert main(["demo", "--epsilon", "1.0", "--ledger", str(path)]) == 2
    assert "refused" in capsys.readouterr().err
    assert len(Ledger.open(path).charges()) == 1


def test_demo_refuses_a_budget_other_than_the_existing_ledgers(tmp_path, capsys):
    path = tmp_path / "demo.sqlite"
    assert main(["demo", "--epsilon", "1", "--ledger", str(path), "--budget", "3"]) == 0
    capsys.readouterr()
    assert main(["demo", "--epsilon", "1", "--ledger", str(path), "--budget", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--budget 2" in err and "epsilon=3" in err
    assert len(Ledger.open(path).charges()) == 1  # refused before any release
    # The ledger's own budget, given again or left out, is used.
    assert main(["demo", "--epsilon", "1", "--ledger", str(path), "--budget", "3",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ledger_budget_epsilon"] == 3.0
    assert main(["demo", "--epsilon", "0.5", "--ledger", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ledger_budget_epsilon"] == 3.0


def test_version_comes_from_the_package_metadata(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"dpkd {version('dpkd-audit')}"


@pytest.mark.parametrize("argv", [["demo", "--epsilon", "0"], ["demo", "--epsilon", "nan"],
                                  ["demo", "--epsilon", "x"]])
def test_demo_rejects_bad_epsilon(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "epsilon" in capsys.readouterr().err


def test_demo_rejects_k_above_clusters(capsys):
    assert main(["demo", "--clusters", "5", "--k", "6"]) == 2
    assert "k must be" in capsys.readouterr().err


def test_audit_one_mechanism_json(capsys):
    assert main(["audit", "Laplace", "--samples", "20000", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["mechanism"] == "Laplace" and not record["violation"]
    assert 0.5 < record["epsilon_lower"] <= 1.0


def test_audit_flags_a_control_and_overrides_epsilon(capsys):
    assert main(["audit", "WrongRandomizedResponse", "--samples", "20000"]) == 1  # CI gating
    assert "| violation |" in capsys.readouterr().out  # the records' verdict, as in JSON
    assert main(["audit", "RandomizedResponse", "--epsilon", "0.5", "--samples", "20000",
                 "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["epsilon_claimed"] == 0.5 and not record["violation"]


#: Slow (about 20 s, mostly the attainable bounds of 27 audits): what it checks is covered by
#: test_audit_all_audits_every_target_and_writes_table_and_plot below (the CLI's wiring: every
#: target asked for, table, flaws, plot, exit status) and by
#: tests/test_audit_suite.py::test_controls_flagged_and_correct_mechanisms_not[0] (every control
#: flagged and no package mechanism, at these sample sizes or more).
@pytest.mark.slow
def test_audit_all_writes_table_and_plot(tmp_path, capsys):
    plot = tmp_path / "audit.png"
    assert main(["audit", "--all", "--samples", "100000", "--max-values", "2000000",
                 "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    from dpkd_audit.audit import controls
    from dpkd_audit.audit.suite import TEXTBOOK_CONTROLS

    # every control (the textbook float samplers too), nothing else
    assert out.count("| violation |") == len(controls.CONTROLS) + len(TEXTBOOK_CONTROLS)
    assert "| SparseVector | 1 |" in out
    assert "for its own audit" in out and "Bonferroni" in out  # family-wise error kept
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_audit_all_audits_every_target_and_writes_table_and_plot(tmp_path, capsys,
                                                                 monkeypatch):
    """`dpkd audit --all` end to end on four of its targets: two package mechanisms (one the
    sparse vector), two controls. The CLI must ask for every target with the controls, flag
    the controls (and only them), print their flaws and still exit 0."""
    from dpkd_audit.audit import suite

    every = suite.audit_targets
    asked = []
    kept = ("RandomizedResponse", "SparseVector", "WrongRandomizedResponse", "HalfNoiseLaplace")

    def four(**kwargs):
        asked.append(kwargs)
        return [t for t in every(**kwargs) if t.name in kept]

    monkeypatch.setattr(suite, "audit_targets", four)
    plot = tmp_path / "audit.png"
    assert main(["audit", "--all", "--samples", "100000", "--max-values", "2000000",
                 "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert asked == [{"include_controls": True}]
    controls = [t.name for t in every(include_controls=True) if t.control]
    assert {"WrongRandomizedResponse", "HalfNoiseLaplace"} <= set(controls)
    assert "SparseVector" not in controls and "RandomizedResponse" not in controls
    assert out.count("| violation |") == 2  # the two controls, nothing else
    assert "VIOLATION" not in out and "no violation" not in out  # one vocabulary: the JSON's
    for name in kept:
        assert out.count(f"| {name} ") == 1, name
    assert "| SparseVector | 1 |" in out
    assert "- WrongRandomizedResponse: " in out and "- HalfNoiseLaplace: " in out
    assert "for its own audit" in out and "Bonferroni" in out  # family-wise error kept
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_audit_argument_errors(capsys):
    assert main(["audit"]) == 2
    assert "--all" in capsys.readouterr().err
    assert main(["audit", "Bogus"]) == 2
    assert "unknown mechanism" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["float_bits", "float-bits", "FLOAT_BITS"])
def test_audit_attack_names_are_the_json_names(capsys, name):
    """One naming scheme: --attack takes the names the JSON records use (dashes accepted)."""
    # the textbook Gaussian (the float-safe Laplace and Gaussian have no float artefact to find)
    assert main(["audit", "TextbookGaussian", "--attack", name, "--samples", "20000",
                 "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert record["attack"] == "float_bits" and record["verdict"] == "violation"
    assert record["policy"] == "float_bits: chosen by the caller"


# ----------------------------------------------------------------------------- issue 32: limits
@pytest.mark.parametrize("mechanism", ["laplace", "laplace-noisy-max", "gaussian"])
def test_budget_at_extreme_noise_prints_no_raw_warning(mechanism, capsys):
    """Noise 1e-308: per-query epsilons near the top of the doubles; the accountants answer
    inf (an upper bound) without numpy overflow warnings (each one an error here)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert main(["budget", mechanism, "--noise", "1e-308", "--queries", "10"]) == 0
    out = capsys.readouterr()
    assert "inf" in out.out and "Warning" not in out.err


def test_audit_refuses_sample_counts_that_cannot_finish_and_says_when_it_caps(capsys):
    assert main(["audit", "Laplace", "--samples", "1000000000000"]) == 2
    err = capsys.readouterr().err
    assert "--samples must be at most 1e+09" in err and "1e+12" in err
    assert main(["audit", "Laplace", "--samples", "3000", "--max-values", "2000",
                 "--json"]) == 0
    captured = capsys.readouterr()
    first = captured.err.splitlines()[0]
    assert "--samples 3000 is above --max-values 2000" in first
    assert json.loads(captured.out)["samples_per_side"] == 2000


def test_audit_run_refuses_run_counts_that_cannot_finish(capsys, tmp_path):
    import time

    start = time.perf_counter()
    assert main(["audit-run", "rknn", "--dataset", "digits", "--mode", "central",
                 "--epsilon", "1", "--runs", "1000000000000", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 2
    assert time.perf_counter() - start < 5  # refused before any work
    assert "--runs must be at most 1,000,000" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_audit_refuses_more_ray_workers_than_cpus_before_starting_ray(capsys):
    import os
    import time

    start = time.perf_counter()
    assert main(["audit", "Laplace", "--samples", "1000", "--executor", "ray",
                 "--workers", "1600"]) == 2
    err = capsys.readouterr().err
    assert f"workers must be at most the {os.cpu_count()} CPUs" in err and "1600" in err
    assert time.perf_counter() - start < 5


def test_audit_gives_up_on_an_unreachable_ray_address_with_one_line(capsys):
    import time

    pytest.importorskip("ray")
    start = time.perf_counter()
    assert main(["audit", "Laplace", "--samples", "1000", "--executor", "ray",
                 "--workers", "2", "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach a Ray cluster at '127.0.0.1:1'" in err
    assert "Traceback" not in err and time.perf_counter() - start < 15
