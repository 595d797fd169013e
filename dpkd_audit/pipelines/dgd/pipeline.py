"""DGD end to end: teacher ensemble, baseline, generator, VAE, LNMax queries, TNAR student.

DGD paper (NOTES, "DGD"), Sec. III and IV:

1. **Teacher ensemble**: ``num_teachers`` teachers, teacher t on the records whose keyed hash
   falls in shard t (:func:`~dpkd_audit.pipelines.common.ensemble.shard_of_records`: adding or
   removing one record changes one shard and nothing else), trained batched.
2. **Baseline** on the whole private split, then a **data-free generator** fitted to it (DAFL's
   loss: cross-entropy to the argmax + 5 x batch-mean information entropy + 0.1 x activation),
   a synthetic set, a **VAE** (latent 32) on it. In ``published`` mode the baseline is trained
   without noise (the paper), and with ``generator_statistics='exact'`` (the small preset's
   departure) the generator also matches the private data's feature statistics read through
   it without noise; in ``sound`` mode with DP-SGD, its event charged first, and the generator
   matches statistics released through it with noise.
3. **Queries**: ``queries`` synthetic images (the first ones, as in the paper, or the
   baseline's most confident per class: :mod:`~dpkd_audit.pipelines.dgd.queries`) go to the
   ensemble; each label is
   released by :class:`~dpkd_audit.mechanisms.LaplaceNoisyMax` (Laplace scale 40 per count,
   eps0 = 2 / 40 = 0.05) and its event charged to the ledger before the label exists.
4. **Student**: cross-entropy on the labelled queries + tangent and normal adversarial
   regularization and entropy on the other synthetic images (or their VAE reconstructions:
   ``student.unlabelled_input``; :mod:`~dpkd_audit.pipelines.dgd.student`).

Accounting in the record:

- ``epsilon_published``: the paper's figure for the queries, Q eps0^2 + eps0 sqrt(-2 Q ln delta)
  (:func:`~dpkd_audit.accountants.advanced.dgd_published_epsilon`; 5.80 at 400 queries),
  plus eps1 when the optional latent-code perturbation is on (``latent_epsilon``; the paper's
  total, Sec. III-E), which protects one synthetic image and is charged to its own ledger;
  ``epsilon_queries_rdp`` / ``epsilon_queries_pld``: the same queries by RDP and PLD,
  data-independent (a sound figure for the queries alone); ``epsilon_data_dependent``: PATE's
  data-dependent analysis of the actual vote histograms
  (:class:`~dpkd_audit.accountants.PATEAccountant`), with ``data_dependent_release`` saying
  what publishing it costs: LNMax has no smooth-sensitivity release in PATE (2017, 2018), so
  that figure is itself a function of the private votes and is not DP to publish.
- ``published`` mode: ``epsilon`` = ``epsilon_published``; ``epsilon_record_level`` infinite
  with the reason (:data:`NOT_PRIVATE_REASON`): the baseline saw the private records without
  noise and the generator, the synthetic set, the VAE and the student all derive from it; the
  ledger records a ``NonPrivateDpEvent``. A ledger with a finite budget refuses the run before
  any work.
- ``sound`` mode: ``epsilon`` is the record-level target of the whole run at ``delta``; the
  baseline's DP-SGD noise is calibrated so that it and the queries compose to the target (RDP,
  add/remove-one neighbours); the generator sees only that DP baseline, so the synthetic set,
  the VAE and the student's unlabelled terms are post-processing. ``epsilon_record_level`` is
  the ledger's figure (RDP), PLD beside it, and both parts are in the record.

Seconds: ``data``, ``shards``, ``ensemble``, ``baseline``, ``statistics`` (sound mode, and
published mode with exact statistics), ``generator``, ``synthetic``, ``vae``, ``queries``,
``student``, ``total``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from typing import Any

import numpy as np
import torch
from dp_accounting import dp_event as _dp
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.accountants import PATEAccountant, PureAccountant
from dpkd_audit.accountants.advanced import dgd_published_epsilon
from dpkd_audit.accountants.base import NeighboringRelation
from dpkd_audit.devices import describe_device, resolve_device
from dpkd_audit.errors import BudgetExceededError
from dpkd_audit.events import event_to_json
from dpkd_audit.ledger import Ledger
from dpkd_audit.mechanisms import Gaussian, LaplaceNoisyMax, LatentCodeLaplace
from dpkd_audit.pipelines.common.config import preset_departures
from dpkd_audit.pipelines.common.dp_statistics import (
    FeatureStatistics,
    ReferenceStatistics,
    exact_feature_statistics,
    statistics_coordinates,
    statistics_mechanism,
    statistics_record,
)
from dpkd_audit.pipelines.common.dp_teacher import (
    DpSgdAccountant,
    DpSgdPlan,
    check_ledger_accountant,
    finite_or_none,
    plan_dp_sgd,
)
from dpkd_audit.pipelines.common.ensemble import (
    EnsembleResult,
    shard_of_records,
    train_ensemble,
)
from dpkd_audit.pipelines.common.generator import (
    GeneratorResult,
    GeneratorTrainer,
    generator_pixel_scale,
)
from dpkd_audit.pipelines.common.loading import LoadedData, load_generative_data
from dpkd_audit.pipelines.common.progress import StageTimer
from dpkd_audit.pipelines.common.source import fit_dp_source, fit_source
from dpkd_audit.pipelines.common.vae import VaeResult, train_vae
from dpkd_audit.pipelines.dgd.config import DgdConfig, DgdMode, GeneratorStatistics
from dpkd_audit.pipelines.dgd.queries import kept_labels, select_queries
from dpkd_audit.pipelines.dgd.student import StudentInit, train_tnar_student
from dpkd_audit.provenance import provenance

__all__ = [
    "DATA_DEPENDENT_RELEASE",
    "LATENT_UNIT",
    "METHOD",
    "NOT_PRIVATE_REASON",
    "PREPARED_STAGES",
    "WITHHELD",
    "DgdResult",
    "EnsembleStage",
    "Prepared",
    "RunPlan",
    "check_run",
    "check_shards",
    "ensemble_key",
    "label_rng",
    "ledger_for",
    "load_data",
    "preparation_key",
    "prepare",
    "prepare_ensemble",
    "queries_epsilon",
    "query_mechanism",
    "run",
    "shards_for",
    "statistics_release",
]

METHOD = "dgd"

#: Stages a sweep's published runs share (none depends on the number of queries).
PREPARED_STAGES: tuple[str, ...] = ("data", "shards", "ensemble", "baseline", "statistics",
                                    "generator", "synthetic", "vae")

#: Why a published run has no record-level guarantee (stored in the ledger and the record).
NOT_PRIVATE_REASON = (
    "published DGD: the baseline classifier is trained on the private records without noise and "
    "the generator is fitted to it, so the synthetic images, the VAE and the student's "
    "unlabelled training all derive from a non-private model; only the label queries are "
    "differentially private (their epsilon is in epsilon_queries_rdp), and the paper's "
    "'generative budget' eps1 protects one synthetic image, not a record")

#: What publishing the data-dependent epsilon costs.
DATA_DEPENDENT_RELEASE = (
    "not private to publish: PATE's data-dependent epsilon is a function of the private vote "
    "histograms, and LNMax has no smooth-sensitivity release (PATE 2018 gives one for GNMax "
    "only); shown for comparison with the paper, the record-level figures do not use it")


#: What the latent-code perturbation protects (stored in the record when it is on).
LATENT_UNIT = (
    "the paper's generative budget eps1: Laplace noise on the VAE codes of synthetic images "
    "protects one synthetic image (the unit of its Theorem), not a private record; charged to "
    "a synthetic-image-level ledger, added to epsilon_published as the paper does, and not part "
    "of the record-level figure")

#: Why a sound record leaves out the ensemble's accuracies and the data-dependent epsilon.
WITHHELD = (
    "sound mode: epsilon_data_dependent, teacher_accuracy_mean and ensemble_plurality_accuracy "
    "are left out of the record: they are functions of the teachers (or their votes) without "
    "noise, which epsilon_record_level does not cover")


def load_data(config: DgdConfig, *, data_dir: str | os.PathLike | None = None,
              progress: bool = False) -> LoadedData:
    """Load the config's dataset, timed as the ``data`` stage (sides multiples of 4).

    Raises:
        DatasetNotFoundError: If the files are missing.
        ValueError: If the image sides are not multiples of 4.
    """
    return load_generative_data(config.dataset, method="DGD", data_dir=data_dir,
                                progress=progress)


def query_mechanism(config: DgdConfig, num_classes: int) -> LaplaceNoisyMax:
    """LNMax with Laplace scale ``config.noise_scale`` per count (eps0 = 2 / scale)."""
    return LaplaceNoisyMax.from_noise_scale(config.noise_scale, num_classes)


def statistics_release(config: DgdConfig, image_shape: tuple[int, int]) -> Gaussian | None:
    """The sound mode's statistics mechanism (``None`` when disabled or in published mode).

    Args:
        config: The run's config.
        image_shape: (h, w) of the private images: the release's length depends on it
            (:func:`~dpkd_audit.pipelines.common.dp_statistics.statistics_coordinates`).
    """
    if config.mode is not DgdMode.SOUND or not config.statistics.enabled:
        return None
    return statistics_mechanism(
        config.statistics, target_epsilon=float(config.epsilon), delta=config.delta,
        coordinates=statistics_coordinates(config.statistics, config.dp_baseline, image_shape))


def _queries_event(config: DgdConfig, num_classes: int, queries: int) -> _dp.DpEvent:
    return _dp.SelfComposedDpEvent(query_mechanism(config, num_classes).event, queries)


def queries_epsilon(config: DgdConfig, num_classes: int, queries: int,
                    accountant: DpSgdAccountant | None = None) -> float:
    """Data-independent epsilon at ``config.delta`` of ``queries`` LNMax queries (add/remove).

    ``accountant``: RDP or PLD; by default the one of the run (``config.dp_sgd.accountant``).

    Under add/remove-one neighbours with hash shards one record changes one teacher's vote, so
    the vote histogram's L1 sensitivity is 2, as under replace-one (PATE 2017, Sec. 3.1).
    """
    instance = (config.dp_sgd.accountant if accountant is None else accountant).make()
    instance.compose(_queries_event(config, num_classes, queries))
    return float(instance.get_epsilon(config.delta))


def _most_queries(config: DgdConfig, num_classes: int, budget: float) -> int:
    """The largest Q whose epsilon (the run's accountant) is <= ``budget`` (0 if none)."""
    low, high = 0, 1
    while queries_epsilon(config, num_classes, high) <= budget:
        low, high = high, high * 2
        if high > 10**7:
            return low
    while high - low > 1:
        middle = (low + high) // 2
        if queries_epsilon(config, num_classes, middle) <= budget:
            low = middle
        else:
            high = middle
    return low


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunPlan:
    """What :func:`check_run` resolved before any work.

    Attributes:
        queries: The number of queries.
        dp_sgd: The sound mode's calibrated DP-SGD plan (``also`` = the queries), else
            ``None``.
    """

    queries: int
    dp_sgd: DpSgdPlan | None


def check_run(config: DgdConfig, ledger: Ledger, *, num_private: int, num_classes: int,
              image_shape: tuple[int, int]) -> RunPlan:
    """Check, before any work, the data size and that ``ledger`` can pay; resolve the plan.

    ``image_shape`` (h, w) of the private images sets the statistics release's length.

    Raises:
        ValueError: Too few records for the teachers, a sound budget the queries alone
            exhaust, a wrong neighbouring relation, or a plan no noise level meets.
        BudgetExceededError: A finite ledger for a published run (saying why), or a budget the
            run does not fit.
    """
    if not isinstance(ledger, Ledger):
        raise ValueError(f"ledger must be a dpkd_audit Ledger; got {type(ledger).__name__}")
    teachers = config.ensemble.num_teachers
    _validate.check_int("num_private", num_private, minimum=1)
    if num_private < teachers * config.min_shard:
        raise ValueError(
            f"ensemble.num_teachers={teachers} teachers do not divide the {num_private} private "
            f"records: each needs at least min_shard={config.min_shard} on average (at most "
            f"{num_private // config.min_shard} teachers); nothing was run or charged")
    mechanism = query_mechanism(config, num_classes)
    if config.mode is DgdMode.PUBLISHED:
        queries = int(config.queries)
        if math.isfinite(ledger.epsilon):
            raise BudgetExceededError(
                f"mode='published' refused by a ledger with a finite budget (epsilon="
                f"{ledger.epsilon:g}): {NOT_PRIVATE_REASON}. Its record-level epsilon is "
                "infinite; record it in an unbounded ledger (Ledger(epsilon=math.inf, "
                "unbounded=True), what dpkd run does without --ledger) or use mode='sound' for "
                "a finite one. Nothing was run or charged")
        ledger.check([_dp.NonPrivateDpEvent(),
                      _dp.SelfComposedDpEvent(mechanism.event, queries)],
                     label="published DGD")
        return RunPlan(queries=queries, dp_sgd=None)
    target = float(config.epsilon)
    if config.queries is None:
        queries = _most_queries(config, num_classes, config.query_share * target)
        if queries < 1:
            raise ValueError(
                f"one LNMax query at noise_scale={config.noise_scale:g} costs "
                f"{queries_epsilon(config, num_classes, 1):.4g} > query_share * epsilon = "
                f"{config.query_share * target:.4g}: raise epsilon, query_share or noise_scale")
    else:
        queries = int(config.queries)
        cost = queries_epsilon(config, num_classes, queries)
        if cost >= target:
            raise ValueError(
                f"queries={queries} LNMax queries at noise_scale={config.noise_scale:g} alone "
                f"cost epsilon {cost:.4g} >= the record-level target epsilon={target:g} at "
                f"delta={config.delta:g} ({config.dp_sgd.accountant.name}), leaving nothing "
                "for the DP baseline: lower queries (--queries), raise noise_scale "
                "(--noise-scale) or epsilon")
    if ledger.identity.neighboring_relation != NeighboringRelation.ADD_OR_REMOVE_ONE.name:
        raise ValueError("ledger must account under add/remove-one neighbours for DP-SGD "
                         "(Opacus's convention); use dgd.ledger_for(config)")
    check_ledger_accountant(ledger, config.dp_sgd)
    statistics = statistics_release(config, image_shape)
    also = (() if statistics is None else (statistics.event,)) \
        + (_queries_event(config, num_classes, queries),)
    plan = plan_dp_sgd(config.dp_sgd, dataset_size=num_private, target_epsilon=target,
                       also=also)
    ledger.check([plan.event, *plan.also],
                 label="DP-SGD baseline, feature statistics and LNMax queries")
    return RunPlan(queries=queries, dp_sgd=plan)


def ledger_for(config: DgdConfig, *, path: str | os.PathLike | None = None) -> Ledger:
    """A ledger that fits the mode.

    ``published``: unbounded (``epsilon=inf``) with basic composition, recording the
    ``NonPrivateDpEvent`` and every query. ``sound``: budget ``(epsilon, delta)`` with
    ``config.dp_sgd.accountant`` (RDP by default) under add/remove-one neighbours.
    """
    if config.mode is DgdMode.PUBLISHED:
        return Ledger(epsilon=math.inf, unbounded=True, accountant=PureAccountant(), path=path)
    return Ledger(epsilon=float(config.epsilon), delta=config.delta,
                  accountant=config.dp_sgd.accountant.make(), path=path)


def label_rng(config: DgdConfig) -> np.random.Generator:
    """The query-noise Generator of a config: a function of (seed, mode, epsilon, queries)."""
    epsilon_bits = int(np.float64(config.epsilon or 0.0).view(np.uint64))
    return np.random.default_rng([config.seed, list(DgdMode).index(config.mode), epsilon_bits,
                                  config.queries or 0, 0xD6D])


def shards_for(config: DgdConfig, images: np.ndarray) -> np.ndarray:
    """Each private record's teacher: a keyed hash of the record (add/remove-safe).

    The key is derived from the seed. It need not be secret: the sensitivity argument only
    needs each record's shard to be a function of that record alone.
    """
    key = hashlib.blake2b(f"dpkd-audit dgd shards seed={config.seed}".encode(),
                          digest_size=32).digest()
    return shard_of_records(images, config.ensemble.num_teachers, key=key)


def ensemble_key(config: DgdConfig) -> tuple[Any, ...]:
    """What the teacher ensemble depends on."""
    return (config.dataset, config.seed, json.dumps(config.to_dict()["ensemble"],
                                                     sort_keys=True))


def preparation_key(config: DgdConfig) -> tuple[Any, ...]:
    """What the published stages depend on (a sound baseline depends on its plan too)."""
    parts = config.to_dict()
    stages = tuple(json.dumps(parts[name], sort_keys=True)
                   for name in ("baseline", "generator", "vae", "synthetic"))
    key: tuple[Any, ...] = (*ensemble_key(config), config.mode, *stages,
                            config.active_generator_statistics)
    if config.mode is DgdMode.SOUND:
        key += (config.epsilon, config.queries, config.query_share, config.noise_scale,
                json.dumps(parts["dp_baseline"], sort_keys=True),
                json.dumps(parts["dp_sgd"], sort_keys=True),
                json.dumps(parts["sound_generator"], sort_keys=True),
                json.dumps(parts["statistics"], sort_keys=True))
    return key


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnsembleStage:
    """A trained ensemble and its shards (shared by every run of a seed)."""

    key: tuple[Any, ...]
    result: EnsembleResult
    plurality_accuracy: float
    seconds: dict[str, float]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prepared:
    """Everything before the queries (shared by a sweep's published runs of one seed).

    Attributes:
        key: :func:`preparation_key` of the configs it serves.
        ensemble: The teacher ensemble stage.
        baseline: The baseline classifier (eval mode).
        baseline_accuracy: Its last-epoch test accuracy.
        generator: Health figures of the fitted generator.
        synthetic: The synthetic set ``(S, 1, h, w)`` on the run's device.
        vae: The trained VAE.
        codes: VAE means of the synthetic set ``(S, c)``.
        probabilities: The baseline's softmax on the synthetic set ``(S, classes)``.
        dp_sgd: The charged DP-SGD plan (sound mode), else ``None``.
        seconds: Per stage.
    """

    key: tuple[Any, ...]
    ensemble: EnsembleStage
    baseline: nn.Module = dataclasses.field(repr=False)
    baseline_accuracy: float
    generator: GeneratorResult
    synthetic: torch.Tensor = dataclasses.field(repr=False)
    vae: VaeResult
    codes: torch.Tensor = dataclasses.field(repr=False)
    probabilities: torch.Tensor = dataclasses.field(repr=False)
    dp_sgd: DpSgdPlan | None
    statistics: ReferenceStatistics | None = dataclasses.field(repr=False)
    seconds: dict[str, float]


def _float_images(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(images, dtype=np.uint8)).float().div_(255.0).unsqueeze(1)


def prepare_ensemble(config: DgdConfig, *, data: LoadedData,
                     device: torch.device | str | None = None,
                     progress: bool = False) -> EnsembleStage:
    """Shard the private split and train the ensemble (no charge: only LNMax releases it).

    Raises:
        ValueError: If a shard is empty (too few records for the teachers).
    """
    device = resolve_device(device)
    dataset = data.dataset
    timer = StageTimer(verbose=progress)
    with timer.stage("shards"):
        shards = shards_for(config, dataset.train_images)
    with timer.stage("ensemble"):
        result = train_ensemble(dataset.train_images, dataset.train_labels, shards,
                                num_classes=dataset.num_classes, config=config.ensemble,
                                test_images=dataset.test_images,
                                test_labels=dataset.test_labels, seed=config.seed,
                                device=device, progress=progress)
        votes = result.ensemble.votes(_float_images(dataset.test_images).to(device))
        plurality = float(np.mean(votes.argmax(axis=1) == dataset.test_labels))
    return EnsembleStage(key=ensemble_key(config), result=result, plurality_accuracy=plurality,
                         seconds=dict(timer.seconds))


def check_shards(config: DgdConfig, images: np.ndarray) -> None:
    """Refuse (before any work) a split whose hash shards leave a teacher without records."""
    sizes = np.bincount(shards_for(config, images), minlength=config.ensemble.num_teachers)
    if sizes.min() == 0:
        raise ValueError(
            f"ensemble.num_teachers={config.ensemble.num_teachers} teachers do not divide the "
            f"{images.shape[0]} private records: {int(np.sum(sizes == 0))} hash shards are "
            "empty; use fewer teachers. Nothing was run or charged")


def prepare(config: DgdConfig, *, data: LoadedData, device: torch.device | str | None = None,
            ledger: Ledger | None = None, plan: RunPlan | None = None,
            rng: np.random.Generator | None = None, ensemble: EnsembleStage | None = None,
            progress: bool = False) -> Prepared:
    """Ensemble, baseline, generator, synthetic set and VAE (sound mode: charging first).

    In sound mode the DP-SGD baseline is charged and trained, then feature statistics are
    released through it (charged; Gaussian noise from ``rng``), then the generator is fitted to
    the baseline's outputs and those statistics.

    Raises:
        ValueError: In sound mode without ``ledger``, ``plan`` (from :func:`check_run`) and
            ``rng``, or an ``ensemble`` made for another config.
    """
    device = resolve_device(device)
    dataset = data.dataset
    timer = StageTimer(verbose=progress)
    if config.mode is DgdMode.SOUND and (ledger is None or plan is None or plan.dp_sgd is None
                                         or rng is None):
        raise ValueError("sound mode: prepare needs the run's ledger, the plan from check_run "
                         "and the noise rng (the DP-SGD baseline and the statistics are "
                         "charged before they exist)")
    statistics: FeatureStatistics | None = None
    if ensemble is None:
        ensemble = prepare_ensemble(config, data=data, device=device, progress=progress)
    elif ensemble.key != ensemble_key(config):
        raise ValueError("ensemble was trained for another dataset, seed or ensemble config")
    if config.mode is DgdMode.SOUND:
        baseline, accuracy, statistics = fit_dp_source(
            dataset, config=config.dp_baseline, dp_sgd=config.dp_sgd, plan=plan.dp_sgd,
            statistics=config.statistics,
            mechanism=statistics_release(config, dataset.image_shape), ledger=ledger,
            rng=rng, role="baseline", timer=timer, seed=config.seed, device=device,
            progress=progress)
    else:
        baseline, accuracy = fit_source(dataset, config=config.baseline, role="baseline",
                                        timer=timer, seed=config.seed, device=device,
                                        progress=progress)
        if config.active_generator_statistics is GeneratorStatistics.EXACT:
            with timer.stage("statistics"):  # a departure, not private (GeneratorStatistics)
                statistics = FeatureStatistics(baseline, exact_feature_statistics(
                    baseline, dataset.train_images, config=config.statistics, device=device))
    with timer.stage("generator"):
        trainer = GeneratorTrainer(baseline, image_shape=dataset.image_shape,
                                   num_classes=dataset.num_classes,
                                   config=config.active_generator, seed=config.seed + 1,
                                   device=device, statistics=statistics,
                                   pixel_scale=generator_pixel_scale(config.active_generator,
                                                                     dataset.train_images))
        trainer.train(config.active_generator.steps, progress=progress)
        generator = trainer.result()
    with timer.stage("synthetic"):
        latents = torch.Generator().manual_seed(config.seed + 2)
        chunk = 1000
        synthetic = torch.cat([
            trainer.generator.sample(min(chunk, config.synthetic - i), latents)
            if config.synthetic - i >= 2 else trainer.generator.sample(2, latents)[:1]
            for i in range(0, config.synthetic, chunk)])
        with torch.inference_mode():
            probabilities = torch.cat([torch.softmax(baseline(synthetic[i:i + chunk]), dim=1)
                                       for i in range(0, config.synthetic, chunk)])
    with timer.stage("vae"):
        vae = train_vae(synthetic, config=config.vae, seed=config.seed + 3, device=device,
                        progress=progress)
        with torch.no_grad():
            codes = torch.cat([vae.vae.encode(synthetic[i:i + 1000])[0]
                               for i in range(0, synthetic.shape[0], 1000)])
    seconds = {"data": data.seconds, **ensemble.seconds, **timer.seconds}
    return Prepared(key=preparation_key(config), ensemble=ensemble, baseline=baseline,
                    baseline_accuracy=accuracy, generator=generator, synthetic=synthetic,
                    vae=vae, codes=codes, probabilities=probabilities,
                    dp_sgd=None if plan is None else plan.dp_sgd,
                    statistics=None if statistics is None else statistics.reference,
                    seconds=seconds)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DgdResult:
    """Outcome of one DGD run (see :meth:`to_record` for the record's fields)."""

    config: DgdConfig
    queries: int
    test_accuracy: float
    baseline_accuracy: float
    teacher_accuracy_mean: float
    ensemble_plurality_accuracy: float
    label_baseline_agreement: float
    #: Released labels the student trained on (``config.active_label_filter``).
    labels_used: int
    epsilon: float
    epsilon_published: float
    epsilon_queries_rdp: float
    epsilon_queries_pld: float
    epsilon_data_dependent: float
    epsilon_record_level: float
    epsilon_record_level_pld: float | None
    record_level_reason: str | None
    shard_sizes: tuple[int, int]
    generator: GeneratorResult
    vae_loss: dict[str, float]
    student_loss: dict[str, float]
    accuracy_curve: tuple[tuple[int, float], ...]
    dp_sgd: DpSgdPlan | None
    seconds: dict[str, float]
    device: str
    charges: tuple[dict[str, Any], ...]
    #: How the teacher ensemble's convolutions ran (an ``EnsembleKernel`` value; no effect
    #: on the result beyond float rounding).
    ensemble_kernel: str = "grouped"
    latent_charges: tuple[dict[str, Any], ...] = ()
    shared_stages: tuple[str, ...] = ()
    #: The released feature statistics (sound mode), else ``None``.
    statistics: ReferenceStatistics | None = dataclasses.field(default=None, repr=False,
                                                               compare=False)
    #: The released student (eval mode): what a record-level audit scores; never in a record.
    student: nn.Module | None = dataclasses.field(default=None, repr=False, compare=False)

    def to_record(self, *, command: str | None = None) -> dict[str, Any]:
        """JSON-ready record (strict JSON: an infinite epsilon is written as ``null``)."""
        config = self.config
        plan = self.dp_sgd
        eps0 = query_mechanism(config, 2).epsilon
        published = config.mode is DgdMode.PUBLISHED
        return {
            "method": METHOD,
            "dataset": config.dataset.value,
            "mode": config.mode.value,
            "epsilon": self.epsilon,
            "epsilon_kind": config.mode.epsilon_kind,
            "epsilon_published": self.epsilon_published,
            "epsilon_queries_rdp": self.epsilon_queries_rdp,
            "epsilon_queries_pld": self.epsilon_queries_pld,
            "epsilon_data_dependent": self.epsilon_data_dependent if published else None,
            "data_dependent_release": DATA_DEPENDENT_RELEASE if published else WITHHELD,
            "epsilon_record_level": (None if math.isinf(self.epsilon_record_level)
                                     else self.epsilon_record_level),
            "epsilon_record_level_pld": self.epsilon_record_level_pld,
            "record_level_reason": self.record_level_reason,
            "delta": config.delta,
            "queries": self.queries,
            "noise_scale": config.noise_scale,
            "epsilon_per_query": eps0,
            "test_accuracy": self.test_accuracy,
            "teacher_accuracy": self.baseline_accuracy,
            "baseline_accuracy": self.baseline_accuracy,
            "teacher_accuracy_mean": self.teacher_accuracy_mean if published else None,
            "ensemble_plurality_accuracy": (self.ensemble_plurality_accuracy if published
                                            else None),
            "withheld": None if published else WITHHELD,
            "label_baseline_agreement": self.label_baseline_agreement,
            "label_filter": config.active_label_filter.value,
            "student_init": config.active_student_init.value,
            "labels_used": self.labels_used,
            "teachers": config.ensemble.num_teachers,
            "shard_sizes": {"min": self.shard_sizes[0], "max": self.shard_sizes[1]},
            "accuracy_curve": [list(p) for p in self.accuracy_curve],
            "generator": {"teacher_confident_share": self.generator.teacher_agreement,
                          "class_histogram": self.generator.class_histogram,
                          "collapsed": self.generator.collapsed,
                          "loss_terms": self.generator.loss_terms,
                          "steps": self.generator.steps},
            "vae_loss": self.vae_loss,
            "student_loss": self.student_loss,
            "statistics": None if self.statistics is None else statistics_record(
                config.statistics, self.statistics.mechanism, self.statistics),
            "epsilon_latent": config.latent_epsilon,
            "latent_unit": None if config.latent_epsilon is None else LATENT_UNIT,
            "latent_charges": list(self.latent_charges),
            "distillation_weight": config.active_distillation_weight,
            "dp_sgd": None if plan is None else {
                "noise_multiplier": plan.noise_multiplier, "steps": plan.steps,
                "epochs": plan.epochs, "batch_size": plan.schedule.batch_size,
                "sampling_probability": plan.schedule.sampling_probability,
                "dataset_size": plan.schedule.dataset_size,
                "epsilon_rdp_with_queries": plan.epsilon_rdp,
                "epsilon_pld_with_queries": finite_or_none(plan.epsilon_pld),
                "delta": plan.delta},
            "seed": config.seed,
            "preset": config.preset.value,
            "preset_departures": preset_departures(config),
            "device": self.device,
            "ensemble_kernel": self.ensemble_kernel,
            "seconds": dict(self.seconds),
            "shared_stages": list(self.shared_stages),
            "charges": list(self.charges),
            "config": config.to_dict(),
            "command": command,
            "provenance": provenance(),
        }


def _charge_record(ledger: Ledger, start: int) -> tuple[dict[str, Any], ...]:
    """The run's charges, consecutive query charges folded into one entry with a count."""
    out: list[dict[str, Any]] = []
    for charge in ledger.charges()[start:]:
        event = json.loads(event_to_json(charge.event))
        query = charge.label.startswith("LNMax query")
        if query and out and out[-1]["label"] == "LNMax queries" and out[-1]["event"] == event:
            out[-1]["count"] += 1
            out[-1]["last_seq"] = charge.seq
            continue
        out.append({"seq": charge.seq, "last_seq": charge.seq, "count": 1,
                    "label": "LNMax queries" if query else charge.label, "event": event})
    return tuple(out)


def run(config: DgdConfig, *, ledger: Ledger, rng: np.random.Generator,
        device: torch.device | str | None = None, data: LoadedData | None = None,
        prepared: Prepared | None = None, ensemble: EnsembleStage | None = None,
        data_dir: str | os.PathLike | None = None, progress: bool = True) -> DgdResult:
    """Run DGD end to end; every privacy-relevant release is charged to ``ledger`` first.

    Everything is checked before any work: the config, the device, the data (enough records
    for the teachers, no empty shard) and that the ledger can pay (a finite ledger refuses
    ``published`` mode, saying why; a sound budget the queries alone exhaust is refused).

    Args:
        config: The run.
        ledger: Budget filter (:func:`ledger_for` makes one that fits the mode).
        rng: Source of the query noise (:func:`label_rng` gives a config's own).
        device: "cpu" (default), "cuda", "cuda:N" or "auto".
        data: The loaded dataset (:func:`load_data`), else loaded here.
        prepared: Stages shared by a sweep (published mode, same :func:`preparation_key`).
        ensemble: The teacher ensemble shared by a sweep (same :func:`ensemble_key`).
        data_dir: Where to find MNIST / Fashion-MNIST files.
        progress: Progress bars and stage messages on stderr.

    Raises:
        ValueError: For a bad config, device, rng, ``prepared`` or ``ensemble``.
        BudgetExceededError: If the ledger cannot pay (before any work).
        DatasetNotFoundError: If the dataset files are missing.
    """
    if not isinstance(config, DgdConfig):
        raise ValueError(f"config must be a DgdConfig; got {type(config).__name__}")
    rng = _validate.check_generator(rng)
    device = resolve_device(device)
    if data is None:
        data = load_data(config, data_dir=data_dir, progress=progress)
    dataset = data.dataset
    num_classes = dataset.num_classes
    plan = check_run(config, ledger, num_private=dataset.n_train, num_classes=num_classes,
                     image_shape=dataset.image_shape)
    if prepared is not None:
        if config.mode is DgdMode.SOUND:
            raise ValueError("prepared applies to published runs only (a sound run's baseline "
                             "is charged to its own ledger)")
        if prepared.key != preparation_key(config):
            raise ValueError("prepared was made for another dataset, seed or stage config")
    elif ensemble is not None and ensemble.key != ensemble_key(config):
        raise ValueError("ensemble was trained for another dataset, seed or ensemble config")
    if prepared is None and ensemble is None:
        check_shards(config, dataset.train_images)
    queries = plan.queries
    if queries + 2 > config.synthetic:
        raise ValueError(f"synthetic must be >= queries + 2 = {queries + 2}; got "
                         f"{config.synthetic}")
    charged_before = len(ledger.charges())
    if config.mode is DgdMode.PUBLISHED:
        ledger.charge(_dp.NonPrivateDpEvent(), label=NOT_PRIVATE_REASON)
    if prepared is None:
        prepared = prepare(config, data=data, device=device, ledger=ledger, plan=plan,
                           rng=rng, ensemble=ensemble, progress=progress)
    timer = StageTimer(verbose=progress)
    mechanism = query_mechanism(config, num_classes)
    with timer.stage("queries"):
        chosen = select_queries(prepared.probabilities, queries, config.selection)
        unlabelled = np.setdiff1d(np.arange(config.synthetic), chosen)
        images = prepared.synthetic[torch.from_numpy(chosen).to(prepared.synthetic.device)]
        votes = prepared.ensemble.result.ensemble.votes(images)
        labels = np.empty(queries, dtype=np.int64)
        for i in range(queries):
            ledger.charge(mechanism.event,
                          label=f"LNMax query {i + 1}/{queries}: Laplace scale "
                                f"{config.noise_scale:g} on {config.ensemble.num_teachers} "
                                "teachers' votes")
            labels[i] = mechanism.aggregate(votes[i:i + 1], rng=rng)[0]
        baseline_labels = prepared.probabilities[chosen].argmax(dim=1).cpu().numpy()
        data_dependent = PATEAccountant()
        for row in votes:
            data_dependent.compose(mechanism.event_with_votes(row))
        epsilon_dd = float(data_dependent.get_epsilon(config.delta))
    codes = prepared.codes[torch.from_numpy(unlabelled).to(prepared.codes.device)]
    latent_charges: tuple[dict[str, Any], ...] = ()
    if config.latent_epsilon is not None:
        latent = LatentCodeLaplace(epsilon=config.latent_epsilon, latent_dim=codes.shape[1])
        image_ledger = Ledger(epsilon=math.inf, unbounded=True, accountant=PureAccountant())
        noisy = latent.release(codes.detach().cpu().numpy().astype(np.float64), rng=rng,
                               ledger=image_ledger,
                               label=f"latent codes of {codes.shape[0]} synthetic images "
                                     f"(Laplace scale {latent.scale:g}; per synthetic image)")
        codes = torch.from_numpy(np.asarray(noisy, dtype=np.float32)).to(codes.device)
        latent_charges = _charge_record(image_ledger, 0)
    kept = kept_labels(labels, baseline_labels, config.active_label_filter)
    with timer.stage("student"):
        rest = torch.from_numpy(unlabelled).to(prepared.synthetic.device)
        student = train_tnar_student(
            images[torch.from_numpy(kept).to(images.device)], labels[kept],
            codes=codes,
            unlabelled=prepared.synthetic[rest],
            vae=prepared.vae.vae,
            num_classes=num_classes, config=config.active_student,
            test_images=_float_images(dataset.test_images).to(prepared.synthetic.device),
            test_labels=dataset.test_labels, seed=config.seed + 4,
            soft_images=prepared.synthetic[rest], soft_targets=prepared.probabilities[rest],
            distillation_weight=config.active_distillation_weight,
            initial_model=prepared.baseline
            if config.active_student_init is StudentInit.BASELINE else None,
            progress=progress)
    published = dgd_published_epsilon(mechanism.epsilon, queries, config.delta) \
        + (config.latent_epsilon or 0.0)
    if config.mode is DgdMode.PUBLISHED:
        epsilon, record_level, record_level_pld = published, math.inf, None
        reason: str | None = NOT_PRIVATE_REASON
    else:
        epsilon = float(config.epsilon)
        record_level = float(ledger.spent().epsilon)
        record_level_pld = finite_or_none(prepared.dp_sgd.epsilon_pld) if prepared.dp_sgd \
            else None
        reason = None
    seconds = {**prepared.seconds, **timer.seconds}
    seconds["total"] = sum(seconds.values())
    sizes = prepared.ensemble.result.shard_sizes
    return DgdResult(
        config=config, queries=queries, test_accuracy=student.test_accuracy,
        baseline_accuracy=prepared.baseline_accuracy,
        teacher_accuracy_mean=float(np.mean(prepared.ensemble.result.teacher_accuracy)),
        ensemble_plurality_accuracy=prepared.ensemble.plurality_accuracy,
        label_baseline_agreement=float(np.mean(labels == baseline_labels)),
        labels_used=int(kept.shape[0]),
        epsilon=epsilon, epsilon_published=published,
        epsilon_queries_rdp=queries_epsilon(config, num_classes, queries,
                                            DpSgdAccountant.RDP),
        epsilon_queries_pld=queries_epsilon(config, num_classes, queries,
                                            DpSgdAccountant.PLD),
        epsilon_data_dependent=epsilon_dd, epsilon_record_level=record_level,
        epsilon_record_level_pld=record_level_pld, record_level_reason=reason,
        shard_sizes=(min(sizes), max(sizes)), generator=prepared.generator,
        vae_loss=prepared.vae.loss_terms, student_loss=student.loss_terms,
        accuracy_curve=student.curve, dp_sgd=prepared.dp_sgd, seconds=seconds,
        device=describe_device(device), charges=_charge_record(ledger, charged_before),
        ensemble_kernel=prepared.ensemble.result.kernel.value,
        latent_charges=latent_charges, statistics=prepared.statistics,
        student=student.model.eval())
