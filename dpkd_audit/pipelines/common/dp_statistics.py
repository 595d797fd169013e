"""Feature statistics of the private data, released with the Gaussian mechanism (sound variants).

DP-DFD's generator matches the batch statistics of its images, at every BatchNorm input of the
teacher, to the teacher's running statistics (DP-DFD paper, Eq. 2, beta term; DeepInversion,
Yin et al. CVPR 2020, Eq. 4); its ablation (Table III) finds this the most useful term. Those
running statistics are statistics of the private data without noise. The sound variant keeps
the term but matches **differentially private** statistics instead:

1. Layers: the input of every ``Conv2d`` of the (DP-SGD) teacher, read by forward hooks (with
   a fixed frontend, such as the ScatterNet's, the frontend's input first). The first
   layer's input is the image: its statistics are per pixel (``pixel_statistics``, a mean
   image and a variance image); the others are per channel, over spatial positions (what
   BatchNorm tracks).
2. Each private record x gives the vector v(x) of its means and mean squares at those layers
   (its own per-pixel values and squares, and per-channel spatial means of the features and of
   their squares), clipped to L2 norm ``clip_norm`` = C: v(x) <- v(x) min(1, C / ||v(x)||).
3. Scale (:class:`StatisticsScale`). ``CLIP_WEIGHTS`` (the default): each record contributes
   u(x) = c(x) [v(x), r C] with its clip factor c(x) = min(1, C / ||v(x)||) and r =
   ``weight_share``, so ||u(x)|| <= sqrt(1 + r^2) C; the sum S = sum_x u(x) has L2 sensitivity
   sqrt(1 + r^2) C under add/remove-one neighbours. Its last coordinate, divided by r C, is
   W = sum_x c(x), and the released means are S_v / W: a weighted mean of the records'
   statistics, whatever C is. A small r costs the statistics little noise (r = 1/4: 3%) and
   leaves W's relative noise 1 / r times that of a coordinate of C-sized values; W is one
   number, shared by all coordinates. ``RECORD_COUNT`` (the release before issue 30):
   u(x) = c(x) v(x), sensitivity C, divided by the record count N (which the DP-SGD schedule
   already treats as public, Opacus's convention); when C is below the records' norms every
   released mean and variance shrinks by the mean clip factor (digits, C = 8, norms ~54: ~7x,
   the generator then fits dark images).
4. S is released by the float-safe Gaussian mechanism (:class:`~dpkd_audit.mechanisms.Gaussian`:
   S rounded to a power-of-two grid plus exact discrete Gaussian noise, Canonne-Kamath-Steinke
   NeurIPS 2020, Thm 14 at L2 grid sensitivity sqrt(1 + r^2) C / g + sqrt(d), converted to
   (epsilon, delta) by their Prop. 12; issue 32), with the ledger charged first. Every one of
   the d coordinates changes with a record, so the event depends on d
   (:func:`statistics_coordinates`, known before training from the architecture and the image
   size, so the run's plan charges exactly what the release costs). Against the textbook
   floating-point sampler (which every sound report used before; its low-order bits are not
   private, Mironov CCS 2012) this costs 10-20% more noise at a release epsilon of 0.1-1 and
   d ~ 2,000 (the zCDP conversion and the grid). The means m and mean squares s give the
   variances max(s - m^2, 0). Everything after the release is post-processing (the noisy W is
   clamped to [1, N] before dividing).

The teacher's weights are themselves a DP output (DP-SGD), so reading features through them
costs nothing beyond this release; its (epsilon, delta) composes with DP-SGD in the ledger.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.ledger import Ledger
from dpkd_audit.mechanisms import Gaussian, TextbookGaussian
from dpkd_audit.pipelines.common.config import parse_enum
from dpkd_audit.pipelines.common.frontend import fixed_frontend
from dpkd_audit.pipelines.common.teacher import TeacherConfig, build_teacher

__all__ = [
    "FeatureStatistics",
    "ReferenceStatistics",
    "StatisticsConfig",
    "StatisticsScale",
    "exact_feature_statistics",
    "release_feature_statistics",
    "statistics_coordinates",
    "statistics_layers",
    "statistics_mechanism",
    "statistics_record",
]


class StatisticsScale(enum.Enum):
    """How the released sums become means (see the module docstring, step 3).

    Attributes:
        CLIP_WEIGHTS: Each record also contributes its clip factor; the sums are divided by their
            released total (sensitivity sqrt(1 + r^2) C). A clip below the records' norms costs
            weighting, not scale.
        RECORD_COUNT: The sums are divided by the record count (sensitivity C); a clip below the
            records' norms shrinks every mean and variance.
    """

    CLIP_WEIGHTS = "clip-weights"
    RECORD_COUNT = "record-count"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StatisticsConfig:
    """The release of feature statistics.

    Attributes:
        epsilon_share: The single release's epsilon as a share of the run's record-level
            target, in [0, 1) (0: no release, and no statistics term in the generator loss).
            Under RDP the release costs much less than this share of the composed epsilon.
        clip_norm: C, the L2 norm each record's statistics vector is clipped to (> 0). The
            release's L2 sensitivity is C (``RECORD_COUNT``) or sqrt(1 + r^2) C
            (``CLIP_WEIGHTS``): :attr:`sensitivity`.
        scale: How the sums become means (:class:`StatisticsScale`).
        weight_share: r, in (0, 1]: ``CLIP_WEIGHTS`` appends r C c(x) to each record's vector.
            r = 1 would cost every statistic sqrt(2) x the noise; 1/4 costs 3% (digits sound
            DGD at seeds 0 / 1 / 2: 21.4 / 16.6 / 21.1% at 1/4, 15.9 / 18.3 / 18.8% at 1).
        pixel_statistics: Per-pixel statistics of the image (else per channel, as for the
            other layers).
        batch_size: Records per forward pass when computing the sum (>= 1).
    """

    epsilon_share: float = 0.1
    clip_norm: float = 16.0
    scale: StatisticsScale = StatisticsScale.CLIP_WEIGHTS
    weight_share: float = 0.25
    pixel_statistics: bool = True
    batch_size: int = 1024

    def __post_init__(self) -> None:
        share = self.epsilon_share
        if isinstance(share, bool) or not isinstance(share, int | float) \
                or not math.isfinite(share) or not 0 <= share < 1:
            raise ValueError(f"epsilon_share must be a real number in [0, 1); got {share!r}")
        _validate.check_positive("clip_norm", self.clip_norm)
        object.__setattr__(self, "scale", parse_enum(StatisticsScale, "scale", self.scale))
        _validate.check_probability("weight_share", self.weight_share, open_low=True)
        if not isinstance(self.pixel_statistics, bool):
            raise ValueError(f"pixel_statistics must be a bool; got {self.pixel_statistics!r}")
        _validate.check_int("batch_size", self.batch_size, minimum=1)

    @property
    def enabled(self) -> bool:
        """Whether statistics are released at all."""
        return self.epsilon_share > 0

    @property
    def sensitivity(self) -> float:
        """The release's L2 sensitivity: C, or sqrt(1 + r^2) C with the clip weights appended."""
        if self.scale is StatisticsScale.CLIP_WEIGHTS:
            return math.hypot(1.0, self.weight_share) * self.clip_norm
        return float(self.clip_norm)


