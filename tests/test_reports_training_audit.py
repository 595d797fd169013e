"""Pipeline-audit reports are built from records alone: table and plot."""

from __future__ import annotations

import numpy as np
import pytest

from dpkd_audit.reports.training_audit import (
    pipeline_audit_markdown,
    plot_pipeline_audit,
    score_histogram,
)


def _record(**overrides):
    record = {"pipeline": "rknn", "dataset": "digits", "mode": "central", "estimator": "many-run",
              "epsilon_claimed": 1.0, "delta": 0.0, "epsilon_lower": 0.9517, "confidence": 0.95,
              "verdict": "consistent", "runs_per_side": 20000, "canaries": 1,
              "neighbouring": "replace-one: ...", "seconds": {"prepare": 1.5, "audit": 110.2},
              "side_labels": {"x": "x: label 4", "x_prime": "x': label 2"},
              "score_histogram": score_histogram([1, 2, 3, 3], [0, 1, 1, 2])}
    record.update(overrides)
    return record


def test_table_rows_carry_the_records_numbers():
    one_run = _record(pipeline="dgd", mode="sound", estimator="one-run",
                      stage="DP-SGD baseline", epsilon_claimed=9.3, delta=1e-5,
                      epsilon_lower=0.61, verdict="inconclusive", canaries=1000, correct=80,
                      guesses=100, seconds={"train": 95.0}, epsilon_lower_fdp=0.93,
                      epsilon_lower_gaussian=1.2345)
    table = pipeline_audit_markdown([_record(), one_run])
    rows = table.splitlines()
    assert "| f-DP bound | Gaussian estimate |" in rows[0]
    assert rows[2] == ("| rknn | digits | central | release path (counts, labels, label accuracy)"
                       " | 1 | 0 | 0.9517 | 0.952 | - | - | consistent | 20,000 runs per side | "
                       "112 |")
    assert rows[3] == ("| dgd | digits | sound | DP-SGD baseline | 9.3 | 1e-05 | 0.61 | 0.066 | "
                       "0.93 | 1.234 | inconclusive | one run, 1,000 canaries (80 / 100 guesses "
                       "right) | 95 |")
    assert "at 95% confidence" in table and "not evidence of privacy" in table
    assert "an estimate under that model, not a distribution-free bound" in table


def test_score_histogram_counts_every_score():
    hist = score_histogram(np.arange(10), np.arange(5, 15))
    assert sum(hist["x"]) == 10 and sum(hist["x_prime"]) == 10
    assert hist["edges"][0] == -0.5 and len(hist["edges"]) == 16  # one bin per integer
    real = score_histogram([0.1, 0.5], [0.3, 2.2], bins=7)
    assert len(real["edges"]) == 8 and sum(real["x"]) + sum(real["x_prime"]) == 4
    with pytest.raises(ValueError, match="finite"):
        score_histogram([np.nan], [1.0])


def test_plot_is_written(tmp_path):
    path = plot_pipeline_audit(_record(), tmp_path / "sub" / "audit.png")
    assert path.stat().st_size > 5_000
    one_run = _record(estimator="one-run", canaries=100, correct=8, guesses=10)
    assert plot_pipeline_audit(one_run, tmp_path / "b.png").exists()
    three = _record(estimator="one-run", canaries=100, correct=8, guesses=10,
                    epsilon_lower_fdp=1.4, epsilon_lower_gaussian=1.6)
    assert plot_pipeline_audit(three, tmp_path / "c.png").stat().st_size > 5_000
