"""A small contrastive image encoder fitted on *public* images only (SimCLR, NT-Xent).

Reverse k-NN labelling (paper: ``papers/rknn-fine-grained-private-kd.txt``, "Learning to
Represent") measures distances between public queries and private records in a representation
"trained ... from scratch (e.g., via self-supervised learning (Chen et al. 2020)) with
public-available D_pub". The record-level guarantee needs the representation to be a fixed map
that never saw a private record, so :func:`fit_encoder` receives the public images and nothing
else, and the returned :class:`FittedEncoder` only *maps* images (it is never trained again).

Method (Chen, Kornblith, Norouzi, Hinton, "A Simple Framework for Contrastive Learning of Visual
Representations", ICML 2020): two random augmentations of every image in a batch of ``B`` images
give ``2B`` views; a CNN backbone and an MLP projection head map them to unit vectors ``z``; the
NT-Xent loss (their Eq. 1) is the cross-entropy of each view's positive partner among the other
``2B - 1`` views with logits ``z_i . z_j / temperature``. By default the representation is the
backbone's (pre-projection) feature vector, L2-normalised (their Section 4.2: the layer before
the head is the better representation for linear evaluation); :class:`FeatureLayer` selects the
projection head's output instead, which clustered MNIST slightly better in our measurements.

Augmentations, in torch on the training device (one ``grid_sample`` per batch): a random affine
map (rotation, anisotropic zoom, shear, shift), a smooth elastic displacement (Simard,
Steinkraus, Platt, ICDAR 2003; here a Gaussian displacement field drawn on a coarse grid and
bicubically upsampled), random stroke thickness (grey-scale 3x3 dilation or erosion, mixed in
with a random weight), optional random erasing of a rectangle (Zhong et al., AAAI 2020; off by
default: it deletes strokes that tell digits apart and lowered MNIST purity) and a random
intensity gain. All randomness comes from ``torch.Generator`` objects seeded from ``seed``,
weight initialisation included: the modules are built on the ``meta`` device and initialised
with a seeded generator, so the global RNG is never read or advanced.

Optional fixed preprocessing (used for training and :meth:`FittedEncoder.transform` alike):
moment-based deskewing, a per-image shear ``x -> x + alpha (y - m_y)`` with
``alpha = cov(x, y) / var(y)`` from the image's second moments, which also moves the intensity
centroid to the image centre (the classic MNIST deskewing preprocessing, LeCun et al. 1998).
Nothing is fitted.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import time
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.devices import resolve_device
from dpkd_audit.pipelines import limits
from dpkd_audit.pipelines.common.progress import progress_counter

__all__ = [
    "EncoderConfig",
    "FeatureLayer",
    "FittedEncoder",
    "deskew_images",
    "fit_encoder",
]

#: Smallest image side the backbone accepts (two 2x2 poolings leave at least 1x1).
MIN_IMAGE_SIDE = 4


def _check_nonnegative(name: str, value: object, *, maximum: float | None = None) -> float:
    """Return ``value`` as a float in ``[0, maximum]`` (a ValueError naming it otherwise)."""
    allowed = "a real number >= 0" + (f" and <= {maximum}" if maximum is not None else "")
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating | np.integer):
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    number = float(value)
    if math.isnan(number) or number < 0 or (maximum is not None and number > maximum):
        raise ValueError(f"{name} must be {allowed}; got {value!r}")
    return number


class FeatureLayer(enum.StrEnum):
    """Which layer's output, L2-normalised, is the representation."""

    #: The backbone's globally pooled features (``4 width`` dimensions; SimCLR's choice for
    #: linear evaluation, Chen et al. 2020, Section 4.2).
    BACKBONE = "backbone"
    #: The projection head's output (``projection_dim`` dimensions), the space the loss
    #: compares views in.
    PROJECTION = "projection"


