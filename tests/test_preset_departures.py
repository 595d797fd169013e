"""``preset_departures``: how a run's config departs from its preset; tables mark it."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dpkd_audit.pipelines.common.config import preset_departures
from dpkd_audit.pipelines.dgd import DgdConfig
from dpkd_audit.pipelines.dpdfd import DpdfdConfig
from dpkd_audit.pipelines.rknn import RknnConfig
from dpkd_audit.reports.tables import DEPARTS_MARK, markdown_table, results_overview


@pytest.mark.parametrize("config", [
    DgdConfig.paper(dataset="mnist", queries=1300),
    DgdConfig.small(dataset="mnist", mode="sound", epsilon=1.0, seed=2),
    DpdfdConfig.paper(dataset="fashion-mnist", epsilon=10.0),
    DpdfdConfig.small(dataset="mnist", mode="sound", epsilon=1.0),
    RknnConfig.paper(dataset="mnist", epsilon=0.1),
    RknnConfig.small(dataset="digits", epsilon=1.0, mode="shuffle"),
])
def test_a_preset_as_it_stands_departs_from_nothing(config) -> None:
    assert preset_departures(config) == []


def test_a_shortened_paper_stage_is_named_with_the_presets_value() -> None:
    config = DgdConfig.paper(dataset="mnist", queries=27)
    cut = dataclasses.replace(config, ensemble=dataclasses.replace(config.ensemble, steps=300))
    assert preset_departures(cut) == ["ensemble.steps: 300 (preset: 3000)"]
    teacher = DpdfdConfig.paper(dataset="mnist", epsilon=1.0)
    short = dataclasses.replace(teacher, teacher=dataclasses.replace(
        teacher.teacher, training=dataclasses.replace(teacher.teacher.training, epochs=3)))
    assert preset_departures(short) == ["teacher.training.epochs: 3 (preset: 10)"]


def _record(departures: list[str] | None, seed: int) -> dict:
    record = {"method": "dgd", "dataset": "mnist", "mode": "published", "epsilon": 10.0,
              "epsilon_published": 9.9, "epsilon_record_level": None, "delta": 1e-5,
              "test_accuracy": 0.9, "seed": seed, "preset": "paper", "queries": 1300}
    if departures is not None:
        record["preset_departures"] = departures
    return record


def test_tables_mark_a_row_whose_run_departs_and_say_how(tmp_path) -> None:
    assert DEPARTS_MARK not in markdown_table([_record([], 0), _record(None, 1)])
    table = markdown_table([_record(["ensemble.steps: 300 (preset: 3000)"], 0),
                            _record([], 1)])
    assert f"paper {DEPARTS_MARK}" in table
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "results.jsonl").write_text(json.dumps(
        _record(["ensemble.steps: 300 (preset: 3000)"], 0)) + "\n")
    text = results_overview([folder])
    assert "Runs that depart from their preset" in text
    assert "dgd mnist published eps=10, seed 0: ensemble.steps: 300 (preset: 3000)" in text


def test_a_malformed_departures_field_is_refused_by_name(tmp_path) -> None:
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "results.jsonl").write_text(json.dumps(_record("steps", 0)) + "\n")
    with pytest.raises(ValueError, match=r"preset_departures.*a list of strings"):
        results_overview([folder])
