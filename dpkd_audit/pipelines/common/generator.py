"""Data-free generator fitted to a frozen teacher (DAFL; DP-DFD's loss; DGD's loss).

The generator is DAFL's (Chen et al. ICCV 2019, "Data-free learning of student networks",
Sec. 3 and its code's MNIST generator): a latent vector z ~ N(0, I) goes through a linear layer
to ``width`` maps of a quarter of the image side, BatchNorm, then twice (nearest upsampling x2,
3x3 conv, BatchNorm with ``bn_eps``, LeakyReLU 0.2) with ``width`` and ``width // 2`` channels
and a 3x3 conv to one channel; then the output (:class:`GeneratorOutput`):

- ``STANDARDISED`` (DAFL): tanh, then BatchNorm without affine parameters over the batch, so
  each batch is standardised as the teacher's inputs were in DAFL (MNIST normalised by its
  pixel mean and standard deviation); since every model of this package reads raw pixels in
  [0, 1], the standardised batch is mapped back by the pixel mean and standard deviation the
  pipeline passes (``pixel_scale``): x = mean + std * BN(tanh(.)). Samples are clipped to
  [0, 1] (:meth:`DaflGenerator.sample`), the range of real images; training sees them
  unclipped, as in DAFL;
- ``SQUASHED``: 0.5 (tanh + 1), in [0, 1] with no normalisation (the package's earlier
  generator; no pixel statistics needed).

The image side must be a multiple of 4 (8x8 digits, 28x28 MNIST). Its BatchNorm layers always
normalise with the statistics of the batch being generated (no running statistics), in training
as in sampling (DAFL keeps its generator in training mode), so samples look like the batches
the teacher judged during training; sample in batches of at least 2.

DAFL's recipe (its MNIST script): width 128, ``bn_eps`` 0.8, Adam at a constant learning rate
0.2 with PyTorch's default betas (0.9, 0.999), batch 512, 200 x 120 steps, the information
entropy in base 10 (``entropy_base``). DAFL also trains its compressed student jointly, by
knowledge distillation on each generated batch; that loss reads the images detached, so the
generator's training does not depend on it, and DGD and DP-DFD train students of their own:
neither pipeline runs it.

Its loss is a weighted sum of named terms, each a function of the teacher's outputs on the
generated batch (all minimised):

- :func:`argmax_cross_entropy`: cross-entropy of the teacher's output to its own argmax
  (DAFL Eq. 3 "one-hot loss"; DP-DFD Eq. 2, first term);
- :func:`information_entropy_loss`: sum_c p_c log_b p_c of the batch-mean softmax p, the
  negative entropy, minimal (-log_b k) when the batch is class-balanced (DAFL Eq. 5; DP-DFD
  Eq. 2, alpha; DAFL's code takes b = 10, which makes the term ln 10 = 2.3 times weaker than
  in base e);
- :func:`bn_statistics_distance`: for every BatchNorm layer of the teacher, the L2 distances
  between the batch mean / variance of its input and its running mean / variance, summed over
  layers (DP-DFD Eq. 2, beta; DeepInversion, Yin et al. CVPR 2020, Eq. 4). Those running
  statistics are **statistics of the private data**: a generator fitted to them is not
  differentially private (see NOTES, "DP-DFD");
- :func:`activation_loss`: minus the mean absolute penultimate feature (DAFL Eq. 4, maximising
  the activations).

DP-DFD uses alpha = 5, beta = 10 and no activation term; DGD uses DAFL's weights (5 and 0.1 on
the activation term, no BN term).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import math
import time
import warnings
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (conventional alias)
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.devices import resolve_device
from dpkd_audit.pipelines import limits
from dpkd_audit.pipelines.common.checkpoint import (
    fingerprint,
    loop_checkpoint,
    no_loop_checkpoint,
    restore_training,
    training_state,
)
from dpkd_audit.pipelines.common.config import parse_enum
from dpkd_audit.pipelines.common.progress import TailMeans, progress_counter
from dpkd_audit.pipelines.common.teacher import penultimate_features

__all__ = [
    "BnStatistics",
    "DaflGenerator",
    "GeneratorConfig",
    "GeneratorOutput",
    "GeneratorResult",
    "GeneratorSchedule",
    "GeneratorTrainer",
    "StatisticsTerm",
    "activation_loss",
    "argmax_cross_entropy",
    "bn_statistics_distance",
    "check_sound_generator",
    "fit_generator",
    "generator_loss",
    "generator_pixel_scale",
    "information_entropy_loss",
    "pixel_scale_of",
]


class GeneratorOutput(enum.StrEnum):
    """The generator's last operation (module docstring)."""

    #: DAFL: tanh, BatchNorm(affine=False), mapped by the pixel mean and standard deviation.
    STANDARDISED = "standardised"
    #: 0.5 (tanh + 1): [0, 1] without normalisation.
    SQUASHED = "squashed"


