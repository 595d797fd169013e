"""A teacher ensemble on disjoint shards of the private data, trained batched (DGD, PATE).

DGD (Sec. IV-A, "Implementation") trains n = 250 teachers, each on its own disjoint shard of the
private training set (240 MNIST images each), with the baseline's architecture: two 3x3
convolutions (64 and 128 channels, stride 1, padding 1) with ReLU and 2x2 max pooling, then a
softmax layer; Adam, batch 128, the learning rate decaying linearly to 0.

**One module, several kernels.** All teachers are one module with stacked weights: the images
of teacher t go in channel t of a ``(batch, n, h, w)`` tensor. Teacher t's logits depend on
teacher t's weights and images only, and Adam is element-wise, so summing the teachers' losses
trains the n teachers exactly as n separate runs would (with the same draws). How the n
convolutions are computed is an :class:`EnsembleKernel`, each equal to per-teacher training
within float tolerance (``tests/test_dgd.py``):

- ``LOOP``: one dense convolution per teacher on views of the stacked weights. On a CPU the
  work, not the launches, is the cost, and PyTorch's dense kernels beat its grouped ones.
- ``GROUPED``: grouped convolutions (``groups = n``), channels-last.
- ``IM2COL``: teacher-major activations ``(n, b, h, w, c)``; each 3x3 convolution is an
  im2col gather and one batched matrix product over teachers (``torch.baddbmm``); on CUDA its
  products use TF32, as PyTorch's convolutions do by default
  (``torch.backends.cudnn.allow_tf32``).
- ``AUTO`` (default): ``LOOP`` on a CPU; on a GPU, whichever of ``GROUPED`` and ``IM2COL``
  runs a training step of this ensemble fastest, timed on a throw-away copy before training
  (the choice and the timings are in :class:`EnsembleResult`).

On CUDA every kernel trains under :func:`cuda_settings` (TF32, cuDNN autotuning). Measured on
one H100 at DGD's sizes (250 teachers of widths (64, 128), batch 128, TF32; per training step
of all teachers; ``reports/gpu/h100-2026-11-27``): ``GROUPED`` 181 ms (114 ms autotuned),
``IM2COL`` 177 ms, ``LOOP`` 217 ms (fp32); bf16 autocast ``GROUPED`` 96 ms (76 ms autotuned).

``benchmarks/ensemble.py`` measures each against a loop over separate models.

**Shards** (NOTES, "Sound variants"): a record's shard is a keyed hash of the record itself
(:func:`shard_of_records`: BLAKE2b of its bytes under a key drawn once per run), not of its
position, so that adding or removing one record changes one teacher's shard and nothing else,
the premise of LNMax's sensitivity under add/remove-one neighbours. Shard sizes are therefore
multinomial (about N / n each), not exactly equal.

Randomness: one seeded CPU ``torch.Generator`` for initialisation and mini-batches.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import hashlib
import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (conventional alias)
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.devices import resolve_device
from dpkd_audit.pipelines import limits
from dpkd_audit.pipelines.common.checkpoint import (
    LoopCheckpoint,
    fingerprint,
    loop_checkpoint,
    restore_training,
    training_state,
)
from dpkd_audit.pipelines.common.config import parse_enum
from dpkd_audit.pipelines.common.progress import progress_counter
from dpkd_audit.pipelines.common.student import StudentConfig, augment_batch

__all__ = [
    "EnsembleConfig",
    "EnsembleKernel",
    "EnsembleResult",
    "TeacherEnsemble",
    "choose_kernel",
    "cuda_settings",
    "draw_minibatches",
    "shard_of_records",
    "teacher_slice",
    "train_ensemble",
]


class EnsembleKernel(enum.Enum):
    """How the n teachers' convolutions are computed (same result within float tolerance)."""

    #: LOOP on a CPU; on CUDA the faster of GROUPED and IM2COL, timed before training.
    AUTO = "auto"
    #: One dense convolution per teacher (the CPU's fastest).
    LOOP = "loop"
    #: Grouped convolutions over all teachers, channels-last.
    GROUPED = "grouped"
    #: im2col + one batched matrix product per layer over all teachers (tensor cores).
    IM2COL = "im2col"


