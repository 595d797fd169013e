"""Reverse k-NN private labelling, end to end (reverse k-NN paper, Algorithm 1 with T = 1).

1. Representation fitted on the public split only; private records are only mapped through it.
2. Queries: k-means of the public representations (s clusters), medoid queries.
3. Reverse k-NN: each private record's k nearest queries; label votes.
4. Private release of the s x |Y| counts (:mod:`dpkd_audit.pipelines.rknn.release`), charged to
   the ledger before it exists.
5. Noisy argmax per query; every public sample inherits its cluster's label; a student CNN is
   trained on the labelled public split and evaluated on the held-out student-test split
   (last epoch); with ``self_training_rounds``, fresh students then learn the previous one's
   predictions on the public split (post-processing, free in privacy).

Stages 1-3 do not depend on epsilon or the release mode: :func:`prepare` computes them once
and :func:`run` accepts the result, which is how sweeps reuse them.

Seconds mean the same in every record: ``seconds`` holds the wall-clock seconds of every stage
the result depends on (``data``: loading and splitting the dataset; ``representation``,
``queries``, ``reverse k-NN``; then this run's ``release``, ``labels``, ``student``) and
``total`` is their sum, i.e. what the run costs on its own. A stage computed once and reused by
several runs of a sweep is measured once and reported, with that one measurement, in every run
that uses it; the record's ``shared_stages`` names those stages (so summing ``total`` over a
sweep's rows over-counts them).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpkd_audit import _validate
from dpkd_audit.accountants import PureAccountant, ShuffleAccountant
from dpkd_audit.data import Splits, load_dataset, rknn_splits
from dpkd_audit.devices import describe_device, resolve_device
from dpkd_audit.events import event_to_json
from dpkd_audit.ledger import Ledger
from dpkd_audit.mechanisms.rknn import noisy_argmax
from dpkd_audit.pipelines.common.config import preset_departures
from dpkd_audit.pipelines.common.progress import StageTimer
from dpkd_audit.pipelines.common.representations import (
    RepresentationKind,
    fit_representation,
)
from dpkd_audit.pipelines.common.self_training import train_self_trained_student
from dpkd_audit.pipelines.purity import cluster_purity
from dpkd_audit.pipelines.rknn.config import ReleaseMode, RknnConfig
from dpkd_audit.pipelines.rknn.queries import Queries, nearest_queries, select_queries
from dpkd_audit.pipelines.rknn.release import planned_events, release_counts
from dpkd_audit.provenance import provenance

__all__ = [
    "EVALUATOR_NOTE",
    "PREPARED_STAGES",
    "LoadedSplits",
    "Prepared",
    "RknnResult",
    "check_clusters",
    "load_data",
    "load_splits",
    "preparation_key",
    "prepare",
    "release_rng",
    "run",
    "splits_key",
]

METHOD = "rknn"

#: What an evaluator-only file is (written beside the records, never part of them).
EVALUATOR_NOTE = (
    "NOT PRIVATE: evaluator-only diagnostics computed from the exact private vote counts "
    "without noise and without a charge to the ledger; for the experimenter, never to be "
    "published with the records")

#: Stages that do not depend on epsilon or the release mode (shared by the runs of a sweep).
PREPARED_STAGES: tuple[str, ...] = ("data", "representation", "queries", "reverse k-NN")


def check_clusters(config: RknnConfig, public_size: int) -> None:
    """Raise ``ValueError`` unless the public set can hold ``config``'s clusters.

    ``clusters`` must be <= the public set size and, for the ``umap`` representation, the
    public set must be larger than UMAP's ``neighbors``.
    """
    if config.clusters > public_size:
        raise ValueError(f"clusters must be <= the public set size {public_size} of "
                         f"{config.dataset.value}; got clusters={config.clusters}")
    neighbors = config.representation.manifold.neighbors
    if config.representation.kind is RepresentationKind.UMAP and public_size <= neighbors:
        raise ValueError(f"the umap representation needs more public images than its "
                         f"{neighbors} neighbours; the public set of {config.dataset.value} "
                         f"has {public_size}: raise --public-size or choose another "
                         "--representation")


def load_splits(config: RknnConfig, *, data_dir: str | os.PathLike | None = None) -> Splits:
    """Load the dataset and split it; check that ``clusters`` fits the public set."""
    dataset = load_dataset(config.dataset, data_dir=data_dir)
    splits = rknn_splits(dataset, seed=config.split_seed, public_size=config.public_size)
    check_clusters(config, splits.public_indices.size)
    return splits


def splits_key(config: RknnConfig) -> tuple[Any, ...]:
    """What the data stage depends on: dataset, public split size and split seed."""
    return (config.dataset, config.public_size, config.split_seed)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class LoadedSplits:
    """A dataset's splits and the wall-clock seconds it took to load and split it.

    Attributes:
        splits: The data split.
        seconds: Seconds of loading the dataset files and splitting them (the ``data`` stage).
    """

    splits: Splits
    seconds: float

    def __post_init__(self) -> None:
        if not isinstance(self.splits, Splits):
            raise ValueError(f"splits must be a Splits; got {type(self.splits).__name__}")
        if (isinstance(self.seconds, bool) or not isinstance(self.seconds, int | float)
                or not math.isfinite(self.seconds) or self.seconds < 0):
            raise ValueError(f"seconds must be a finite number >= 0; got {self.seconds!r}")


def load_data(config: RknnConfig, *, data_dir: str | os.PathLike | None = None,
              progress: bool = False) -> LoadedSplits:
    """:func:`load_splits`, timed as the ``data`` stage (with a stage message if ``progress``).

    Raises:
        ValueError: If ``clusters`` exceeds the public set.
        DatasetNotFoundError: If the dataset files are missing.
    """
    timer = StageTimer(verbose=progress)
    with timer.stage("data"):
        splits = load_splits(config, data_dir=data_dir)
    return LoadedSplits(splits=splits, seconds=timer.seconds["data"])


def _loaded(config: RknnConfig, splits: Splits | LoadedSplits | None, *,
            data_dir: str | os.PathLike | None, progress: bool) -> tuple[Splits, float | None]:
    """The splits of ``config`` and their load seconds (``None``: loaded by the caller, untimed).

    Splits passed in must be of the config's dataset and split seed, and hold enough public
    images for ``clusters``.
    """
    if splits is None:
        loaded = load_data(config, data_dir=data_dir, progress=progress)
        return loaded.splits, loaded.seconds
    if isinstance(splits, LoadedSplits):
        result, seconds = splits.splits, splits.seconds
    elif isinstance(splits, Splits):
        result, seconds = splits, None
    else:
        raise ValueError("splits must be a Splits, a LoadedSplits or None; got "
                         f"{type(splits).__name__}")
    if result.dataset.name is not config.dataset or result.seed != config.split_seed:
        raise ValueError(f"splits must be of dataset {config.dataset.value!r} with split seed "
                         f"{config.split_seed} (the config's); got dataset "
                         f"{result.dataset.name.value!r}, seed {result.seed}")
    check_clusters(config, result.public_indices.size)
    return result, seconds


def release_rng(config: RknnConfig) -> np.random.Generator:
    """The release Generator of a config: a function of (seed, mode, epsilon) only.

    ``dpkd run`` and ``dpkd sweep`` use it, so a sweep point reruns identically on its own.
    """
    epsilon_bits = int(np.float64(config.epsilon).view(np.uint64))
    mode_index = list(ReleaseMode).index(config.mode)
    return np.random.default_rng([config.seed, mode_index, epsilon_bits])


def preparation_key(config: RknnConfig) -> tuple[Any, ...]:
    """What stages 1-3 depend on: dataset, split, seed, representation, encoder, s, k."""
    return (config.dataset, config.public_size, config.split_seed, config.seed,
            config.representation, config.encoder, config.clusters, config.k)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Prepared:
    """Stages 1-3: representation, queries and reverse k-NN neighbours (no privacy spent).

    Attributes:
        key: What these stages depend on (dataset, split, seed, representation, s, k).
        splits: The data split.
        queries: The medoid queries and the public clusters.
        neighbours: ``(n_private, k)`` nearest queries of every private record.
        seconds: Seconds per stage (:data:`PREPARED_STAGES`; ``data`` is absent when the
            splits were passed in as a plain :class:`~dpkd_audit.data.Splits`, whose load
            time is unknown).
        device: Description of the torch device used.
    """

    key: tuple[Any, ...]
    splits: Splits
    queries: Queries
    neighbours: np.ndarray
    seconds: dict[str, float]
    device: str


def prepare(config: RknnConfig, *, device: torch.device | str | None = None,
            data_dir: str | os.PathLike | None = None,
            splits: Splits | LoadedSplits | None = None, progress: bool = False) -> Prepared:
    """Representation (public data only), queries and reverse k-NN neighbours.

    Args:
        config: The run configuration.
        device: Torch device for the learned encoder ("cpu", "cuda", ...).
        data_dir: Where to look for the dataset files.
        splits: Already loaded splits, to skip loading: from :func:`load_data` (their load
            seconds become the ``data`` stage) or :func:`load_splits` (no ``data`` stage).
        progress: Progress bars and stage messages on stderr.

    Raises:
        ValueError: For splits of another dataset or split seed, or too many clusters.
        DatasetNotFoundError: If the dataset files are missing.
    """
    torch_device = resolve_device(device)
    splits, data_seconds = _loaded(config, splits, data_dir=data_dir, progress=progress)
    timer = StageTimer(verbose=progress)
    if data_seconds is not None:
        timer.seconds["data"] = data_seconds
    with timer.stage("representation"):
        # The fit sees the public images and nothing else (tested).
        representation = fit_representation(
            config.representation, splits.public_images, seed=config.seed,
            device=torch_device, encoder=config.encoder, progress=progress)
        public = representation.transform(splits.public_images)
        private = representation.transform(splits.private_images)
    with timer.stage("queries"):
        queries = select_queries(public, config.clusters, seed=config.seed)
    with timer.stage("reverse k-NN"):
        neighbours = nearest_queries(queries.features, private, config.k)
    return Prepared(key=preparation_key(config), splits=splits, queries=queries,
                    neighbours=neighbours, seconds=dict(timer.seconds),
                    device=describe_device(torch_device))


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class RknnResult:
    """What one run measured and spent (see :meth:`to_record` for the JSON form).

    Attributes:
        config: The configuration.
        test_accuracy: Student accuracy on the student-test split, last epoch.
        test_accuracy_per_epoch: For learning-curve plots only (never for selection).
        label_accuracy: Share of public samples whose inherited label is right (a function
            of the noisy release and public data).
        cluster_purity: Share of public samples whose label is their cluster's most common
            public label: the best label accuracy any labelling of these clusters can reach,
            a function of public data only.
        self_trained_label_accuracy: Share of public samples whose label in the last
            self-training round is right (``None`` without self-training); a function of the
            release and public data.
        test_accuracy_per_round: Last-epoch test accuracy of the first student and of each
            self-training round's (the last is ``test_accuracy``).
        evaluator: Diagnostics computed from the **exact private counts** (not released:
            :meth:`to_evaluator_record`, never in :meth:`to_record`):
            ``label_accuracy_without_noise`` (the label accuracy of the exact vote argmax) and
            ``query_accuracy`` (share of queries whose released label equals it).
        epsilon_published: The epsilon the paper's analysis states for this release.
        epsilon_record_level: What the ledger's accountant proves at record level for this
            run's charges (equal here: the representation never saw private data).
        delta: Delta of both epsilons.
        local_epsilon: The clients' local epsilon (local and shuffle modes).
        mechanisms: Mechanism descriptions.
        charges: ``[{"label", "event"}]`` of this run's ledger charges.
        seconds: Seconds per stage the result depends on, plus ``total``, their sum (what
            the run costs on its own; see the module docstring). With a ``prepared`` input,
            :data:`PREPARED_STAGES` are the shared preparation's, counted in every run that
            uses it.
        device: Torch device description.
        sizes: Number of private, public and student-test records.
        provenance: Package version, git commit, time and library versions
            (:func:`dpkd_audit.provenance.provenance`, taken when the run finished).
        shared_stages: Stages whose seconds this run shares with other runs of a sweep
            (measured once, reported in each); empty for a run of its own.
    """

    config: RknnConfig
    test_accuracy: float
    test_accuracy_per_epoch: tuple[float, ...]
    label_accuracy: float
    cluster_purity: float
    self_trained_label_accuracy: float | None
    test_accuracy_per_round: tuple[float, ...]
    evaluator: dict[str, float]
    epsilon_published: float
    epsilon_record_level: float
    delta: float
    local_epsilon: float | None
    mechanisms: tuple[str, ...]
    charges: tuple[dict[str, Any], ...]
    seconds: dict[str, float]
    device: str
    sizes: dict[str, int]
    provenance: dict[str, Any]
    shared_stages: tuple[str, ...] = ()

    def to_record(self, *, command: str | None = None) -> dict[str, Any]:
        """The JSON result record (``result.json`` / one line of ``results.jsonl``).

        Every field is a function of the configuration, the noisy release, public data and
        the machine (tested), except the wall-clock ``seconds`` of the stages that read private
        data (a timing figure, not a statistic of it) and ``provenance``: nothing computed from
        the exact private counts. The release noise comes from :func:`release_rng`, a function
        of (seed, mode, epsilon) for reproducible experiments: whoever knows the seed can
        regenerate the noise, so a deployment must keep its seed secret.
        """
        cfg = self.config
        record_level = self.epsilon_record_level
        return {
            "method": METHOD,
            "dataset": cfg.dataset.value,
            "mode": cfg.mode.value,
            "epsilon": cfg.epsilon,
            "delta": self.delta,
            "test_accuracy": self.test_accuracy,
            "label_accuracy": self.label_accuracy,
            "cluster_purity": self.cluster_purity,
            "self_training_rounds": cfg.self_training_rounds,
            "self_trained_label_accuracy": self.self_trained_label_accuracy,
            "test_accuracy_per_round": list(self.test_accuracy_per_round),
            "epsilon_published": self.epsilon_published,
            "epsilon_record_level": record_level if math.isfinite(record_level) else None,
            "record_level_note": (
                "pure epsilon-DP at record level: the representation was fitted on public "
                "data only and each record votes into k queries (L1 sensitivity 2k)"
                if not cfg.mode.is_shuffle else
                "(epsilon, delta)-DP at record level in the shuffle model (one record per "
                "client); the representation was fitted on public data only"),
            "local_epsilon": self.local_epsilon,
            "clusters": cfg.clusters,
            "k": cfg.k,
            "representation": cfg.representation.kind.value,
            "preset": cfg.preset.value,
            "preset_departures": preset_departures(cfg),
            "seed": cfg.seed,
            "device": self.device,
            "mechanisms": list(self.mechanisms),
            "charges": list(self.charges),
            "seconds": self.seconds,
            "shared_stages": list(self.shared_stages),
            "sizes": self.sizes,
            "test_accuracy_per_epoch": list(self.test_accuracy_per_epoch),
            "config": cfg.to_dict(),
            "command": command,
            "provenance": self.provenance,
        }

    def to_evaluator_record(self, *, command: str | None = None) -> dict[str, Any]:
        """Evaluator-only diagnostics (``evaluator.json`` / ``evaluator.jsonl``): NOT private.

        Computed from the exact private vote counts without noise and released without a
        charge: for whoever runs the experiment, never to be published with the record.
        """
        cfg = self.config
        return {"evaluator_only": True, "note": EVALUATOR_NOTE, "method": METHOD,
                "dataset": cfg.dataset.value, "mode": cfg.mode.value, "epsilon": cfg.epsilon,
                "seed": cfg.seed, "clusters": cfg.clusters, "k": cfg.k,
                **self.evaluator, "command": command}


def _record_level_epsilon(config: RknnConfig, events: tuple[Any, ...]) -> float:
    accountant = (ShuffleAccountant(config.delta) if config.mode is ReleaseMode.SHUFFLE
                  else PureAccountant())
    for event in events:
        accountant.compose(event)
    return float(accountant.get_epsilon(config.delta))


def _targets(estimated: np.ndarray, query_labels: np.ndarray, assignment: np.ndarray,
             *, soft: bool) -> np.ndarray:
    if not soft:
        return query_labels[assignment]
    clipped = np.clip(estimated, 0.0, None)
    totals = clipped.sum(axis=1, keepdims=True)
    uniform = np.full_like(clipped, 1.0 / clipped.shape[1])
    soft_rows = np.where(totals > 0, clipped / np.where(totals > 0, totals, 1.0), uniform)
    return soft_rows[assignment].astype(np.float32)


def run(config: RknnConfig, *, ledger: Ledger, rng: np.random.Generator,
        device: torch.device | str | None = None, data_dir: str | os.PathLike | None = None,
        splits: Splits | LoadedSplits | None = None, prepared: Prepared | None = None,
        progress: bool = False) -> RknnResult:
    """Run reverse k-NN labelling and the student; the release is charged to ``ledger``.

    Checks (before any work): the config, the dataset files, ``clusters`` against the public
    set size, the device, and that the ledger can pay for the planned release.

    Args:
        config: The run configuration.
        ledger: Budget filter charged for the release (see
            :func:`~dpkd_audit.pipelines.rknn.release.ledger_for` for one that fits the mode).
        rng: Generator of the release noise and of tie-breaking.
        device: Torch device ("cpu", "cuda", "cuda:N", "auto").
        data_dir: Where to look for MNIST / Fashion-MNIST files.
        splits: Already loaded splits (from :func:`load_data`, e.g. by
            :func:`~dpkd_audit.pipelines.rknn.sweep.check_configs`), to skip loading.
        prepared: Stages 1-3 from :func:`prepare` with the same dataset, split, seed,
            representation, s and k (e.g. in a sweep over epsilon or mode).
        progress: Progress bars and stage messages on stderr.

    Raises:
        ValueError: For bad arguments or a ``prepared`` that does not match ``config``.
        DatasetNotFoundError: If the dataset files are missing.
        BudgetExceededError: If the ledger cannot pay for the release (before any work).
    """
    if not isinstance(config, RknnConfig):
        raise ValueError(f"config must be an RknnConfig; got {type(config).__name__}")
    if not isinstance(ledger, Ledger):
        raise ValueError(f"ledger must be a dpkd_audit Ledger; got {type(ledger).__name__}")
    rng = _validate.check_generator(rng)
    torch_device = resolve_device(device)
    timer = StageTimer(verbose=progress)
    if prepared is not None:
        if not isinstance(prepared, Prepared) or prepared.key != preparation_key(config):
            raise ValueError("prepared must come from prepare() with the same dataset, split, "
                             "seed, representation, clusters and k as config")
        loaded: Splits | LoadedSplits = prepared.splits
        timer.seconds.update(prepared.seconds)  # stages 1-3, computed once and reused
    else:
        split_data, data_seconds = _loaded(config, splits, data_dir=data_dir,
                                           progress=progress)
        loaded = (split_data if data_seconds is None
                  else LoadedSplits(splits=split_data, seconds=data_seconds))
    splits = loaded.splits if isinstance(loaded, LoadedSplits) else loaded
    num_classes = splits.dataset.num_classes
    num_private = splits.private_indices.size
    ledger.check(planned_events(config, num_private=num_private, num_classes=num_classes),
                 label=f"planned reverse k-NN release ({config.mode.value})")
    if prepared is None:
        prepared = prepare(config, device=torch_device, splits=loaded, progress=progress)
        timer.seconds.update(prepared.seconds)
    charged_before = len(ledger.charges())
    with timer.stage("release"):
        released = release_counts(prepared.neighbours, splits.private_labels, config=config,
                                  num_classes=num_classes, ledger=ledger, rng=rng,
                                  progress=progress)
    with timer.stage("labels"):
        query_labels = noisy_argmax(released.estimated, rng=rng)
        clean_labels = np.argmax(released.true_counts, axis=1)
        assignment = prepared.queries.assignment
        public_truth = splits.public_labels
        label_accuracy = float(np.mean(query_labels[assignment] == public_truth))
        purity = cluster_purity(assignment, public_truth, num_classes)
        # evaluator-only: functions of the exact private counts (never in the record)
        evaluator = {
            "label_accuracy_without_noise": float(np.mean(clean_labels[assignment]
                                                          == public_truth)),
            "query_accuracy": float(np.mean(query_labels == clean_labels))}
        targets = _targets(released.estimated, query_labels, assignment,
                           soft=config.soft_labels)
    with timer.stage("student"):
        trained = train_self_trained_student(
            splits.public_images, targets, rounds=config.self_training_rounds,
            num_classes=num_classes, test_images=splits.student_test_images,
            test_labels=splits.student_test_labels, config=config.student, seed=config.seed,
            device=torch_device, progress=progress)
        student = trained.student
        self_trained = (float(np.mean(trained.labels_per_round[-1] == public_truth))
                        if trained.labels_per_round else None)
    seconds = dict(timer.seconds)
    seconds["total"] = sum(seconds.values())
    return RknnResult(
        config=config,
        test_accuracy=float(student.test_accuracy),
        test_accuracy_per_epoch=tuple(float(a) for a in student.test_accuracy_per_epoch),
        label_accuracy=label_accuracy,
        cluster_purity=purity,
        self_trained_label_accuracy=self_trained,
        test_accuracy_per_round=trained.test_accuracy_per_round,
        evaluator=evaluator,
        epsilon_published=config.epsilon,
        epsilon_record_level=_record_level_epsilon(config, released.events),
        delta=config.delta,
        local_epsilon=released.local_epsilon,
        mechanisms=released.mechanisms,
        charges=tuple({"seq": c.seq, "label": c.label, "event": json.loads(event_to_json(c.event))}
                      for c in ledger.charges()[charged_before:]),
        seconds={k: round(v, 3) for k, v in seconds.items()},
        device=describe_device(torch_device),
        sizes={"private": num_private, "public": int(splits.public_indices.size),
               "student_test": int(splits.student_test_indices.size)},
        provenance=provenance(),
    )


def command_line() -> str:
    """The command line of this process (for records)."""
    return " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
