"""Student CNN training shared by the distillation pipelines (reverse k-NN, DP-DFD, DGD).

A student is a compact VGG-like CNN (conv blocks with BatchNorm, max pooling and a global
average pool) trained on labelled public images. Targets are either hard labels (with label
smoothing) or soft labels (rows of class probabilities). The reported accuracy is always the
accuracy of the **last** epoch on the held-out test split; the per-epoch curve is returned for
plots only and must never be used to pick an epoch (that would tune on the test set).

All randomness (weight initialisation, shuffling, augmentation) comes from one
``torch.Generator`` seeded from ``seed`` and kept on the CPU, so a run is deterministic on the
CPU for a seed and draws the same random numbers on any device. Global RNG state is never read
or written.

Example:
    >>> import numpy as np, torch
    >>> from dpkd_audit.pipelines.common.student import StudentConfig, train_student, predict
    >>> rng = np.random.default_rng(0)
    >>> x = rng.integers(0, 256, size=(64, 8, 8), dtype=np.uint8)
    >>> y = rng.integers(0, 2, size=64)
    >>> config = StudentConfig(epochs=1, batch_size=32, width=4)
    >>> result = train_student(x, y, num_classes=2, test_images=x, test_labels=y,
    ...                        config=config, seed=0, device=torch.device("cpu"), progress=False)
    >>> predict(result.model, x, device=torch.device("cpu")).shape
    (64, 2)
"""

from __future__ import annotations

import dataclasses
import enum
import math
import numbers
import time
from collections.abc import Callable
from typing import Any

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
    restore_training,
    training_state,
)
from dpkd_audit.pipelines.common.progress import progress_counter

__all__ = [
    "LrSchedule",
    "StudentConfig",
    "StudentOptimizer",
    "StudentResult",
    "augment_batch",
    "build_student",
    "fit_classifier",
    "init_weights",
    "predict",
    "train_student",
]

#: Tolerance on the row sums of soft targets.
_SOFT_TARGET_ATOL = 1e-3


class StudentOptimizer(enum.StrEnum):
    """Optimizer of the student."""

    SGD = "sgd"  #: SGD with Nesterov momentum and L2 weight decay.
    ADAMW = "adamw"  #: AdamW (decoupled weight decay).


class LrSchedule(enum.StrEnum):
    """Learning-rate schedule, stepped once per batch."""

    ONE_CYCLE = "one-cycle"  #: Warm up to ``learning_rate``, then anneal (torch ``OneCycleLR``).
    COSINE = "cosine"  #: Cosine decay from ``learning_rate`` to 0.
    CONSTANT = "constant"  #: ``learning_rate`` throughout.


def _check_nonnegative(name: str, value: Any, *, maximum: float | None = None) -> float:
    allowed = "a real number >= 0" + (f" and <= {maximum}" if maximum is not None else "")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    value = float(value)
    if math.isnan(value) or value < 0 or math.isinf(value) or (
            maximum is not None and value > maximum):
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    return value


