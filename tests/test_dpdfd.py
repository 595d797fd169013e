"""DP-DFD pipeline on the embedded digits: accounting, charges before releases, bad input."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event as _dp
from event_helpers import flat_events

from dpkd_audit.accountants.dp_sgd import DpSgdAccountant, dp_sgd_epsilon
from dpkd_audit.cli.main import main
from dpkd_audit.errors import BudgetExceededError
from dpkd_audit.events import SelectiveRandomizedResponseDpEvent
from dpkd_audit.ledger import Ledger
from dpkd_audit.mechanisms.selective_rr import SelectiveRandomizedResponse
from dpkd_audit.pipelines import dpdfd
from dpkd_audit.pipelines.common.distill import DistillConfig
from dpkd_audit.pipelines.common.dp_statistics import StatisticsConfig
from dpkd_audit.pipelines.common.dp_teacher import DpSgdConfig
from dpkd_audit.pipelines.common.generator import GeneratorConfig
from dpkd_audit.pipelines.common.student import StudentConfig
from dpkd_audit.pipelines.common.teacher import TeacherConfig
from dpkd_audit.pipelines.dpdfd import DpdfdConfig, DpdfdMode, label_rng, ledger_for, run

#: Mechanics only (accuracy is measured by the committed reports, not by tests).
TINY = {
    "dataset": "digits", "stages": 3, "stage_size": 32,
    "teacher": TeacherConfig(width=4, training=StudentConfig(
        epochs=1, batch_size=64, augment=False, label_smoothing=0.0)),
    "dp_teacher": TeacherConfig(width=4),
    "dp_sgd": DpSgdConfig(epochs=1, batch_size=200, learning_rate=0.5),
    "generator": GeneratorConfig(width=8, steps=3, batch_size=16),
    "sound_generator": GeneratorConfig(width=8, steps=3, batch_size=16, beta=10.0,
                                       activation_weight=0.1),
    "student": DistillConfig(width=4, steps_per_stage=2, batch_size=16),
}


def tiny(**overrides: object) -> DpdfdConfig:
    return DpdfdConfig.small(**{**TINY, **overrides})


@pytest.fixture(scope="module")
def published() -> tuple[DpdfdConfig, Ledger, dpdfd.DpdfdResult]:
    config = tiny(mode="published", epsilon=2.0)
    ledger = ledger_for(config)
    return config, ledger, run(config, ledger=ledger, rng=label_rng(config), progress=False)


@pytest.fixture(scope="module")
def sound() -> tuple[DpdfdConfig, Ledger, dpdfd.DpdfdResult]:
    config = tiny(mode="sound", epsilon=3.0, label_epsilon=4.0)
    ledger = ledger_for(config)
    return config, ledger, run(config, ledger=ledger, rng=label_rng(config), progress=False)


def test_published_records_the_non_private_step_and_every_label(published) -> None:
    config, ledger, result = published
    charges = ledger.charges()
    assert isinstance(charges[0].event, _dp.NonPrivateDpEvent)
    assert "without noise" in charges[0].label
    stages = charges[1:]
    assert len(stages) == config.stages
    labels = 0
    for charge in stages:
        assert isinstance(charge.event, _dp.SelfComposedDpEvent)
        assert charge.event.event == SelectiveRandomizedResponseDpEvent(epsilon=2.0,
                                                                        num_classes=10)
        labels += charge.event.count
    assert labels == config.labels == result.labels == 96
    assert math.isinf(float(ledger.spent().epsilon))
    record = result.to_record(command="test")
    assert record["epsilon_record_level"] is None and "BatchNorm" in record["record_level_reason"]
    assert record["epsilon_published"] == record["epsilon"] == 2.0
    assert record["epsilon_kind"] == "per-label"
    assert record["epsilon_labels_composed"] == pytest.approx(96 * 2.0)
    assert record["delta"] == 0.0 and record["dp_sgd"] is None
    assert len(record["charges"]) == 1 + config.stages
    classes = record["classes"]
    assert sum(classes["released"]) == sum(classes["teacher_labels"]) == 96
    # the label accuracy is at most what the per-class counts allow
    assert result.label_accuracy * 96 <= sum(min(t, r) for t, r in
                                             zip(classes["teacher_labels"], classes["released"],
                                                 strict=True))
    assert all(0 <= s <= config.stages for s in classes["last_released_stage"])
    assert all(s == 0 for s, n in zip(classes["last_released_stage"], classes["released"],
                                      strict=True) if n == 0)
    assert len(classes["student_recall"]) == len(classes["teacher_recall"]) == 10
    json.dumps(record, allow_nan=False)  # strict JSON


def test_sound_epsilon_is_the_accountants_figure_for_the_dp_sgd_plan(sound) -> None:
    config, ledger, result = sound
    teacher, stats = ledger.charges()  # the labels are post-processing: not on this ledger
    plan = result.dp_sgd
    assert teacher.event == plan.event and "DP-SGD" in teacher.label
    mechanism = dpdfd.statistics_release(config, (8, 8))
    assert stats.event == mechanism.event and "statistics" in stats.label
    assert mechanism.epsilon == pytest.approx(0.1 * 3.0) and mechanism.delta == 1e-5
    assert float(mechanism.sensitivity.value) == pytest.approx(  # the clip weights ride along
        math.hypot(1, config.statistics.weight_share) * config.statistics.clip_norm)
    n = 1200  # the digits' training split
    assert plan.schedule.dataset_size == n and plan.schedule.batch_size == 200
    epsilons = {}
    for kind in DpSgdAccountant:  # an independent composition of the two charged events
        accountant = kind.make()
        accountant.compose(plan.event).compose(mechanism.event)
        epsilons[kind] = float(accountant.get_epsilon(1e-5))
    assert result.epsilon_record_level == pytest.approx(epsilons[DpSgdAccountant.RDP],
                                                        rel=1e-12)
    # the float-safe statistics release has no 1-D PLD: it enters through its zCDP bound (its
    # declared pair used the whole delta: inf), and the record carries the figure
    assert epsilons[DpSgdAccountant.PLD] <= epsilons[DpSgdAccountant.RDP]
    assert result.epsilon_record_level_pld == pytest.approx(epsilons[DpSgdAccountant.PLD],
                                                            abs=1e-4)
    assert epsilons[DpSgdAccountant.RDP] <= 3.0 * (1 + 1e-9)
    # calibrated: the smallest sigma meeting the target with the statistics release composed
    assert epsilons[DpSgdAccountant.RDP] >= 3.0 * (1 - 1e-3)
    alone = float(dp_sgd_epsilon(plan.schedule, noise_multiplier=plan.noise_multiplier,
                                 epochs=1, delta=1e-5))
    assert alone < epsilons[DpSgdAccountant.RDP]  # the statistics are paid for
    record = result.to_record()
    assert record["epsilon_kind"] == "record-level" and record["delta"] == 1e-5
    assert record["epsilon_per_label"] == 4.0
    assert record["epsilon_labels_composed"] == pytest.approx(96 * 4.0)
    assert record["record_level_reason"] is None
    assert record["dp_sgd"]["noise_multiplier"] == plan.noise_multiplier
    assert record["statistics"]["epsilon"] == mechanism.epsilon
    assert record["statistics"]["layers"] == 5  # the VGG-like net's five convs
    assert record["statistics"]["coordinates"] == mechanism.coordinates
    assert record["statistics"]["sigma"] == mechanism.sigma
    assert record["dp_sgd"]["epsilon_pld"] == pytest.approx(epsilons[DpSgdAccountant.PLD],
                                                           abs=1e-4)
    assert "bn_statistics" not in record["generator"]["loss_terms"]
    assert "dp_feature_statistics" in record["generator"]["loss_terms"]
    assert "statistics" in record["seconds"]


def test_sound_mode_never_reads_batchnorm_running_statistics(monkeypatch) -> None:
    from dpkd_audit.pipelines.common import generator

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a sound run read BatchNorm running statistics")

    monkeypatch.setattr(generator.BnStatistics, "__init__", refuse)
    config = tiny(mode="sound", epsilon=3.0)
    run(config, ledger=ledger_for(config), rng=label_rng(config), progress=False)


def test_published_mode_is_refused_by_a_finite_ledger_before_any_work(monkeypatch) -> None:
    def no_work(*args: object, **kwargs: object) -> None:
        raise AssertionError("work started")

    monkeypatch.setattr(dpdfd.pipeline, "fit_source", no_work)
    monkeypatch.setattr(dpdfd.pipeline, "prepare", no_work)
    config = tiny(mode="published", epsilon=1.0)
    ledger = Ledger(epsilon=1000.0)
    with pytest.raises(BudgetExceededError,
                       match=r"finite budget.*nothing after it is differentially private"):
        run(config, ledger=ledger, rng=label_rng(config), progress=False)
    assert ledger.charges() == []


def test_sound_mode_is_refused_by_a_ledger_it_does_not_fit(monkeypatch) -> None:
    monkeypatch.setattr(dpdfd.pipeline, "prepare", lambda *a, **k: pytest.fail("work started"))
    config = tiny(mode="sound", epsilon=3.0)
    ledger = ledger_for(tiny(mode="sound", epsilon=1.0))  # budget 1 < the run's 3
    with pytest.raises(BudgetExceededError):
        run(config, ledger=ledger, rng=label_rng(config), progress=False)
    assert ledger.charges() == []
    with pytest.raises(ValueError, match="add/remove-one"):
        run(config, ledger=Ledger(epsilon=10.0, delta=1e-5), rng=label_rng(config),
            progress=False)


def test_each_stage_is_charged_before_its_labels_exist(monkeypatch) -> None:
    config = tiny(mode="published", epsilon=1.0)
    ledger = ledger_for(config)
    seen: list[int] = []
    original = SelectiveRandomizedResponse._keep_threshold  # used only to draw labels

    def spy(self, *args, **kwargs):
        seen.append(len(ledger.charges()))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(SelectiveRandomizedResponse, "_keep_threshold", spy)
    # this tiny digits generator rarely makes several classes: flagged before the stages
    with pytest.warns(RuntimeWarning, match=r"the generator rarely makes \d+ class\(es\).*"
                      r"at per-label eps=1 the first stage keeps the teacher's label with "
                      r"probability 0\.23"):
        run(config, ledger=ledger, rng=label_rng(config), progress=False)
    # stage i's labels are drawn after the non-private step and i stage charges
    assert seen == [2, 3, 4]


def test_runs_are_deterministic(published) -> None:
    config, _, first = published
    again = run(config, ledger=ledger_for(config), rng=label_rng(config), progress=False)
    assert again.test_accuracy == first.test_accuracy
    assert again.label_accuracy == first.label_accuracy
    assert again.accuracy_per_stage == first.accuracy_per_stage


@pytest.mark.parametrize(("overrides", "match"), [
    ({"mode": "private-ish"}, "mode must be one of"),
    ({"epsilon": 0.0}, "epsilon"),
    ({"epsilon": -1.0}, "epsilon"),
    ({"epsilon": math.inf}, "epsilon"),
    ({"stages": 0}, "stages"),
    ({"stage_size": 1}, "stage_size"),
    ({"label_epsilon": 1.0}, "label_epsilon applies to mode='sound'"),
    ({"mode": "sound", "label_epsilon": 0.0}, "label_epsilon"),
    ({"mode": "sound", "sound_generator": GeneratorConfig(beta=0.0)}, "sound_generator.beta"),
    ({"mode": "sound", "statistics": StatisticsConfig(epsilon_share=0.0)},
     "sound_generator.beta"),
    ({"threshold": 1.0}, "threshold"),
    ({"dataset": "cifar"}, "dataset"),
])
def test_bad_config_is_refused_by_name(overrides: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tiny(**overrides)


def test_config_round_trips_to_json() -> None:
    config = tiny(mode="sound", epsilon=1.0)
    data = json.loads(json.dumps(config.to_dict()))
    assert data["mode"] == "sound" and data["label_epsilon"] == 10.0
    assert data["dp_teacher"]["architecture"] == "vgg"
    assert DpdfdConfig.small(dataset="mnist").dp_teacher.architecture.value == "scatter-cnn"
    assert DpdfdConfig.paper().teacher.architecture.value == "resnet34"
    assert DpdfdMode("sound").epsilon_kind == "record-level"


def test_small_preset_trains_the_fashion_teacher_longer_only_there() -> None:
    """The published teacher: 6 epochs on Fashion-MNIST, 2 on MNIST, 10 on the digits."""
    epochs = {d: DpdfdConfig.small(dataset=d).teacher.training.epochs
              for d in ("digits", "mnist", "fashion-mnist")}
    assert epochs == {"digits": 10, "mnist": 2, "fashion-mnist": 6}
    assert DpdfdConfig.small(dataset="fashion-mnist", teacher=DpdfdConfig.small().teacher) \
        .teacher.training.epochs == 2  # an override wins


def test_small_preset_gives_published_28x28_runs_more_stages_only() -> None:
    """300 stages for published MNIST / Fashion-MNIST; 100 for sound runs, 20 on the digits."""
    stages = {(d, m): DpdfdConfig.small(dataset=d, mode=m).stages
              for d in ("digits", "mnist", "fashion-mnist") for m in ("published", "sound")}
    assert stages == {("digits", "published"): 20, ("digits", "sound"): 20,
                      ("mnist", "published"): 300, ("mnist", "sound"): 100,
                      ("fashion-mnist", "published"): 300, ("fashion-mnist", "sound"): 100}
    assert DpdfdConfig.small(dataset="fashion-mnist").stages == 300  # published by default
    assert DpdfdConfig.small(dataset="fashion-mnist", stages=7).stages == 7  # an override wins
    with pytest.raises(ValueError, match="mode"):
        DpdfdConfig.small(dataset="fashion-mnist", mode="neither")


def _cli(tmp_path: Path, *extra: str) -> list[str]:
    return ["run", "dpdfd", "--stages", "2", "--stage-size", "16", "--teacher-epochs", "1",
            "--generator-steps", "2", "--quiet", "--out", str(tmp_path / "out"), *extra]


def test_cli_run_writes_a_record(tmp_path: Path, capsys) -> None:
    assert main(_cli(tmp_path, "--mode", "published", "--epsilon", "5")) == 0
    record = json.loads((tmp_path / "out" / "result.json").read_text())
    assert record["method"] == "dpdfd" and record["mode"] == "published"
    assert record["epsilon_record_level"] is None and record["labels"] == 32
    assert record["command"].startswith("dpkd run dpdfd")
    assert "inf (not DP at record level)" in capsys.readouterr().out


@pytest.mark.parametrize(("extra", "message"), [
    (("--mode", "secret"), "invalid choice"),
    (("--epsilon", "0"), "must be a finite number > 0"),
    (("--epsilon", "nan"), "must be a finite number > 0"),
    (("--stages", "0"), "must be an integer >= 1"),
    (("--mode", "published", "--label-epsilon", "2"), "--label-epsilon applies to --mode sound"),
    (("--mode", "published", "--statistics-share", "0.2"), "applies to sound runs only"),
    (("--mode", "sound", "--statistics-share", "1"), "must be a number in [0, 1)"),
    (("--label-loss", "mse"), "invalid choice"),
    (("--mode", "published", "--no-student-from-teacher"), "applies to sound runs only"),
    (("--mode", "published", "--dp-architecture", "vgg"), "applies to sound runs only"),
])
def test_cli_bad_input_fails_before_any_work(tmp_path: Path, capsys, extra: tuple,
                                             message: str) -> None:
    code = None
    try:
        code = main(_cli(tmp_path, *extra))
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_cli_published_refused_by_a_finite_ledger_file(tmp_path: Path, capsys) -> None:
    path = tmp_path / "budget.sqlite"
    Ledger(epsilon=5.0, path=path).close()
    assert main(_cli(tmp_path, "--mode", "published", "--ledger", str(path))) == 2
    assert "finite budget" in capsys.readouterr().err
    assert Ledger.open(path).charges() == []
    assert not (tmp_path / "out").exists()


def test_cli_sweep_shares_the_teacher_between_published_runs(tmp_path: Path, monkeypatch,
                                                             capsys) -> None:
    calls: list[float] = []
    original = dpdfd.pipeline.prepare

    def counting(config, **kwargs):
        calls.append(config.epsilon)
        return original(config, **kwargs)

    # the module, not the function dpdfd.sweep that shadows it in the package namespace
    monkeypatch.setattr(importlib.import_module("dpkd_audit.pipelines.dpdfd.sweep"), "prepare",
                        counting)
    out = tmp_path / "sweep"
    argv = ["sweep", "dpdfd", "--epsilons", "1,4", "--stages", "2", "--stage-size", "16",
            "--teacher-epochs", "1", "--generator-steps", "2", "--quiet", "--out", str(out)]
    assert main(argv) == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [r["epsilon"] for r in records] == [1.0, 4.0]
    assert calls == [1.0]  # one teacher and generator for both epsilons
    assert all(r["shared_stages"] == ["data", "teacher", "generator"] for r in records)
    assert records[0]["teacher_accuracy"] == records[1]["teacher_accuracy"]
    assert (out / "accuracy.png").stat().st_size > 0
    assert "What epsilon means here" in (out / "README.md").read_text()
    assert main(argv) == 2  # an existing results.jsonl is refused without --resume / --force
    assert "--resume" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0  # nothing left to run
    assert len((out / "results.jsonl").read_text().splitlines()) == 2


def test_unbounded_ledger_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "published.sqlite"
    with pytest.raises(ValueError, match="epsilon"):  # an infinite budget is opt-in
        Ledger(epsilon=math.inf, path=path)
    with pytest.raises(ValueError, match=r"unbounded=True needs epsilon=math\.inf"):
        Ledger(epsilon=5.0, unbounded=True)
    ledger = Ledger(epsilon=math.inf, unbounded=True, path=path)
    ledger.charge(_dp.NonPrivateDpEvent(), label="teacher without noise")
    ledger.close()
    again = Ledger.open(path)
    assert math.isinf(again.epsilon) and len(again.charges()) == 1
    assert math.isinf(float(again.spent().epsilon))
    with pytest.raises(Exception, match="holds a ledger for epsilon=inf"):
        Ledger(epsilon=5.0, path=path)  # the stored identity is checked as for any budget


def test_label_rng_depends_on_seed_mode_and_epsilon() -> None:
    draws = {(m, e, s): label_rng(tiny(mode=m, epsilon=e, seed=s)).integers(0, 2**62)
             for m in ("published", "sound") for e in (1.0, 2.0) for s in (0, 1)}
    assert len(set(draws.values())) == len(draws)
    assert label_rng(tiny(epsilon=1.0)).integers(0, 2**62) == draws[("published", 1.0, 0)]
    assert np.isfinite(list(draws.values())).all()


def test_cli_label_loss_and_statistics_share_reach_the_config(tmp_path: Path) -> None:
    argv = _cli(tmp_path, "--mode", "sound", "--epsilon", "2", "--label-loss", "kl",
                "--statistics-share", "0", "--json")
    assert main(argv) == 0
    record = json.loads((tmp_path / "out" / "result.json").read_text())
    assert record["config"]["student"]["loss"] == "kl"
    assert record["statistics"] is None and len(record["charges"]) == 1
    assert record["config"]["sound_generator"]["beta"] == 0.0
    assert record["config"]["student_from_teacher"] is True  # the sound default
    argv = _cli(tmp_path / "scratch", "--mode", "sound", "--epsilon", "2",
                "--no-student-from-teacher")
    assert main(argv) == 0
    record = json.loads((tmp_path / "scratch" / "out" / "result.json").read_text())
    assert record["config"]["student_from_teacher"] is False


def test_the_published_student_never_starts_from_the_teacher() -> None:
    assert not tiny(mode="published", epsilon=2.0).active_student_from_teacher
    assert tiny(mode="sound", epsilon=2.0).active_student_from_teacher
    with pytest.raises(ValueError, match="student_from_teacher must be True or False"):
        tiny(mode="sound", epsilon=2.0, student_from_teacher="yes")


def test_the_student_from_the_teacher_trains_at_its_own_learning_rate(monkeypatch) -> None:
    sound = tiny(mode="sound", epsilon=2.0)
    assert sound.student_from_teacher_learning_rate == 3e-4
    assert sound.active_student.learning_rate == 3e-4
    assert sound.active_student == dataclasses.replace(sound.student, learning_rate=3e-4)
    for config in (tiny(mode="published", epsilon=2.0),
                   tiny(mode="sound", epsilon=2.0, student_from_teacher=False),
                   tiny(mode="sound", epsilon=2.0, student_from_teacher_learning_rate=None)):
        assert config.active_student == config.student  # a fresh student keeps its own rate
    for bad in (0, -1e-3, math.nan, math.inf, True, "3e-4"):
        with pytest.raises(ValueError, match="student_from_teacher_learning_rate must be"):
            tiny(mode="sound", epsilon=2.0, student_from_teacher_learning_rate=bad)
    seen = []
    real = dpdfd.pipeline.StagedStudent

    def spy(*, config, **kwargs):
        seen.append((config.learning_rate, kwargs["initial_model"] is not None))
        return real(config=config, **kwargs)

    monkeypatch.setattr(dpdfd.pipeline, "StagedStudent", spy)
    config = tiny(mode="sound", epsilon=2.0, student_from_teacher_learning_rate=5e-4)
    run(config, ledger=ledger_for(config), rng=label_rng(config), progress=False)
    assert seen == [(5e-4, True)]


def test_cli_student_from_teacher_lr_reaches_the_config_and_is_refused_elsewhere(
        tmp_path: Path, capsys) -> None:
    argv = _cli(tmp_path, "--mode", "sound", "--epsilon", "2", "--student-from-teacher-lr",
                "1e-4")
    assert main(argv) == 0
    record = json.loads((tmp_path / "out" / "result.json").read_text())
    assert record["config"]["student_from_teacher_learning_rate"] == 1e-4
    for extra in (["--mode", "published"], ["--mode", "sound", "--no-student-from-teacher"]):
        assert main(_cli(tmp_path / "bad", *extra, "--epsilon", "2",
                         "--student-from-teacher-lr", "1e-4")) == 2
        assert "--student-from-teacher-lr applies to sound runs" in capsys.readouterr().err
        assert not (tmp_path / "bad" / "out").exists()


def test_dpkd_ledger_shows_an_unbounded_ledger_in_strict_json(tmp_path: Path, capsys) -> None:
    path = tmp_path / "published.sqlite"
    ledger = Ledger(epsilon=math.inf, unbounded=True, path=path)
    ledger.charge(_dp.NonPrivateDpEvent(), label="teacher without noise")
    ledger.close()
    assert main(["ledger", str(path)]) == 0
    text = capsys.readouterr().out
    assert "unbounded: it records, refuses nothing" in text and "remaining inf" in text
    assert main(["ledger", "--json", str(path)]) == 0
    shown = json.loads(capsys.readouterr().out)  # strict JSON: no Infinity
    assert shown["budget_epsilon"] is None and shown["unbounded"] is True
    assert shown["spent_epsilon"] is None


@pytest.mark.parametrize("fixture", ["published", "sound"])
def test_sweep_plan_is_exactly_what_a_run_charges(fixture, request) -> None:
    """dpkd sweep --ledger charges the plan up front: it must equal the run's own charges."""
    from dpkd_audit.pipelines.dpdfd.sweep import check_configs, planned_run_events

    config, ledger, _ = request.getfixturevalue(fixture)
    planned = planned_run_events(config, check_configs([config]))
    assert flat_events(planned) == flat_events(c.event for c in ledger.charges())
