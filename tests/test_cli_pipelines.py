"""``dpkd run rknn`` and ``dpkd sweep rknn``: files written, records, early errors."""

from __future__ import annotations

import json

import pytest

from dpkd_audit.cli.main import main
from dpkd_audit.ledger import Ledger

FAST = ["--dataset", "digits", "--clusters", "20", "--student-epochs", "2", "--quiet"]


def test_run_rknn_writes_result_and_config(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "rknn", "--epsilon", "1", "--out", str(out), *FAST]) == 0
    record = json.loads((out / "result.json").read_text())
    for key in ("method", "dataset", "mode", "test_accuracy", "label_accuracy",
                "epsilon_published", "epsilon_record_level", "delta", "charges", "seconds",
                "device", "config", "command"):
        assert key in record, key
    assert record["command"].startswith("dpkd run rknn --epsilon 1")
    assert record["config"]["clusters"] == 20 and record["config"]["student"]["epochs"] == 2
    saved = json.loads((out / "config.json").read_text())
    assert saved["argv"][:2] == ["run", "rknn"] and saved["config"] == record["config"]
    assert "test accuracy" in capsys.readouterr().out


def test_run_rknn_charges_a_ledger_file(tmp_path):
    path = tmp_path / "ledger.sqlite"
    args = ["run", "rknn", "--epsilon", "0.5", "--out", str(tmp_path / "a"), "--ledger",
            str(path), *FAST]
    assert main(args) == 0
    assert main(args) == 2  # the budget of the file (0.5) is spent: refused before any work
    ledger = Ledger.open(path)
    assert len(ledger.charges()) == 1 and float(ledger.spent().epsilon) == pytest.approx(0.5)


@pytest.mark.parametrize(("args", "message"), [
    (["--epsilon", "0"], "epsilon must be"),
    (["--k", "30"], "k must be <= clusters=20"),
    (["--clusters", "500"], "clusters must be <= the public set size 298"),
    (["--mode", "shuffle", "--delta", "0"], "delta must be in"),
    (["--device", "tpu"], "device must be"),
])
def test_run_rknn_bad_input_fails_early_with_a_clear_message(tmp_path, capsys, args, message):
    base = ["run", "rknn", "--out", str(tmp_path / "x"), "--dataset", "digits", "--clusters",
            "20", "--quiet"]
    assert main([*base, *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x" / "result.json").exists()


def test_run_rknn_missing_dataset_names_what_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("DPKD_DATA_DIR", raising=False)
    code = main(["run", "rknn", "--dataset", "fashion-mnist", "--data-dir",
                 str(tmp_path / "none"), "--out", str(tmp_path / "x"), "--quiet"])
    err = capsys.readouterr().err
    if code == 0:  # pragma: no cover - a machine with Fashion-MNIST installed system-wide
        pytest.skip("Fashion-MNIST is installed system-wide here")
    assert code == 2 and "train-images-idx3-ubyte" in err and "--data-dir" in err


def test_unknown_dataset_is_refused_by_the_parser(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["run", "rknn", "--dataset", "cifar10", "--out", str(tmp_path)])
    assert "invalid choice" in capsys.readouterr().err


def test_sweep_rknn_writes_jsonl_plot_and_readme_and_resumes(tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["sweep", "rknn", "--epsilons", "0.5,2", "--modes", "central,local-rr", "--out",
            str(out), *FAST]
    assert main(args) == 0
    lines = (out / "results.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["mode"], r["epsilon"]) for r in records] == [
        ("central", 0.5), ("central", 2.0), ("local-rr", 0.5), ("local-rr", 2.0)]
    assert (out / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    readme = (out / "README.md").read_text()
    assert "dpkd sweep rknn --epsilons 0.5,2" in readme and "accuracy.png" in readme
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0  # nothing left to run
    assert len((out / "results.jsonl").read_text().splitlines()) == 4
    assert "test accuracy" not in capsys.readouterr().out
