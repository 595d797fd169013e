"""DP-DFD end to end (papers/dp-dfd-data-free-distillation.txt), as published and sound.

Example (CPU, the embedded digits):
    >>> from dpkd_audit.pipelines.dpdfd import DpdfdConfig, label_rng, ledger_for, run
    >>> config = DpdfdConfig.small(dataset="digits", mode="sound", epsilon=3.0)
    >>> result = run(config, ledger=ledger_for(config), rng=label_rng(config))  # doctest: +SKIP
"""

from dpkd_audit.pipelines.dpdfd.config import (
    DEFAULT_LABEL_EPSILON,
    DpdfdConfig,
    DpdfdMode,
    Preset,
)
from dpkd_audit.pipelines.dpdfd.pipeline import (
    METHOD,
    NOT_PRIVATE_REASON,
    PREPARED_STAGES,
    DpdfdResult,
    LoadedData,
    Prepared,
    check_run,
    label_rng,
    ledger_for,
    load_data,
    planned_dp_sgd,
    preparation_key,
    prepare,
    run,
    statistics_release,
)
from dpkd_audit.pipelines.dpdfd.sweep import check_configs, sweep, sweep_configs

__all__ = [
    "DEFAULT_LABEL_EPSILON",
    "METHOD",
    "NOT_PRIVATE_REASON",
    "PREPARED_STAGES",
    "DpdfdConfig",
    "DpdfdMode",
    "DpdfdResult",
    "LoadedData",
    "Prepared",
    "Preset",
    "check_configs",
    "check_run",
    "label_rng",
    "ledger_for",
    "load_data",
    "planned_dp_sgd",
    "preparation_key",
    "prepare",
    "run",
    "statistics_release",
    "sweep",
    "sweep_configs",
]