@dataclasses.dataclass(frozen=True, kw_only=True)
class EncoderConfig:
    """Architecture, optimisation and augmentation of the contrastive encoder.

    The defaults are the CPU preset: about 150 s of CPU time (one thread) for 5,000 28x28
    images. Measured on the 5,000 public MNIST images (reverse k-NN splits, seed 0; label
    accuracy of k-means clusters labelled by the majority vote of the 60,000 private records
    at their nearest cluster medoid): 0.969 / 0.975 / 0.976 at 40 / 100 / 200 clusters with
    the backbone features, 0.982 / 0.984 / 0.984 with ``features=FeatureLayer.PROJECTION``
    (deskewed HOG + PCA-50: 0.927 / 0.947 / 0.947). On a busy machine one intra-op thread
    (``torch.set_num_threads(1)``) is several times faster than two: OpenMP barriers wait for
    descheduled threads. :meth:`gpu` is a wider, longer preset for an accelerator.

    Attributes:
        width: Channels of the first backbone stage (the stages have ``width``, ``2 width``,
            ``4 width`` channels).
        projection_dim: Output dimension of the projection head.
        features: The layer whose L2-normalised output is the representation
            (:class:`FeatureLayer`).
        epochs: Passes over the public images.
        batch_size: Images per step (each gives two views); clamped to the number of images.
        learning_rate: Peak AdamW learning rate (linear warm-up, then cosine decay to 0).
        weight_decay: AdamW weight decay (>= 0).
        warmup_epochs: Epochs of linear learning-rate warm-up (>= 0; at most ``epochs`` are
            used).
        temperature: NT-Xent temperature (> 0).
        deskew: Deskew images (moment-based shear, centroid to the centre) before everything.
        rotation_degrees: Maximal absolute rotation of the random affine map.
        scale_range: ``(low, high)`` range of the random zoom factor (log-uniform, per axis
            with ``aspect_jitter``); ``0 < low <= high``.
        aspect_jitter: Maximal relative difference of the two axes' zoom (0 = isotropic).
        shear: Maximal absolute shear factor of the random affine map.
        shift_fraction: Maximal absolute shift, as a fraction of the image side.
        elastic_strength: Standard deviation of the elastic displacement, as a fraction of the
            image side (0 disables it).
        elastic_grid: Side of the coarse grid the elastic displacement is drawn on (>= 2).
        thickness_probability: Probability of a random stroke-thickness change per view.
        erase_probability: Probability of erasing one random rectangle per view.
        erase_max_area: Largest erased area, as a fraction of the image.
        contrast_range: ``(low, high)`` range of a random intensity gain (``low <= high``).
    """

    width: int = 16
    projection_dim: int = 64
    features: FeatureLayer = FeatureLayer.BACKBONE
    epochs: int = 60
    batch_size: int = 128
    learning_rate: float = 2e-3
    weight_decay: float = 1e-4
    warmup_epochs: int = 2
    temperature: float = 0.5
    deskew: bool = True
    rotation_degrees: float = 12.0
    scale_range: tuple[float, float] = (0.85, 1.2)
    aspect_jitter: float = 0.1
    shear: float = 0.15
    shift_fraction: float = 0.08
    elastic_strength: float = 0.05
    elastic_grid: int = 4
    thickness_probability: float = 0.5
    erase_probability: float = 0.0
    erase_max_area: float = 0.2
    contrast_range: tuple[float, float] = (0.6, 1.0)

    def __post_init__(self) -> None:
        _validate.check_int("width", self.width, minimum=1, maximum=1024)
        _validate.check_int("projection_dim", self.projection_dim, minimum=1)
        try:
            object.__setattr__(self, "features", FeatureLayer(self.features))
        except ValueError:
            raise ValueError(f"features must be one of {[f.value for f in FeatureLayer]}; "
                             f"got {self.features!r}") from None
        _validate.check_int("epochs", self.epochs, minimum=1, maximum=limits.MAX_EPOCHS)
        _validate.check_int("batch_size", self.batch_size, minimum=2)
        _validate.check_positive("learning_rate", self.learning_rate)
        _check_nonnegative("weight_decay", self.weight_decay)
        _validate.check_int("warmup_epochs", self.warmup_epochs, minimum=0)
        _validate.check_positive("temperature", self.temperature)
        if not isinstance(self.deskew, bool):
            raise ValueError(f"deskew must be a bool; got {self.deskew!r}")
        _check_nonnegative("rotation_degrees", self.rotation_degrees, maximum=180.0)
        object.__setattr__(self, "scale_range", self._range("scale_range", self.scale_range))
        _check_nonnegative("aspect_jitter", self.aspect_jitter, maximum=0.5)
        _check_nonnegative("shear", self.shear, maximum=1.0)
        _check_nonnegative("shift_fraction", self.shift_fraction, maximum=0.5)
        _check_nonnegative("elastic_strength", self.elastic_strength, maximum=0.5)
        _validate.check_int("elastic_grid", self.elastic_grid, minimum=2)
        _validate.check_probability("thickness_probability", self.thickness_probability)
        _validate.check_probability("erase_probability", self.erase_probability)
        _validate.check_probability("erase_max_area", self.erase_max_area)
        object.__setattr__(self, "contrast_range",
                           self._range("contrast_range", self.contrast_range))

    @staticmethod
    def _range(name: str, value: object) -> tuple[float, float]:
        allowed = "a pair (low, high) of real numbers with 0 < low <= high"
        try:
            low, high = value  # type: ignore[misc]
            low = _validate.check_positive(name, low)
            high = _validate.check_positive(name, high)
        except (TypeError, ValueError):
            raise ValueError(f"{name} must be {allowed}; got {value!r}") from None
        if low > high:
            raise ValueError(f"{name} must be {allowed}; got {value!r}")
        return (low, high)

    @classmethod
    def gpu(cls) -> EncoderConfig:
        """A wider, longer preset for an accelerator (not yet timed on a GPU)."""
        return cls(width=32, projection_dim=128, epochs=200, batch_size=256, warmup_epochs=10)

    @property
    def feature_dim(self) -> int:
        """Dimension of the representation."""
        if self.features is FeatureLayer.PROJECTION:
            return self.projection_dim
        return 4 * self.width


