"""Several reverse k-NN runs (epsilons x modes x seeds) that share their private-free stages.

Each run is a separate experiment with its own budget (a fresh ledger from
:func:`~dpkd_audit.pipelines.rknn.release.ledger_for`): releasing all of them on the same
private data would compose, which the sweep's README says.

Every result's ``seconds`` mean what they mean for a run of its own (see
:mod:`~dpkd_audit.pipelines.rknn.pipeline`): the shared stages are measured once and reported
in each result that uses them, which ``shared_stages`` says.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

import torch

from dpkd_audit import _validate
from dpkd_audit.pipelines.rknn.config import ReleaseMode, RknnConfig
from dpkd_audit.pipelines.rknn.pipeline import (
    PREPARED_STAGES,
    LoadedSplits,
    Prepared,
    RknnResult,
    check_clusters,
    load_data,
    preparation_key,
    prepare,
    release_rng,
    run,
    splits_key,
)
from dpkd_audit.pipelines.rknn.release import ledger_for, planned_events

__all__ = ["check_configs", "sweep", "sweep_configs"]


def sweep_configs(base: RknnConfig, *, epsilons: Sequence[float],
                  modes: Sequence[ReleaseMode | str], seeds: Sequence[int]) -> list[RknnConfig]:
    """The grid of configs, seed-major (so that stages 1-3 are prepared once per seed).

    Delta is kept when given explicitly for shuffle modes and reset to each mode's default
    otherwise.

    Raises:
        ValueError: For an empty or invalid list.
    """
    if not epsilons or not modes or not seeds:
        raise ValueError("epsilons, modes and seeds must each hold at least one value")
    configs = []
    for seed in seeds:
        _validate.check_int("seed", seed, minimum=0)
        for mode in modes:
            for eps in epsilons:
                config = dataclasses.replace(base, epsilon=eps, mode=mode, seed=seed,
                                             delta=None)
                if base.mode.is_shuffle and config.mode.is_shuffle:
                    config = dataclasses.replace(config, delta=base.delta)
                configs.append(config)
    return configs


def check_configs(configs: Sequence[RknnConfig], *,
                  data_dir: str | os.PathLike | None = None,
                  progress: bool = False) -> dict[tuple[Any, ...], LoadedSplits]:
    """Check every config (point of a sweep, or one run) before any work.

    Checks the dataset files, ``clusters`` against the public set, and that the release of each
    point can be built (its mechanisms accept epsilon, delta, s and k). Each dataset is loaded
    once, timed as the ``data`` stage (:func:`~dpkd_audit.pipelines.rknn.pipeline.load_data`).

    Args:
        configs: The configs.
        data_dir: Where to look for the dataset files.
        progress: Stage messages on stderr while loading.

    Returns:
        The loaded splits, keyed by :func:`~dpkd_audit.pipelines.rknn.pipeline.splits_key`, for
        :func:`sweep` and :func:`~dpkd_audit.pipelines.rknn.pipeline.run` (``splits=``).

    Raises:
        ValueError: For an empty list, a non-config, or a point whose release is refused (the
            message names the parameter and the point).
        DatasetNotFoundError: If the dataset files are missing.
    """
    configs = list(configs)
    if not configs or not all(isinstance(c, RknnConfig) for c in configs):
        raise ValueError("configs must be a non-empty sequence of RknnConfig")
    splits_cache: dict[tuple[Any, ...], LoadedSplits] = {}
    for config in configs:
        key = splits_key(config)
        if key not in splits_cache:
            splits_cache[key] = load_data(config, data_dir=data_dir, progress=progress)
        splits = splits_cache[key].splits
        check_clusters(config, splits.public_indices.size)
        try:
            planned_events(config, num_private=splits.private_indices.size,
                           num_classes=splits.dataset.num_classes)
        except ValueError as exc:
            raise ValueError(f"{exc} (sweep point mode={config.mode.value}, "
                             f"epsilon={config.epsilon!r}, seed={config.seed})") from exc
    return splits_cache


def sweep(configs: Sequence[RknnConfig], *, device: torch.device | str | None = None,
          data_dir: str | os.PathLike | None = None,
          checked: Mapping[tuple[Any, ...], LoadedSplits] | None = None,
          progress: bool = False, stages: Mapping[Any, Any] | None = None,
          only: Collection[int] | None = None) -> Iterator[RknnResult]:
    """Run ``configs`` in order, yielding each result as soon as it exists.

    Stages 1-3 (:func:`~dpkd_audit.pipelines.rknn.pipeline.prepare`) are computed once per
    distinct (dataset, split, seed, representation, s, k) and reused; every run gets its own
    ledger and its own release Generator
    (:func:`~dpkd_audit.pipelines.rknn.pipeline.release_rng`, a function of the config alone,
    so one point reruns identically with ``dpkd run``). All configs are validated
    and the dataset files found before the first run starts.

    Args:
        configs: The points, in order (see :func:`sweep_configs`).
        device: Torch device ("cpu", "cuda", "cuda:N", "auto").
        data_dir: Where to look for MNIST / Fashion-MNIST files.
        checked: What :func:`check_configs` returned for these configs (or more), so that the
            data is not loaded twice; ``None`` checks them here.
        progress: Progress bars and stage messages on stderr.
        stages: Shared stages computed elsewhere (:func:`stages_of`), used instead of
            computing them (a Ray task of one run, the stages from the object store).
        only: Run only the configs at these indices (the others still count for what is
            shared, so each record says the same as in the whole sweep).

    Yields:
        One result per config; ``shared_stages`` names the stages measured once and shared
        with other results of this sweep.

    Raises:
        ValueError: For a bad config, or a ``checked`` that lacks a config's data.
    """
    configs = list(configs)
    if checked is None:
        checked = check_configs(configs, data_dir=data_dir, progress=progress)
    else:
        missing = sorted({str(splits_key(c)) for c in configs if splits_key(c) not in checked})
        if missing:
            raise ValueError("checked must hold the splits of every config (the result of "
                             f"check_configs(configs)); missing {', '.join(missing)}")
    per_preparation = collections.Counter(preparation_key(c) for c in configs)
    per_split = collections.Counter(splits_key(c) for c in configs)
    prepared: dict[tuple[object, ...], Prepared] = {}
    for index, config in enumerate(configs):
        if only is not None and index not in only:
            continue
        key = preparation_key(config)
        if key not in prepared:
            prepared.clear()  # keep one preparation in memory at a time
            prepared[key] = stages[key] if stages is not None and key in stages else prepare(
                config, device=device, splits=checked[splits_key(config)], progress=progress)
        if per_preparation[key] > 1:
            shared = tuple(s for s in PREPARED_STAGES if s in prepared[key].seconds)
        elif per_split[splits_key(config)] > 1:
            shared = ("data",)
        else:
            shared = ()
        result = run(config, ledger=ledger_for(config), rng=release_rng(config), device=device,
                     prepared=prepared[key], progress=progress)
        yield dataclasses.replace(result, shared_stages=shared)


def planned_run_events(config: RknnConfig, checked: Mapping[Any, LoadedSplits]) -> list[Any]:
    """The events ``config``'s run will charge (``planned_events``), for a sweep's one ledger.

    ``checked`` is :func:`check_configs`'s result.
    """
    splits = checked[splits_key(config)].splits
    return list(planned_events(config, num_private=splits.private_indices.size,
                               num_classes=splits.dataset.num_classes))


def stages_of(configs: Sequence[RknnConfig], *, checked: Mapping[Any, LoadedSplits],
              device: torch.device | str | None = None,
              progress: bool = False) -> dict[Any, Any]:
    """The stages ``configs`` share (stages 1-3 of each preparation used more than once).

    For :func:`sweep`'s ``stages``: computed once (one Ray task), then passed to every run.
    """
    counts = collections.Counter(preparation_key(c) for c in configs)
    out: dict[Any, Any] = {}
    for config in configs:
        key = preparation_key(config)
        if counts[key] > 1 and key not in out:
            out[key] = prepare(config, device=device, splits=checked[splits_key(config)],
                               progress=progress)
    return out