def statistics_mechanism(config: StatisticsConfig, *, target_epsilon: float, delta: float,
                         coordinates: int) -> Gaussian:
    """The float-safe Gaussian mechanism of the release: (share x target, delta)-DP.

    Args:
        config: The release (its sensitivity is :attr:`StatisticsConfig.sensitivity`).
        target_epsilon: The run's record-level target (> 0).
        delta: The release's delta, in (0, 1).
        coordinates: d, the released vector's length (:func:`statistics_coordinates`): one
            record changes every coordinate, which the grid's rounding bound counts.

    Raises:
        ValueError: If the release is disabled (``epsilon_share`` = 0) or a parameter is bad
            (naming it), or the noise is beyond the exact sampler.
    """
    if not config.enabled:
        raise ValueError("statistics are disabled (epsilon_share = 0): there is no mechanism")
    target_epsilon = _validate.check_epsilon(target_epsilon, "target_epsilon")
    coordinates = _validate.check_int("coordinates", coordinates, minimum=1)
    return Gaussian(epsilon=config.epsilon_share * target_epsilon, delta=delta,
                    sensitivity=config.sensitivity, coordinates=coordinates)


def _conv_layout(model: nn.Module) -> tuple[int, ...]:
    # a fixed frontend's input is the (single-channel) image
    return tuple(int(getattr(m, "in_channels", 1)) for m in statistics_layers(model))


@functools.lru_cache(maxsize=64)
def _teacher_layout(teacher: TeacherConfig, image_shape: tuple[int, int]) -> tuple[int, ...]:
    model = build_teacher(teacher, image_shape, 2, generator=torch.Generator().manual_seed(0))
    return _conv_layout(model)


