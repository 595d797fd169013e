"""A teacher ensemble on disjoint shards of the private data, trained batched (DGD, PATE).

DGD (Sec. IV-A, "Implementation") trains n = 250 teachers, each on its own disjoint shard of the
private training set (240 MNIST images each), with the baseline's architecture: two 3x3
convolutions (64 and 128 channels, stride 1, padding 1) with ReLU and 2x2 max pooling, then a
softmax layer; Adam, batch 128, the learning rate decaying linearly to 0.

**Batched, not a Python loop.** All teachers are one module with stacked weights: the images of
teacher t go in channel t of a ``(batch, n, h, w)`` tensor and every convolution is a grouped
convolution with ``groups = n`` (one group per teacher), the last layer a batched matrix product.
Teacher t's logits depend on teacher t's weights and images only, and Adam is element-wise, so
summing the teachers' losses trains the n teachers exactly as n separate runs would (with the
same draws); ``benchmarks/ensemble.py`` measures the speed-up against a loop over separate
models.

**Shards** (NOTES, "Sound variants"): a record's shard is a keyed hash of the record itself
(:func:`shard_of_records`: BLAKE2b of its bytes under a key drawn once per run), not of its
position, so that adding or removing one record changes one teacher's shard and nothing else,
the premise of LNMax's sensitivity under add/remove-one neighbours. Shard sizes are therefore
multinomial (about N / n each), not exactly equal.

Randomness: one seeded CPU ``torch.Generator`` for initialisation and mini-batches.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (conventional alias)
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.pipelines.common.devices import resolve_device
from dpkd_audit.pipelines.common.progress import progress_counter

__all__ = [
    "EnsembleConfig",
    "EnsembleResult",
    "TeacherEnsemble",
    "draw_minibatches",
    "shard_of_records",
    "teacher_slice",
    "train_ensemble",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnsembleConfig:
    """The teachers and their training.

    Attributes:
        num_teachers: n (>= 2).
        widths: Channels of the two convolutions (each >= 1); DGD uses (64, 128).
        steps: Adam steps per teacher (>= 1); DGD uses 3,000.
        batch_size: Images per teacher per step (>= 1), drawn with replacement from its shard.
        learning_rate: Adam's initial learning rate (> 0), decayed linearly to 0.
    """

    num_teachers: int = 250
    widths: tuple[int, int] = (64, 128)
    steps: int = 3000
    batch_size: int = 128
    learning_rate: float = 1e-3

    def __post_init__(self) -> None:
        _validate.check_int("num_teachers", self.num_teachers, minimum=2)
        if (not isinstance(self.widths, tuple | list) or len(self.widths) != 2):
            raise ValueError(f"widths must be two channel counts; got {self.widths!r}")
        for width in self.widths:
            _validate.check_int("widths", width, minimum=1)
        object.__setattr__(self, "widths", tuple(self.widths))
        _validate.check_int("steps", self.steps, minimum=1)
        _validate.check_int("batch_size", self.batch_size, minimum=1)
        _validate.check_positive("learning_rate", self.learning_rate)


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
    teacher reads the same images) and returns logits ``(b, n, k)``.
    """

    def __init__(self, *, num_teachers: int, widths: tuple[int, int],
                 image_shape: tuple[int, int], num_classes: int,
                 generator: torch.Generator) -> None:
        super().__init__()
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
        if x.shape[1] == 1 and n > 1:
            x = x.expand(-1, n, -1, -1)
        # channels-last grouped convolutions: 1.7x faster than NCHW on a 2-core CPU (measured
        # with 250 teachers of widths (8, 16), 16 images each, forward and backward)
        x = x.contiguous(memory_format=torch.channels_last)
        x = F.max_pool2d(F.relu(F.conv2d(x, self.conv1, self.bias1, padding=1, groups=n)), 2)
        x = F.max_pool2d(F.relu(F.conv2d(x, self.conv2, self.bias2, padding=1, groups=n)), 2)
        x = x.reshape(x.shape[0], n, self.features)
        return torch.einsum("btf,tfk->btk", x, self.head) + self.head_bias

    @torch.inference_mode()
    def votes(self, images: torch.Tensor, *, batch_size: int = 256) -> np.ndarray:
        """Vote histograms ``(m, k)``: how many teachers predict each class of each image."""
        self.eval()
        out = []
        for i in range(0, images.shape[0], batch_size):
            predictions = self(images[i:i + batch_size]).argmax(dim=2)  # (b, n)
            out.append(F.one_hot(predictions, self.num_classes).sum(dim=1).cpu())
        return torch.cat(out).numpy().astype(np.int64)


