"""A CPU-only quick start on scikit-learn's bundled digits: private reverse k-NN labelling.

This is the smallest end-to-end use of the foundation: a representation fitted on the *public*
half only (PCA), query points from k-means on public data (the public sample nearest to each
centre), each private record voting its label into its k nearest queries, and the s x |Y| vote
matrix released once through :class:`~dpkd_audit.mechanisms.ReverseKnnCountRelease` (exact
discrete Laplace, L1 sensitivity 2k) charged to a ledger. Public samples inherit their cluster's
noisy label; the label accuracy on public data is reported, beside the cluster purity (the
most any labelling of these clusters can reach, from public data only). Nothing reported is
computed from the exact private counts. Student training and the real-data
pipelines live in :mod:`dpkd_audit.pipelines.rknn` (reverse k-NN paper, Algorithm 1).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.neighbors import NearestNeighbors

from dpkd_audit import _validate
from dpkd_audit.ledger import Ledger
from dpkd_audit.mechanisms.rknn import ReverseKnnCountRelease
from dpkd_audit.pipelines.purity import cluster_purity

__all__ = ["QuickstartConfig", "QuickstartResult", "run"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class QuickstartConfig:
    """Configuration of the digits quick start.

    Attributes:
        epsilon: Epsilon of the single count release (> 0).
        clusters: Number of queries s (k-means clusters on public data).
        k: Each private record votes into its k nearest queries (1 <= k <= clusters).
        components: PCA dimensions fitted on public data.
        public_fraction: Share of the 1,797 digits used as the unlabelled public set.
        seed: Seed of the split and of k-means (noise uses the injected generator).
    """

    epsilon: float = 1.0
    clusters: int = 20
    k: int = 1
    components: int = 30
    public_fraction: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        _validate.check_epsilon(self.epsilon)
        _validate.check_int("clusters", self.clusters, minimum=2)
        _validate.check_int("k", self.k, minimum=1, maximum=self.clusters)
        _validate.check_int("components", self.components, minimum=1, maximum=64)
        _validate.check_probability("public_fraction", self.public_fraction, open_low=True,
                                    open_high=True)
        _validate.check_int("seed", self.seed, minimum=0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class QuickstartResult:
    """What the quick start measured (functions of the noisy release and public data only)."""

    label_accuracy: float
    cluster_purity: float
    epsilon: float
    public_size: int
    private_size: int
    seconds: float


def run(config: QuickstartConfig, *, ledger: Ledger, rng: np.random.Generator) -> QuickstartResult:
    """Run the quick start; the only private release is charged to ``ledger``."""
    rng = _validate.check_generator(rng)
    start = time.perf_counter()
    digits = load_digits()
    x, y = digits.data.astype(np.float64) / 16.0, digits.target
    order = np.random.default_rng(config.seed).permutation(len(x))
    n_public = round(config.public_fraction * len(x))
    if config.clusters > n_public:
        raise ValueError(f"clusters must be <= the public set size {n_public}; "
                         f"got {config.clusters}")
    public, private = order[:n_public], order[n_public:]

    pca = PCA(n_components=config.components, random_state=config.seed).fit(x[public])
    z_public, z_private = pca.transform(x[public]), pca.transform(x[private])
    km = KMeans(n_clusters=config.clusters, n_init=4, random_state=config.seed).fit(z_public)
    medoids = NearestNeighbors(n_neighbors=1).fit(z_public).kneighbors(
        km.cluster_centers_, return_distance=False)[:, 0]
    queries = z_public[medoids]

    # Reverse k-NN votes: each private record adds its one-hot label to its k nearest queries.
    nearest = NearestNeighbors(n_neighbors=config.k).fit(queries).kneighbors(
        z_private, return_distance=False)
    votes = np.zeros((config.clusters, 10), dtype=np.int64)
    np.add.at(votes, (nearest.ravel(), np.repeat(y[private], config.k)), 1)

    mechanism = ReverseKnnCountRelease(epsilon=config.epsilon, k=config.k,
                                       num_queries=config.clusters, num_classes=10)
    noisy = mechanism.release(votes, rng=rng, ledger=ledger,
                              label=f"reverse k-NN counts (digits, s={config.clusters})")
    query_labels = np.argmax(noisy, axis=1)
    public_cluster = km.labels_
    accuracy = float(np.mean(query_labels[public_cluster] == y[public]))
    purity = cluster_purity(public_cluster, y[public], 10)
    return QuickstartResult(label_accuracy=accuracy, cluster_purity=purity,
                            epsilon=config.epsilon, public_size=len(public),
                            private_size=len(private), seconds=time.perf_counter() - start)