def _check_enum(name: str, value: Any, enum_type: type[enum.StrEnum]) -> enum.StrEnum:
    try:
        return enum_type(value)
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in enum_type)
        raise ValueError(f"{name} must be one of {allowed}; got {value!r}") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudentConfig:
    """Hyper-parameters of student training.

    Attributes:
        epochs: Passes over the training set (>= 1).
        batch_size: Mini-batch size (>= 2, BatchNorm needs two samples). An epoch is split into
            ``ceil(n / batch_size)`` near-equal batches, so no sample is dropped.
        learning_rate: Peak learning rate (> 0).
        weight_decay: Weight decay (>= 0); L2 for SGD, decoupled for AdamW.
        label_smoothing: Label smoothing in [0, 1) applied to hard labels (soft targets are used
            as given).
        augment: Whether to augment training batches with random affine transforms.
        max_shift: Largest random translation, as a fraction of the image side, in [0, 0.5].
        max_rotation: Largest random rotation in degrees, in [0, 180].
        max_scale: Largest relative zoom in [0, 0.5] (scale drawn from [1 - s, 1 + s]).
        width: Channels of the first conv block (the next blocks use 2x and 4x), >= 1.
        optimizer: :class:`StudentOptimizer` (or its value).
        momentum: SGD momentum in [0, 1) (ignored by AdamW).
        schedule: :class:`LrSchedule` (or its value).
        warmup_fraction: Share of the steps spent warming up under ``ONE_CYCLE``, in (0, 1).
    """

    epochs: int = 15
    batch_size: int = 64
    learning_rate: float = 0.1
    weight_decay: float = 5e-4
    label_smoothing: float = 0.1
    augment: bool = True
    max_shift: float = 0.1
    max_rotation: float = 10.0
    max_scale: float = 0.1
    width: int = 32
    optimizer: StudentOptimizer = StudentOptimizer.SGD
    momentum: float = 0.9
    schedule: LrSchedule = LrSchedule.ONE_CYCLE
    warmup_fraction: float = 0.2

    def __post_init__(self) -> None:
        _validate.check_int("epochs", self.epochs, minimum=1, maximum=limits.MAX_EPOCHS)
        _validate.check_int("batch_size", self.batch_size, minimum=2)
        _validate.check_positive("learning_rate", self.learning_rate)
        _check_nonnegative("weight_decay", self.weight_decay)
        _validate.check_probability("label_smoothing", self.label_smoothing, open_high=True)
        if not isinstance(self.augment, bool):
            raise ValueError(f"augment must be a bool; got {self.augment!r}")
        _check_nonnegative("max_shift", self.max_shift, maximum=0.5)
        _check_nonnegative("max_rotation", self.max_rotation, maximum=180.0)
        _check_nonnegative("max_scale", self.max_scale, maximum=0.5)
        _validate.check_int("width", self.width, minimum=1)
        object.__setattr__(self, "optimizer",
                           _check_enum("optimizer", self.optimizer, StudentOptimizer))
        _validate.check_probability("momentum", self.momentum, open_high=True)
        object.__setattr__(self, "schedule", _check_enum("schedule", self.schedule, LrSchedule))
        _validate.check_probability("warmup_fraction", self.warmup_fraction, open_low=True,
                                    open_high=True)

    @classmethod
    def small(cls) -> StudentConfig:
        """CPU preset for 28x28 images.

        Measured on the 5,000 MNIST public images with true labels (test: the 5,000 student-test
        images): last-epoch accuracy 0.9914-0.9936 over seeds 0-2, about 27 s on 2 idle cores
        (about 48 CPU-seconds; 65-90 s on a single thread).
        """
        return cls(epochs=15, batch_size=64, learning_rate=0.1, weight_decay=5e-4, width=16)

    @classmethod
    def paper(cls) -> StudentConfig:
        """GPU preset: a wider student (width 64) trained for 60 epochs (not tuned on a GPU yet)."""
        return cls(epochs=60, batch_size=128, learning_rate=0.1, weight_decay=5e-4, width=64)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StudentResult:
    """Outcome of :func:`train_student`.

    Attributes:
        test_accuracy: Test accuracy after the **last** epoch (the number to report).
        test_accuracy_per_epoch: Test accuracy after each epoch, for plots only (never pick the
            best epoch from it).
        train_loss_per_epoch: Mean training loss of each epoch (on augmented batches).
        seconds: Wall-clock seconds of training and evaluation.
        epochs: Number of epochs trained.
        num_train: Number of training images.
        model: The trained student (in eval mode), for :func:`predict`; excluded from repr and
            equality.
    """

    test_accuracy: float
    test_accuracy_per_epoch: list[float]
    train_loss_per_epoch: list[float]
    seconds: float
    epochs: int
    num_train: int
    model: nn.Module = dataclasses.field(repr=False, compare=False)