@dataclasses.dataclass(frozen=True, kw_only=True)
class EnsembleResult:
    """A trained ensemble.

    Attributes:
        ensemble: The module (eval mode) on the training device.
        shard_sizes: Records per teacher.
        teacher_accuracy: Each teacher's accuracy on the test split (for reports; the test
            split is not private).
        seconds: Wall-clock seconds of training.
    """

    ensemble: TeacherEnsemble = dataclasses.field(repr=False)
    shard_sizes: tuple[int, ...]
    teacher_accuracy: tuple[float, ...]
    seconds: float


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
                          generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        one.conv1.copy_(ensemble.conv1[teacher * c1:(teacher + 1) * c1])
        one.bias1.copy_(ensemble.bias1[teacher * c1:(teacher + 1) * c1])
        one.conv2.copy_(ensemble.conv2[teacher * c2:(teacher + 1) * c2])
        one.bias2.copy_(ensemble.bias2[teacher * c2:(teacher + 1) * c2])
        one.head.copy_(ensemble.head[teacher:teacher + 1])
        one.head_bias.copy_(ensemble.head_bias[teacher:teacher + 1])
    return one


def train_ensemble(images: np.ndarray, labels: np.ndarray, shards: np.ndarray, *,
                   num_classes: int, config: EnsembleConfig, test_images: np.ndarray,
                   test_labels: np.ndarray, seed: int, device: torch.device | str,
                   progress: bool = True) -> EnsembleResult:
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

    Raises:
        ValueError: For bad shapes, a shard index out of range, or an empty shard.
    """
    start = time.perf_counter()
    if not isinstance(config, EnsembleConfig):
        raise ValueError(f"config must be an EnsembleConfig; got {type(config).__name__}")
    _validate.check_int("num_classes", num_classes, minimum=2)
    _validate.check_int("seed", seed, minimum=0)
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
    ensemble.train()
    b = config.batch_size
    for step in range(config.steps):
        index = draw_minibatches(generator, order, offsets, sizes_t, b).to(device)  # (n, b)
        x = x_all[index].permute(1, 0, 2, 3)                         # (b, n, h, w)
        logits = ensemble(x)                                         # (b, n, k)
        # the sum over teachers of each teacher's mean loss: independent gradients
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
    bar.close()
    ensemble.eval()
    accuracy = _teacher_accuracy(ensemble, test_images, test_labels, device)
    return EnsembleResult(ensemble=ensemble, shard_sizes=tuple(int(s) for s in sizes),
                          teacher_accuracy=accuracy, seconds=time.perf_counter() - start)


@torch.inference_mode()
def _teacher_accuracy(ensemble: TeacherEnsemble, images: np.ndarray, labels: np.ndarray,
                      device: torch.device) -> tuple[float, ...]:
    x = _as_input(images).unsqueeze(1).to(device)
    y = torch.from_numpy(np.array(labels, dtype=np.int64)).to(device)
    correct = torch.zeros(ensemble.num_teachers, device=device)
    for i in range(0, x.shape[0], 256):
        correct += (ensemble(x[i:i + 256]).argmax(dim=2) == y[i:i + 256, None]).sum(dim=0)
    return tuple(float(c) / x.shape[0] for c in correct.cpu())