class GeneratorSchedule(enum.StrEnum):
    """The generator's learning-rate schedule."""

    #: Constant (DAFL on MNIST).
    CONSTANT = "constant"
    #: Cosine decay to 0 over the steps of a call.
    COSINE = "cosine"
    #: Multiplied by ``decay_factor`` every ``decay_every`` steps (DGD, Sec. IV: 0.2, ten times
    #: smaller every 80 of its 200 rounds).
    STEP = "step"


def argmax_cross_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of ``logits`` ``(n, k)`` to their own argmax (pseudo-labels)."""
    return F.cross_entropy(logits, logits.detach().argmax(dim=1))


def information_entropy_loss(logits: torch.Tensor, base: float = math.e) -> torch.Tensor:
    """sum_c p_c log_base p_c of the batch-mean softmax p (minimal, -log_base k, if balanced).

    Args:
        logits: ``(n, k)`` teacher outputs.
        base: Base of the logarithm (> 1).
    """
    mean = torch.softmax(logits, dim=1).mean(dim=0)
    return (mean * torch.log(mean.clamp_min(1e-12))).sum() / math.log(base)


def pixel_scale_of(images: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation of the pixels (scaled to [0, 1]) of uint8 images.

    What a :attr:`GeneratorOutput.STANDARDISED` generator maps its standardised batches back
    by: DAFL's input normalisation constants (0.1307 and 0.3081 for MNIST's training set).

    Raises:
        ValueError: If ``images`` is not a non-empty uint8 array, or is constant.
    """
    arr = np.asarray(images)
    if arr.dtype != np.uint8 or arr.size == 0:
        raise ValueError(f"images must be a non-empty uint8 array; got dtype {arr.dtype} and "
                         f"shape {arr.shape}")
    total = arr.size
    mean = float(arr.sum(dtype=np.float64)) / total
    square = float(np.square(arr, dtype=np.float64).sum()) / total
    std = math.sqrt(max(square - mean * mean, 0.0))
    if std <= 0:
        raise ValueError("images are constant: their pixel standard deviation is 0")
    return mean / 255.0, std / 255.0


def activation_loss(features: torch.Tensor) -> torch.Tensor:
    """Minus the mean absolute value of ``features`` (DAFL's activation term, minimised)."""
    return -features.abs().mean()


def bn_statistics_distance(pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                             torch.Tensor]]) -> torch.Tensor:
    """Sum over layers of ||mean - running_mean||_2 + ||var - running_var||_2.

    Args:
        pairs: Per BatchNorm layer, ``(batch_mean, batch_var, running_mean, running_var)``
            (batch variance biased, over the batch and spatial axes).

    Raises:
        ValueError: If ``pairs`` is empty (the teacher has no BatchNorm layer).
    """
    if not pairs:
        raise ValueError("the teacher has no BatchNorm layer: the BN-statistics term needs one "
                         "(set beta=0)")
    total = torch.zeros((), device=pairs[0][0].device)
    for mean, var, run_mean, run_var in pairs:
        total = total + torch.linalg.vector_norm(mean - run_mean) \
            + torch.linalg.vector_norm(var - run_var)
    return total