#: The augmentation of ``EnsembleConfig(augment=True)``: the student's defaults.
_AUGMENT = StudentConfig()

#: Inference batches of the IM2COL kernel are split so that one gathered tensor stays below this.
_IM2COL_CHUNK_BYTES = 2 << 30


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnsembleConfig:
    """The teachers and their training.

    Attributes:
        num_teachers: n (>= 2).
        widths: Channels of the two convolutions (each >= 1); DGD uses (64, 128).
        steps: Adam steps per teacher (>= 1); DGD uses 3,000.
        batch_size: Images per teacher per step (>= 1), drawn with replacement from its shard.
        learning_rate: Adam's initial learning rate (> 0), decayed linearly to 0.
        augment: Each teacher's mini-batches get the student's random affine augmentation
            (shift, rotation and zoom of up to 10%, 10 degrees, 10%;
            :func:`~dpkd_audit.pipelines.common.student.augment_batch`). Not in DGD (False
            there); it changes what a teacher learns from its shard, not whose records it sees,
            so the votes' sensitivity is unchanged.
    """

    num_teachers: int = 250
    widths: tuple[int, int] = (64, 128)
    steps: int = 3000
    batch_size: int = 128
    learning_rate: float = 1e-3
    augment: bool = False

    def __post_init__(self) -> None:
        _validate.check_int("num_teachers", self.num_teachers, minimum=2,
                            maximum=limits.MAX_TEACHERS)
        if (not isinstance(self.widths, tuple | list) or len(self.widths) != 2):
            raise ValueError(f"widths must be two channel counts; got {self.widths!r}")
        for width in self.widths:
            _validate.check_int("widths", width, minimum=1)
        object.__setattr__(self, "widths", tuple(self.widths))
        _validate.check_int("steps", self.steps, minimum=1, maximum=limits.MAX_STEPS)
        _validate.check_int("batch_size", self.batch_size, minimum=1)
        _validate.check_positive("learning_rate", self.learning_rate)
        if not isinstance(self.augment, bool):
            raise ValueError(f"augment must be a bool; got {self.augment!r}")


def shard_of_records(images: np.ndarray, num_shards: int, *, key: bytes) -> np.ndarray:
    """Each record's shard: a keyed BLAKE2b hash of its bytes, modulo ``num_shards``.

    A function of the record (and the secret key) only: adding or removing a record leaves
    every other record's shard unchanged. Identical records share a shard.

    Args:
        images: ``(N, ...)`` records.
        num_shards: n (>= 1).
        key: 16 to 64 bytes, drawn once per run and kept secret.

    Returns:
        int64 shard indices ``(N,)``.
    """
    _validate.check_int("num_shards", num_shards, minimum=1)
    if not isinstance(key, bytes) or not 16 <= len(key) <= 64:
        raise ValueError(f"key must be 16 to 64 bytes; got {type(key).__name__} of length "
                         f"{len(key) if isinstance(key, bytes) else '?'}")
    images = np.ascontiguousarray(images)
    out = np.empty(images.shape[0], dtype=np.int64)
    for i in range(images.shape[0]):
        digest = hashlib.blake2b(images[i].tobytes(), key=key, digest_size=8).digest()
        out[i] = int.from_bytes(digest, "little") % num_shards
    return out