class _StudentNet(nn.Module):
    """VGG-like CNN: three conv blocks (width, 2*width, 4*width), global average pool, linear."""

    def __init__(self, image_shape: tuple[int, int], num_classes: int, width: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = 1
        for block, channels in enumerate((width, 2 * width, 4 * width)):
            convs = 1 if block == 0 else 2
            for _ in range(convs):
                layers += [nn.Conv2d(in_channels, channels, 3, padding=1, bias=False),
                           nn.BatchNorm2d(channels), nn.ReLU(inplace=True)]
                in_channels = channels
            if block < 2:
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
        self.image_shape = image_shape
        self.num_classes = num_classes
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(in_channels, num_classes)

    def backbone_features(self, x: torch.Tensor) -> torch.Tensor:
        """The pooled features ``(n, 4 * width)`` the classifier reads (DGD's phi(W-; x))."""
        return torch.flatten(self.pool(self.features(x)), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.backbone_features(x))


def init_weights(model: nn.Module, generator: torch.Generator) -> None:
    """Kaiming-normal convs, uniform linears (fan-in bound), unit norms: no global RNG draws."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu",
                                        generator=generator)
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, nn.BatchNorm2d | nn.GroupNorm):
                module.reset_parameters()
            elif isinstance(module, nn.Linear):
                bound = 1.0 / math.sqrt(module.in_features)
                module.weight.uniform_(-bound, bound, generator=generator)
                module.bias.zero_()


def build_student(image_shape: tuple[int, int], num_classes: int, width: int, *,
                  generator: torch.Generator | None = None) -> nn.Module:
    """Build the student CNN for single-channel images, on the CPU.

    Three conv blocks of ``width``, ``2 * width`` and ``4 * width`` channels (3x3 conv,
    BatchNorm, ReLU; two convs in the later blocks), max pooling after the first two blocks and
    a global average pool, so any image of at least 4x4 works (8x8 digits, 28x28 MNIST).

    Args:
        image_shape: ``(height, width)`` of the inputs, each >= 4.
        num_classes: Number of classes (>= 2).
        width: Channels of the first block (>= 1).
        generator: CPU generator for the weight initialisation; ``None`` uses a generator
            seeded with 0 (global RNG state is never used).

    Returns:
        The model in training mode; it takes float tensors of shape ``(n, 1, h, w)`` scaled to
        [0, 1] and returns logits ``(n, num_classes)``.

    Raises:
        ValueError: On a bad ``image_shape``, ``num_classes``, ``width`` or ``generator``.
    """
    image_shape = _check_image_shape(image_shape)
    _validate.check_int("num_classes", num_classes, minimum=2)
    _validate.check_int("width", width, minimum=1)
    if generator is None:
        generator = torch.Generator().manual_seed(0)
    elif not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU torch.Generator; got {generator!r}")
    with torch.device("meta"):  # no default initialisation, so no global RNG draws
        model = _StudentNet(image_shape, num_classes, width)
    model = model.to_empty(device="cpu")
    init_weights(model, generator)
    return model


def _check_image_shape(image_shape: Any) -> tuple[int, int]:
    if (not isinstance(image_shape, tuple | list) or len(image_shape) != 2
            or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 4
                   for s in image_shape)):
        raise ValueError(f"image_shape must be a pair of integers (height, width), each >= 4; "
                         f"got {image_shape!r}")
    return int(image_shape[0]), int(image_shape[1])


def _check_images(name: str, images: Any) -> np.ndarray:
    arr = np.asarray(images)
    if (arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[0] < 1 or arr.shape[1] < 4
            or arr.shape[2] < 4):
        raise ValueError(f"{name} must be a uint8 array of shape (n, height, width) with n >= 1 "
                         f"and height, width >= 4; got dtype {arr.dtype} and shape {arr.shape}")
    return arr


def _check_hard_labels(name: str, labels: np.ndarray, n: int, num_classes: int) -> np.ndarray:
    if labels.shape != (n,) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array of shape ({n},); got dtype "
                         f"{labels.dtype} and shape {labels.shape}")
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(f"{name} must hold labels in [0, {num_classes}) (num_classes="
                         f"{num_classes}); got values in [{labels.min()}, {labels.max()}]")
    return labels.astype(np.int64)


def _check_targets(targets: Any, n: int, num_classes: int) -> tuple[np.ndarray, bool]:
    """Return ``(targets, soft)`` after validating hard labels or soft label rows."""
    arr = np.asarray(targets)
    if arr.ndim == 2 and np.issubdtype(arr.dtype, np.floating):
        if arr.shape != (n, num_classes):
            raise ValueError(f"train_targets as soft labels must have shape (n, num_classes) = "
                             f"({n}, {num_classes}); got {arr.shape}")
        if not np.all(np.isfinite(arr)) or arr.min() < 0:
            raise ValueError("train_targets as soft labels must be finite and >= 0")
        sums = arr.sum(axis=1, dtype=np.float64)
        worst = float(np.max(np.abs(sums - 1.0)))
        if worst > _SOFT_TARGET_ATOL:
            raise ValueError(f"train_targets as soft labels must have rows summing to 1 (within "
                             f"{_SOFT_TARGET_ATOL}); got a row summing to "
                             f"{float(sums[np.argmax(np.abs(sums - 1.0))])}")
        return arr.astype(np.float32), True
    if arr.ndim == 1:
        return _check_hard_labels("train_targets", arr, n, num_classes), False
    raise ValueError(f"train_targets must be integer labels of shape ({n},) or float soft labels "
                     f"of shape ({n}, {num_classes}); got dtype {arr.dtype} and shape {arr.shape}")


def _to_tensor(images: np.ndarray, device: torch.device) -> torch.Tensor:
    """uint8 (n, h, w) -> float32 (n, 1, h, w) in [0, 1] on ``device``."""
    tensor = torch.from_numpy(np.ascontiguousarray(images).copy())
    return tensor.to(device).unsqueeze(1).float().div_(255.0)


def augment_batch(x: torch.Tensor, generator: torch.Generator,
                  config: StudentConfig) -> torch.Tensor:
    """Random rotation, zoom and shift of a batch via ``affine_grid``/``grid_sample``."""
    n = x.shape[0]
    u = torch.rand(n, 4, generator=generator, dtype=torch.float32) * 2.0 - 1.0  # CPU draws
    angle = u[:, 0] * math.radians(config.max_rotation)
    scale = 1.0 + u[:, 1] * config.max_scale
    # Normalised coordinates span [-1, 1], so a shift of a fraction f of the side is 2f.
    tx, ty = u[:, 2] * 2.0 * config.max_shift, u[:, 3] * 2.0 * config.max_shift
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack([torch.stack([cos, -sin, tx], 1), torch.stack([sin, cos, ty], 1)], 1)
    grid = F.affine_grid(theta.to(x.device), list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def _make_optimizer(model: nn.Module, config: StudentConfig) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]  # BatchNorm and biases
    groups = [{"params": decay, "weight_decay": config.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    if config.optimizer is StudentOptimizer.SGD:
        return torch.optim.SGD(groups, lr=config.learning_rate, momentum=config.momentum,
                               nesterov=config.momentum > 0)
    return torch.optim.AdamW(groups, lr=config.learning_rate)


def _make_schedule(optimizer: torch.optim.Optimizer, config: StudentConfig,
                   total_steps: int) -> torch.optim.lr_scheduler.LRScheduler:
    if config.schedule is LrSchedule.ONE_CYCLE:
        warmup = config.warmup_fraction
        if warmup * total_steps <= 1.0:
            # At most one warm-up step: none at all (OneCycleLR divides by zero when
            # warmup * total_steps is exactly 1, e.g. 1 epoch of 5 batches at 0.2).
            warmup = 0.5 / total_steps
        return torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=config.learning_rate, total_steps=total_steps,
            pct_start=warmup,
            cycle_momentum=config.optimizer is StudentOptimizer.SGD and config.momentum > 0)
    if config.schedule is LrSchedule.COSINE:
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: 0.5 * (1.0 + math.cos(math.pi * step / total_steps)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)


def _predict_tensor(model: nn.Module, x: torch.Tensor, batch_size: int) -> torch.Tensor:
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            probs = [torch.softmax(model(x[i:i + batch_size]).float(), dim=1)
                     for i in range(0, x.shape[0], batch_size)]
    finally:
        model.train(was_training)
    return torch.cat(probs)


def predict(model: nn.Module, images: np.ndarray, *, device: torch.device,
            batch_size: int = 1024) -> np.ndarray:
    """Class probabilities of a trained student.

    Args:
        model: A model from :func:`build_student` / :attr:`StudentResult.model` (already on
            ``device``).
        images: uint8 array ``(n, height, width)`` in 0..255, the size the model was built for.
        device: Device to run on (the model's device).
        batch_size: Images per forward pass (>= 1).

    Returns:
        float32 array ``(n, num_classes)`` whose rows sum to 1.

    Raises:
        ValueError: On bad images, device or batch size.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    images = _check_images("images", images)
    device = resolve_device(device)
    _validate.check_int("batch_size", batch_size, minimum=1)
    expected = getattr(model, "image_shape", None)
    if expected is not None and tuple(images.shape[1:]) != tuple(expected):
        raise ValueError(f"images must have shape (n, {expected[0]}, {expected[1]}) to match the "
                         f"model; got {images.shape}")
    probs = _predict_tensor(model, _to_tensor(images, device), batch_size)
    return probs.cpu().numpy().astype(np.float32, copy=False)


def train_student(train_images: np.ndarray, train_targets: np.ndarray, *, num_classes: int,
                  test_images: np.ndarray, test_labels: np.ndarray, config: StudentConfig,
                  seed: int, device: torch.device, progress: bool = True) -> StudentResult:
    """Train a student CNN and report its last-epoch test accuracy.

    Args:
        train_images: uint8 ``(n, h, w)`` in 0..255 (normalised inside).
        train_targets: int labels ``(n,)`` in ``[0, num_classes)``, or float soft labels
            ``(n, num_classes)`` with non-negative rows summing to 1. Label smoothing applies to
            hard labels only.
        num_classes: Number of classes (>= 2).
        test_images: uint8 ``(m, h, w)``, same image size as ``train_images``.
        test_labels: int labels ``(m,)`` in ``[0, num_classes)``.
        config: Training hyper-parameters.
        seed: Seed (>= 0) of the one CPU ``torch.Generator`` behind initialisation, shuffling
            and augmentation.
        device: Device to train on (CPU or CUDA).
        progress: Show a tqdm bar over epochs on stderr (loss and test accuracy as postfix).

    Returns:
        A :class:`StudentResult`; ``test_accuracy`` is the last epoch's.

    Raises:
        ValueError: On bad shapes, dtypes, lengths, ``num_classes``, label range, ``config``,
            ``seed`` or ``device``.
        FloatingPointError: If the training loss becomes non-finite (lower the learning rate).
    """
    return fit_classifier(
        lambda shape, generator: build_student(shape, num_classes, config.width,
                                               generator=generator),
        train_images, train_targets, num_classes=num_classes, test_images=test_images,
        test_labels=test_labels, config=config, seed=seed, device=device, progress=progress,
        desc="student")


def fit_classifier(build: Callable[[tuple[int, int], torch.Generator], nn.Module],
                   train_images: np.ndarray, train_targets: np.ndarray, *, num_classes: int,
                   test_images: np.ndarray, test_labels: np.ndarray, config: StudentConfig,
                   seed: int, device: torch.device, progress: bool = True,
                   desc: str = "classifier") -> StudentResult:
    """Train the model ``build(image_shape, generator)`` returns, as :func:`train_student` does.

    The training loop of every classifier of the pipelines (students, non-private teachers):
    ``config`` sets the optimizer, schedule, augmentation and label smoothing (``config.width``
    is the builder's business). Arguments and errors are those of :func:`train_student`;
    ``build`` receives the image shape and the seeded CPU generator and returns a CPU model
    taking ``(n, 1, h, w)`` floats in [0, 1]; ``desc`` names the progress bar.
    """
    start = time.perf_counter()
    _validate.check_int("num_classes", num_classes, minimum=2)
    train_images = _check_images("train_images", train_images)
    n = train_images.shape[0]
    if n < 2:
        raise ValueError(f"train_images must hold at least 2 images; got {n}")
    targets, soft = _check_targets(train_targets, n, num_classes)
    test_images = _check_images("test_images", test_images)
    if test_images.shape[1:] != train_images.shape[1:]:
        raise ValueError(f"test_images must have the image size of train_images "
                         f"{train_images.shape[1:]}; got {test_images.shape[1:]}")
    test_labels = _check_hard_labels("test_labels", np.asarray(test_labels),
                                     test_images.shape[0], num_classes)
    if not isinstance(config, StudentConfig):
        raise ValueError(f"config must be a StudentConfig; got {type(config).__name__}")
    _validate.check_int("seed", seed, minimum=0)
    device = resolve_device(device)

    generator = torch.Generator().manual_seed(seed)
    model = build(tuple(train_images.shape[1:]), generator).to(device)
    x_train = _to_tensor(train_images, device)
    y_train = torch.from_numpy(targets).to(device)
    x_test = _to_tensor(test_images, device)
    y_test = torch.from_numpy(test_labels).to(device)

    steps = math.ceil(n / config.batch_size)
    optimizer = _make_optimizer(model, config)
    schedule = _make_schedule(optimizer, config, config.epochs * steps)
    smoothing = 0.0 if soft else config.label_smoothing

    accuracies: list[float] = []
    losses: list[float] = []
    bar = progress_counter(enabled=progress, desc=desc, total=config.epochs, unit="epoch")
    checkpoint = loop_checkpoint(desc, lambda: {
        "config": fingerprint(config), "seed": seed, "num_classes": num_classes,
        "data": fingerprint(train_images, targets), "initial_model": fingerprint(model)})
    # Where the loop is inside an epoch: its batch order, the next batch, the loss sum so far.
    epoch_state: dict[str, Any] = {"order": None, "batch": 0, "total": None}

    def state() -> dict[str, Any]:
        return training_state(model, optimizer, schedule, generator,
                              accuracies=list(accuracies), losses=list(losses),
                              order=epoch_state["order"], batch=epoch_state["batch"],
                              total=None if epoch_state["total"] is None
                              else epoch_state["total"].detach().cpu())

    loaded = checkpoint.load()
    if loaded is not None:
        _, saved = loaded
        restore_training(saved, model, optimizer, schedule, generator)
        accuracies[:], losses[:] = saved["accuracies"], saved["losses"]
        epoch_state.update(order=saved["order"], batch=saved["batch"], total=saved["total"])
        bar.update(len(accuracies))
    total_steps = config.epochs * steps
    with checkpoint:
        for epoch in range(len(accuracies), config.epochs):
            model.train()
            if epoch_state["order"] is None:
                epoch_state.update(order=torch.randperm(n, generator=generator), batch=0,
                                   total=torch.zeros(()))
            batches = epoch_state["order"].tensor_split(steps)
            total = epoch_state["total"] = epoch_state["total"].to(device)
            for b in range(epoch_state["batch"], steps):
                batch = batches[b].to(device)
                xb = x_train[batch]
                if config.augment:
                    xb = augment_batch(xb, generator, config)
                loss = F.cross_entropy(model(xb), y_train[batch], label_smoothing=smoothing)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
                total += loss.detach() * batch.shape[0]
                if b + 1 < steps:  # the epoch's last step is saved with its accuracy
                    epoch_state["batch"] = b + 1
                    checkpoint.step_done(epoch * steps + b + 1, total_steps, state)
            mean_loss = float(total) / n
            if not math.isfinite(mean_loss):
                raise FloatingPointError(f"training loss became {mean_loss} in epoch "
                                         f"{epoch + 1}; lower the learning rate "
                                         f"({config.learning_rate})")
            losses.append(mean_loss)
            predictions = _predict_tensor(model, x_test, 1024).argmax(dim=1)
            accuracies.append(int((predictions == y_test).sum()) / len(test_labels))
            bar.set_postfix(loss=f"{losses[-1]:.4f}", acc=f"{accuracies[-1]:.4f}",
                            refresh=False)
            bar.update(1)
            epoch_state.update(order=None, batch=0, total=None)
            checkpoint.step_done((epoch + 1) * steps, total_steps, state)
    bar.close()
    model.eval()
    return StudentResult(test_accuracy=accuracies[-1], test_accuracy_per_epoch=accuracies,
                         train_loss_per_epoch=losses, seconds=time.perf_counter() - start,
                         epochs=config.epochs, num_train=n, model=model)