# ----------------------------------------------------------------------------------------------
# Networks


def _conv_block(cin: int, cout: int, *, pool: bool) -> list[nn.Module]:
    """3x3 convolution, optional 2x2 max-pooling, batch norm, ReLU.

    Pooling right after the convolution (before normalisation and ReLU) computes the cheap
    layers on a quarter of the positions: about 1.3x faster training on CPU.
    """
    layers: list[nn.Module] = [nn.Conv2d(cin, cout, 3, padding=1, bias=False)]
    if pool:
        layers.append(nn.MaxPool2d(2, ceil_mode=True))
    return [*layers, nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


class _Backbone(nn.Module):
    """Four 3x3 conv layers (two 2x2 max-poolings), global average pooling: any side >= 4.

    Runs in ``channels_last`` memory format (about 1.3x faster on CPU, native on cuDNN).
    """

    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *_conv_block(1, width, pool=True),
            *_conv_block(width, 2 * width, pool=True),
            *_conv_block(2 * width, 4 * width, pool=False),
            *_conv_block(4 * width, 4 * width, pool=False),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x.contiguous(memory_format=torch.channels_last))


def _projection_head(features: int, out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(features, features, bias=False), nn.BatchNorm1d(features),
                         nn.ReLU(inplace=True), nn.Linear(features, out))


def _build(width: int, projection_dim: int, generator: torch.Generator,
           device: torch.device) -> tuple[nn.Module, nn.Module]:
    """Backbone and head, initialised from ``generator`` only (never the global RNG)."""
    with torch.device("meta"):
        backbone = _Backbone(width)
        head = _projection_head(4 * width, projection_dim)
    modules = []
    for module in (backbone, head):
        module = module.to_empty(device=torch.device("cpu"))
        for layer in module.modules():
            if isinstance(layer, nn.Conv2d | nn.Linear):
                # He et al. 2015 (fan-in, ReLU gain) for weights; zero biases.
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu", generator=generator)
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)
            elif isinstance(layer, nn.BatchNorm1d | nn.BatchNorm2d):
                nn.init.ones_(layer.weight)
                nn.init.zeros_(layer.bias)
                layer.reset_running_stats()
        modules.append(module.to(device, memory_format=torch.channels_last))
    return modules[0], modules[1]


# ----------------------------------------------------------------------------------------------
# Fixed preprocessing and augmentations


