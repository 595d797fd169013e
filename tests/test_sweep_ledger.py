"""dpkd sweep --ledger: one budget for the whole sweep, planned and charged before any run."""

from __future__ import annotations

import json

import pytest

from dpkd_audit.cli.main import main
from dpkd_audit.events import event_to_json
from dpkd_audit.ledger import Ledger

BASE = ["sweep", "rknn", "--dataset", "digits", "--epsilons", "0.5,1", "--seeds", "0,1",
        "--quiet"]


def test_sweep_is_planned_and_charged_to_one_ledger(tmp_path, capsys):
    ledger, out = tmp_path / "sweep.sqlite", tmp_path / "out"
    # 4 runs at 0.5 + 1 + 0.5 + 1 = 3 under basic composition: a budget of 2.5 is refused
    # before any work, and neither the ledger file nor the output folder is created
    assert main([*BASE, "--out", str(out), "--ledger", str(ledger),
                 "--ledger-epsilon", "2.5"]) == 2
    assert "over the budget epsilon=2.5; nothing was recorded" in capsys.readouterr().err
    assert not ledger.exists() and not out.exists()
    assert main([*BASE, "--out", str(out), "--ledger", str(ledger),
                 "--ledger-epsilon", "3"]) == 0
    opened = Ledger.open(ledger)
    charges = opened.charges()
    assert len(charges) == 4 and float(opened.spent().epsilon) == pytest.approx(3.0)
    # what was charged up front is exactly what each run's own ledger charged
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    planned = sorted(event_to_json(c.event) for c in charges)
    ran = sorted(json.dumps(r["charges"][0]["event"], sort_keys=True, separators=(",", ":"))
                 for r in records)
    assert planned == ran
    opened.close()
    # --resume with nothing missing charges nothing more; a rerun (--force) is refused: spent
    assert main([*BASE, "--out", str(out), "--ledger", str(ledger), "--resume"]) == 0
    assert len(Ledger.open(ledger).charges()) == 4
    capsys.readouterr()
    assert main([*BASE, "--out", str(out), "--ledger", str(ledger), "--force"]) == 2
    assert "over the budget" in capsys.readouterr().err
    assert len(Ledger.open(ledger).charges()) == 4


def test_resume_charges_only_the_missing_runs(tmp_path):
    ledger, out = tmp_path / "sweep.sqlite", tmp_path / "out"
    assert main([*BASE[:4], "--epsilons", "0.5", "--seeds", "0", "--quiet", "--out", str(out),
                 "--ledger", str(ledger), "--ledger-epsilon", "5"]) == 0
    assert main([*BASE, "--out", str(out), "--ledger", str(ledger), "--resume"]) == 0
    charges = Ledger.open(ledger).charges()
    assert len(charges) == 4  # the first point once, the three new ones
    assert len({c.label for c in charges}) == 4


def test_ledger_arguments_are_checked(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([*BASE, "--out", str(out), "--ledger", str(tmp_path / "new.sqlite")]) == 2
    assert "--ledger-epsilon E" in capsys.readouterr().err
    assert main([*BASE, "--out", str(out), "--ledger-epsilon", "3"]) == 2
    assert "--ledger-epsilon applies with --ledger FILE only" in capsys.readouterr().err
    existing = tmp_path / "old.sqlite"
    Ledger(epsilon=7.0, path=existing).close()
    assert main([*BASE, "--out", str(out), "--ledger", str(existing),
                 "--ledger-epsilon", "3"]) == 2
    assert "differs from the budget" in capsys.readouterr().err
    assert len(Ledger.open(existing).charges()) == 0


def test_published_runs_are_refused_by_a_finite_sweep_ledger(tmp_path, capsys):
    from dpkd_audit.pipelines.dgd import DgdConfig
    from dpkd_audit.pipelines.dgd.sweep import check_configs, planned_run_events

    config = DgdConfig.small(dataset="digits")
    events = planned_run_events(config, check_configs([config]))
    assert type(events[0]).__name__ == "NonPrivateDpEvent"
    assert main(["sweep", "dgd", "--dataset", "digits", "--queries", "50", "--quiet",
                 "--out", str(tmp_path / "o"), "--ledger", str(tmp_path / "l.sqlite"),
                 "--ledger-epsilon", "100"]) == 2
    assert "refused" in capsys.readouterr().err
    assert not (tmp_path / "l.sqlite").exists()


def test_missing_ray_is_refused_before_any_charge(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("dpkd_audit.executor.ray_available", lambda: False)
    assert main([*BASE, "--executor", "ray", "--out", str(tmp_path / "o"),
                 "--ledger", str(tmp_path / "l.sqlite"), "--ledger-epsilon", "5"]) == 2
    assert "needs Ray" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_resume_with_another_delta_is_refused_not_released_uncharged(tmp_path, capsys):
    """Issue 33: a sweep killed after its plan's charge and resumed with another --delta
    released at a delta that was never charged. The charged events must equal the plan's."""
    ledger, out = tmp_path / "sweep.sqlite", tmp_path / "out"
    shuffle = ["sweep", "rknn", "--dataset", "digits", "--modes", "shuffle-multi",
               "--epsilons", "1", "--quiet", "--out", str(out), "--ledger", str(ledger)]
    assert main([*shuffle, "--ledger-epsilon", "1", "--delta", "1e-6"]) == 0
    (out / "results.jsonl").unlink()  # as if killed after the charge, before the record
    capsys.readouterr()
    assert main([*shuffle, "--delta", "0.01", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "was charged to" in err and "another --delta" in err
    assert not (out / "results.jsonl").exists()  # nothing released
    assert len(Ledger.open(ledger).charges()) == 1
    # the same parameters resume: the charged run is not charged again, and runs
    assert main([*shuffle, "--delta", "1e-6", "--resume"]) == 0
    assert len(Ledger.open(ledger).charges()) == 1
    assert (out / "results.jsonl").exists()
