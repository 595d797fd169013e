"""Teachers trained on the private split: architectures and non-private training.

Shared by DP-DFD and DGD. A teacher is a classifier of single-channel images taking
``(n, 1, h, w)`` floats in [0, 1] and returning logits; its last layer is named ``classifier``
(:func:`penultimate_features` reads its input, DAFL's activation term needs it).

Architectures (:class:`TeacherArchitecture`):

- ``vgg``: the package's VGG-like student CNN (:func:`~dpkd_audit.pipelines.common.student.
  build_student`), BatchNorm after every conv: the CPU preset's teacher. Under DP-SGD its
  BatchNorm layers become GroupNorm (Opacus ``ModuleValidator.fix``), since BatchNorm mixes the
  records of a batch and per-sample gradients do not exist for it.
- ``resnet18`` / ``resnet34``: He et al. CVPR 2016 ResNets with BasicBlocks ([2, 2, 2, 2] and
  [3, 4, 6, 3]), a 3x3 stem without max pooling (28x28 inputs): DP-DFD's teacher is a ResNet-34
  (DP-DFD paper, Sec. III-A "Implementation").
- ``tanh-cnn``: the small CNN with tanh activations of Papernot et al. AAAI 2021 ("Tempered
  sigmoid activations for deep learning with differential privacy") and Tramer-Boneh ICLR 2021
  (Table 9, MNIST): conv 16x8x8/2, max-pool 2/1, conv 32x4x4/2, max-pool 2/1, linear 32, linear;
  no normalisation layer, made for DP-SGD. Needs images of at least 28x28.
- ``dgd-cnn``: DGD's baseline and teacher network (DGD paper, Sec. IV, "On MNIST and FMNIST,
  the networks of baseline and teachers have the same structure"): two 3x3 convolutions
  (stride 1, padding 1) of ``width`` and ``2 width`` channels (64 and 128 in the paper), each
  with ReLU and 2x2 max pooling, then the linear softmax layer; no normalisation layer, so it
  also trains under DP-SGD as is. One teacher of
  :class:`~dpkd_audit.pipelines.common.ensemble.TeacherEnsemble` computes the same function.
- ``scatter-cnn``: Tramer and Boneh's ScatterNet + CNN (ICLR 2021, Sec. 3 and their MNIST
  model): the fixed scattering transform (:class:`~dpkd_audit.pipelines.common.scattering.
  Scattering2d`, J = 2, L = 8: 81 channels at a quarter of the side), GroupNorm of 27 groups
  without affine parameters (data-independent, so free under DP), conv 16x3x3/2, tanh,
  conv 32x3x3/1, tanh, linear 32, tanh, linear. Its ``frontend`` has no parameter and reads no
  data: :func:`~dpkd_audit.pipelines.common.dp_teacher.train_dp_teacher` computes it once per
  record and trains the rest with DP-SGD. Needs images of at least 8x8.

All randomness comes from a seeded CPU ``torch.Generator``; the training loop is
:func:`~dpkd_audit.pipelines.common.student.fit_classifier` (last-epoch test accuracy).
"""

from __future__ import annotations

import dataclasses
import enum

import numpy as np
import torch
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.pipelines.common.scattering import Scattering2d
from dpkd_audit.pipelines.common.student import (
    StudentConfig,
    StudentResult,
    build_student,
    fit_classifier,
    init_weights,
)

__all__ = [
    "TeacherArchitecture",
    "TeacherConfig",
    "build_teacher",
    "penultimate_features",
    "train_teacher",
]


class TeacherArchitecture(enum.StrEnum):
    """Network of a teacher (see the module docstring)."""

    VGG = "vgg"
    RESNET18 = "resnet18"
    RESNET34 = "resnet34"
    TANH_CNN = "tanh-cnn"
    DGD_CNN = "dgd-cnn"
    SCATTER_CNN = "scatter-cnn"

    @property
    def min_side(self) -> int:
        """Smallest image side the network accepts."""
        if self is TeacherArchitecture.TANH_CNN:
            return 28
        return 8 if self is TeacherArchitecture.SCATTER_CNN else 4