def _to_tensor(images: np.ndarray, device: torch.device) -> torch.Tensor:
    """uint8 ``(n, h, w)`` -> float32 ``(n, 1, h, w)`` in [0, 1] on ``device``."""
    tensor = torch.from_numpy(np.ascontiguousarray(images).copy()).to(device)
    return tensor.to(torch.float32).div_(255.0).unsqueeze(1)


def _identity_theta(n: int, device: torch.device) -> torch.Tensor:
    theta = torch.zeros(n, 2, 3, device=device)
    theta[:, 0, 0] = 1.0
    theta[:, 1, 1] = 1.0
    return theta


def _deskew_theta(x: torch.Tensor) -> torch.Tensor:
    """Affine maps (output -> input, ``affine_grid`` convention) that deskew and centre ``x``.

    In pixel units, output pixel ``(row, col)`` relative to the image centre samples the input
    at ``(m_y + row, m_x + col + alpha row)`` with ``(m_x, m_y)`` the intensity centroid and
    ``alpha = cov(x, y) / var(y)`` (second moments). In normalised coordinates
    (``align_corners=False``: ``u = (2 col + 1) / w - 1``) the shear becomes ``alpha h / w``.
    Blank images get the identity.
    """
    n, _, h, w = x.shape
    img = x[:, 0]
    rows = torch.arange(h, device=x.device, dtype=x.dtype)
    cols = torch.arange(w, device=x.device, dtype=x.dtype)
    total = img.sum(dim=(1, 2))
    blank = total <= 1e-6
    total = total.clamp_min(1e-6)
    my = (img.sum(dim=2) @ rows) / total
    mx = (img.sum(dim=1) @ cols) / total
    dy = rows[None, :] - my[:, None]  # (n, h)
    dx = cols[None, :] - mx[:, None]  # (n, w)
    cov = torch.einsum("nij,ni,nj->n", img, dy, dx) / total
    var = torch.einsum("nij,ni->n", img, dy * dy) / total
    alpha = torch.where(var > 1e-6, cov / var.clamp_min(1e-6), torch.zeros_like(var))
    alpha = alpha.clamp(-2.0, 2.0)
    theta = _identity_theta(n, x.device)
    theta[:, 0, 1] = alpha * (h / w)
    theta[:, 0, 2] = (2.0 * mx + 1.0) / w - 1.0
    theta[:, 1, 2] = (2.0 * my + 1.0) / h - 1.0
    return torch.where(blank[:, None, None], _identity_theta(n, x.device), theta)


def _warp(x: torch.Tensor, theta: torch.Tensor,
          displacement: torch.Tensor | None = None) -> torch.Tensor:
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    if displacement is not None:
        grid = grid + displacement
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


def deskew_images(images: np.ndarray, *, device: torch.device | None = None) -> np.ndarray:
    """Deskew and centre uint8 ``(n, h, w)`` images: float32 ``(n, h, w)`` in [0, 1].

    The fixed preprocessing of :class:`EncoderConfig` ``deskew=True`` (see
    :func:`_deskew_theta`), vectorised with ``affine_grid``/``grid_sample``; nothing is fitted.
    """
    arr = _check_images("images", images)
    device = torch.device("cpu") if device is None else resolve_device(device)
    out = []
    with torch.no_grad():
        for start in range(0, len(arr), 8192):
            x = _to_tensor(arr[start:start + 8192], device)
            out.append(_warp(x, _deskew_theta(x))[:, 0].cpu().numpy())
    if not out:
        return np.zeros(arr.shape, dtype=np.float32)
    return np.concatenate(out).astype(np.float32, copy=False)


def _uniform(n: int, low: float, high: float, generator: torch.Generator,
             device: torch.device) -> torch.Tensor:
    return low + (high - low) * torch.rand(n, generator=generator, device=device)


