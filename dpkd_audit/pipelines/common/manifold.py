"""A UMAP embedding of public features, with a record-wise map for every other image.

Reverse k-NN labelling is only as good as the clusters of its queries: with s = 10 queries
(the paper's hardest points) each cluster must hold one class. k-means on deskewed HOG + PCA
features is about 80% pure at s = 10 on MNIST; a UMAP embedding (McInnes, Healy, Melville 2018,
"UMAP: Uniform Manifold Approximation and Projection") of the same features, fitted on the
public split only, separates the classes well enough for k-means (``benchmarks/
rknn_clustering.py`` measures the purity; figures in ``benchmarks/README.md``).

**Record-wise map.** UMAP's own ``transform`` of new points is not a function of each point
alone: it prunes the new points' graph by the largest weight among *all* of them and picks its
number of epochs from their count, so one private record's embedding would depend on the other
private records, which breaks the reverse k-NN release's sensitivity (each record moves only
its own k votes). :class:`ManifoldMap` therefore maps an image by the weighted mean of the
embeddings of its ``m`` nearest *public* points in the feature space, weights the inverse
distances (UMAP's own initialisation of new points, without the optimisation): a function of
the image and the public data only (tested). A public image maps (up to float rounding) to
its own embedding, whose distance to itself is zero.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Protocol

import faiss
import numpy as np

from dpkd_audit import _validate

__all__ = ["FittedRepresentation", "ManifoldConfig", "ManifoldMap", "fit_manifold"]


class FittedRepresentation(Protocol):
    """A frozen feature map, fitted on public images only."""

    #: Number of (public) images the representation was fitted on.
    num_fitted: int

    def transform(self, images: np.ndarray) -> np.ndarray:
        """Map uint8 ``(n, h, w)`` images to float32 ``(n, d)`` features."""
        ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class ManifoldConfig:
    """The UMAP embedding and its out-of-sample map.

    Attributes:
        components: Dimensions of the embedding (>= 1).
        neighbors: UMAP's ``n_neighbors`` (>= 2): the size of the local neighbourhood.
        min_dist: UMAP's ``min_dist`` in [0, 1] (at most its ``spread``, 1); 0 packs
            clusters tightly (for clustering).
        map_neighbors: Public neighbours averaged by the out-of-sample map (>= 1).
        pixel_weight: Weight (>= 0) of PCA features of the (deskewed) pixels joined to the
            HOG + PCA features the embedding is fitted on, each block divided by its mean
            public norm; 0: HOG + PCA alone. On MNIST 0.5 makes the s = 10 clusters purer
            (``benchmarks/rknn_clustering.py``).
    """

    components: int = 10
    neighbors: int = 30
    min_dist: float = 0.0
    map_neighbors: int = 5
    pixel_weight: float = 0.0

    def __post_init__(self) -> None:
        _validate.check_int("components", self.components, minimum=1)
        _validate.check_int("neighbors", self.neighbors, minimum=2)
        _validate.check_nonnegative("min_dist", self.min_dist)
        if self.min_dist > 1.0:
            raise ValueError(f"min_dist must be in [0, 1] (UMAP's spread is 1); got "
                             f"{self.min_dist!r}")
        _validate.check_int("map_neighbors", self.map_neighbors, minimum=1)
        _validate.check_nonnegative("pixel_weight", self.pixel_weight)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class ManifoldMap:
    """A frozen UMAP embedding of public features (a :class:`FittedRepresentation`).

    Attributes:
        base: The feature map the embedding was fitted on (public-only as well).
        public_features: ``(n, d)`` base features of the public images.
        embedding: ``(n, c)`` their UMAP embedding.
        map_neighbors: Public neighbours averaged for an image (see the module docstring).
        num_fitted: Number of public images fitted.
    """

    base: FittedRepresentation
    public_features: np.ndarray = dataclasses.field(repr=False)
    embedding: np.ndarray = dataclasses.field(repr=False)
    map_neighbors: int
    num_fitted: int

    def transform(self, images: np.ndarray) -> np.ndarray:
        """Map uint8 ``(n, h, w)`` images to float32 ``(n, c)`` embedding coordinates.

        Each image's inverse-distance-weighted mean of the embeddings of its
        ``map_neighbors`` nearest public points: a function of that image alone.
        """
        x = np.ascontiguousarray(self.base.transform(images), dtype=np.float32)
        m = min(self.map_neighbors, self.public_features.shape[0])
        index = faiss.IndexFlatL2(self.public_features.shape[1])
        index.add(self.public_features)
        out = np.empty((x.shape[0], self.embedding.shape[1]), dtype=np.float32)
        for i in range(0, x.shape[0], 8192):  # faiss searches each query row on its own
            squared, nearest = index.search(x[i:i + 8192], m)
            weights = 1.0 / np.maximum(np.sqrt(np.maximum(squared.astype(np.float64), 0.0)),
                                       1e-9)
            weights /= weights.sum(axis=1, keepdims=True)
            out[i:i + 8192] = np.einsum("nm,nmc->nc", weights, self.embedding[nearest])
        return out


def fit_manifold(base: FittedRepresentation, public_images: np.ndarray, *,
                 config: ManifoldConfig, seed: int) -> ManifoldMap:
    """Fit UMAP (umap-learn) on the public images' ``base`` features, nothing else.

    Args:
        base: A feature map fitted on the public images only.
        public_images: uint8 ``(n, h, w)`` public images (``n > config.neighbors``).
        config: The embedding.
        seed: UMAP's ``random_state`` (>= 0): the fit is deterministic (single-threaded).

    Raises:
        ValueError: If there are not more public images than ``config.neighbors``.
    """
    _validate.check_int("seed", seed, minimum=0)
    features = np.ascontiguousarray(base.transform(public_images), dtype=np.float32)
    if features.shape[0] <= config.neighbors:
        raise ValueError(f"the UMAP representation needs more public images than its "
                         f"neighbors={config.neighbors}; got {features.shape[0]}")
    import umap  # slow to import (numba): only when this representation is used

    reducer = umap.UMAP(n_components=config.components, n_neighbors=config.neighbors,
                        min_dist=config.min_dist, random_state=seed)
    with warnings.catch_warnings():
        # "n_jobs value 1 overridden to 1 by setting random_state": wanted (determinism)
        warnings.filterwarnings("ignore", message=".*n_jobs.*", category=UserWarning)
        embedding = reducer.fit_transform(features)
    return ManifoldMap(base=base, public_features=features,
                       embedding=np.ascontiguousarray(embedding, dtype=np.float32),
                       map_neighbors=config.map_neighbors, num_fitted=features.shape[0])