class StatisticsTerm(Protocol):
    """What the statistics term reads: a context manager around the teacher's forward pass.

    After the pass, :attr:`pairs` holds ``(batch_mean, batch_var, reference_mean,
    reference_var)`` per layer; :attr:`name` names the loss term. :class:`BnStatistics` (the
    teacher's BatchNorm running statistics, DP-DFD) and
    :class:`~dpkd_audit.pipelines.common.dp_statistics.FeatureStatistics` (differentially
    private statistics, the sound variant) implement it.
    """

    name: str
    pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]

    @property
    def count(self) -> int: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...


class BnStatistics:
    """Forward hooks collecting each BatchNorm input's batch statistics beside its running ones.

    Use as a context manager around the teacher's forward pass; :attr:`pairs` then holds one
    ``(batch_mean, batch_var, running_mean, running_var)`` per BatchNorm layer, for
    :func:`bn_statistics_distance`.
    """

    name = "bn_statistics"

    def __init__(self, model: nn.Module) -> None:
        self._layers = [m for m in model.modules()
                        if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self.pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []

    @property
    def count(self) -> int:
        """Number of BatchNorm layers."""
        return len(self._layers)

    def _hook(self, module: nn.Module, inputs: tuple[torch.Tensor, ...], _out: object) -> None:
        x = inputs[0]
        axes = [0, *range(2, x.ndim)]
        self.pairs.append((x.mean(dim=axes), x.var(dim=axes, unbiased=False),
                           module.running_mean, module.running_var))

    def __enter__(self) -> BnStatistics:
        self.pairs = []
        self._handles = [m.register_forward_hook(self._hook) for m in self._layers]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


class DaflGenerator(nn.Module):
    """DAFL's generator (see the module docstring); ``forward(z)`` -> images.

    Args:
        latent_dim: Size of z.
        width: Channels after the linear layer.
        image_shape: ``(h, w)``, multiples of 4.
        output: :class:`GeneratorOutput`.
        bn_eps: ``eps`` of the BatchNorm layers after the two upsampling convolutions (DAFL:
            0.8; the first BatchNorm keeps PyTorch's 1e-5, as in DAFL).
        pixel_scale: ``(mean, std)`` of real pixels in [0, 1] (``STANDARDISED`` only).
    """

    def __init__(self, *, latent_dim: int, width: int, image_shape: tuple[int, int],
                 output: GeneratorOutput = GeneratorOutput.SQUASHED, bn_eps: float = 1e-5,
                 pixel_scale: tuple[float, float] | None = None) -> None:
        super().__init__()
        h, w = image_shape
        self.latent_dim = latent_dim
        self.image_shape = (h, w)
        self.init_shape = (h // 4, w // 4)
        self.width = width
        self.output = GeneratorOutput(output)
        if (self.output is GeneratorOutput.STANDARDISED) != (pixel_scale is not None):
            raise ValueError("pixel_scale (mean, std) is needed by, and only by, the "
                             f"'standardised' output; got output={self.output.value!r}, "
                             f"pixel_scale={pixel_scale!r}")
        self.pixel_scale = None if pixel_scale is None else (float(pixel_scale[0]),
                                                             float(pixel_scale[1]))
        half = max(1, width // 2)
        self.linear = nn.Linear(latent_dim, width * self.init_shape[0] * self.init_shape[1])
        self.bn0 = nn.BatchNorm2d(width, track_running_stats=False)
        self.block1 = nn.Sequential(nn.Upsample(scale_factor=2),
                                    nn.Conv2d(width, width, 3, padding=1),
                                    nn.BatchNorm2d(width, eps=bn_eps,
                                                   track_running_stats=False),
                                    nn.LeakyReLU(0.2))
        self.block2 = nn.Sequential(nn.Upsample(scale_factor=2),
                                    nn.Conv2d(width, half, 3, padding=1),
                                    nn.BatchNorm2d(half, eps=bn_eps, track_running_stats=False),
                                    nn.LeakyReLU(0.2),
                                    nn.Conv2d(half, 1, 3, padding=1))
        self.standardise = nn.BatchNorm2d(1, affine=False, track_running_stats=False) \
            if self.output is GeneratorOutput.STANDARDISED else None

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        x = self.linear(z).view(z.shape[0], self.width, *self.init_shape)
        x = torch.tanh(self.block2(self.block1(self.bn0(x))))
        if self.standardise is None:
            return 0.5 * (x + 1.0)
        mean, std = self.pixel_scale
        return mean + std * self.standardise(x)

    def sample(self, n: int, generator: torch.Generator) -> torch.Tensor:
        """``n`` images in [0, 1] (no gradient) from latents drawn with the CPU ``generator``.

        A ``STANDARDISED`` generator's images are clipped to [0, 1], the range of real images.
        """
        n = _validate.check_int("n", n, minimum=2)
        device = self.linear.weight.device
        was_training = self.training
        self.eval()
        try:
            with torch.no_grad():
                z = torch.randn(n, self.latent_dim, generator=generator).to(device)
                return self(z).clamp_(0.0, 1.0)
        finally:
            self.train(was_training)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GeneratorConfig:
    """Generator and its data-free training.

    Attributes:
        latent_dim: Size of z (>= 1); DAFL uses 100.
        width: Channels after the linear layer (>= 2); DAFL uses 128.
        steps: Adam steps (>= 1).
        batch_size: Latents per step (>= 2).
        learning_rate: Adam's learning rate (> 0).
        schedule: :class:`GeneratorSchedule` of the learning rate (DAFL on MNIST: constant;
            DGD: step).
        decay_every: ``STEP`` schedule: steps between two decays (>= 1).
        decay_factor: ``STEP`` schedule: the factor of each decay, in (0, 1] (DGD: 0.1).
        betas: Adam's betas, each in [0, 1) (DAFL: PyTorch's default (0.9, 0.999)).
        output: :class:`GeneratorOutput` (DAFL: ``STANDARDISED``).
        bn_eps: ``eps`` of the BatchNorm layers after the upsampling convolutions (> 0; DAFL:
            0.8).
        entropy_base: Base of the logarithm of :func:`information_entropy_loss` (> 1; DAFL's
            code: 10).
        cross_entropy_weight: Weight of :func:`argmax_cross_entropy` (>= 0).
        alpha: Weight of :func:`information_entropy_loss` (>= 0); 5 in DP-DFD and DAFL.
        beta: Weight of :func:`bn_statistics_distance` (>= 0); 10 in DP-DFD, 0 in DGD.
        activation_weight: Weight of :func:`activation_loss` (>= 0); 0.1 in DAFL and DGD, 0 in
            DP-DFD.
    """

    latent_dim: int = 100
    width: int = 128
    steps: int = 2000
    batch_size: int = 256
    learning_rate: float = 0.01
    schedule: GeneratorSchedule = GeneratorSchedule.COSINE
    decay_every: int = 1000
    decay_factor: float = 0.1
    betas: tuple[float, float] = (0.5, 0.999)
    output: GeneratorOutput = GeneratorOutput.SQUASHED
    bn_eps: float = 1e-5
    entropy_base: float = math.e
    cross_entropy_weight: float = 1.0
    alpha: float = 5.0
    beta: float = 10.0
    activation_weight: float = 0.0

    def __post_init__(self) -> None:
        _validate.check_int("latent_dim", self.latent_dim, minimum=1)
        _validate.check_int("width", self.width, minimum=2)
        _validate.check_int("steps", self.steps, minimum=1, maximum=limits.MAX_STEPS)
        _validate.check_int("batch_size", self.batch_size, minimum=2)
        _validate.check_positive("learning_rate", self.learning_rate)
        object.__setattr__(self, "schedule",
                           parse_enum(GeneratorSchedule, "schedule", self.schedule))
        object.__setattr__(self, "output", parse_enum(GeneratorOutput, "output", self.output))
        _validate.check_int("decay_every", self.decay_every, minimum=1)
        _validate.check_probability("decay_factor", self.decay_factor, open_low=True)
        betas = self.betas
        if (not isinstance(betas, tuple | list) or len(betas) != 2
                or any(isinstance(b, bool) or not isinstance(b, int | float)
                       or not math.isfinite(b) or not 0 <= b < 1 for b in betas)):
            raise ValueError(f"betas must be two numbers in [0, 1) (Adam's); got {betas!r}")
        object.__setattr__(self, "betas", (float(betas[0]), float(betas[1])))
        _validate.check_positive("bn_eps", self.bn_eps)
        base = self.entropy_base
        if isinstance(base, bool) or not isinstance(base, int | float) \
                or not math.isfinite(base) or base <= 1:
            raise ValueError(f"entropy_base must be a finite number > 1; got {base!r}")
        for name in ("cross_entropy_weight", "alpha", "beta", "activation_weight"):
            _validate.check_nonnegative(name, getattr(self, name))

    @property
    def needs_pixel_scale(self) -> bool:
        """Whether the generator needs the real pixels' mean and standard deviation."""
        return self.output is GeneratorOutput.STANDARDISED

    @property
    def uses_bn_statistics(self) -> bool:
        """Whether the loss reads the teacher's BatchNorm running statistics."""
        return self.beta > 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class GeneratorResult:
    """A fitted generator and its training curve.

    Attributes:
        generator: The generator (eval mode), on the training device.
        loss_terms: Mean of each named loss term over the last 10% of the last call's steps.
        seconds: Wall-clock seconds of the fit.
        teacher_agreement: Share of a fresh batch of 1,000 samples whose teacher argmax is
            confident (max softmax > 0.9), a health figure of the fit.
        class_histogram: Teacher argmax counts on that batch (class balance).
        steps: Steps taken in all.
    """

    generator: DaflGenerator = dataclasses.field(repr=False, compare=False)
    loss_terms: dict[str, float]
    seconds: float
    teacher_agreement: float
    class_histogram: list[int]
    steps: int

    @property
    def largest_class_share(self) -> float:
        """Share of the check samples in the teacher's most frequent class."""
        return max(self.class_histogram) / max(1, sum(self.class_histogram))

    @property
    def collapsed(self) -> bool:
        """Whether the generator has collapsed: over 90% of its samples in one class.

        DAFL's recipe at learning rate 0.2 does this after some thousand steps (every sample
        the same image; ``reports/benchmarks/dgd-generator-h100``); a student then learns one
        class.
        """
        return self.largest_class_share > 0.9


@contextlib.contextmanager
def _frozen(model: nn.Module) -> Iterator[None]:
    """Eval mode and no parameter gradients for the duration (restored afterwards)."""
    was_training = model.training
    flags = [p.requires_grad for p in model.parameters()]
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in zip(model.parameters(), flags, strict=True):
            p.requires_grad_(flag)
        model.train(was_training)


def generator_loss(teacher: nn.Module, images: torch.Tensor, config: GeneratorConfig,
                   bn: StatisticsTerm | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The weighted loss of ``images`` under the frozen ``teacher`` and its named terms."""
    if bn is not None:
        with bn:
            logits, features = penultimate_features(teacher, images)
    else:
        logits, features = penultimate_features(teacher, images)
    terms = {"cross_entropy": argmax_cross_entropy(logits),
             "information_entropy": information_entropy_loss(logits, config.entropy_base)}
    total = config.cross_entropy_weight * terms["cross_entropy"] \
        + config.alpha * terms["information_entropy"]
    if config.activation_weight > 0:
        terms["activation"] = activation_loss(features)
        total = total + config.activation_weight * terms["activation"]
    if bn is not None:
        terms[bn.name] = bn_statistics_distance(bn.pairs)
        total = total + config.beta * terms[bn.name]
    return total, terms


class GeneratorTrainer:
    """A :class:`DaflGenerator` being fitted to a frozen teacher; :func:`fit_generator` wraps it.

    The teacher is only read: its parameters and BatchNorm statistics are never updated. Steps
    can be taken in several calls (DP-DFD's optional fine-tuning after each stage).

    Args:
        teacher: A trained classifier (with a ``classifier`` layer) on ``device``.
        image_shape: ``(h, w)``, both multiples of 4.
        num_classes: The teacher's number of classes.
        config: Generator and training.
        seed: Seed (>= 0) of the generator's initialisation and latents (one CPU
            ``torch.Generator``).
        device: CPU or CUDA.
        statistics: The statistics term's reference (:class:`StatisticsTerm`, weight
            ``config.beta``); default: the teacher's BatchNorm running statistics
            (:class:`BnStatistics`, DP-DFD's term).
        pixel_scale: ``(mean, std)`` of real pixels in [0, 1], given exactly when
            ``config.output`` is ``STANDARDISED`` (:func:`pixel_scale_of`); mean in (0, 1),
            std in (0, 1].

    Raises:
        ValueError: For a bad shape, config, seed or pixel scale, ``beta > 0`` with a teacher
            without BatchNorm layers and no ``statistics``, or ``statistics`` with
            ``beta = 0``.
    """

    def __init__(self, teacher: nn.Module, *, image_shape: tuple[int, int], num_classes: int,
                 config: GeneratorConfig, seed: int, device: torch.device | str,
                 statistics: StatisticsTerm | None = None,
                 pixel_scale: tuple[float, float] | None = None) -> None:
        if not isinstance(config, GeneratorConfig):
            raise ValueError(f"config must be a GeneratorConfig; got {type(config).__name__}")
        if (not isinstance(image_shape, tuple | list) or len(image_shape) != 2
                or any(not isinstance(s, int) or s < 4 or s % 4 for s in image_shape)):
            raise ValueError(f"image_shape must be (h, w) with both sides multiples of 4 and "
                             f">= 4; got {image_shape!r}")
        self.num_classes = _validate.check_int("num_classes", num_classes, minimum=2)
        _validate.check_int("seed", seed, minimum=0)
        if config.needs_pixel_scale:
            if (not isinstance(pixel_scale, tuple | list) or len(pixel_scale) != 2
                    or any(isinstance(v, bool) or not isinstance(v, int | float)
                           or not math.isfinite(v) for v in pixel_scale)
                    or not 0 < pixel_scale[0] < 1 or not 0 < pixel_scale[1] <= 1):
                raise ValueError("config.output='standardised' needs pixel_scale = (mean, std) "
                                 "of real pixels in [0, 1], mean in (0, 1) and std in (0, 1]; "
                                 f"got {pixel_scale!r}")
        elif pixel_scale is not None:
            raise ValueError(f"pixel_scale applies to config.output='standardised' only; got "
                             f"output={config.output.value!r}, pixel_scale={pixel_scale!r}")
        self.device = resolve_device(device)
        self.config = config
        self.teacher = teacher
        if statistics is not None and not config.uses_bn_statistics:
            raise ValueError("statistics were given but config.beta = 0 (their term's weight)")
        self._bn = (statistics if statistics is not None else BnStatistics(teacher)) \
            if config.uses_bn_statistics else None
        if self._bn is not None and self._bn.count == 0:
            raise ValueError("config.beta > 0 needs a teacher with BatchNorm layers (their "
                             "running statistics); this teacher has none: set beta=0")
        self.rng = torch.Generator().manual_seed(seed)
        self.seed, self.image_shape, self.pixel_scale = seed, tuple(image_shape), \
            None if pixel_scale is None else [float(v) for v in pixel_scale]
        with torch.device("meta"):
            generator = DaflGenerator(latent_dim=config.latent_dim, width=config.width,
                                      image_shape=tuple(image_shape), output=config.output,
                                      bn_eps=config.bn_eps, pixel_scale=pixel_scale)
        generator = generator.to_empty(device="cpu")
        _init_generator(generator, self.rng)
        self.generator = generator.to(self.device)
        self.steps_taken = 0
        self.seconds = 0.0
        self.loss_terms: dict[str, float] = {}

    def train(self, steps: int, *, learning_rate: float | None = None, progress: bool = False,
              desc: str = "generator", checkpoint: bool = True) -> None:
        """Take ``steps`` Adam steps; :attr:`loss_terms` becomes their last 10%'s means.

        The learning rate starts at ``learning_rate`` (default ``config.learning_rate``) and
        follows ``config.schedule`` (constant; a cosine to 0 over these steps; or steps
        counted over every step the trainer has taken). Adam's moments start afresh. With
        ``checkpoint`` (default) the loop is checkpointed under an active
        :class:`~dpkd_audit.pipelines.common.checkpoint.Checkpoints` (named ``desc``); short
        repeated calls (DP-DFD's fine-tuning after each stage) pass ``False``.

        Raises:
            FloatingPointError: If the loss becomes non-finite.
        """
        start = time.perf_counter()
        steps = _validate.check_int("steps", steps, minimum=1)
        lr = self.config.learning_rate if learning_rate is None else \
            _validate.check_positive("learning_rate", learning_rate)
        optimizer = torch.optim.Adam(self.generator.parameters(), lr=lr,
                                     betas=self.config.betas)
        kind, config, before = self.config.schedule, self.config, self.steps_taken

        def factor(step: int) -> float:
            if kind is GeneratorSchedule.COSINE:
                return 0.5 * (1.0 + math.cos(math.pi * step / steps))
            if kind is GeneratorSchedule.STEP:
                # counted over all the trainer's steps, so that calls continue the schedule
                return config.decay_factor ** ((before + step) // config.decay_every)
            return 1.0

        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        sums = TailMeans(steps=steps)
        bar = progress_counter(enabled=progress, desc=desc, total=steps, unit="step")
        config = self.config
        checkpoint = (loop_checkpoint if checkpoint else no_loop_checkpoint)(desc, lambda: {
            "config": fingerprint(config), "seed": self.seed, "num_classes": self.num_classes,
            "image_shape": list(self.image_shape), "pixel_scale": self.pixel_scale,
            "steps": steps, "learning_rate": lr, "steps_before": before,
            "generator_before": fingerprint(self.generator),
            "teacher": fingerprint(self.teacher),
            "statistics": _statistics_fingerprint(self._bn)})

        def state() -> dict[str, Any]:
            return training_state(self.generator, optimizer, schedule, self.rng,
                                  tail_means=dict(sums.means))

        first = 0
        loaded = checkpoint.load()
        if loaded is not None:
            first, saved = loaded
            restore_training(saved, self.generator, optimizer, schedule, self.rng)
            sums.means = dict(saved["tail_means"])
            bar.update(first)
        with _frozen(self.teacher), checkpoint:
            self.generator.train()
            for step in range(first, steps):
                z = torch.randn(config.batch_size, config.latent_dim, generator=self.rng) \
                    .to(self.device)
                loss, terms = generator_loss(self.teacher, self.generator(z), config, self._bn)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"generator loss became {float(loss.detach())} at "
                                             f"step {self.steps_taken + step + 1}; lower "
                                             f"learning_rate ({lr})")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
                sums.add(step, terms)
                if step % 20 == 0 or step == steps - 1:
                    bar.set_postfix(loss=f"{float(loss.detach()):.3f}", refresh=False)
                bar.update(1)
                checkpoint.step_done(step + 1, steps, state)
            bar.close()
        self.generator.eval()
        self.steps_taken += steps
        self.loss_terms = sums.means
        self.seconds += time.perf_counter() - start

    def result(self, *, check_samples: int = 1000) -> GeneratorResult:
        """The generator with its health figures on ``check_samples`` fresh samples."""
        check_samples = _validate.check_int("check_samples", check_samples, minimum=2)
        with _frozen(self.teacher), torch.no_grad():
            probs = torch.softmax(self.teacher(self.generator.sample(check_samples, self.rng)),
                                  dim=1)
        confident = float((probs.max(dim=1).values > 0.9).float().mean())
        histogram = torch.bincount(probs.argmax(dim=1), minlength=self.num_classes).tolist()
        result = GeneratorResult(generator=self.generator, loss_terms=dict(self.loss_terms),
                                 seconds=self.seconds, teacher_agreement=confident,
                                 class_histogram=histogram, steps=self.steps_taken)
        if result.collapsed:
            warnings.warn(f"the generator has collapsed after {self.steps_taken} steps: "
                          f"{result.largest_class_share:.0%} of its samples fall in one class "
                          "of the teacher; take fewer steps or a lower learning_rate "
                          f"({self.config.learning_rate})", RuntimeWarning, stacklevel=2)
        return result


def _statistics_fingerprint(term: StatisticsTerm | None) -> str:
    """Fingerprint of what a statistics term matches the generator to.

    Released (or exact) feature statistics; none for :class:`BnStatistics`, whose reference is
    the teacher's BatchNorm buffers, fingerprinted with the teacher.
    """
    reference = getattr(term, "reference", None)
    return fingerprint(None if reference is None else
                       (type(term).__name__, reference.means, reference.variances,
                        reference.pixel_statistics))


def fit_generator(teacher: nn.Module, *, image_shape: tuple[int, int], num_classes: int,
                  config: GeneratorConfig, seed: int, device: torch.device | str,
                  pixel_scale: tuple[float, float] | None = None,
                  progress: bool = True) -> GeneratorResult:
    """Fit a :class:`DaflGenerator` to the frozen ``teacher`` (no data: only its outputs).

    ``config.steps`` steps of :class:`GeneratorTrainer` (arguments and errors as there).

    Example:
        >>> import torch
        >>> from dpkd_audit.pipelines.common.student import build_student
        >>> teacher = build_student((8, 8), 3, 4).eval()
        >>> result = fit_generator(teacher, image_shape=(8, 8), num_classes=3,
        ...                        config=GeneratorConfig(width=8, steps=2, batch_size=8),
        ...                        seed=0, device="cpu", progress=False)
        >>> result.generator.sample(4, torch.Generator().manual_seed(0)).shape
        torch.Size([4, 1, 8, 8])
    """
    trainer = GeneratorTrainer(teacher, image_shape=image_shape, num_classes=num_classes,
                               config=config, seed=seed, device=device,
                               pixel_scale=pixel_scale)
    trainer.train(config.steps, progress=progress)
    return trainer.result()


def generator_pixel_scale(config: GeneratorConfig,
                          images: np.ndarray) -> tuple[float, float] | None:
    """The pixel scale a published pipeline's generator needs, or ``None``.

    :func:`pixel_scale_of` ``images`` (the private training split, read without noise:
    published DP-DFD and DGD are not private at the record level anyway) when
    ``config.output`` uses one.
    """
    return pixel_scale_of(images) if config.needs_pixel_scale else None


def check_sound_generator(config: GeneratorConfig) -> None:
    """Refuse a sound mode's generator whose output needs the private pixels' scale.

    Raises:
        ValueError: If ``config.output`` is ``STANDARDISED`` (its mean and standard deviation
            would be statistics of the private data without noise).
    """
    if config.needs_pixel_scale:
        raise ValueError("sound_generator.output must be 'squashed': a 'standardised' output "
                         "maps its batches by the private pixels' mean and standard deviation, "
                         "statistics of the private data without noise")


def _init_generator(model: nn.Module, rng: torch.Generator) -> None:
    """PyTorch's default initialisation, drawn from ``rng`` (no global RNG)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Conv2d | nn.Linear):
                fan_in = module.weight[0].numel()
                bound = 1.0 / math.sqrt(fan_in)
                module.weight.uniform_(-bound, bound, generator=rng)
                module.bias.uniform_(-bound, bound, generator=rng)
            elif isinstance(module, nn.BatchNorm2d):
                module.reset_parameters()