class TeacherEnsemble(nn.Module):
    """n teachers of DGD's architecture as one module of stacked weights.

    ``forward(x)`` takes ``(b, n, h, w)`` (teacher t reads channel t) or ``(b, 1, h, w)`` (every
    teacher reads the same images) and returns logits ``(b, n, k)``, computed by the module's
    ``kernel`` (an :class:`EnsembleKernel` other than ``AUTO``; an attribute, not a weight:
    the same weights give the same logits within float rounding under every kernel).
    """

    def __init__(self, *, num_teachers: int, widths: tuple[int, int],
                 image_shape: tuple[int, int], num_classes: int,
                 generator: torch.Generator,
                 kernel: EnsembleKernel | str = EnsembleKernel.GROUPED) -> None:
        super().__init__()
        self.kernel = _concrete_kernel(kernel)
        n, (c1, c2) = num_teachers, widths
        h, w = image_shape
        self.num_teachers, self.widths, self.num_classes = n, (c1, c2), num_classes
        self.image_shape = (h, w)
        self.features = (h // 4) * (w // 4) * c2
        if self.features == 0:
            raise ValueError(f"image_shape must be at least 4x4; got {image_shape}")
        self.conv1 = nn.Parameter(torch.empty(n * c1, 1, 3, 3))
        self.bias1 = nn.Parameter(torch.zeros(n * c1))
        self.conv2 = nn.Parameter(torch.empty(n * c2, c1, 3, 3))
        self.bias2 = nn.Parameter(torch.zeros(n * c2))
        self.head = nn.Parameter(torch.empty(n, self.features, num_classes))
        self.head_bias = nn.Parameter(torch.zeros(n, num_classes))
        with torch.no_grad():  # Xavier-uniform per teacher (DGD), from the injected generator
            for weight, fan_in, fan_out in ((self.conv1, 9, 9 * c1), (self.conv2, 9 * c1, 9 * c2),
                                            (self.head, self.features, num_classes)):
                bound = math.sqrt(6.0 / (fan_in + fan_out))
                weight.uniform_(-bound, bound, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.num_teachers
        if x.ndim != 4 or x.shape[1] not in (1, n):
            raise ValueError(f"x must be (batch, 1 or {n}, h, w); got {tuple(x.shape)}")
        if self.kernel is EnsembleKernel.LOOP:
            return self._forward_loop(x)
        if self.kernel is EnsembleKernel.IM2COL:
            return self._forward_im2col(x)
        return self._forward_grouped(x)

    def _forward_grouped(self, x: torch.Tensor) -> torch.Tensor:
        n = self.num_teachers
        if x.shape[1] == 1 and n > 1:
            x = x.expand(-1, n, -1, -1)
        # channels-last grouped convolutions: 1.7x faster than NCHW on a 2-core CPU (measured
        # with 250 teachers of widths (8, 16), 16 images each, forward and backward)
        x = x.contiguous(memory_format=torch.channels_last)
        x = F.max_pool2d(F.relu(F.conv2d(x, self.conv1, self.bias1, padding=1, groups=n)), 2)
        x = F.max_pool2d(F.relu(F.conv2d(x, self.conv2, self.bias2, padding=1, groups=n)), 2)
        x = x.reshape(x.shape[0], n, self.features)
        return torch.einsum("btf,tfk->btk", x, self.head) + self.head_bias

    def teacher_weights(self, teacher: int) -> tuple[torch.Tensor, ...]:
        """Views of teacher ``teacher``'s six weight tensors in the stacked parameters."""
        return _teacher_slices((self.conv1, self.bias1, self.conv2, self.bias2, self.head,
                                self.head_bias), teacher, self.widths)

    def _forward_loop(self, x: torch.Tensor) -> torch.Tensor:
        n, (c1, c2) = self.num_teachers, self.widths
        # unbind: views whose backward is one stack, not n zero-filled copies of each weight
        weights = zip(self.conv1.unflatten(0, (n, c1)).unbind(0),
                      self.bias1.view(n, c1).unbind(0),
                      self.conv2.unflatten(0, (n, c2)).unbind(0),
                      self.bias2.view(n, c2).unbind(0), self.head.unbind(0),
                      self.head_bias.unbind(0), strict=True)
        shared = x.shape[1] == 1
        return torch.stack([_one_teacher(x if shared else x[:, t:t + 1], *w)
                            for t, w in enumerate(weights)], dim=1)

    def _forward_im2col(self, x: torch.Tensor) -> torch.Tensor:
        n, (c1, _) = self.num_teachers, self.widths
        h, w = x.shape[2:]
        gathered = n * 9 * max(h * w, (h // 2) * (w // 2) * c1) * x.element_size()  # per image
        chunk = max(1, _IM2COL_CHUNK_BYTES // gathered)
        if not torch.is_grad_enabled() and x.shape[0] > chunk:
            return torch.cat([self._forward_im2col(x[i:i + chunk])
                              for i in range(0, x.shape[0], chunk)])
        x = x.permute(1, 0, 2, 3).unsqueeze(-1)                 # (n or 1, b, h, w, 1)
        if x.shape[0] == 1 and n > 1:
            x = x.expand(n, -1, -1, -1, -1)
        x = _pool_teacher_major(F.relu(_conv3x3_teacher_major(x, self.conv1, self.bias1, n)))
        x = _pool_teacher_major(F.relu(_conv3x3_teacher_major(x, self.conv2, self.bias2, n)))
        _, b, h4, w4, c2 = x.shape
        # the head's rows follow the grouped kernel's (c, h, w) flattening; reorder them to
        # this kernel's (h, w, c)
        head = self.head.view(n, c2, h4, w4, -1).permute(0, 2, 3, 1, 4).reshape(
            n, h4 * w4 * c2, -1)
        logits = torch.baddbmm(self.head_bias.unsqueeze(1), x.reshape(n, b, -1), head)
        return logits.permute(1, 0, 2)                           # (b, n, k)

    @torch.inference_mode()
    def votes(self, images: torch.Tensor, *, batch_size: int = 256) -> np.ndarray:
        """Vote histograms ``(m, k)``: how many teachers predict each class of each image."""
        self.eval()
        out = []
        for i in range(0, images.shape[0], batch_size):
            predictions = self(images[i:i + batch_size]).argmax(dim=2)  # (b, n)
            out.append(F.one_hot(predictions, self.num_classes).sum(dim=1).cpu())
        return torch.cat(out).numpy().astype(np.int64)


def _concrete_kernel(kernel: EnsembleKernel | str) -> EnsembleKernel:
    """A kernel a module can run (``AUTO`` is resolved by :func:`choose_kernel`)."""
    kernel = parse_enum(EnsembleKernel, "kernel", kernel)
    if kernel is EnsembleKernel.AUTO:
        raise ValueError("kernel 'auto' is resolved by choose_kernel() before a module is "
                         "built; give loop, grouped or im2col")
    return kernel


def _one_teacher(x: torch.Tensor, conv1: torch.Tensor, bias1: torch.Tensor,
                 conv2: torch.Tensor, bias2: torch.Tensor, head: torch.Tensor,
                 head_bias: torch.Tensor) -> torch.Tensor:
    """One teacher's logits ``(b, k)`` on ``(b, 1, h, w)`` (dense convolutions)."""
    x = F.max_pool2d(F.relu(F.conv2d(x, conv1, bias1, padding=1)), 2)
    x = F.max_pool2d(F.relu(F.conv2d(x, conv2, bias2, padding=1)), 2)
    return torch.addmm(head_bias, x.flatten(1), head)


def _conv3x3_teacher_major(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                           n: int) -> torch.Tensor:
    """The n 3x3 convolutions (padding 1) of ``(n, b, h, w, c_in)`` as one batched product."""
    _, b, h, w, c_in = x.shape
    c_out = weight.shape[0] // n
    padded = F.pad(x, (0, 0, 1, 1, 1, 1))
    cols = torch.cat([padded[:, :, dy:dy + h, dx:dx + w, :]
                      for dy in range(3) for dx in range(3)], dim=-1)   # (n, b, h, w, 9 c_in)
    # weight rows (teacher, c_out) x (c_in, dy, dx) -> (teacher, (dy, dx, c_in), c_out)
    matrix = weight.view(n, c_out, c_in, 3, 3).permute(0, 3, 4, 2, 1).reshape(
        n, 9 * c_in, c_out)
    out = torch.baddbmm(bias.view(n, 1, c_out), cols.view(n, b * h * w, 9 * c_in), matrix)
    return out.view(n, b, h, w, c_out)


def _pool_teacher_major(x: torch.Tensor) -> torch.Tensor:
    """2x2 max pooling of ``(n, b, h, w, c)`` (odd rows and columns dropped, as max_pool2d)."""
    n, b, h, w, c = x.shape
    x = x[:, :, :h // 2 * 2, :w // 2 * 2, :]
    return x.reshape(n, b, h // 2, 2, w // 2, 2, c).amax(dim=(3, 5))


@contextlib.contextmanager
def cuda_settings(device: torch.device) -> Iterator[None]:
    """The ensemble's CUDA settings, each restored after; nothing changes on a CPU.

    - TF32 products (``torch.backends.cuda.matmul.allow_tf32``), as PyTorch's cuDNN
      convolutions use by default: the ``IM2COL`` kernel's products at the grouped
      convolutions' precision.
    - cuDNN autotuning (``torch.backends.cudnn.benchmark``): the ensemble's shapes are fixed
      for the whole training, and cuDNN's own choice of algorithm for 250 grouped convolutions
      is far from its fastest: measured on one H100 (``benchmarks/ensemble.py --variants``,
      250 teachers of widths (64, 128), batch 128, TF32), 181 ms per step without autotuning,
      114 ms with it (``reports/gpu/h100-2026-11-27``). The chosen algorithm may differ from run
      to run, and with it the float rounding.
    """
    if device.type != "cuda":
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark = before


def _step_seconds(ensemble: TeacherEnsemble, x: torch.Tensor, y: torch.Tensor, *,
                  repeats: int) -> float:
    """Mean seconds of a forward-backward-Adam step of a copy of ``ensemble``."""
    model = copy.deepcopy(ensemble).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    k = model.num_classes

    def step() -> None:
        loss = F.cross_entropy(model(x).reshape(-1, k), y.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    step()  # autotuning and allocation outside the timer
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    if x.device.type == "cuda":
        torch.cuda.synchronize(x.device)
    return (time.perf_counter() - start) / repeats


def choose_kernel(ensemble: TeacherEnsemble, *, batch_size: int, device: torch.device,
                  repeats: int = 3) -> tuple[EnsembleKernel, dict[str, float]]:
    """The ``AUTO`` kernel for ``ensemble`` on ``device`` and the timings it was chosen by.

    ``LOOP`` on a CPU (no timing: measured faster than ``GROUPED`` there, see
    ``benchmarks/README.md``). On CUDA: ``GROUPED`` and ``IM2COL`` each time ``repeats``
    training steps of a copy of the ensemble on random images of the real shape; the faster
    one is returned with the seconds per step of each (the copies are discarded; the injected
    generators are not used).
    """
    if device.type != "cuda":
        return EnsembleKernel.LOOP, {}
    h, w = ensemble.image_shape
    draws = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(batch_size, ensemble.num_teachers, h, w, device=device, generator=draws)
    y = torch.randint(0, ensemble.num_classes, (batch_size, ensemble.num_teachers),
                      device=device, generator=draws)
    timings: dict[str, float] = {}
    for kernel in (EnsembleKernel.GROUPED, EnsembleKernel.IM2COL):
        before = ensemble.kernel
        ensemble.kernel = kernel
        try:
            with cuda_settings(device):
                timings[kernel.value] = _step_seconds(ensemble, x, y, repeats=repeats)
        except torch.cuda.OutOfMemoryError:
            timings[kernel.value] = math.inf
        finally:
            ensemble.kernel = before
            torch.cuda.empty_cache()
    best = min(timings, key=timings.__getitem__)
    return EnsembleKernel(best), timings


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnsembleResult:
    """A trained ensemble.

    Attributes:
        ensemble: The module (eval mode) on the training device.
        shard_sizes: Records per teacher.
        teacher_accuracy: Each teacher's accuracy on the test split (for reports; the test
            split is not private).
        seconds: Wall-clock seconds of training.
        kernel: The kernel that trained it (:class:`EnsembleKernel`, never ``AUTO``).
        kernel_timings: Seconds per training step of each kernel ``AUTO`` timed (empty if
            the kernel was given or picked without timing).
    """

    ensemble: TeacherEnsemble = dataclasses.field(repr=False)
    shard_sizes: tuple[int, ...]
    teacher_accuracy: tuple[float, ...]
    seconds: float
    kernel: EnsembleKernel = EnsembleKernel.GROUPED
    kernel_timings: dict[str, float] = dataclasses.field(default_factory=dict)


def _as_input(images: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(images, dtype=np.uint8)).float().div_(255.0)


def draw_minibatches(generator: torch.Generator, order: torch.Tensor, offsets: torch.Tensor,
                     sizes: torch.Tensor, batch_size: int) -> torch.Tensor:
    """Record indices ``(n, batch_size)``: teacher t's draws, uniform on its shard.

    With replacement; ``order[offsets[t]:offsets[t] + sizes[t]]`` are teacher t's records. One
    ``torch.rand(n, batch_size)`` call on the CPU ``generator`` per step, so a per-teacher
    reference loop that calls this function sees the same draws.
    """
    n = sizes.shape[0]
    u = torch.rand(n, batch_size, generator=generator)
    local = torch.minimum((u * sizes[:, None]).long(), sizes[:, None] - 1)
    return order[offsets[:, None] + local]


def teacher_slice(ensemble: TeacherEnsemble, teacher: int) -> TeacherEnsemble:
    """A one-teacher ensemble holding a copy of teacher ``teacher``'s weights (CPU)."""
    n, (c1, c2) = ensemble.num_teachers, ensemble.widths
    _validate.check_int("teacher", teacher, minimum=0)
    if teacher >= n:
        raise ValueError(f"teacher must be < num_teachers={n}; got {teacher}")
    one = TeacherEnsemble(num_teachers=1, widths=(c1, c2), image_shape=ensemble.image_shape,
                          num_classes=ensemble.num_classes,
                          generator=torch.Generator().manual_seed(0), kernel=ensemble.kernel)
    with torch.no_grad():
        for target, source in zip(one.teacher_weights(0), ensemble.teacher_weights(teacher),
                                  strict=True):
            target.copy_(source)
    return one


def train_ensemble(images: np.ndarray, labels: np.ndarray, shards: np.ndarray, *,
                   num_classes: int, config: EnsembleConfig, test_images: np.ndarray,
                   test_labels: np.ndarray, seed: int, device: torch.device | str,
                   progress: bool = True,
                   kernel: EnsembleKernel | str = EnsembleKernel.AUTO) -> EnsembleResult:
    """Train the n teachers of ``config`` at once, teacher t on the records of shard t.

    Args:
        images: uint8 ``(N, h, w)`` private images.
        labels: int labels ``(N,)``.
        shards: Shard of each record in [0, n) (:func:`shard_of_records`).
        num_classes: Number of classes (>= 2).
        config: Teachers and training.
        test_images: uint8 held-out images (each teacher's accuracy, for reports).
        test_labels: Their labels.
        seed: Seed (>= 0) of initialisation and mini-batches.
        device: CPU or CUDA.
        progress: A tqdm bar over steps.
        kernel: How the convolutions are computed (:class:`EnsembleKernel`; the trained
            weights agree within float tolerance whichever is used).

    Raises:
        ValueError: For bad shapes, a shard index out of range, an empty shard or an unknown
            kernel.
    """
    start = time.perf_counter()
    if not isinstance(config, EnsembleConfig):
        raise ValueError(f"config must be an EnsembleConfig; got {type(config).__name__}")
    _validate.check_int("num_classes", num_classes, minimum=2)
    _validate.check_int("seed", seed, minimum=0)
    kernel = parse_enum(EnsembleKernel, "kernel", kernel)
    images, labels, shards = np.asarray(images), np.asarray(labels), np.asarray(shards)
    n = config.num_teachers
    if images.ndim != 3 or labels.shape != (images.shape[0],) \
            or shards.shape != (images.shape[0],):
        raise ValueError(f"images must be (N, h, w) with (N,) labels and shards; got "
                         f"{images.shape}, {labels.shape}, {shards.shape}")
    if shards.dtype.kind not in "iu" or shards.min() < 0 or shards.max() >= n:
        raise ValueError(f"shards must be integers in [0, {n}); got range "
                         f"[{shards.min()}, {shards.max()}]")
    sizes = np.bincount(shards, minlength=n)
    if sizes.min() == 0:
        raise ValueError(f"every teacher needs at least one record; shard "
                         f"{int(np.argmin(sizes))} is empty ({images.shape[0]} records, {n} "
                         "teachers)")
    device = resolve_device(device)
    generator = torch.Generator().manual_seed(seed)
    ensemble = TeacherEnsemble(num_teachers=n, widths=config.widths,
                               image_shape=tuple(images.shape[1:]), num_classes=num_classes,
                               generator=generator).to(device)
    timings: dict[str, float] = {}
    if kernel is EnsembleKernel.AUTO:
        kernel, timings = choose_kernel(ensemble, batch_size=config.batch_size, device=device)
    ensemble.kernel = kernel
    # Records sorted by shard: teacher t's records are order[offsets[t]:offsets[t] + sizes[t]].
    order = torch.from_numpy(np.argsort(shards, kind="stable"))
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes)[:-1]]))
    sizes_t = torch.from_numpy(sizes)
    x_all = _as_input(images).to(device)
    y_all = torch.from_numpy(labels.astype(np.int64)).to(device)
    optimizer = torch.optim.Adam(ensemble.parameters(), lr=config.learning_rate)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: max(0.0, 1.0 - step / config.steps))
    bar = progress_counter(enabled=progress, desc="teacher ensemble", total=config.steps,
                           unit="step")
    checkpoint = loop_checkpoint("ensemble", lambda: {
        "config": dataclasses.asdict(config), "seed": seed, "num_classes": num_classes,
        "data": fingerprint(images, labels, shards)})
    ensemble.train()
    with cuda_settings(device), checkpoint:
        _train_steps(ensemble, optimizer, schedule, bar, generator=generator, order=order,
                     offsets=offsets, sizes=sizes_t, x_all=x_all, y_all=y_all, config=config,
                     device=device, checkpoint=checkpoint)
        bar.close()
        ensemble.eval()
        accuracy = _teacher_accuracy(ensemble, test_images, test_labels, device)
    return EnsembleResult(ensemble=ensemble, shard_sizes=tuple(int(s) for s in sizes),
                          teacher_accuracy=accuracy, seconds=time.perf_counter() - start,
                          kernel=kernel, kernel_timings=timings)


def _train_steps(ensemble: TeacherEnsemble, optimizer: torch.optim.Optimizer,
                 schedule: torch.optim.lr_scheduler.LRScheduler, bar: Any, *,
                 generator: torch.Generator, order: torch.Tensor, offsets: torch.Tensor,
                 sizes: torch.Tensor, x_all: torch.Tensor, y_all: torch.Tensor,
                 config: EnsembleConfig, device: torch.device,
                 checkpoint: LoopCheckpoint) -> None:
    """``config.steps`` Adam steps of every teacher on its own mini-batches.

    The loss is the sum over teachers of each teacher's mean cross-entropy, so teacher t's
    gradient is its own run's. The ``LOOP`` kernel computes it teacher by teacher (forward and
    backward of one small model while its activations are in cache), writing each teacher's
    gradient into its slice of the stacked gradients; one Adam step then updates all. The
    loop starts at the step ``checkpoint`` reached and saves its state there.
    """
    n, b = ensemble.num_teachers, config.batch_size
    loop = ensemble.kernel is EnsembleKernel.LOOP
    if loop:
        for parameter in ensemble.parameters():
            parameter.grad = torch.zeros_like(parameter)

    def state() -> dict[str, Any]:
        return training_state(ensemble, optimizer, schedule, generator)

    start = 0
    loaded = checkpoint.load()
    if loaded is not None:
        start, saved = loaded
        restore_training(saved, ensemble, optimizer, schedule, generator)
        bar.update(start)
    for step in range(start, config.steps):
        index = draw_minibatches(generator, order, offsets, sizes, b).to(device)  # (n, b)
        x = x_all[index]                                                  # (n, b, h, w)
        if config.augment:
            x = augment_batch(x.reshape(n * b, 1, *x.shape[2:]), generator,
                              _AUGMENT).reshape(x.shape)
        if loop:
            loss = _loop_gradients(ensemble, x, y_all[index])
        else:
            logits = ensemble(x.permute(1, 0, 2, 3))                      # (b, n, k)
            loss = F.cross_entropy(logits.reshape(b * n, -1), y_all[index].t().reshape(-1),
                                   reduction="sum") / b
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == config.steps - 1:
            if not math.isfinite(float(loss.detach())):
                raise FloatingPointError(f"ensemble loss became non-finite at step {step + 1}; "
                                         f"lower learning_rate ({config.learning_rate})")
            bar.set_postfix(loss=f"{float(loss.detach()) / n:.3f}", refresh=False)
        bar.update(1)
        checkpoint.step_done(step + 1, config.steps, state)


def _loop_gradients(ensemble: TeacherEnsemble, x: torch.Tensor,
                    y: torch.Tensor) -> torch.Tensor:
    """Each teacher's mean-loss gradient into its slice of ``.grad``; the summed loss.

    ``x`` is ``(n, b, h, w)`` (teacher-major), ``y`` ``(n, b)``.
    """
    total = torch.zeros((), device=x.device)
    for t in range(ensemble.num_teachers):
        weights = [w.detach().requires_grad_() for w in ensemble.teacher_weights(t)]
        loss = F.cross_entropy(_one_teacher(x[t].unsqueeze(1), *weights), y[t])
        grads = torch.autograd.grad(loss, weights)
        with torch.no_grad():
            for slot, grad in zip(_teacher_grads(ensemble, t), grads, strict=True):
                slot.copy_(grad)
        total += loss.detach()
    return total


def _teacher_grads(ensemble: TeacherEnsemble, teacher: int) -> tuple[torch.Tensor, ...]:
    """Views of teacher ``teacher``'s slices of the stacked ``.grad`` tensors."""
    grads = tuple(p.grad for p in (ensemble.conv1, ensemble.bias1, ensemble.conv2,
                                   ensemble.bias2, ensemble.head, ensemble.head_bias))
    if any(g is None for g in grads):
        raise RuntimeError("the loop kernel's gradient buffers are missing")
    return _teacher_slices(grads, teacher, ensemble.widths)


def _teacher_slices(stacked: tuple[Any, ...], teacher: int,
                    widths: tuple[int, int]) -> tuple[torch.Tensor, ...]:
    """Teacher ``teacher``'s views of (conv1, bias1, conv2, bias2, head, head bias)."""
    c1, c2 = widths
    conv1, bias1, conv2, bias2, head, head_bias = stacked
    return (conv1[teacher * c1:(teacher + 1) * c1], bias1[teacher * c1:(teacher + 1) * c1],
            conv2[teacher * c2:(teacher + 1) * c2], bias2[teacher * c2:(teacher + 1) * c2],
            head[teacher], head_bias[teacher])


@torch.inference_mode()
def _teacher_accuracy(ensemble: TeacherEnsemble, images: np.ndarray, labels: np.ndarray,
                      device: torch.device) -> tuple[float, ...]:
    x = _as_input(images).unsqueeze(1).to(device)
    y = torch.from_numpy(np.array(labels, dtype=np.int64)).to(device)
    correct = torch.zeros(ensemble.num_teachers, device=device)
    for i in range(0, x.shape[0], 256):
        correct += (ensemble(x[i:i + 256]).argmax(dim=2) == y[i:i + 256, None]).sum(dim=0)
    return tuple(float(c) / x.shape[0] for c in correct.cpu())
