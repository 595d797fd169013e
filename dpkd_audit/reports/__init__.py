"""Reports built from saved result records: plots and tables.

Nothing here imports the pipelines or torch: reports are built from records (dicts / JSON lines)
only, so they can be regenerated from committed ``results.jsonl`` files.
"""

from __future__ import annotations

from dpkd_audit._lazy import lazy_attributes

#: Where each exported name lives; imported on first access (PEP 562), so that ``dpkd audit``
#: (which needs :mod:`.audit` only) does not load the sweep tables, records and accuracy plots.
_EXPORTS: dict[str, str] = {
    "accuracy_figure": "accuracy",
    "plot_accuracy": "accuracy",
    "audit_markdown_table": "audit",
    "plot_audit": "audit",
    "REQUIRED_KEYS": "records",
    "SETUP_KEYS": "records",
    "Metric": "records",
    "load_records": "records",
    "validate_record": "records",
    "PAPER_REFERENCES": "references",
    "PaperReference": "references",
    "references_for": "references",
    "COMPACT_COLUMNS": "tables",
    "PARTIAL_SECONDS_MARK": "tables",
    "TABLE_COLUMNS": "tables",
    "markdown_table": "tables",
    "results_overview": "tables",
    "rst_results": "tables",
    "seconds_note": "tables",
    "sweep_readme": "tables",
}

__all__ = [
    "COMPACT_COLUMNS",
    "PAPER_REFERENCES",
    "PARTIAL_SECONDS_MARK",
    "REQUIRED_KEYS",
    "SETUP_KEYS",
    "TABLE_COLUMNS",
    "Metric",
    "PaperReference",
    "accuracy_figure",
    "audit_markdown_table",
    "load_records",
    "markdown_table",
    "plot_accuracy",
    "plot_audit",
    "references_for",
    "results_overview",
    "rst_results",
    "seconds_note",
    "sweep_readme",
    "validate_record",
]


__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, globals())
