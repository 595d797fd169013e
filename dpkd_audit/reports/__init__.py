"""Reports built from saved result records: plots and tables.

Nothing here imports the pipelines or torch: reports are built from records (dicts / JSON lines)
only, so they can be regenerated from committed ``results.jsonl`` files.
"""

from dpkd_audit.reports.accuracy import accuracy_figure, plot_accuracy
from dpkd_audit.reports.audit import audit_markdown_table, plot_audit
from dpkd_audit.reports.records import (
    REQUIRED_KEYS,
    SETUP_KEYS,
    Metric,
    load_records,
    validate_record,
)
from dpkd_audit.reports.references import PAPER_REFERENCES, PaperReference, references_for
from dpkd_audit.reports.tables import (
    PARTIAL_SECONDS_MARK,
    TABLE_COLUMNS,
    markdown_table,
    results_overview,
    seconds_note,
    sweep_readme,
)

__all__ = [
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
    "seconds_note",
    "sweep_readme",
    "validate_record",
]