def _random_theta(n: int, config: EncoderConfig, generator: torch.Generator,
                  device: torch.device) -> torch.Tensor:
    """Random affine maps in ``affine_grid`` convention: rotation . shear . zoom, plus shift."""
    angle = _uniform(n, -1.0, 1.0, generator, device) * math.radians(config.rotation_degrees)
    low, high = config.scale_range
    log_zoom = _uniform(n, math.log(low), math.log(high), generator, device)
    aspect = _uniform(n, -1.0, 1.0, generator, device) * config.aspect_jitter
    # Output -> input: sampling at (1 / zoom) times the output coordinate zooms in by ``zoom``.
    sx = torch.exp(-(log_zoom + aspect / 2))
    sy = torch.exp(-(log_zoom - aspect / 2))
    shear = _uniform(n, -1.0, 1.0, generator, device) * config.shear
    shift = _uniform(2 * n, -1.0, 1.0, generator, device).view(n, 2) * (2 * config.shift_fraction)
    cos, sin = torch.cos(angle), torch.sin(angle)
    # [[cos, -sin], [sin, cos]] @ [[1, shear], [0, 1]] @ diag(sx, sy)
    theta = torch.empty(n, 2, 3, device=device)
    theta[:, 0, 0] = cos * sx
    theta[:, 0, 1] = (cos * shear - sin) * sy
    theta[:, 1, 0] = sin * sx
    theta[:, 1, 1] = (sin * shear + cos) * sy
    theta[:, :, 2] = shift
    return theta


def _compose(outer: torch.Tensor, inner: torch.Tensor) -> torch.Tensor:
    """The affine map ``outer(inner(.))`` of two ``(n, 2, 3)`` affine maps."""
    linear = outer[:, :, :2] @ inner[:, :, :2]
    offset = (outer[:, :, :2] @ inner[:, :, 2:]) + outer[:, :, 2:]
    return torch.cat([linear, offset], dim=2)


def _augment(x: torch.Tensor, base: torch.Tensor, config: EncoderConfig,
             generator: torch.Generator) -> torch.Tensor:
    """One random view of every image of ``x`` (``base``: fixed per-image preprocessing map)."""
    n, _, h, w = x.shape
    device = x.device
    theta = _compose(base, _random_theta(n, config, generator, device))
    displacement = None
    if config.elastic_strength > 0:
        g = config.elastic_grid
        coarse = torch.randn(n, 2, g, g, generator=generator, device=device)
        coarse = coarse * (2.0 * config.elastic_strength)  # normalised units: side = 2
        displacement = F.interpolate(coarse, size=(h, w), mode="bicubic",
                                     align_corners=True).permute(0, 2, 3, 1)
    view = _warp(x, theta, displacement)
    if config.thickness_probability > 0:
        # Grey-scale dilation (3x3 max) or erosion (3x3 min, i.e. -max(-x)), mixed in with a
        # random weight: one pooling for both.
        sign = torch.where(torch.rand(n, 1, 1, 1, generator=generator, device=device) < 0.5,
                           1.0, -1.0)
        target = sign * F.max_pool2d(sign * view, 3, stride=1, padding=1)
        weight = torch.rand(n, 1, 1, 1, generator=generator, device=device)
        apply = torch.rand(n, 1, 1, 1, generator=generator, device=device)
        weight = weight * (apply < config.thickness_probability)
        view = view + weight * (target - view)
    if config.erase_probability > 0 and config.erase_max_area > 0:
        area = _uniform(n, 0.02, 1.0, generator, device) * config.erase_max_area
        log_ratio = _uniform(n, math.log(0.3), math.log(3.3), generator, device)
        eh = torch.sqrt(area * torch.exp(log_ratio)).clamp(max=1.0) * h
        ew = torch.sqrt(area / torch.exp(log_ratio)).clamp(max=1.0) * w
        top = torch.rand(n, generator=generator, device=device) * (h - eh)
        left = torch.rand(n, generator=generator, device=device) * (w - ew)
        rows = torch.arange(h, device=device, dtype=torch.float32)[None, :]
        cols = torch.arange(w, device=device, dtype=torch.float32)[None, :]
        inside = (((rows >= top[:, None]) & (rows < (top + eh)[:, None]))[:, :, None]
                  & ((cols >= left[:, None]) & (cols < (left + ew)[:, None]))[:, None, :])
        apply = torch.rand(n, generator=generator, device=device) < config.erase_probability
        view = view.masked_fill((inside & apply[:, None, None])[:, None], 0.0)
    low, high = config.contrast_range
    if low != 1.0 or high != 1.0:
        view = view * _uniform(n, low, high, generator, device).view(n, 1, 1, 1)
    return view


def _normalise_input(x: torch.Tensor) -> torch.Tensor:
    return x * 2.0 - 1.0


