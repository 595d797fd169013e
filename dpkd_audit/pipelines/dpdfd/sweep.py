"""Several DP-DFD runs (epsilons x modes x seeds) sharing what does not depend on epsilon.

Published runs of one seed share the teacher and the generator (neither depends on the
per-label epsilon); a sound run's DP-SGD teacher is calibrated to its own record-level epsilon,
so it trains its own. Each run has its own budget (a fresh ledger from
:func:`~dpkd_audit.pipelines.dpdfd.pipeline.ledger_for`): releasing all of them on the same
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
from dpkd_audit.pipelines.common.planning import planned_by_check
from dpkd_audit.pipelines.dpdfd.config import DpdfdConfig, DpdfdMode
from dpkd_audit.pipelines.dpdfd.pipeline import (
    PREPARED_STAGES,
    DpdfdResult,
    LoadedData,
    Prepared,
    check_run,
    label_rng,
    ledger_for,
    load_data,
    preparation_key,
    prepare,
    run,
)

__all__ = ["check_configs", "sweep", "sweep_configs"]


def sweep_configs(base: DpdfdConfig, *, epsilons: Sequence[float],
                  modes: Sequence[DpdfdMode | str], seeds: Sequence[int]) -> list[DpdfdConfig]:
    """The grid, seed-major then mode (so that published runs of a seed are adjacent).

    Raises:
        ValueError: For an empty list or a bad value (naming the sweep point).
    """
    if not epsilons or not modes or not seeds:
        raise ValueError("epsilons, modes and seeds must each hold at least one value")
    configs = []
    for seed in seeds:
        _validate.check_int("seed", seed, minimum=0)
        for mode in modes:
            for eps in epsilons:
                sound = DpdfdMode(mode) is DpdfdMode.SOUND
                label = (base.label_epsilon if base.mode is DpdfdMode.SOUND else None) \
                    if sound else None
                configs.append(dataclasses.replace(base, epsilon=eps, mode=mode, seed=seed,
                                                   label_epsilon=label))
    return configs


def _data_key(config: DpdfdConfig) -> Any:
    return config.dataset


def check_configs(configs: Sequence[DpdfdConfig], *,
                  data_dir: str | os.PathLike | None = None,
                  progress: bool = False) -> dict[Any, LoadedData]:
    """Check every point before any work: the data, and that its own ledger can pay.

    Returns:
        The loaded datasets keyed by dataset, for :func:`sweep` and ``run(data=...)``.

    Raises:
        ValueError: For an empty list, a non-config, or a point refused (naming it).
        DatasetNotFoundError: If the dataset files are missing.
    """
    configs = list(configs)
    if not configs or not all(isinstance(c, DpdfdConfig) for c in configs):
        raise ValueError("configs must be a non-empty sequence of DpdfdConfig")
    loaded: dict[Any, LoadedData] = {}
    for config in configs:
        key = _data_key(config)
        if key not in loaded:
            loaded[key] = load_data(config, data_dir=data_dir, progress=progress)
        dataset = loaded[key].dataset
        try:
            check_run(config, ledger_for(config), num_private=dataset.n_train,
                      num_classes=dataset.num_classes, image_shape=dataset.image_shape)
        except ValueError as exc:
            raise ValueError(f"{exc} (sweep point mode={config.mode.value}, epsilon="
                             f"{config.epsilon!r}, seed={config.seed})") from exc
    return loaded


def sweep(configs: Sequence[DpdfdConfig], *, device: torch.device | str | None = None,
          data_dir: str | os.PathLike | None = None,
          checked: Mapping[Any, LoadedData] | None = None,
          progress: bool = False, stages: Mapping[Any, Any] | None = None,
          only: Collection[int] | None = None) -> Iterator[DpdfdResult]:
    """Run ``configs`` in order, yielding each result as soon as it exists.

    Every run gets its own ledger and its own label-noise Generator (:func:`~dpkd_audit.
    pipelines.dpdfd.pipeline.label_rng`), so one point reruns identically with ``dpkd run``.
    ``stages`` (:func:`stages_of`) are shared stages computed elsewhere, used instead of
    computing them; ``only`` runs the configs at these indices alone (the others still count
    for what is shared), for one Ray task per run.
    """
    configs = list(configs)
    if checked is None:
        checked = check_configs(configs, data_dir=data_dir, progress=progress)
    missing = sorted({str(_data_key(c)) for c in configs if _data_key(c) not in checked})
    if missing:
        raise ValueError("checked must hold the data of every config (the result of "
                         f"check_configs(configs)); missing {', '.join(missing)}")
    per_preparation = Counter(preparation_key(c) for c in configs
                              if c.mode is DpdfdMode.PUBLISHED)
    per_data = Counter(_data_key(c) for c in configs)
    prepared: dict[tuple[Any, ...], Prepared] = {}
    for index, config in enumerate(configs):
        if only is not None and index not in only:
            continue
        data = checked[_data_key(config)]
        shared: tuple[str, ...] = ("data",) if per_data[_data_key(config)] > 1 else ()
        share = None
        if config.mode is DpdfdMode.PUBLISHED and per_preparation[preparation_key(config)] > 1:
            key = preparation_key(config)
            if key not in prepared:
                prepared.clear()  # one preparation in memory at a time
                prepared[key] = stages[key] if stages is not None and key in stages else \
                    prepare(config, data=data, device=device, progress=progress)
            share = prepared[key]
            shared = PREPARED_STAGES
        result = run(config, ledger=ledger_for(config), rng=label_rng(config), device=device,
                     data=data, prepared=share, progress=progress)
        yield dataclasses.replace(result, shared_stages=shared)


def planned_run_events(config: DpdfdConfig, checked: Mapping[Any, LoadedData]) -> list[Any]:
    """The events ``config``'s run will charge, from its own pre-run check (``check_run``).

    ``checked`` is :func:`check_configs`'s result. Used to plan a whole sweep against one
    shared ledger before any run starts.
    """
    return planned_by_check(check_run, config, ledger_for(config),
                            checked[_data_key(config)].dataset)


def stages_of(configs: Sequence[DpdfdConfig], *, checked: Mapping[Any, LoadedData],
              device: torch.device | str | None = None,
              progress: bool = False) -> dict[Any, Any]:
    """The stages ``configs`` share (teacher and generator of published runs, by key).

    For :func:`sweep`'s ``stages``: computed once (one Ray task), then passed to every run.
    """
    counts = Counter(preparation_key(c) for c in configs if c.mode is DpdfdMode.PUBLISHED)
    out: dict[Any, Any] = {}
    for config in configs:
        key = preparation_key(config)
        if config.mode is DpdfdMode.PUBLISHED and counts[key] > 1 and key not in out:
            out[key] = prepare(config, data=checked[_data_key(config)], device=device,
                               progress=progress)
    return out
