"""Audit reports: Markdown table and PNG plot built from records only."""

from __future__ import annotations

import math

import pytest

from dpkd_audit.reports.audit import audit_markdown_table, plot_audit

RECORDS = [
    {"mechanism": "Laplace", "epsilon_claimed": 1.0, "epsilon_lower": 0.98,
     "epsilon_estimate": 1.0, "violation": False, "samples_per_side": 10**6, "seconds": 1.2,
     "attack": "threshold"},
    {"mechanism": "HalfNoiseLaplace", "epsilon_claimed": 1.0, "epsilon_lower": 1.95,
     "violation": True, "true_epsilon": 2.0},
    {"mechanism": "NaiveFloatLaplace", "epsilon_claimed": 1.0, "epsilon_lower": math.inf,
     "violation": True, "true_epsilon": math.inf},
]


def test_markdown_table_has_one_row_per_record_and_verdicts():
    table = audit_markdown_table(RECORDS).splitlines()
    assert len(table) == 2 + len(RECORDS)
    assert "| Laplace | 1 | 0.98 | 0.98 | ok |" in table[2]
    assert "VIOLATION" in table[3] and "| inf |" in table[4]


def test_plot_writes_a_png(tmp_path):
    path = plot_audit(RECORDS, tmp_path / "sub" / "audit.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_plot_refuses_empty_records(tmp_path):
    with pytest.raises(ValueError, match="records"):
        plot_audit([], tmp_path / "x.png")