def _nt_xent(z: torch.Tensor, temperature: float) -> torch.Tensor:
    """NT-Xent (Chen et al. 2020, Eq. 1) for ``z = [z_a; z_b]`` with ``z_a[i] ~ z_b[i]``."""
    b = z.shape[0] // 2
    z = F.normalize(z, dim=1)
    logits = (z @ z.T) / temperature
    logits.fill_diagonal_(float("-inf"))
    targets = torch.arange(2 * b, device=z.device).roll(b)
    return F.cross_entropy(logits, targets)


# ----------------------------------------------------------------------------------------------
# Public API


def _check_images(name: str, images: object, *, shape: tuple[int, int] | None = None,
                  minimum: int = 0) -> np.ndarray:
    if not isinstance(images, np.ndarray):
        raise ValueError(f"{name} must be a numpy array of uint8 pixels; got "
                         f"{type(images).__name__}")
    if images.dtype != np.uint8:
        raise ValueError(f"{name} must be uint8 pixels in 0..255; got dtype {images.dtype}")
    if images.ndim != 3:
        raise ValueError(f"{name} must have shape (n, h, w); got shape {images.shape}")
    if shape is None and min(images.shape[1:]) < MIN_IMAGE_SIDE:
        raise ValueError(f"{name} must have sides h, w >= {MIN_IMAGE_SIDE}; got shape "
                         f"{images.shape}")
    if shape is not None and images.shape[1:] != shape:
        raise ValueError(f"{name} must have shape (n, {shape[0]}, {shape[1]}) like the images "
                         f"the encoder was fitted on; got {images.shape}")
    if images.shape[0] < minimum:
        raise ValueError(f"{name} must hold at least {minimum} images; got {images.shape[0]}")
    return images


class FittedEncoder:
    """A frozen encoder fitted on public images only; maps images to L2-normalised features.

    Attributes:
        config: The configuration it was fitted with.
        num_fitted: Number of (public) images it was fitted on.
        image_shape: ``(h, w)`` of the images it was fitted on (and accepts).
        feature_dim: Dimension of :meth:`transform`'s output.
        device: Device of the network.
        losses: Mean NT-Xent loss of every epoch.
        seconds: Wall-clock seconds of the fit.
    """

    def __init__(self, *, backbone: nn.Module, head: nn.Module, config: EncoderConfig,
                 num_fitted: int, image_shape: tuple[int, int], device: torch.device,
                 losses: tuple[float, ...], seconds: float) -> None:
        self._backbone = backbone.eval()
        self._head = head.eval() if config.features is FeatureLayer.PROJECTION else None
        for module in (backbone, head):
            for parameter in module.parameters():
                parameter.requires_grad_(False)
        self.config = config
        self.num_fitted = num_fitted
        self.image_shape = image_shape
        self.feature_dim = config.feature_dim
        self.device = device
        self.losses = losses
        self.seconds = seconds

    def __repr__(self) -> str:
        return (f"FittedEncoder(num_fitted={self.num_fitted}, image_shape={self.image_shape}, "
                f"feature_dim={self.feature_dim}, device={str(self.device)!r})")

    def transform(self, images: np.ndarray, *, batch_size: int = 1024) -> np.ndarray:
        """Map uint8 ``(n, h, w)`` images to float32 ``(n, feature_dim)`` unit vectors.

        Runs in eval mode without gradients, ``batch_size`` images at a time, on the device.

        Raises:
            ValueError: If the images are not uint8 of the fitted ``image_shape``, or
                ``batch_size`` is not a positive integer.
        """
        arr = _check_images("images", images, shape=self.image_shape)
        batch_size = _validate.check_int("batch_size", batch_size, minimum=1)
        out = np.empty((len(arr), self.feature_dim), dtype=np.float32)
        with torch.no_grad():
            for start in range(0, len(arr), batch_size):
                x = _to_tensor(arr[start:start + batch_size], self.device)
                if self.config.deskew:
                    x = _warp(x, _deskew_theta(x))
                features = self._backbone(_normalise_input(x))
                if self._head is not None:
                    features = self._head(features)
                features = F.normalize(features, dim=1)
                out[start:start + len(x)] = features.cpu().numpy()
        return out


