"""Reverse k-NN private labelling, end to end (papers/rknn-fine-grained-private-kd.txt).

Example (CPU, the embedded digits):
    >>> import numpy as np
    >>> from dpkd_audit.pipelines.rknn import RknnConfig, ledger_for, run
    >>> config = RknnConfig.small(dataset="digits", epsilon=1.0, clusters=20)
    >>> ledger = ledger_for(config)
    >>> result = run(config, ledger=ledger, rng=np.random.default_rng(0))  # doctest: +SKIP
"""

from dpkd_audit.pipelines.rknn.config import (
    DEFAULT_SHUFFLE_DELTA,
    CentralNoise,
    Preset,
    ReleaseMode,
    RknnConfig,
)
from dpkd_audit.pipelines.rknn.pipeline import (
    PREPARED_STAGES,
    LoadedSplits,
    Prepared,
    RknnResult,
    load_data,
    load_splits,
    prepare,
    release_rng,
    run,
    splits_key,
)
from dpkd_audit.pipelines.rknn.queries import Queries, nearest_queries, select_queries
from dpkd_audit.pipelines.rknn.release import (
    CountRelease,
    build_mechanisms,
    ledger_for,
    planned_events,
    release_counts,
    shuffle_local_epsilon,
)
from dpkd_audit.pipelines.rknn.sweep import check_configs, sweep, sweep_configs

__all__ = [
    "DEFAULT_SHUFFLE_DELTA",
    "PREPARED_STAGES",
    "CentralNoise",
    "CountRelease",
    "LoadedSplits",
    "Prepared",
    "Preset",
    "Queries",
    "ReleaseMode",
    "RknnConfig",
    "RknnResult",
    "build_mechanisms",
    "check_configs",
    "ledger_for",
    "load_data",
    "load_splits",
    "nearest_queries",
    "planned_events",
    "prepare",
    "release_counts",
    "release_rng",
    "run",
    "select_queries",
    "shuffle_local_epsilon",
    "splits_key",
    "sweep",
    "sweep_configs",
]
