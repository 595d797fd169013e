"""DGD end to end (papers/dgd-discriminative-generative-distillation.txt), as published and sound.

Example (CPU, the embedded digits):
    >>> from dpkd_audit.pipelines.dgd import DgdConfig, label_rng, ledger_for, run
    >>> config = DgdConfig.small(dataset="digits", queries=100)
    >>> result = run(config, ledger=ledger_for(config), rng=label_rng(config))  # doctest: +SKIP
"""

from dpkd_audit.pipelines.dgd.config import PAPER_QUERIES, DgdConfig, DgdMode, Preset
from dpkd_audit.pipelines.dgd.pipeline import (
    DATA_DEPENDENT_RELEASE,
    METHOD,
    NOT_PRIVATE_REASON,
    PREPARED_STAGES,
    WITHHELD,
    DgdResult,
    EnsembleStage,
    Prepared,
    RunPlan,
    check_run,
    check_shards,
    ensemble_key,
    label_rng,
    ledger_for,
    load_data,
    preparation_key,
    prepare,
    prepare_ensemble,
    queries_epsilon,
    query_mechanism,
    run,
    shards_for,
)
from dpkd_audit.pipelines.dgd.queries import (
    LabelFilter,
    QuerySelection,
    kept_labels,
    select_queries,
)
from dpkd_audit.pipelines.dgd.student import (
    LabelledLoss,
    StudentInit,
    TnarConfig,
    TnarStudentResult,
    UnlabelledTerms,
    train_tnar_student,
)
from dpkd_audit.pipelines.dgd.sweep import check_configs, sweep, sweep_configs

__all__ = [
    "DATA_DEPENDENT_RELEASE",
    "METHOD",
    "NOT_PRIVATE_REASON",
    "PAPER_QUERIES",
    "PREPARED_STAGES",
    "WITHHELD",
    "DgdConfig",
    "DgdMode",
    "DgdResult",
    "EnsembleStage",
    "LabelFilter",
    "LabelledLoss",
    "Prepared",
    "Preset",
    "QuerySelection",
    "RunPlan",
    "StudentInit",
    "TnarConfig",
    "TnarStudentResult",
    "UnlabelledTerms",
    "check_configs",
    "check_run",
    "check_shards",
    "ensemble_key",
    "kept_labels",
    "label_rng",
    "ledger_for",
    "load_data",
    "preparation_key",
    "prepare",
    "prepare_ensemble",
    "queries_epsilon",
    "query_mechanism",
    "run",
    "select_queries",
    "shards_for",
    "sweep",
    "sweep_configs",
    "train_tnar_student",
]