def statistics_coordinates(config: StatisticsConfig, teacher: TeacherConfig | nn.Module,
                           image_shape: tuple[int, int]) -> int:
    """d, the length of the released vector for a teacher on images of ``image_shape``.

    Twice (means and mean squares) the first layer's input size (h w in_channels per pixel, or
    in_channels) plus every later conv's in_channels, plus one clip-weight coordinate
    (``CLIP_WEIGHTS``). Depends only on the architecture (Opacus's BatchNorm -> GroupNorm fix
    keeps every Conv2d), so the run's plan knows it before the teacher is trained.

    Args:
        config: The release's layout.
        teacher: The DP model's architecture (``TeacherConfig``) or the model itself.
        image_shape: (h, w) of one (single-channel) image.

    Raises:
        ValueError: For a bad image shape or an architecture without ``Conv2d``.
    """
    shape = tuple(image_shape)
    if len(shape) != 2 or not all(isinstance(v, int | np.integer) and v >= 1 for v in shape):
        raise ValueError(f"image_shape must be two positive ints (h, w); got {image_shape!r}")
    shape = (int(shape[0]), int(shape[1]))
    layout = (_conv_layout(teacher) if isinstance(teacher, nn.Module)
              else _teacher_layout(teacher, shape))
    first = layout[0] * shape[0] * shape[1] if config.pixel_statistics else layout[0]
    weighted = config.scale is StatisticsScale.CLIP_WEIGHTS
    return 2 * (first + sum(layout[1:])) + (1 if weighted else 0)


def statistics_layers(model: nn.Module) -> list[nn.Module]:
    """The layers whose inputs are summarised: every ``Conv2d``, in module order.

    A model with a fixed frontend (:func:`~dpkd_audit.pipelines.common.frontend.
    fixed_frontend`, e.g. the ScatterNet + CNN) has the frontend first: its input is the
    image (per-pixel statistics), its first conv's input the frontend's channels.

    Raises:
        ValueError: If the model has no ``Conv2d``.
    """
    layers = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    if not layers:
        raise ValueError("the teacher has no Conv2d layer whose inputs could be summarised")
    frontend = fixed_frontend(model)
    return layers if frontend is None else [frontend, *layers]


