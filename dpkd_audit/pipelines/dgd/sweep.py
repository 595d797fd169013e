"""Several DGD runs (query counts x record-level epsilons x modes x seeds) sharing stages.

Every run of a seed shares the teacher ensemble (it depends on neither the queries nor the
budget: only LNMax releases it). Published runs of a seed also share the baseline, the
generator, the synthetic set and the VAE: only the queries and the student are redone. A sound
run's DP baseline is calibrated to its own budget, so it trains its own (and its own generator
and VAE). Each run has its own budget (a fresh ledger from
:func:`~dpkd_audit.pipelines.dgd.pipeline.ledger_for`): releasing all of them on the same
private data would compose, which the sweep's README says.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import torch

from dpkd_audit import _validate
from dpkd_audit.pipelines.common.loading import LoadedData
from dpkd_audit.pipelines.common.planning import planned_by_check
from dpkd_audit.pipelines.dgd.config import DgdConfig, DgdMode
from dpkd_audit.pipelines.dgd.pipeline import (
    PREPARED_STAGES,
    DgdResult,
    EnsembleStage,
    Prepared,
    check_run,
    check_shards,
    ensemble_key,
    label_rng,
    ledger_for,
    load_data,
    preparation_key,
    prepare,
    prepare_ensemble,
    run,
)

__all__ = ["check_configs", "sweep", "sweep_configs"]


def sweep_configs(base: DgdConfig, *, modes: Sequence[DgdMode | str], seeds: Sequence[int],
                  queries: Sequence[int] = (), epsilons: Sequence[float] = ()
                  ) -> list[DgdConfig]:
    """The grid, seed-major, then mode.

    Published points: one per query count (``queries`` required). Sound points: one per
    record-level epsilon (``epsilons`` required), times each query count if ``queries`` is
    given, else with the most queries that fit ``base.query_share`` of the budget.

    Raises:
        ValueError: For an empty list or a bad value (naming the sweep point).
    """
    if not modes or not seeds:
        raise ValueError("modes and seeds must each hold at least one value")
    modes = [DgdMode(m) if not isinstance(m, DgdMode) else m for m in modes]
    if DgdMode.PUBLISHED in modes and not queries:
        raise ValueError("published DGD points need query counts (--queries), e.g. "
                         "27,400,750,1300")
    if DgdMode.SOUND in modes and not epsilons:
        raise ValueError("sound DGD points need record-level epsilons (--epsilons), e.g. 1,3,10")
    configs = []
    for seed in seeds:
        _validate.check_int("seed", seed, minimum=0)
        for mode in modes:
            if mode is DgdMode.PUBLISHED:
                for count in queries:
                    configs.append(dataclasses.replace(base, mode=mode, seed=seed,
                                                       queries=count, epsilon=None))
            else:
                for eps in epsilons:
                    for count in (queries or [None]):
                        configs.append(dataclasses.replace(base, mode=mode, seed=seed,
                                                           queries=count, epsilon=eps))
    return configs


def check_configs(configs: Sequence[DgdConfig], *, data_dir: str | os.PathLike | None = None,
                  progress: bool = False) -> dict[Any, LoadedData]:
    """Check every point before any work: the data, its shards, and that its ledger can pay.

    Returns:
        The loaded datasets keyed by dataset, for :func:`sweep` and ``run(data=...)``.

    Raises:
        ValueError: For an empty list, a non-config, or a point refused (naming it).
        DatasetNotFoundError: If the dataset files are missing.
    """
    configs = list(configs)
    if not configs or not all(isinstance(c, DgdConfig) for c in configs):
        raise ValueError("configs must be a non-empty sequence of DgdConfig")
    loaded: dict[Any, LoadedData] = {}
    for config in configs:
        if config.dataset not in loaded:
            loaded[config.dataset] = load_data(config, data_dir=data_dir, progress=progress)
        dataset = loaded[config.dataset].dataset
        try:
            check_run(config, ledger_for(config), num_private=dataset.n_train,
                      num_classes=dataset.num_classes, image_shape=dataset.image_shape)
            check_shards(config, dataset.train_images)
        except ValueError as exc:
            raise ValueError(f"{exc} (sweep point mode={config.mode.value}, queries="
                             f"{config.queries!r}, epsilon={config.epsilon!r}, seed="
                             f"{config.seed})") from exc
    return loaded


def sweep(configs: Sequence[DgdConfig], *, device: torch.device | str | None = None,
          data_dir: str | os.PathLike | None = None,
          checked: Mapping[Any, LoadedData] | None = None,
          progress: bool = False, stages: Mapping[Any, Any] | None = None,
          only: Collection[int] | None = None) -> Iterator[DgdResult]:
    """Run ``configs`` in order, yielding each result as soon as it exists.

    Every run gets its own ledger and its own query-noise Generator
    (:func:`~dpkd_audit.pipelines.dgd.pipeline.label_rng`), so one point reruns identically
    with ``dpkd run dgd``. ``stages`` (:func:`stages_of`) are shared stages computed
    elsewhere, used instead of computing them; ``only`` runs the configs at these indices alone
    (the others still count for what is shared), for one Ray task per run.
    """
    configs = list(configs)
    if checked is None:
        checked = check_configs(configs, data_dir=data_dir, progress=progress)
    missing = sorted({c.dataset.value for c in configs if c.dataset not in checked})
    if missing:
        raise ValueError("checked must hold the data of every config (the result of "
                         f"check_configs(configs)); missing {', '.join(missing)}")
    per_preparation = Counter(preparation_key(c) for c in configs
                              if c.mode is DgdMode.PUBLISHED)
    per_ensemble = Counter(ensemble_key(c) for c in configs)
    per_data = Counter(c.dataset for c in configs)
    ensembles: dict[tuple[Any, ...], EnsembleStage] = {}
    prepared: dict[tuple[Any, ...], Prepared] = {}
    given = stages or {}
    for index, config in enumerate(configs):
        if only is not None and index not in only:
            continue
        data = checked[config.dataset]
        shared: tuple[str, ...] = ("data",) if per_data[config.dataset] > 1 else ()
        share_ensemble = None
        if per_ensemble[ensemble_key(config)] > 1:
            key = ensemble_key(config)
            if key not in ensembles:
                ensembles.clear()  # one ensemble in memory at a time
                ensembles[key] = given[("ensemble", key)] if ("ensemble", key) in given \
                    else prepare_ensemble(config, data=data, device=device, progress=progress)
            share_ensemble = ensembles[key]
            shared = ("data", "shards", "ensemble")
        share = None
        if config.mode is DgdMode.PUBLISHED and per_preparation[preparation_key(config)] > 1:
            key = preparation_key(config)
            if key not in prepared:
                prepared.clear()
                prepared[key] = given[("prepared", key)] if ("prepared", key) in given \
                    else prepare(config, data=data, device=device, ensemble=share_ensemble,
                                 progress=progress)
            share = prepared[key]
            shared = tuple(s for s in PREPARED_STAGES if s in share.seconds)
        result = run(config, ledger=ledger_for(config), rng=label_rng(config), device=device,
                     data=data, prepared=share, ensemble=None if share else share_ensemble,
                     progress=progress)
        yield dataclasses.replace(result, shared_stages=shared)


def planned_run_events(config: DgdConfig, checked: Mapping[Any, LoadedData]) -> list[Any]:
    """The events ``config``'s run will charge, from its own pre-run check (``check_run``).

    ``checked`` is :func:`check_configs`'s result. Used to plan a whole sweep against one
    shared ledger before any run starts.
    """
    return planned_by_check(check_run, config, ledger_for(config), checked[config.dataset].dataset)


def stages_of(configs: Sequence[DgdConfig], *, checked: Mapping[Any, LoadedData],
              device: torch.device | str | None = None,
              progress: bool = False) -> dict[Any, Any]:
    """The stages ``configs`` share, each computed as :func:`sweep` computes it.

    Ensembles used by several runs (keyed ``("ensemble", key)``), and the baseline, generator
    and VAE of published runs that share them (``("prepared", key)``). For :func:`sweep`'s
    ``stages``: computed once (one Ray task), then passed to every run.
    """
    per_ensemble = Counter(ensemble_key(c) for c in configs)
    per_preparation = Counter(preparation_key(c) for c in configs
                              if c.mode is DgdMode.PUBLISHED)
    out: dict[Any, Any] = {}
    for config in configs:
        data = checked[config.dataset]
        ens_key = ("ensemble", ensemble_key(config))
        if per_ensemble[ens_key[1]] > 1 and ens_key not in out:
            out[ens_key] = prepare_ensemble(config, data=data, device=device, progress=progress)
        prep_key = ("prepared", preparation_key(config))
        if (config.mode is DgdMode.PUBLISHED and per_preparation[prep_key[1]] > 1
                and prep_key not in out):
            out[prep_key] = prepare(config, data=data, device=device,
                                    ensemble=out.get(ens_key), progress=progress)
    return out
