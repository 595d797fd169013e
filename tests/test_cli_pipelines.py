"""``dpkd run rknn`` and ``dpkd sweep rknn``: files written, records, early errors."""

from __future__ import annotations

import json
from pathlib import Path

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
    assert record["self_training_rounds"] == 0 == record["config"]["self_training_rounds"]
    saved = json.loads((out / "config.json").read_text())
    assert saved["argv"][:2] == ["run", "rknn"] and saved["config"] == record["config"]
    assert "test accuracy" in capsys.readouterr().out
    # diagnostics from the exact private counts stay out of the record, in their own file
    assert "label_accuracy_without_noise" not in record and "cluster_purity" in record
    evaluator = json.loads((out / "evaluator.json").read_text())
    assert evaluator["evaluator_only"] is True and "NOT PRIVATE" in evaluator["note"]
    assert 0 < evaluator["label_accuracy_without_noise"] <= record["cluster_purity"]


def test_run_rknn_self_training_rounds_reach_the_record(tmp_path):
    out = tmp_path / "st"
    assert main(["run", "rknn", "--epsilon", "1", "--out", str(out),
                 "--self-training-rounds", "1", *FAST]) == 0
    record = json.loads((out / "result.json").read_text())
    assert record["self_training_rounds"] == 1 and len(record["test_accuracy_per_round"]) == 2
    assert record["test_accuracy"] == record["test_accuracy_per_round"][-1]
    assert isinstance(record["self_trained_label_accuracy"], float)  # 2 epochs: no floor


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
    (["--self-training-rounds", "-1"], "self_training_rounds must be"),
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
    evaluator = [json.loads(line) for line in
                 (out / "evaluator.jsonl").read_text().splitlines()]
    assert [(e["mode"], e["epsilon"]) for e in evaluator] == [
        (r["mode"], r["epsilon"]) for r in records]
    assert all("query_accuracy" not in r for r in records)
    assert (out / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    readme = (out / "README.md").read_text()
    assert "dpkd sweep rknn --epsilons 0.5,2" in readme and "accuracy.png" in readme
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0  # nothing left to run
    assert len((out / "results.jsonl").read_text().splitlines()) == 4
    assert "test accuracy" not in capsys.readouterr().out


def test_run_rknn_loads_and_announces_the_data_once(tmp_path, capsys):
    out = tmp_path / "run"
    fast = [a for a in FAST if a != "--quiet"]
    assert main(["run", "rknn", "--epsilon", "1", "--out", str(out), *fast]) == 0
    err = capsys.readouterr().err
    assert err.count("[dpkd] data ...") == 1, err
    record = json.loads((out / "result.json").read_text())
    saved = json.loads((out / "config.json").read_text())
    for prov in (record["provenance"], saved["provenance"]):
        assert prov["package"] == "dpkd-audit" and "torch" in prov["versions"]
        assert "git_commit" in prov and prov["created_utc"].endswith("Z")
    assert record["shared_stages"] == []


def test_sweep_refuses_to_overwrite_results_before_any_work(tmp_path, capsys, monkeypatch):
    import dpkd_audit.pipelines.rknn as rknn

    out = tmp_path / "sweep"
    out.mkdir()
    (out / "results.jsonl").write_text("kept\n")

    def no_work(*args, **kwargs):
        raise AssertionError("no work may start before the overwrite check")

    monkeypatch.setattr(rknn, "check_configs", no_work)
    assert main(["sweep", "rknn", "--epsilons", "1", "--out", str(out), *FAST]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "results.jsonl exists" in err[0]
    assert "--resume" in err[0] and "--force" in err[0]
    assert (out / "results.jsonl").read_text() == "kept\n"
    assert sorted(p.name for p in out.iterdir()) == ["results.jsonl"]
    with pytest.raises(SystemExit) as info:
        main(["sweep", "rknn", "--epsilons", "1", "--out", str(out), "--resume", "--force",
              *FAST])
    assert info.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_sweep_force_overwrites_results(tmp_path, capsys):
    out = tmp_path / "sweep"
    out.mkdir()
    (out / "results.jsonl").write_text('{"stale": true}\n')
    assert main(["sweep", "rknn", "--epsilons", "1", "--out", str(out), "--force", *FAST]) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["epsilon"] for r in records] == [1.0] and "stale" not in records[0]
    sweep_json = json.loads((out / "sweep.json").read_text())
    assert sweep_json["provenance"]["package"] == "dpkd-audit"
    capsys.readouterr()


def test_sweep_takes_each_modes_preset_clusters(monkeypatch):
    """Fashion-MNIST's preset s is 10 in local modes, 40 in central ones below eps = 0.1 and
    100 from 0.1: a sweep gives each point its own (the first point's s once leaked into the
    others)."""
    from dpkd_audit.cli import rknn as cli

    seen = {}

    def fake_run_sweep(args, *, configs, **kwargs):
        seen["configs"] = configs
        return 0

    monkeypatch.setattr(cli, "run_sweep", fake_run_sweep)
    for modes in ("central,local-rr", "local-rr,central"):
        assert main(["sweep", "rknn", "--dataset", "fashion-mnist", "--epsilons", "0.01,1",
                     "--modes", modes, "--seeds", "0,1", "--out", "x", "--quiet"]) == 0
        clusters = {(c.mode.value, c.epsilon, c.clusters) for c in seen["configs"]}
        assert clusters == {("central", 0.01, 40), ("central", 1.0, 100),
                            ("local-rr", 0.01, 10), ("local-rr", 1.0, 10)}
        assert [c.seed for c in seen["configs"]] == [0] * 4 + [1] * 4  # seed-major
    assert main(["sweep", "rknn", "--dataset", "fashion-mnist", "--epsilons", "1", "--modes",
                 "central,local-rr", "--clusters", "20", "--out", "x", "--quiet"]) == 0
    assert {c.clusters for c in seen["configs"]} == {20}


def test_results_refuses_a_record_with_exact_count_diagnostics(tmp_path, capsys):
    from dpkd_audit.reports.records import validate_record

    record = {"method": "rknn", "dataset": "mnist", "mode": "central", "epsilon": 0.1,
              "test_accuracy": 0.9}
    validate_record(record)
    with pytest.raises(ValueError, match="query_accuracy must not be in a released record"):
        validate_record({**record, "query_accuracy": 0.99})


def test_representation_choices_are_the_representation_kinds():
    from dpkd_audit.cli.rknn import _REPRESENTATIONS
    from dpkd_audit.pipelines.common.representations import RepresentationKind

    assert _REPRESENTATIONS == [kind.value for kind in RepresentationKind]


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_clusters_help_states_each_presets_default(capsys, command):
    from dpkd_audit.pipelines.rknn import Preset, RknnConfig

    with pytest.raises(SystemExit):
        main([command, "rknn", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    start = text.index("--clusters CLUSTERS number of queries")
    help_text = text[start:text.index("--k K", start)]
    for preset in Preset:
        defaults = {RknnConfig.preset_config(preset, dataset=d).clusters
                    for d in ("digits", "mnist", "fashion-mnist")}
        assert f"--preset {preset.value}:" in help_text
        for value in defaults:
            assert str(value) in help_text
    # Each dataset is named beside its own default (the help once said 100 for digits too).
    small = {d: RknnConfig.small(dataset=d).clusters for d in ("digits", "mnist")}
    assert small["digits"] != small["mnist"]
    assert f"{small['digits']} for digits" in help_text
    assert f"{small['mnist']} for mnist" in help_text
    for mode, eps in (("local-rr", 1.0), ("central", 0.01), ("central", 1.0)):
        value = RknnConfig.small(dataset="fashion-mnist", mode=mode, epsilon=eps).clusters
        assert f"{value} (" in help_text and mode in help_text


def _saved_record(folder: Path) -> Path:
    folder.mkdir(parents=True)
    record = {"method": "rknn", "dataset": "mnist", "mode": "central", "epsilon": 0.1,
              "test_accuracy": 0.9}
    (folder / "results.jsonl").write_text(json.dumps(record) + "\n")
    return folder


def test_results_prints_the_overview_of_saved_records(tmp_path, capsys):
    from dpkd_audit.reports import results_overview

    folder = _saved_record(tmp_path / "a")
    assert main(["results", str(folder)]) == 0
    out = capsys.readouterr().out
    assert out == results_overview([folder]) and "| rknn | mnist | central |" in out
    assert main(["results", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl" in capsys.readouterr().err


def test_results_skips_folders_of_folders_a_glob_matches(tmp_path, capsys):
    from dpkd_audit.reports import results_overview

    folder = _saved_record(tmp_path / "a")
    nested = tmp_path / "ablations"
    _saved_record(nested / "b")
    assert main(["results", str(folder), str(nested)]) == 0
    captured = capsys.readouterr()
    assert captured.out == results_overview([folder])
    assert f"skipped {nested}" in captured.err
    # a folder without records on its own is still an error
    assert main(["results", str(nested)]) == 2
    assert "no results.jsonl or result.json" in capsys.readouterr().err