@dataclasses.dataclass(frozen=True, kw_only=True)
class TeacherConfig:
    """A teacher: its architecture, its width and how it is trained.

    Attributes:
        architecture: :class:`TeacherArchitecture` (or its value).
        width: Channels of the first block (>= 1); ignored by ``tanh-cnn`` and
            ``scatter-cnn`` (fixed widths).
        training: Optimizer, schedule, epochs and augmentation of non-private training (the
            student's loop); ``training.width`` is not used.
    """

    architecture: TeacherArchitecture = TeacherArchitecture.VGG
    width: int = 32
    training: StudentConfig = dataclasses.field(
        default_factory=lambda: StudentConfig(epochs=4, batch_size=128, learning_rate=0.1,
                                              label_smoothing=0.0))

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "architecture", TeacherArchitecture(self.architecture))
        except ValueError:
            allowed = ", ".join(repr(a.value) for a in TeacherArchitecture)
            raise ValueError(f"architecture must be one of {allowed}; got "
                             f"{self.architecture!r}") from None
        _validate.check_int("width", self.width, minimum=1)
        if not isinstance(self.training, StudentConfig):
            raise ValueError(f"training must be a StudentConfig; got {self.training!r}")


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class _ResNet(nn.Module):
    """He et al. 2016 ResNet with BasicBlocks for small single-channel images."""

    def __init__(self, blocks: tuple[int, ...], width: int, num_classes: int,
                 image_shape: tuple[int, int]) -> None:
        super().__init__()
        self.image_shape = image_shape
        self.num_classes = num_classes
        layers: list[nn.Module] = [nn.Conv2d(1, width, 3, padding=1, bias=False),
                                   nn.BatchNorm2d(width), nn.ReLU()]
        cin = width
        for stage, count in enumerate(blocks):
            cout = width * 2**stage
            for i in range(count):
                layers.append(_BasicBlock(cin, cout, 2 if (i == 0 and stage > 0) else 1))
                cin = cout
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


