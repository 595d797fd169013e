"""DP-DFD end to end: teacher, data-free generator, staged selective-RR labels, student.

DP-DFD paper, Algorithm 1 (NOTES, "DP-DFD"):

1. A teacher on the private split: without noise in ``published`` mode (the paper); with DP-SGD
   in ``sound`` mode, its (epsilon, delta) event charged to the ledger before the first step.
   In ``sound`` mode, feature statistics of the private data read through that DP teacher are
   then released by the Gaussian mechanism, charged first
   (:mod:`~dpkd_audit.pipelines.common.dp_statistics`).
2. A generator fitted to the frozen teacher without data: DP-DFD's loss (cross-entropy to the
   argmax, alpha * information entropy, beta * BatchNorm-statistics distance) in ``published``
   mode; in ``sound`` mode DAFL's loss (with its activation term) and beta * the distance to the
   *released* statistics in place of the BatchNorm running statistics: the generator only sees
   DP outputs, so it and everything after it are post-processing.
3. Stages i = 1..T: a fresh synthetic batch; the teacher's argmax y_t; the current student's
   softmax y_s; labels by :class:`~dpkd_audit.mechanisms.SelectiveRandomizedResponse`
   (threshold 1/(2k), top-2 fallback), the stage's labels charged before they exist; the
   student trained with KL on every label released so far; optionally the generator
   fine-tuned.

Accounting in the record:

- ``published``: ``epsilon`` (= ``epsilon_published``) is the per-label epsilon, the paper's
  accounting. ``epsilon_record_level`` is infinite, with the reason: the teacher saw the
  private records without noise and the generator matched its BatchNorm running statistics
  (statistics of the private data), which the ledger records as a ``NonPrivateDpEvent``; even
  setting that aside, Q labels read from one teacher compose to Q * eps
  (``epsilon_labels_composed``). A ledger with a finite budget refuses the run before any work.
- ``sound``: ``epsilon`` is the record-level target; the DP-SGD teacher's noise is calibrated so
  that it and the statistics release compose to the target at ``dp_sgd.delta`` (RDP), and
  ``epsilon_record_level`` is the ledger's figure (RDP), with the PLD figure beside it. The
  labels are post-processing of a DP teacher: they add nothing at the record level and are
  charged to a separate label-level ledger (``label_epsilon`` each, label protection on top).

Seconds: ``data``, ``teacher``, ``statistics`` (sound mode), ``generator``, ``distillation``
(stages: sampling, labels and student training) and ``total``; in a sweep, the shared stages
are measured once and named in ``shared_stages`` (as for reverse k-NN).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
from typing import Any

import numpy as np
import torch
from dp_accounting import dp_event as _dp
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.accountants import PureAccountant
from dpkd_audit.accountants.base import NeighboringRelation
from dpkd_audit.devices import describe_device, resolve_device
from dpkd_audit.errors import BudgetExceededError
from dpkd_audit.events import event_to_json
from dpkd_audit.ledger import Ledger
from dpkd_audit.mechanisms import Gaussian
from dpkd_audit.mechanisms.selective_rr import SelectiveRandomizedResponse
from dpkd_audit.pipelines.common.class_coverage import (
    ClassCoverage,
    ClassTally,
    class_coverage,
    warn_classes_at_risk,
)
from dpkd_audit.pipelines.common.config import preset_departures
from dpkd_audit.pipelines.common.distill import ReleaseChannel, StagedStudent
from dpkd_audit.pipelines.common.dp_statistics import (
    FeatureStatistics,
    ReferenceStatistics,
    statistics_coordinates,
    statistics_mechanism,
    statistics_record,
)
from dpkd_audit.pipelines.common.dp_teacher import (
    DpSgdPlan,
    check_ledger_accountant,
    finite_or_none,
    plan_dp_sgd,
)
from dpkd_audit.pipelines.common.generator import (
    GeneratorResult,
    GeneratorTrainer,
    generator_pixel_scale,
)
from dpkd_audit.pipelines.common.loading import LoadedData, load_generative_data
from dpkd_audit.pipelines.common.progress import StageTimer, progress_counter
from dpkd_audit.pipelines.common.source import fit_dp_source, fit_source
from dpkd_audit.pipelines.common.student import predict
from dpkd_audit.pipelines.dpdfd.config import DpdfdConfig, DpdfdMode
from dpkd_audit.provenance import provenance

__all__ = [
    "METHOD",
    "NOT_PRIVATE_REASON",
    "PREPARED_STAGES",
    "DpdfdResult",
    "LoadedData",
    "Prepared",
    "check_run",
    "label_rng",
    "ledger_for",
    "load_data",
    "planned_dp_sgd",
    "preparation_key",
    "prepare",
    "run",
    "statistics_release",
]

METHOD = "dpdfd"

#: Stages that a sweep's published runs share (they do not depend on epsilon).
PREPARED_STAGES: tuple[str, ...] = ("data", "teacher", "generator")

#: Why a published run has no record-level guarantee (stored in the ledger and the record).
NOT_PRIVATE_REASON = (
    "published DP-DFD: the teacher is trained on the private records without noise and the "
    "generator is fitted to its BatchNorm running statistics (statistics of the private data), "
    "so nothing after it is differentially private at the record level; the per-label epsilon "
    "protects one synthetic image's label only, and Q labels from one teacher compose to "
    "Q * eps even setting that aside")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Prepared:
    """Teacher and generator of a run (shared by a sweep's published runs of one seed).

    Attributes:
        key: :func:`preparation_key` of the configs it serves.
        teacher: The trained teacher (eval mode) on the run's device.
        teacher_accuracy: Its last-epoch test accuracy.
        trainer: The generator's trainer (copied before any fine-tuning).
        generator: Health figures of the fitted generator.
        dp_sgd: The charged DP-SGD plan (sound mode), else ``None``.
        statistics: The released feature statistics (sound mode), else ``None``.
        seconds: ``data``, ``teacher``, ``statistics`` (sound mode), ``generator``.
    """

    key: tuple[Any, ...]
    teacher: nn.Module = dataclasses.field(repr=False)
    teacher_accuracy: float
    trainer: GeneratorTrainer = dataclasses.field(repr=False)
    generator: GeneratorResult
    dp_sgd: DpSgdPlan | None
    statistics: ReferenceStatistics | None
    seconds: dict[str, float]


def load_data(config: DpdfdConfig, *, data_dir: str | os.PathLike | None = None,
              progress: bool = False) -> LoadedData:
    """Load the config's dataset, timed as the ``data`` stage.

    Raises:
        DatasetNotFoundError: If the files are missing.
        ValueError: If the images are not a multiple of 4 on each side (the generator's
            upsampling).
    """
    return load_generative_data(config.dataset, method="DP-DFD", data_dir=data_dir,
                                progress=progress)


def preparation_key(config: DpdfdConfig) -> tuple[Any, ...]:
    """What the teacher and generator depend on (a sound run's teacher depends on epsilon)."""
    key: tuple[Any, ...] = (config.dataset, config.mode, config.seed,
                            json.dumps(config.to_dict()["teacher"], sort_keys=True),
                            json.dumps(config.to_dict()["generator"], sort_keys=True))
    if config.mode is DpdfdMode.SOUND:
        key += (config.epsilon, json.dumps(config.to_dict()["dp_teacher"], sort_keys=True),
                json.dumps(config.to_dict()["statistics"], sort_keys=True),
                json.dumps(config.to_dict()["dp_sgd"], sort_keys=True),
                json.dumps(config.to_dict()["sound_generator"], sort_keys=True))
    return key


def label_rng(config: DpdfdConfig) -> np.random.Generator:
    """The label-noise Generator of a config: a function of (seed, mode, epsilon) only."""
    epsilon_bits = int(np.float64(config.epsilon).view(np.uint64))
    return np.random.default_rng([config.seed, list(DpdfdMode).index(config.mode), epsilon_bits,
                                  0xDFD])


def ledger_for(config: DpdfdConfig, *, path: str | os.PathLike | None = None) -> Ledger:
    """A ledger that fits the mode.

    ``published``: an unbounded ledger (``epsilon=inf``) with basic composition, which records
    the ``NonPrivateDpEvent`` and every label. ``sound``: budget ``(epsilon, dp_sgd.delta)``
    with ``config.dp_sgd.accountant`` (RDP, Opacus's, by default) under add/remove-one
    neighbours (Opacus's convention).
    """
    if config.mode is DpdfdMode.PUBLISHED:
        return Ledger(epsilon=math.inf, unbounded=True, accountant=PureAccountant(), path=path)
    return Ledger(epsilon=config.epsilon, delta=config.delta,
                  accountant=config.dp_sgd.accountant.make(), path=path)


def statistics_release(config: DpdfdConfig, image_shape: tuple[int, int]) -> Gaussian | None:
    """The sound mode's statistics mechanism (``None`` when disabled or in published mode).

    Args:
        config: The run's config.
        image_shape: (h, w) of the private images: the release's length depends on it
            (:func:`~dpkd_audit.pipelines.common.dp_statistics.statistics_coordinates`).
    """
    if config.mode is not DpdfdMode.SOUND or not config.statistics.enabled:
        return None
    return statistics_mechanism(
        config.statistics, target_epsilon=config.epsilon, delta=config.dp_sgd.delta,
        coordinates=statistics_coordinates(config.statistics, config.dp_teacher, image_shape))


def planned_dp_sgd(config: DpdfdConfig, num_private: int, *,
                   image_shape: tuple[int, int]) -> DpSgdPlan:
    """The sound mode's DP-SGD plan for ``num_private`` records of ``image_shape`` (h, w).

    Calibrated so that DP-SGD and the statistics release compose to the target (RDP).
    """
    mechanism = statistics_release(config, image_shape)
    also = () if mechanism is None else (mechanism.event,)
    return plan_dp_sgd(config.dp_sgd, dataset_size=num_private, target_epsilon=config.epsilon,
                       also=also)


def _label_event(config: DpdfdConfig, num_classes: int, count: int) -> _dp.DpEvent:
    mechanism = SelectiveRandomizedResponse(epsilon=config.per_label_epsilon,
                                            num_classes=num_classes, threshold=config.threshold)
    return _dp.SelfComposedDpEvent(mechanism.event, count)


def check_run(config: DpdfdConfig, ledger: Ledger, *, num_private: int, num_classes: int,
              image_shape: tuple[int, int]) -> DpSgdPlan | None:
    """Check, before any work, that ``ledger`` can pay for the run; the sound mode's plan.

    ``image_shape`` (h, w) of the private images sets the statistics release's length.

    Raises:
        BudgetExceededError: A finite ledger for a published run (saying why), or a budget the
            run does not fit.
        ValueError: For a plan no noise level meets, or a batch larger than the private set.
    """
    if not isinstance(ledger, Ledger):
        raise ValueError(f"ledger must be a dpkd_audit Ledger; got {type(ledger).__name__}")
    labels = _label_event(config, num_classes, config.labels)  # checks the mechanism's eps
    if config.mode is DpdfdMode.PUBLISHED:
        if math.isfinite(ledger.epsilon):
            raise BudgetExceededError(
                f"mode='published' refused by a ledger with a finite budget (epsilon="
                f"{ledger.epsilon:g}): {NOT_PRIVATE_REASON}. Its record-level epsilon is "
                "infinite; record it in an unbounded ledger (Ledger(epsilon=math.inf, "
                "unbounded=True), what dpkd run does without --ledger) or use mode='sound' for "
                "a finite one. Nothing was run or charged")
        ledger.check([_dp.NonPrivateDpEvent(), labels], label="published DP-DFD")
        return None
    plan = planned_dp_sgd(config, num_private, image_shape=image_shape)
    if ledger.identity.neighboring_relation != NeighboringRelation.ADD_OR_REMOVE_ONE.name:
        raise ValueError("ledger must account under add/remove-one neighbours for DP-SGD "
                         "(Opacus's convention); use dpdfd.ledger_for(config)")
    check_ledger_accountant(ledger, config.dp_sgd)
    ledger.check([plan.event, *plan.also], label="DP-SGD teacher and feature statistics")
    return plan


def prepare(config: DpdfdConfig, *, data: LoadedData, device: torch.device | str | None = None,
            ledger: Ledger | None = None, plan: DpSgdPlan | None = None,
            rng: np.random.Generator | None = None, progress: bool = False) -> Prepared:
    """Train the teacher and fit the generator (sound mode: charging ``ledger`` first).

    In sound mode the DP-SGD teacher is charged and trained, then the feature statistics are
    released through it (charged, noise from ``rng``), then the generator is fitted to the
    teacher's outputs and those statistics.

    Raises:
        ValueError: In sound mode without ``ledger``, ``plan`` (from :func:`check_run`) and
            ``rng``.
    """
    device = resolve_device(device)
    dataset = data.dataset
    timer = StageTimer(verbose=progress)
    statistics: FeatureStatistics | None = None
    if config.mode is DpdfdMode.SOUND:
        if ledger is None or plan is None or rng is None:
            raise ValueError("sound mode: prepare needs the run's ledger, the plan from "
                             "check_run and the noise rng (the DP-SGD teacher and the "
                             "statistics are charged before they exist)")
        teacher, accuracy, statistics = fit_dp_source(
            dataset, config=config.dp_teacher, dp_sgd=config.dp_sgd, plan=plan,
            statistics=config.statistics,
            mechanism=statistics_release(config, dataset.image_shape), ledger=ledger,
            rng=rng, role="teacher", timer=timer, seed=config.seed, device=device,
            progress=progress)
    else:
        teacher, accuracy = fit_source(dataset, config=config.teacher, role="teacher",
                                       timer=timer, seed=config.seed, device=device,
                                       progress=progress)
    with timer.stage("generator"):
        trainer = GeneratorTrainer(teacher, image_shape=dataset.image_shape,
                                   num_classes=dataset.num_classes,
                                   config=config.active_generator, seed=config.seed + 1,
                                   device=device, statistics=statistics,
                                   pixel_scale=generator_pixel_scale(config.active_generator,
                                                                     dataset.train_images))
        trainer.train(config.active_generator.steps, progress=progress)
        generator = trainer.result()
    return Prepared(key=preparation_key(config), teacher=teacher, teacher_accuracy=accuracy,
                    trainer=trainer, generator=generator, dp_sgd=plan,
                    statistics=None if statistics is None else statistics.reference,
                    seconds={"data": data.seconds, **timer.seconds})


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpdfdResult:
    """Outcome of one DP-DFD run (see :meth:`to_record` for the record's fields)."""

    config: DpdfdConfig
    test_accuracy: float
    teacher_accuracy: float
    label_accuracy: float
    epsilon_published: float
    epsilon_record_level: float
    epsilon_record_level_pld: float | None
    epsilon_labels_composed: float
    record_level_reason: str | None
    labels: int
    generator: GeneratorResult
    dp_sgd: DpSgdPlan | None
    statistics: ReferenceStatistics | None
    accuracy_per_stage: tuple[tuple[int, float], ...]
    classes: ClassCoverage
    seconds: dict[str, float]
    device: str
    charges: tuple[dict[str, Any], ...]
    shared_stages: tuple[str, ...] = ()
    #: The released student (eval mode): what a record-level audit scores; never in a record.
    student: nn.Module | None = dataclasses.field(default=None, repr=False, compare=False)

    def to_record(self, *, command: str | None = None) -> dict[str, Any]:
        """JSON-ready record (strict JSON: an infinite epsilon is written as ``null``)."""
        config = self.config
        plan = self.dp_sgd
        return {
            "method": METHOD,
            "dataset": config.dataset.value,
            "mode": config.mode.value,
            "epsilon": config.epsilon,
            "epsilon_kind": config.mode.epsilon_kind,
            "epsilon_published": self.epsilon_published,
            "epsilon_per_label": config.per_label_epsilon,
            "epsilon_record_level": (None if math.isinf(self.epsilon_record_level)
                                     else self.epsilon_record_level),
            "epsilon_record_level_pld": self.epsilon_record_level_pld,
            "record_level_reason": self.record_level_reason,
            "epsilon_labels_composed": self.epsilon_labels_composed,
            "delta": config.delta,
            "test_accuracy": self.test_accuracy,
            "teacher_accuracy": self.teacher_accuracy,
            "label_accuracy": self.label_accuracy,
            "labels": self.labels,
            "stages": config.stages,
            "stage_size": config.stage_size,
            "accuracy_per_stage": [list(p) for p in self.accuracy_per_stage],
            "classes": self.classes.to_record(),
            "generator": {"teacher_confident_share": self.generator.teacher_agreement,
                          "class_histogram": self.generator.class_histogram,
                          "collapsed": self.generator.collapsed,
                          "loss_terms": self.generator.loss_terms,
                          "steps": self.generator.steps},
            "dp_sgd": None if plan is None else {
                "noise_multiplier": plan.noise_multiplier, "steps": plan.steps,
                "epochs": plan.epochs, "batch_size": plan.schedule.batch_size,
                "sampling_probability": plan.schedule.sampling_probability,
                "dataset_size": plan.schedule.dataset_size, "epsilon_rdp": plan.epsilon_rdp,
                "epsilon_pld": finite_or_none(plan.epsilon_pld), "delta": plan.delta},
            "statistics": None if self.statistics is None else statistics_record(
                config.statistics, self.statistics.mechanism, self.statistics),
            "seed": config.seed,
            "preset": config.preset.value,
            "preset_departures": preset_departures(config),
            "device": self.device,
            "seconds": dict(self.seconds),
            "shared_stages": list(self.shared_stages),
            "charges": list(self.charges),
            "config": config.to_dict(),
            "command": command,
            "provenance": provenance(),
        }


def _probabilities(rows: torch.Tensor) -> np.ndarray:
    """float64 probability rows summing to 1 (the mechanism checks to 1e-6)."""
    probs = rows.double().cpu().numpy()
    return probs / probs.sum(axis=1, keepdims=True)


def run(config: DpdfdConfig, *, ledger: Ledger, rng: np.random.Generator,
        device: torch.device | str | None = None, data: LoadedData | None = None,
        prepared: Prepared | None = None, data_dir: str | os.PathLike | None = None,
        evaluate_every: int = 10, progress: bool = True) -> DpdfdResult:
    """Run DP-DFD end to end; every privacy-relevant step is charged to ``ledger`` first.

    Everything is checked before any work: the config, the device, the data, and that the
    ledger can pay (a finite ledger refuses ``published`` mode, saying why).

    Args:
        config: The run.
        ledger: Budget filter (:func:`ledger_for` makes one that fits the mode).
        rng: Source of the label noise (:func:`label_rng` gives a config's own).
        device: "cpu" (default), "cuda", "cuda:N" or "auto".
        data: The loaded dataset (:func:`load_data`), else loaded here.
        prepared: Teacher and generator shared by a sweep (published mode, same
            :func:`preparation_key`); ``None`` trains them here.
        data_dir: Where to find MNIST / Fashion-MNIST files.
        evaluate_every: Test accuracy every this many stages (for the curve; >= 1).
        progress: Progress bars and stage messages on stderr.

    Raises:
        ValueError: For a bad config, device, rng or ``prepared``.
        BudgetExceededError: If the ledger cannot pay (before any work).
        DatasetNotFoundError: If the dataset files are missing.
    """
    if not isinstance(config, DpdfdConfig):
        raise ValueError(f"config must be a DpdfdConfig; got {type(config).__name__}")
    rng = _validate.check_generator(rng)
    device = resolve_device(device)
    _validate.check_int("evaluate_every", evaluate_every, minimum=1)
    if data is None:
        data = load_data(config, data_dir=data_dir, progress=progress)
    dataset = data.dataset
    num_classes = dataset.num_classes
    plan = check_run(config, ledger, num_private=dataset.n_train, num_classes=num_classes,
                     image_shape=dataset.image_shape)
    if prepared is not None:
        if config.mode is DpdfdMode.SOUND:
            raise ValueError("prepared applies to published runs only (a sound run's teacher "
                             "is charged to its own ledger)")
        if prepared.key != preparation_key(config):
            raise ValueError("prepared was made for another dataset, seed, teacher or generator")
    charged_before = len(ledger.charges())
    if config.mode is DpdfdMode.PUBLISHED:
        ledger.charge(_dp.NonPrivateDpEvent(), label=NOT_PRIVATE_REASON)
        label_ledger = ledger
    else:
        label_ledger = Ledger(epsilon=math.inf, unbounded=True, accountant=PureAccountant())
    shared: tuple[str, ...] = ()
    if prepared is None:
        prepared = prepare(config, data=data, device=device, ledger=ledger, plan=plan, rng=rng,
                           progress=progress)
    trainer = prepared.trainer
    if config.generator_finetune_steps:
        trainer = copy.deepcopy(trainer)  # a shared generator stays as it was fitted
    timer = StageTimer(verbose=progress)
    warn_classes_at_risk(prepared.generator.class_histogram, epsilon=config.per_label_epsilon)
    mechanism = SelectiveRandomizedResponse(epsilon=config.per_label_epsilon,
                                            num_classes=num_classes, threshold=config.threshold)
    latents = torch.Generator().manual_seed(config.seed + 2)
    student = StagedStudent(config=config.active_student, image_shape=dataset.image_shape,
                            num_classes=num_classes, stages=config.stages, seed=config.seed + 3,
                            device=device, initial_model=prepared.teacher
                            if config.active_student_from_teacher else None)
    agree = 0
    tally = ClassTally(num_classes)
    curve: list[tuple[int, float]] = []
    with timer.stage("distillation"):
        bar = progress_counter(enabled=progress, desc="stages", total=config.stages,
                               unit="stage")
        for stage in range(1, config.stages + 1):
            images = trainer.generator.sample(config.stage_size, latents)
            with torch.inference_mode():
                teacher_labels = prepared.teacher(images).argmax(dim=1).cpu().numpy()
            student_probs = _probabilities(student.probabilities(images))
            released = mechanism.randomize_batch(
                teacher_labels, student_probs, rng=rng, ledger=label_ledger,
                label=f"stage {stage}/{config.stages}: {config.stage_size} selective-RR labels "
                      f"at eps={config.per_label_epsilon:g} each")
            agree += int(np.sum(released == teacher_labels))
            tally.update(teacher_labels, released)
            mask, keep, other = mechanism.release_channel(student_probs)
            student.add(images, released, ReleaseChannel(mask=mask, keep=keep, other=other))
            loss = student.train_stage()
            if config.generator_finetune_steps:
                trainer.train(config.generator_finetune_steps,
                              learning_rate=0.1 * trainer.config.learning_rate,
                              checkpoint=False)  # a few steps per stage: not worth a file
            if stage % evaluate_every == 0 or stage == config.stages:
                curve.append((stage * config.stage_size,
                              student.accuracy(dataset.test_images, dataset.test_labels)))
                bar.set_postfix(loss=f"{loss:.3f}", acc=f"{curve[-1][1]:.4f}", refresh=False)
            bar.update(1)
        bar.close()
    classes = class_coverage(
        tally, teacher_predictions=predict(prepared.teacher, dataset.test_images,
                                           device=device).argmax(axis=1),
        student_predictions=student.predict_classes(dataset.test_images),
        test_labels=dataset.test_labels)
    labels_accountant = PureAccountant()
    labels_accountant.compose(_label_event(config, num_classes, config.labels))
    composed = float(labels_accountant.get_epsilon(0.0))
    if config.mode is DpdfdMode.PUBLISHED:
        record_level, record_level_pld, reason = math.inf, None, NOT_PRIVATE_REASON
    else:
        record_level = float(ledger.spent().epsilon)
        record_level_pld = finite_or_none(prepared.dp_sgd.epsilon_pld) if prepared.dp_sgd \
            else None
        reason = None
    seconds = {**prepared.seconds, **timer.seconds}
    seconds["total"] = sum(seconds.values())
    return DpdfdResult(
        config=config, test_accuracy=curve[-1][1], teacher_accuracy=prepared.teacher_accuracy,
        label_accuracy=agree / config.labels, epsilon_published=config.per_label_epsilon,
        epsilon_record_level=record_level, epsilon_record_level_pld=record_level_pld,
        epsilon_labels_composed=composed, record_level_reason=reason, labels=config.labels,
        generator=prepared.generator, dp_sgd=prepared.dp_sgd, statistics=prepared.statistics,
        accuracy_per_stage=tuple(curve), classes=classes,
        seconds=seconds, device=describe_device(device),
        charges=tuple({"seq": c.seq, "label": c.label,
                       "event": json.loads(event_to_json(c.event))}
                      for c in ledger.charges()[charged_before:]),
        shared_stages=shared, student=student.model.eval())