def _batches(n: int, batch_size: int, generator: torch.Generator,
             device: torch.device) -> Iterator[torch.Tensor]:
    """A random permutation cut into full batches (the incomplete last one is dropped)."""
    order = torch.randperm(n, generator=generator, device=device)
    for start in range(0, n - batch_size + 1, batch_size):
        yield order[start:start + batch_size]


def fit_encoder(public_images: np.ndarray, *, config: EncoderConfig, seed: int,
                device: torch.device, progress: bool = True) -> FittedEncoder:
    """Train the contrastive encoder on ``public_images`` (the only data it ever sees).

    Args:
        public_images: uint8 ``(n, h, w)`` public images, pixels 0..255 (n >= 2, h, w >= 4).
        config: Architecture, optimisation and augmentations.
        seed: Non-negative seed of the weight initialisation, the batch order and the
            augmentations (one ``torch.Generator`` each, seeds derived with
            ``numpy.random.SeedSequence``).
        device: Where to train and later transform (CPU or CUDA).
        progress: Show a tqdm progress bar (epochs, loss) on stderr.

    Returns:
        The frozen :class:`FittedEncoder`.

    Raises:
        ValueError: For images that are not uint8 ``(n, h, w)`` with ``n >= 2`` and
            ``h, w >= 4``, a non-:class:`EncoderConfig` config, a negative seed or a bad device.
    """
    start_time = time.perf_counter()
    if not isinstance(config, EncoderConfig):
        raise ValueError(f"config must be an EncoderConfig; got {type(config).__name__}")
    arr = _check_images("public_images", public_images, minimum=2)
    seed = _validate.check_int("seed", seed, minimum=0)
    device = resolve_device(device)
    if not isinstance(progress, bool):
        raise ValueError(f"progress must be a bool; got {progress!r}")

    init_seed, order_seed, augment_seed = np.random.SeedSequence(seed).generate_state(3)
    init_gen = torch.Generator(device="cpu").manual_seed(int(init_seed))
    order_gen = torch.Generator(device=device).manual_seed(int(order_seed))
    augment_gen = torch.Generator(device=device).manual_seed(int(augment_seed))

    n = len(arr)
    batch_size = min(config.batch_size, n)
    steps_per_epoch = n // batch_size
    total_steps = config.epochs * steps_per_epoch
    warmup_steps = min(config.warmup_epochs, config.epochs) * steps_per_epoch

    backbone, head = _build(config.width, config.projection_dim, init_gen, device)
    parameters = [*backbone.parameters(), *head.parameters()]
    optimizer = torch.optim.AdamW(parameters, lr=config.learning_rate,
                                  weight_decay=config.weight_decay)

    def learning_rate(step: int) -> float:
        if step < warmup_steps:
            return config.learning_rate * (step + 1) / warmup_steps
        progress_fraction = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return config.learning_rate * 0.5 * (1.0 + math.cos(math.pi * progress_fraction))

    images = _to_tensor(arr, device)
    with torch.no_grad():
        base = _deskew_theta(images) if config.deskew else _identity_theta(n, device)

    bar = progress_counter(enabled=progress, desc="encoder", total=config.epochs, unit="epoch")
    losses: list[float] = []
    backbone.train()
    head.train()
    step = 0
    try:
        for _ in range(config.epochs):
            epoch_loss = torch.zeros((), device=device)
            for index in _batches(n, batch_size, order_gen, device):
                x, theta = images[index], base[index]
                with torch.no_grad():
                    views = torch.cat([_augment(x, theta, config, augment_gen),
                                       _augment(x, theta, config, augment_gen)])
                for group in optimizer.param_groups:
                    group["lr"] = learning_rate(step)
                loss = _nt_xent(head(backbone(_normalise_input(views))), config.temperature)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                epoch_loss += loss.detach()
                step += 1
            losses.append(float(epoch_loss) / steps_per_epoch)
            bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
            bar.update(1)
    finally:
        bar.close()
    return FittedEncoder(backbone=backbone, head=head, config=config, num_fitted=n,
                         image_shape=(arr.shape[1], arr.shape[2]), device=device,
                         losses=tuple(losses), seconds=time.perf_counter() - start_time)
