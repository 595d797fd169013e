"""Audit reports: Markdown table and PNG plot built from records only."""

from __future__ import annotations

import math

import pytest

from dpkd_audit.reports.audit import audit_figure, audit_markdown_table, plot_audit

RECORDS = [
    {"mechanism": "Laplace", "epsilon_claimed": 1.0, "epsilon_lower": 0.98,
     "epsilon_estimate": 1.0, "violation": False, "samples_per_side": 10**6, "seconds": 1.2,
     "attack": "threshold"},
    {"mechanism": "HalfNoiseLaplace", "epsilon_claimed": 1.0, "epsilon_lower": 1.95,
     "violation": True, "true_epsilon": 2.0, "control": True},
    {"mechanism": "Collision", "epsilon_claimed": 1.0, "epsilon_lower": 0.0,
     "violation": False},
    {"mechanism": "NaiveFloatLaplace", "epsilon_claimed": 1.0, "epsilon_lower": math.inf,
     "violation": True, "true_epsilon": math.inf},
]


def test_markdown_table_has_one_row_per_record_and_verdicts():
    table = audit_markdown_table(RECORDS).splitlines()
    assert len(table) == 2 + len(RECORDS) + 2  # header, rows, blank line, per-audit note
    # the verdicts as the JSON records write them (one vocabulary: CLI, Markdown, HTML)
    assert "| Laplace | 1 | 0.98 | 0.98 | consistent |" in table[2]
    assert "| HalfNoiseLaplace (control) |" in table[3] and "| violation |" in table[3]
    assert "inconclusive" in table[4]  # a bound of 0 is never "ok"
    assert "| inf |" in table[5]
    assert "not jointly" in table[-1]


def test_plot_writes_a_png(tmp_path):
    path = plot_audit(RECORDS, tmp_path / "sub" / "audit.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_plot_refuses_empty_records(tmp_path):
    with pytest.raises(ValueError, match="records"):
        plot_audit([], tmp_path / "x.png")


def test_figure_is_log_scale_with_controls_grouped_last():
    import matplotlib.pyplot as plt

    fig = audit_figure(RECORDS)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"  # one row per audit, epsilon across
    names = [t.get_text() for t in ax.get_yticklabels()]
    assert names == ["Laplace", "Collision", "NaiveFloatLaplace", "HalfNoiseLaplace"]
    assert ax.yaxis_inverted()  # the first audit on top
    legend = ax.get_legend()  # below the axes: it covers no point
    assert legend.get_bbox_to_anchor().transformed(ax.transAxes.inverted()).y1 <= 0
    labels = ax.get_legend_handles_labels()[1]
    assert "true epsilon (controls)" in labels
    assert any("inconclusive" in label for label in labels)
    plt.close(fig)
