"""Queries (k-means medoids of the public set) and reverse k-NN neighbours.

Reverse k-NN paper, Algorithm 1, "Selecting Queries": the public set is clustered into s groups
in the representation space and the cluster centres are the queries; as in the reference code
(NOTES.md), the public sample nearest to each centre (a medoid) is the query. "Reverse k-NN":
every private record finds its k nearest queries and votes its label into them.

k-means is scikit-learn's (k-means++ seeding, the best of ``restarts`` runs): faiss's k-means
(random seeding) merged two MNIST classes into one cluster at s = 10 on the UMAP embedding
while this was built, even with 10 restarts. The neighbour searches are exact L2 with faiss.
"""

from __future__ import annotations

import dataclasses

import faiss
import numpy as np
from sklearn.cluster import KMeans

from dpkd_audit import _validate

__all__ = ["Queries", "nearest_queries", "select_queries"]


def _as_features(x: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1 or arr.dtype.kind != "f":
        raise ValueError(f"{name} must be a non-empty float (n, d) array; got dtype {arr.dtype} "
                         f"and shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite")
    return np.ascontiguousarray(arr, dtype=np.float32)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Queries:
    """The s queries chosen on the public set.

    Attributes:
        medoids: ``(s,)`` distinct public indices: the public sample nearest to each centre.
        assignment: ``(n_public,)`` k-means cluster of every public sample; a public sample
            inherits the label of its cluster's query.
        features: ``(s, d)`` representation of the queries (the medoids' features).
    """

    medoids: np.ndarray
    assignment: np.ndarray
    features: np.ndarray

    @property
    def num_queries(self) -> int:
        """The number of queries s."""
        return int(self.medoids.shape[0])


def select_queries(public: np.ndarray, clusters: int, *, seed: int, iterations: int = 100,
                   restarts: int = 3) -> Queries:
    """k-means (k-means++ seeding, ``restarts`` runs, best objective kept) and medoid queries.

    Every public point is used for training (no subsampling). When two centres share their
    nearest public sample, the later centre takes its next-nearest unused sample, so the s
    queries are distinct.

    Raises:
        ValueError: If ``clusters`` is not in ``[2, n_public]``.
    """
    x = _as_features(public, "public")
    clusters = _validate.check_int("clusters", clusters, minimum=2)
    if clusters > x.shape[0]:
        raise ValueError(f"clusters must be <= the public set size {x.shape[0]}; got {clusters}")
    seed = _validate.check_int("seed", seed, minimum=0)
    iterations = _validate.check_int("iterations", iterations, minimum=1)
    restarts = _validate.check_int("restarts", restarts, minimum=1)
    kmeans = KMeans(n_clusters=clusters, init="k-means++", n_init=restarts,
                    max_iter=iterations, random_state=seed % (2**31)).fit(x)
    assignment = kmeans.labels_.astype(np.int64)
    centroids = np.ascontiguousarray(kmeans.cluster_centers_, dtype=np.float32)
    index = faiss.IndexFlatL2(x.shape[1])
    index.add(x)
    candidates = min(x.shape[0], clusters + 1)
    _, nearest = index.search(centroids, candidates)
    used: set[int] = set()
    medoids = np.empty(clusters, dtype=np.int64)
    for c in range(clusters):
        pick = next(int(i) for i in nearest[c] if i >= 0 and int(i) not in used)
        used.add(pick)
        medoids[c] = pick
    return Queries(medoids=medoids, assignment=assignment,
                   features=x[medoids].copy())


def nearest_queries(queries: np.ndarray, records: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` nearest queries of every record (exact L2, faiss): int64 ``(n, k)``."""
    q = _as_features(queries, "queries")
    x = _as_features(records, "records")
    if q.shape[1] != x.shape[1]:
        raise ValueError(f"records must have the queries' dimension {q.shape[1]}; got "
                         f"{x.shape[1]}")
    k = _validate.check_int("k", k, minimum=1, maximum=q.shape[0])
    index = faiss.IndexFlatL2(q.shape[1])
    index.add(q)
    _, neighbours = index.search(x, k)
    return neighbours.astype(np.int64)