class _Hooks:
    """Forward pre-hooks keeping each layer's input (the first is the image)."""

    def __init__(self, layers: list[nn.Module]) -> None:
        self.layers = layers
        self.inputs: list[torch.Tensor] = []
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> _Hooks:
        self.inputs = []
        self._handles = [m.register_forward_pre_hook(
            lambda _m, args: self.inputs.append(args[0])) for m in self.layers]
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _per_record(x: torch.Tensor, pixel: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Each record's values and squares: per pixel (flattened) or per channel (spatial mean)."""
    if pixel:
        flat = x.flatten(1)
        return flat, flat * flat
    axes = tuple(range(2, x.ndim))
    return x.mean(dim=axes), (x * x).mean(dim=axes)


def _batch(x: torch.Tensor, pixel: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's means and (biased) variances, matching :func:`_per_record`'s layout."""
    if pixel:
        flat = x.flatten(1)
        return flat.mean(dim=0), flat.var(dim=0, unbiased=False)
    axes = [0, *range(2, x.ndim)]
    return x.mean(dim=axes), x.var(dim=axes, unbiased=False)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReferenceStatistics:
    """Released means and variances, one pair per statistics layer (CPU float32 tensors).

    Attributes:
        means: Per layer, the mean image (first layer, pixel statistics) or channel means.
        variances: The matching variances (>= 0).
        pixel_statistics: Whether the first layer's are per pixel.
        mechanism: The Gaussian mechanism the sum was released with; ``None`` for
            :func:`exact_feature_statistics` (not private).
        clip_factor_mean: ``CLIP_WEIGHTS``: the released mean clip factor W / N (a DP figure:
            1 when C is above every record's norm, C / norm when it binds everywhere); else
            ``None``.
    """

    means: tuple[torch.Tensor, ...]
    variances: tuple[torch.Tensor, ...]
    pixel_statistics: bool
    mechanism: Gaussian | TextbookGaussian | None
    clip_factor_mean: float | None = None


class FeatureStatistics:
    """Hooks pairing a batch's statistics with :class:`ReferenceStatistics` (the generator term).

    Use as a context manager around the teacher's forward pass; :attr:`pairs` then holds one
    ``(batch_mean, batch_var, reference_mean, reference_var)`` per layer, for
    :func:`~dpkd_audit.pipelines.common.generator.bn_statistics_distance` (the same protocol as
    :class:`~dpkd_audit.pipelines.common.generator.BnStatistics`).

    Raises:
        ValueError: If the reference does not fit the model's layers.
    """

    def __init__(self, model: nn.Module, reference: ReferenceStatistics) -> None:
        self._hooks = _Hooks(statistics_layers(model))
        if len(reference.means) != len(self._hooks.layers):
            raise ValueError(f"reference holds {len(reference.means)} layers; the teacher has "
                             f"{len(self._hooks.layers)} Conv2d layers")
        self.reference = reference
        #: The generator's loss-term name: released (DP) or exact (not private) statistics.
        self.name = "exact_feature_statistics" if reference.mechanism is None \
            else "dp_feature_statistics"
        self.pairs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []

    @property
    def count(self) -> int:
        """Number of layers."""
        return len(self._hooks.layers)

    def __enter__(self) -> FeatureStatistics:
        self.pairs = []
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
        ref = self.reference
        for i, x in enumerate(self._hooks.inputs):
            mean, var = _batch(x, ref.pixel_statistics and i == 0)
            self.pairs.append((mean, var, ref.means[i].to(x.device), ref.variances[i].to(x.device)))
        self._hooks.inputs = []


def release_feature_statistics(teacher: nn.Module, images: np.ndarray, *,
                               config: StatisticsConfig,
                               mechanism: Gaussian | TextbookGaussian,
                               ledger: Ledger,
                               rng: np.random.Generator, device: torch.device,
                               label: str = "feature statistics") -> ReferenceStatistics:
    """Sum every record's clipped statistics, charge ``ledger``, release the noisy sum.

    Args:
        teacher: The DP teacher (its weights are a DP output), on ``device``.
        images: uint8 ``(n, h, w)`` private images.
        config: Clipping and layout.
        mechanism: From :func:`statistics_mechanism` (its sensitivity must be
            ``config.sensitivity``, its ``coordinates`` the sum's length); a
            ``TextbookGaussian`` only for comparisons (its doubles are not private).
        ledger: Charged (through ``mechanism.release``) before the noisy sum exists.
        rng: Source of the Gaussian noise.
        device: Where the forward passes run.
        label: The ledger label.

    Returns:
        The released statistics.
    """
    if not math.isclose(float(mechanism.sensitivity.value), config.sensitivity, rel_tol=1e-12):
        raise ValueError(f"mechanism's sensitivity {mechanism.sensitivity.value} must equal the "
                         f"release's {config.sensitivity} (clip_norm {config.clip_norm}, scale "
                         f"{config.scale.name})")
    total, sizes, n = _statistics_sum(teacher, images, config=config, device=device,
                                      clip=True)
    if isinstance(mechanism, Gaussian) and mechanism.coordinates != total.numel():
        raise ValueError(f"the mechanism was calibrated for {mechanism.coordinates} coordinates; "
                         f"the teacher's statistics have {total.numel()} (statistics_coordinates "
                         "of another architecture or image size)")
    noisy = np.asarray(mechanism.release(total.numpy(), rng=rng, ledger=ledger, label=label),
                       dtype=np.float64)
    factor_mean = None
    if config.scale is StatisticsScale.CLIP_WEIGHTS:
        weight = min(max(float(noisy[-1]) / (config.weight_share * config.clip_norm), 1.0),
                     float(n))
        noisy = noisy[:-1] / weight
        factor_mean = weight / n
    else:
        noisy = noisy / n
    return _reference(noisy, sizes, pixel_statistics=config.pixel_statistics,
                      mechanism=mechanism, clip_factor_mean=factor_mean)


def exact_feature_statistics(model: nn.Module, images: np.ndarray, *,
                             config: StatisticsConfig, device: torch.device
                             ) -> ReferenceStatistics:
    """The private data's feature statistics through ``model``, **without noise or clipping**.

    Not differentially private: for the published modes only, whose model already saw the
    private records without noise (DGD's ``generator_statistics='exact'``). The layout (layers,
    per-pixel first layer) is that of :func:`release_feature_statistics`, so the generator's
    term is the same; ``config.clip_norm``, ``scale`` and ``weight_share`` are not used.

    Args:
        model: A trained classifier with ``Conv2d`` layers, on ``device``.
        images: uint8 ``(n, h, w)`` images.
        config: The layout (``pixel_statistics``) and ``batch_size``.
        device: Where the forward passes run.

    Returns:
        The means and variances (``mechanism`` ``None``).
    """
    total, sizes, n = _statistics_sum(model, images, config=config, device=device, clip=False)
    return _reference(total.numpy() / n, sizes, pixel_statistics=config.pixel_statistics,
                      mechanism=None, clip_factor_mean=None)


def _statistics_sum(model: nn.Module, images: np.ndarray, *, config: StatisticsConfig,
                    device: torch.device, clip: bool) -> tuple[torch.Tensor, list[int], int]:
    """The records' statistics vectors summed (float64, CPU), each layer's width, the count.

    With ``clip``, each vector is clipped to ``config.clip_norm`` first and, for
    ``CLIP_WEIGHTS``, carries its clip weight (module docstring, steps 2-3).
    """
    images = np.asarray(images)
    n = images.shape[0] if images.ndim == 3 else 0
    if n < 1:
        raise ValueError(f"images must be a non-empty (n, h, w) array; got shape {images.shape}")
    weighted = clip and config.scale is StatisticsScale.CLIP_WEIGHTS
    hooks = _Hooks(statistics_layers(model))
    was_training = model.training
    model.eval()
    total = torch.zeros(0, dtype=torch.float64)
    sizes: list[int] = []
    try:
        with torch.inference_mode():
            for start in range(0, n, config.batch_size):
                x = torch.from_numpy(np.array(images[start:start + config.batch_size],
                                              dtype=np.uint8)).unsqueeze(1).float().div_(255.0)
                with hooks:
                    model(x.to(device))
                means, squares = zip(*(_per_record(h, config.pixel_statistics and i == 0)
                                       for i, h in enumerate(hooks.inputs)), strict=True)
                sizes = [m.shape[1] for m in means]
                v = torch.cat([*means, *squares], dim=1).double()
                if clip:
                    norms = torch.linalg.vector_norm(v, dim=1, keepdim=True)
                    factor = torch.clamp(config.clip_norm / norms.clamp_min(1e-300), max=1.0)
                    v = v * factor
                if weighted:  # r C c(x): its sum is r C W
                    v = torch.cat([v, factor * (config.weight_share * config.clip_norm)], dim=1)
                part = v.sum(dim=0).cpu()
                total = part if total.numel() == 0 else total + part
    finally:
        model.train(was_training)
    return total, sizes, n


def _reference(values: np.ndarray, sizes: list[int], *, pixel_statistics: bool,
               mechanism: Gaussian | TextbookGaussian | None,
               clip_factor_mean: float | None) -> ReferenceStatistics:
    """Means and mean squares (per layer, concatenated) as :class:`ReferenceStatistics`."""
    half = sum(sizes)
    means_all, squares_all = values[:half], values[half:]
    means_out, vars_out = [], []
    offset = 0
    for size in sizes:
        m = means_all[offset:offset + size]
        sq = squares_all[offset:offset + size]
        means_out.append(torch.from_numpy(m).float())
        vars_out.append(torch.from_numpy(np.maximum(sq - m * m, 0.0)).float())
        offset += size
    return ReferenceStatistics(means=tuple(means_out), variances=tuple(vars_out),
                               pixel_statistics=pixel_statistics, mechanism=mechanism,
                               clip_factor_mean=clip_factor_mean)


def statistics_record(config: StatisticsConfig, mechanism: Gaussian | None,
                      reference: ReferenceStatistics | None = None) -> dict[str, Any] | None:
    """The run record's ``statistics`` entry (``None`` without statistics).

    Args:
        config: The release's config.
        mechanism: Its Gaussian mechanism, or ``None`` for no release.
        reference: The released statistics, when the run made them (adds ``layers`` and the
            released ``clip_factor_mean``); with ``mechanism`` ``None``, statistics from
            :func:`exact_feature_statistics` give an entry saying they are not private.
    """
    if mechanism is None:
        if reference is None or reference.mechanism is not None:
            return None
        return {"sampler": "exact (no noise, no clipping): not private",
                "layers": len(reference.means), "pixel_statistics": reference.pixel_statistics}
    record: dict[str, Any] = {
        "epsilon": mechanism.epsilon, "delta": mechanism.delta,
        "clip_norm": config.clip_norm, "scale": config.scale.value,
        "weight_share": config.weight_share,
        "sensitivity": float(mechanism.sensitivity.value), "sigma": mechanism.sigma,
        "noise_multiplier": mechanism.sigma / float(mechanism.sensitivity.value),
        "coordinates": mechanism.coordinates,
        "granularity": mechanism.grid(mechanism.coordinates or 1).granularity,
        "sampler": "float-safe discrete Gaussian",
        "pixel_statistics": config.pixel_statistics}
    if reference is not None:
        record["layers"] = len(reference.means)
        record["clip_factor_mean"] = reference.clip_factor_mean
    return record