class _TanhCnn(nn.Module):
    """Papernot et al. 2021 / Tramer-Boneh 2021 MNIST CNN with tanh activations."""

    def __init__(self, num_classes: int, image_shape: tuple[int, int]) -> None:
        super().__init__()
        self.image_shape = image_shape
        self.num_classes = num_classes
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 8, stride=2, padding=2), nn.Tanh(), nn.MaxPool2d(2, 1),
            nn.Conv2d(16, 32, 4, stride=2), nn.Tanh(), nn.MaxPool2d(2, 1),
            nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(32 * 16, 32), nn.Tanh())
        self.classifier = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class _DgdCnn(nn.Module):
    """DGD's two-convolution network (see the module docstring)."""

    def __init__(self, num_classes: int, image_shape: tuple[int, int], width: int) -> None:
        super().__init__()
        h, w = image_shape
        self.image_shape = image_shape
        self.num_classes = num_classes
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten())
        self.classifier = nn.Linear(2 * width * (h // 4) * (w // 4), num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class _ScatterCnn(nn.Module):
    """Tramer-Boneh ScatterNet + CNN (see the module docstring).

    Attributes:
        frontend: The fixed scattering transform (no parameters).
        head: Everything after it (GroupNorm, the CNN, ``classifier``'s input).
        classifier: The last linear layer.
    """

    #: GroupNorm groups over the 81 scattering channels (Tramer and Boneh's choice).
    GROUPS = 27

    def __init__(self, num_classes: int, image_shape: tuple[int, int]) -> None:
        super().__init__()
        self.image_shape = image_shape
        self.num_classes = num_classes
        self.frontend = Scattering2d(tuple(image_shape), scales=2, angles=8)
        channels, rows, cols = self.frontend.output_shape
        self.head = nn.Sequential(
            nn.GroupNorm(self.GROUPS, channels, affine=False),
            nn.Conv2d(channels, 16, 3, stride=2, padding=1), nn.Tanh(),
            nn.Conv2d(16, 32, 3, padding=1), nn.Tanh(), nn.Flatten(),
            nn.Linear(32 * ((rows + 1) // 2) * ((cols + 1) // 2), 32), nn.Tanh())
        self.classifier = nn.Linear(32, num_classes)

    def forward_features(self, features: torch.Tensor) -> torch.Tensor:
        """Logits from the frontend's output (what DP-SGD trains)."""
        return self.classifier(self.head(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_features(self.frontend(x))


def build_teacher(config: TeacherConfig, image_shape: tuple[int, int], num_classes: int, *,
                  generator: torch.Generator) -> nn.Module:
    """A freshly initialised teacher on the CPU (training mode).

    Raises:
        ValueError: For a bad config, class count, or an image smaller than the architecture
            accepts.
    """
    if not isinstance(config, TeacherConfig):
        raise ValueError(f"config must be a TeacherConfig; got {type(config).__name__}")
    _validate.check_int("num_classes", num_classes, minimum=2)
    if not isinstance(generator, torch.Generator) or generator.device.type != "cpu":
        raise ValueError(f"generator must be a CPU torch.Generator; got {generator!r}")
    side = min(image_shape)
    if side < config.architecture.min_side:
        raise ValueError(f"architecture {config.architecture.value!r} needs images of at least "
                         f"{config.architecture.min_side}x{config.architecture.min_side}; got "
                         f"{image_shape[0]}x{image_shape[1]} (use 'vgg')")
    arch = config.architecture
    if arch is TeacherArchitecture.VGG:
        return build_student(image_shape, num_classes, config.width, generator=generator)
    with torch.device("meta"):  # no default initialisation, so no global RNG draws
        if arch is TeacherArchitecture.TANH_CNN:
            model: nn.Module = _TanhCnn(num_classes, tuple(image_shape))
        elif arch is TeacherArchitecture.DGD_CNN:
            model = _DgdCnn(num_classes, tuple(image_shape), config.width)
        elif arch is TeacherArchitecture.SCATTER_CNN:
            model = _ScatterCnn(num_classes, tuple(image_shape))
        else:
            blocks = (2, 2, 2, 2) if arch is TeacherArchitecture.RESNET18 else (3, 4, 6, 3)
            model = _ResNet(blocks, config.width, num_classes, tuple(image_shape))
    model = model.to_empty(device="cpu")
    if isinstance(model, _ScatterCnn):  # its filters are fixed, not initialised: rebuilt
        model.frontend = Scattering2d(tuple(image_shape), scales=2, angles=8)
    init_weights(model, generator)
    return model


def train_teacher(images: np.ndarray, labels: np.ndarray, *, num_classes: int,
                  test_images: np.ndarray, test_labels: np.ndarray, config: TeacherConfig,
                  seed: int, device: torch.device, progress: bool = True,
                  desc: str = "teacher") -> StudentResult:
    """Train a teacher on the private split **without** privacy; last-epoch test accuracy.

    The result's model saw the private records without noise: nothing computed from it is
    differentially private at the record level (DP-DFD's and DGD's published teachers).

    Args:
        images: uint8 ``(n, h, w)`` private images.
        labels: int labels ``(n,)``.
        num_classes: Number of classes (>= 2).
        test_images: uint8 ``(m, h, w)`` held-out images.
        test_labels: int labels ``(m,)``.
        config: The teacher.
        seed: Seed (>= 0) of initialisation, shuffling and augmentation.
        device: CPU or CUDA.
        progress: A tqdm bar over epochs.
        desc: The progress bar's and the loop checkpoint's name (DGD's ``"baseline"``).

    Returns:
        A :class:`~dpkd_audit.pipelines.common.student.StudentResult` (model in eval mode).
    """
    if not isinstance(config, TeacherConfig):
        raise ValueError(f"config must be a TeacherConfig; got {type(config).__name__}")
    return fit_classifier(
        lambda shape, generator: build_teacher(config, shape, num_classes, generator=generator),
        images, labels, num_classes=num_classes, test_images=test_images,
        test_labels=test_labels, config=config.training, seed=seed, device=device,
        progress=progress, desc=desc)


def penultimate_features(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logits, features)``: the model's output and the input of its ``classifier`` layer.

    Raises:
        ValueError: If the model has no ``classifier`` submodule.
    """
    head = getattr(model, "classifier", None)
    if not isinstance(head, nn.Module):
        raise ValueError("model must have a 'classifier' layer (its last layer) to read "
                         "penultimate features")
    captured: list[torch.Tensor] = []
    handle = head.register_forward_hook(lambda _m, inputs, _out: captured.append(inputs[0]))
    try:
        logits = model(x)
    finally:
        handle.remove()
    return logits, captured[0]
