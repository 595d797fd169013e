"""Image representations fitted on *public* data only (reverse k-NN paper, "Selecting Queries").

The reverse k-NN method measures distances between public queries and private records in a
representation space; its record-level guarantee holds only if the representation never saw
private data (NOTES.md, "Reverse k-NN labelling"). Every representation here is therefore
built in two steps: :func:`fit_representation` receives the public images and nothing else;
the returned :class:`FittedRepresentation` is frozen and only *maps* images (private records,
test images) through it.

- ``pca``: principal components of the (deskewed) pixels.
- ``hog``: histograms of oriented gradients (Dalal-Triggs 2005, as for SVHN in the paper), a
  fixed feature map with no fitted parameters.
- ``hog-pca``: HOG followed by PCA fitted on the public HOG features.
- ``encoder``: a small contrastive (SimCLR) CNN trained on the public images
  (:mod:`dpkd_audit.pipelines.common.encoder`).
- ``umap``: ``hog-pca`` followed by a UMAP embedding fitted on the public features, with a
  record-wise out-of-sample map (:mod:`dpkd_audit.pipelines.common.manifold`): the
  clusters of s = 10 queries are nearly pure with it.

Deskewing (shear by the image's second moments, a classic MNIST preprocessing) is a fixed
per-image transform without fitted parameters; it is applied before pixels or HOG when enabled.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING

import numpy as np

from dpkd_audit import _validate
from dpkd_audit.pipelines.common.manifold import FittedRepresentation, ManifoldConfig, fit_manifold

if TYPE_CHECKING:
    import torch

    from dpkd_audit.pipelines.common.encoder import EncoderConfig

__all__ = [
    "FittedRepresentation",
    "RepresentationConfig",
    "RepresentationKind",
    "check_images",
    "deskew",
    "fit_representation",
    "hog_features",
]


class RepresentationKind(enum.StrEnum):
    """Which representation the queries and the reverse k-NN search use."""

    PCA = "pca"
    HOG = "hog"
    HOG_PCA = "hog-pca"
    ENCODER = "encoder"
    UMAP = "umap"


@dataclasses.dataclass(frozen=True, kw_only=True)
class RepresentationConfig:
    """How to build the representation.

    Attributes:
        kind: The representation (:class:`RepresentationKind`).
        components: PCA dimensions for ``pca`` and ``hog-pca`` (>= 1; clipped to the data).
        deskew: Deskew images (moment-based shear) before pixels/HOG (not used by ``encoder``).
        hog_bins: Orientation bins of HOG (>= 2).
        hog_cells: HOG cells per image side (>= 2), or None for cells of ``max(2, side // 7)``
            pixels (7 cells of 4 pixels on 28x28 images, 4 of 2 on 8x8 digits).
        manifold: The UMAP embedding of ``umap`` (fitted on the ``hog-pca`` features).
    """

    kind: RepresentationKind = RepresentationKind.HOG_PCA
    components: int = 50
    deskew: bool = True
    hog_bins: int = 9
    hog_cells: int | None = None
    manifold: ManifoldConfig = dataclasses.field(default_factory=ManifoldConfig)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", RepresentationKind(self.kind))
        except ValueError:
            raise ValueError(f"kind must be one of {[k.value for k in RepresentationKind]}; "
                             f"got {self.kind!r}") from None
        _validate.check_int("components", self.components, minimum=1)
        _validate.check_int("hog_bins", self.hog_bins, minimum=2)
        if self.hog_cells is not None:
            _validate.check_int("hog_cells", self.hog_cells, minimum=2)
        if not isinstance(self.deskew, bool):
            raise ValueError(f"deskew must be a bool; got {self.deskew!r}")
        if not isinstance(self.manifold, ManifoldConfig):
            raise ValueError(f"manifold must be a ManifoldConfig; got "
                             f"{type(self.manifold).__name__}")


def check_images(images: np.ndarray, name: str = "images") -> np.ndarray:
    """Validate a uint8 ``(n, h, w)`` image batch (n >= 1, square, h >= 4)."""
    arr = np.asarray(images)
    if arr.dtype != np.uint8:
        raise ValueError(f"{name} must be uint8 pixels in 0..255; got dtype {arr.dtype}")
    if arr.ndim != 3 or arr.shape[0] < 1 or arr.shape[1] != arr.shape[2] or arr.shape[1] < 4:
        raise ValueError(f"{name} must have shape (n, h, h) with n >= 1 and h >= 4; got "
                         f"{arr.shape}")
    return arr


def deskew(images: np.ndarray) -> np.ndarray:
    """Deskew images by their second moments: float32 ``(n, h, w)`` in [0, 1].

    Each row ``r`` of an image is shifted horizontally by ``alpha (r - m_y)``, with
    ``alpha = cov(x, y) / var(y)`` and ``m_y`` the intensity centroid's row (bilinear along the
    row, zero outside), which removes the slant of handwritten strokes. A fixed per-image map:
    nothing is fitted.
    """
    arr = check_images(images).astype(np.float32) / 255.0
    _, h, w = arr.shape
    rows = np.arange(h, dtype=np.float32)
    cols = np.arange(w, dtype=np.float32)
    total = arr.sum(axis=(1, 2)) + 1e-6
    my = (arr.sum(axis=2) @ rows) / total
    mx = (arr.sum(axis=1) @ cols) / total
    dy = rows[None, :] - my[:, None]  # (n, h)
    dx = cols[None, :] - mx[:, None]  # (n, w)
    cov = np.einsum("nij,ni,nj->n", arr, dy, dx) / total
    var = np.einsum("nij,ni->n", arr, dy * dy) / total
    alpha = np.where(var > 1e-6, cov / np.maximum(var, 1e-6), 0.0)
    source = cols[None, None, :] + (alpha[:, None] * dy)[:, :, None]  # (n, h, w) input columns
    left = np.floor(source)
    frac = source - left
    left = left.astype(np.int64)
    padded = np.pad(arr, ((0, 0), (0, 0), (1, 1)))  # zero columns at -1 and w
    lo = np.clip(left, -1, w) + 1
    hi = np.clip(left + 1, -1, w) + 1
    out = ((1.0 - frac) * np.take_along_axis(padded, lo, axis=2)
           + frac * np.take_along_axis(padded, hi, axis=2))
    return out.astype(np.float32)


def hog_features(images: np.ndarray, *, cells: int = 7, bins: int = 9) -> np.ndarray:
    """Histograms of oriented gradients (Dalal-Triggs 2005): float32 ``(n, features)``.

    Centred gradients, unsigned orientation in ``bins`` bins over [0, pi), magnitude-weighted
    histograms on a ``cells x cells`` grid, and L2-normalised overlapping 2x2 blocks of cells.

    Args:
        images: float ``(n, h, w)`` in [0, 1] (e.g. from :func:`deskew`) or uint8.
        cells: Cells per side (the image side is cropped to a multiple of it).
        bins: Orientation bins.
    """
    raw = np.asarray(images)
    if raw.ndim != 3 or raw.dtype.kind not in "uf":
        raise ValueError(f"images must be a real (n, h, w) array; got dtype {raw.dtype} and "
                         f"shape {raw.shape}")
    arr = raw.astype(np.float32) / (255.0 if raw.dtype == np.uint8 else 1.0)
    n, h, _ = arr.shape
    size = h // cells
    if size < 1:
        raise ValueError(f"cells must be <= the image side {h}; got {cells}")
    gx = np.zeros_like(arr)
    gy = np.zeros_like(arr)
    gx[:, :, 1:-1] = arr[:, :, 2:] - arr[:, :, :-2]
    gy[:, 1:-1, :] = arr[:, 2:, :] - arr[:, :-2, :]
    magnitude = np.hypot(gx, gy)
    angle = np.mod(np.arctan2(gy, gx), np.pi)
    index = np.minimum((angle * (bins / np.pi)).astype(np.int64), bins - 1)
    side = cells * size
    magnitude, index = magnitude[:, :side, :side], index[:, :side, :side]
    hist = np.zeros((n, cells, cells, bins), dtype=np.float32)
    for b in range(bins):
        hist[..., b] = (magnitude * (index == b)).reshape(n, cells, size, cells, size).sum(
            axis=(2, 4))
    blocks = np.stack([hist[:, i:i + 2, j:j + 2].reshape(n, -1)
                       for i in range(cells - 1) for j in range(cells - 1)], axis=1)
    blocks /= np.sqrt((blocks * blocks).sum(axis=-1, keepdims=True) + 1e-6)
    return blocks.reshape(n, -1).astype(np.float32)


@dataclasses.dataclass(frozen=True, eq=False)
class _Pca:
    mean: np.ndarray
    components: np.ndarray  # (d, features)

    @classmethod
    def fit(cls, x: np.ndarray, dims: int) -> _Pca:
        mean = x.mean(axis=0)
        _, _, vt = np.linalg.svd(x - mean, full_matrices=False)
        return cls(mean=mean, components=vt[:min(dims, vt.shape[0])].copy())

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mean) @ self.components.T).astype(np.float32)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class _Handcrafted:
    """Pixels or HOG, optionally deskewed, optionally followed by a public-fitted PCA."""

    config: RepresentationConfig
    image_shape: tuple[int, int]
    num_fitted: int
    pca: _Pca | None

    def features(self, images: np.ndarray) -> np.ndarray:
        arr = check_images(images)
        if arr.shape[1:] != self.image_shape:
            raise ValueError(f"images must have shape (n, {self.image_shape[0]}, "
                             f"{self.image_shape[1]}) like the public images; got {arr.shape}")
        pixels = deskew(arr) if self.config.deskew else arr.astype(np.float32) / 255.0
        if self.config.kind is RepresentationKind.PCA:
            return pixels.reshape(len(pixels), -1)
        # HOG, HOG_PCA and UMAP (whose embedding is fitted on the HOG + PCA features)
        side = self.image_shape[0]
        cells = (side // max(2, side // 7) if self.config.hog_cells is None
                 else min(self.config.hog_cells, side))
        return hog_features(pixels, cells=cells, bins=self.config.hog_bins)

    def transform(self, images: np.ndarray) -> np.ndarray:
        out = [self._map(images[i:i + 8192]) for i in range(0, len(images), 8192)]
        return np.ascontiguousarray(np.concatenate(out), dtype=np.float32)

    def _map(self, images: np.ndarray) -> np.ndarray:
        feats = self.features(images)
        return feats if self.pca is None else self.pca(feats)


def fit_representation(config: RepresentationConfig, public_images: np.ndarray, *, seed: int,
                       device: torch.device | None = None,
                       encoder: EncoderConfig | None = None,
                       progress: bool = False) -> FittedRepresentation:
    """Fit the representation on ``public_images`` (the only data it ever sees).

    Args:
        config: The representation.
        public_images: uint8 ``(n, h, h)`` public images.
        seed: Seed of the learned encoder and of UMAP (unused by the fixed maps and PCA).
        device: Torch device of the learned encoder (default CPU).
        encoder: Configuration of the learned encoder (``kind == "encoder"``); default
            ``EncoderConfig()``.
        progress: Show a progress bar while training the encoder.
    """
    public = check_images(public_images, "public_images")
    _validate.check_int("seed", seed, minimum=0)
    if config.kind is RepresentationKind.ENCODER:
        import torch

        from dpkd_audit.pipelines.common.encoder import EncoderConfig, fit_encoder

        return fit_encoder(public, config=encoder or EncoderConfig(), seed=seed,
                           device=device or torch.device("cpu"), progress=progress)
    shape = (public.shape[1], public.shape[2])
    base = _Handcrafted(config=config, image_shape=shape, num_fitted=len(public), pca=None)
    pca = None
    if config.kind is not RepresentationKind.HOG:
        pca = _Pca.fit(base.transform(public), config.components)
    fitted = dataclasses.replace(base, pca=pca)
    if config.kind is RepresentationKind.UMAP:
        joined: FittedRepresentation = fitted
        if config.manifold.pixel_weight > 0:
            pixels = dataclasses.replace(base, config=dataclasses.replace(
                config, kind=RepresentationKind.PCA))
            pixels = dataclasses.replace(pixels, pca=_Pca.fit(pixels.transform(public),
                                                              config.components))
            joined = _Joined.fit((fitted, pixels), (1.0, config.manifold.pixel_weight), public)
        return fit_manifold(joined, public, config=config.manifold, seed=seed)
    return fitted


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class _Joined:
    """Feature maps side by side, each block divided by its mean public norm and weighted."""

    parts: tuple[FittedRepresentation, ...]
    scales: tuple[float, ...]
    num_fitted: int

    @classmethod
    def fit(cls, parts: tuple[FittedRepresentation, ...], weights: tuple[float, ...],
            public: np.ndarray) -> _Joined:
        norms = [float(np.linalg.norm(part.transform(public), axis=1).mean()) for part in parts]
        return cls(parts=parts, scales=tuple(w / max(n, 1e-12) for w, n in zip(weights, norms,
                                                                                strict=True)),
                   num_fitted=len(public))

    def transform(self, images: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.hstack([
            scale * part.transform(images) for part, scale in zip(self.parts, self.scales,
                                                                  strict=True)]),
            dtype=np.float32)
