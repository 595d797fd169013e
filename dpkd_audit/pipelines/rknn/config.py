"""Configuration of the reverse k-NN pipeline (paper defaults, a CPU preset, a GPU preset)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from dpkd_audit import _validate
from dpkd_audit.data import DatasetName
from dpkd_audit.pipelines import limits
from dpkd_audit.pipelines.common.config import Preset, parse_enum, plain
from dpkd_audit.pipelines.common.encoder import EncoderConfig
from dpkd_audit.pipelines.common.manifold import ManifoldConfig
from dpkd_audit.pipelines.common.representations import RepresentationConfig, RepresentationKind
from dpkd_audit.pipelines.common.student import StudentConfig

__all__ = [
    "DEFAULT_SHUFFLE_DELTA",
    "SMALL_EPSILON",
    "CentralNoise",
    "Preset",
    "ReleaseMode",
    "RknnConfig",
    "small_preset_clusters",
]

#: Delta of the shuffle modes when none is given (below 1/n for MNIST's 60,000 records).
DEFAULT_SHUFFLE_DELTA = 1e-5


class ReleaseMode(enum.StrEnum):
    """How the private vote counts are released (reverse k-NN paper, "Private Mechanisms")."""

    #: A trusted curator adds Laplace noise of L1 sensitivity 2kr to every count (Prop. 1).
    CENTRAL = "central"
    #: Every record's client randomizes its answer bits with per-bit epsilon eps/(2kr) (Thm 1).
    LOCAL_RR = "local-rr"
    #: Every client sends one Collision report (Wang et al. 2021; paper Def. 5, Thm 2).
    LOCAL_COLLISION = "local-collision"
    #: Single-message shuffle: Collision at a larger eps0, amplified by FMT21 to the target.
    SHUFFLE = "shuffle"
    #: Multi-message shuffled histogram with distributed discrete-Laplace noise (Ghazi et al.).
    SHUFFLE_MULTI = "shuffle-multi"

    @property
    def is_local(self) -> bool:
        """Local randomizers (no trusted curator, no shuffler)."""
        return self in (ReleaseMode.LOCAL_RR, ReleaseMode.LOCAL_COLLISION)

    @property
    def is_shuffle(self) -> bool:
        """Shuffle-model releases, which are (epsilon, delta)-DP."""
        return self in (ReleaseMode.SHUFFLE, ReleaseMode.SHUFFLE_MULTI)


class CentralNoise(enum.StrEnum):
    """Noise of the central release."""

    #: Exact discrete Laplace (Canonne-Kamath-Steinke 2020 sampler), the default.
    DISCRETE = "discrete"
    #: Textbook floating-point Laplace (subject to Mironov 2012's artefacts).
    CONTINUOUS = "continuous"


_enum = parse_enum

#: Below this epsilon the small preset takes fewer queries in central and shuffle modes.
SMALL_EPSILON = 0.1


def small_preset_clusters(dataset: DatasetName, mode: ReleaseMode,
                          kind: RepresentationKind | None, epsilon: float) -> int:
    """The small preset's number of queries s for a dataset, mode, representation and epsilon.

    Fewer queries mean more votes per query (less noise per label) but coarser clusters; by
    the measured purity of the public clusters (``benchmarks/rknn_clustering.py``) and the
    committed runs (``reports/rknn/``): digits 40; MNIST with ``umap`` (the preset's) 10 in
    every mode (97.1% pure at s = 10, 97.4% at 100); otherwise 10 in the local modes, where
    the clients' noise dominates, 40 below epsilon = 0.1 and 100 from 0.1 up (Fashion-MNIST,
    central: 76.9% at s = 40 against 62.6% at s = 100 for eps = 0.01, 81.8% at s = 100 against
    79.3% at s = 40 for eps = 0.1). A function of public parameters only.
    """
    if dataset is DatasetName.DIGITS:
        return 40
    if mode.is_local or (dataset is DatasetName.MNIST and kind is RepresentationKind.UMAP):
        return 10
    return 40 if epsilon < SMALL_EPSILON else 100


@dataclasses.dataclass(frozen=True, kw_only=True)
class RknnConfig:
    """One reverse k-NN run (paper Algorithm 1 with T = 1).

    Attributes:
        dataset: Which dataset (the private set is its training split).
        epsilon: Target epsilon of the whole run (> 0). Central and local modes are pure
            epsilon-DP; shuffle modes are (epsilon, delta)-DP.
        delta: Target delta; must be 0 for central/local modes; default
            :data:`DEFAULT_SHUFFLE_DELTA` for shuffle modes.
        mode: How the vote counts are released (:class:`ReleaseMode`).
        clusters: Number of queries s (k-means clusters of the public set).
        k: Each private record votes into its k nearest queries (1 <= k <= clusters).
        central_noise: Discrete (default) or continuous Laplace for ``central``.
        simulate_local: For ``local-rr``, draw the *aggregate* of the clients' reports from its
            exact law (sums of binomials) instead of randomizing every client; same output
            distribution (checked by the tests), much less memory for large s.
        representation: The representation fitted on public data.
        encoder: Learned-encoder settings (used when ``representation.kind == "encoder"``).
        student: Student CNN training.
        soft_labels: Train on the normalised noisy counts of each query (the paper's
            "soft labeling results") instead of the noisy argmax with label smoothing.
        self_training_rounds: Rounds (>= 0) of self-training after the first student: a
            fresh student learns the previous one's predictions on the public images
            (:mod:`~dpkd_audit.pipelines.common.self_training`; not in the paper, 0 there).
            Post-processing of the release and the public images: free in privacy.
        public_size: Size of the public split (default: half of the test set).
        split_seed: Seed of the public / student-test split.
        seed: Seed of k-means, the encoder and the student (the release noise comes from the
            injected Generator).
        preset: Name of the preset the config came from (recorded in results).
    """

    dataset: DatasetName = DatasetName.MNIST
    epsilon: float = 0.1
    delta: float | None = None
    mode: ReleaseMode = ReleaseMode.CENTRAL
    clusters: int = 40
    k: int = 1
    central_noise: CentralNoise = CentralNoise.DISCRETE
    simulate_local: bool = False
    representation: RepresentationConfig = dataclasses.field(
        default_factory=RepresentationConfig)
    encoder: EncoderConfig = dataclasses.field(default_factory=EncoderConfig)
    student: StudentConfig = dataclasses.field(default_factory=StudentConfig.small)
    soft_labels: bool = False
    self_training_rounds: int = 0
    public_size: int | None = None
    split_seed: int = 0
    seed: int = 0
    preset: Preset = Preset.SMALL

    def __post_init__(self) -> None:
        object.__setattr__(self, "dataset", _enum(DatasetName, "dataset", self.dataset))
        object.__setattr__(self, "mode", _enum(ReleaseMode, "mode", self.mode))
        object.__setattr__(self, "central_noise",
                           _enum(CentralNoise, "central_noise", self.central_noise))
        object.__setattr__(self, "preset", _enum(Preset, "preset", self.preset))
        _validate.check_epsilon(self.epsilon)
        delta = self.delta
        if delta is None:
            delta = DEFAULT_SHUFFLE_DELTA if self.mode.is_shuffle else 0.0
        delta = _validate.check_delta(delta)
        if self.mode.is_shuffle and delta == 0.0:
            raise ValueError(f"delta must be in (0, 1) for mode={self.mode.value!r} (shuffle "
                             f"guarantees are (epsilon, delta)); got {delta!r}")
        if not self.mode.is_shuffle and delta != 0.0:
            raise ValueError(f"delta must be 0 for mode={self.mode.value!r} (a pure "
                             f"epsilon-DP release); got {delta!r}")
        object.__setattr__(self, "delta", delta)
        _validate.check_int("clusters", self.clusters, minimum=2, maximum=limits.MAX_CLUSTERS)
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ValueError(f"k must be an integer >= 1; got {self.k!r}")
        if self.k > self.clusters:
            raise ValueError(f"k must be <= clusters={self.clusters} (each record votes into k "
                             f"distinct queries); got k={self.k}")
        if self.mode is ReleaseMode.SHUFFLE_MULTI and self.epsilon / self.k < 0.01:
            raise ValueError(f"epsilon / k must be >= 0.01 for mode='shuffle-multi' (one "
                             f"shuffled histogram per neighbour rank); got {self.epsilon:g} / "
                             f"{self.k}")
        for name in ("simulate_local", "soft_labels"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool; got {getattr(self, name)!r}")
        if self.simulate_local and self.mode is not ReleaseMode.LOCAL_RR:
            raise ValueError("simulate_local is only available for mode='local-rr'; got "
                             f"mode={self.mode.value!r}")
        for name, kind in (("representation", RepresentationConfig),
                           ("encoder", EncoderConfig), ("student", StudentConfig)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be a {kind.__name__}; got "
                                 f"{type(getattr(self, name)).__name__}")
        _validate.check_int("self_training_rounds", self.self_training_rounds, minimum=0,
                            maximum=limits.MAX_ROUNDS)
        if self.public_size is not None:
            _validate.check_int("public_size", self.public_size, minimum=1,
                                maximum=limits.MAX_PUBLIC_SIZE)
        _validate.check_int("split_seed", self.split_seed, minimum=0, maximum=limits.MAX_SEED)
        _validate.check_int("seed", self.seed, minimum=0, maximum=limits.MAX_SEED)

    @classmethod
    def small(cls, **overrides: Any) -> RknnConfig:
        """CPU preset: a public-only UMAP representation and a short student training.

        MNIST / Fashion-MNIST: deskewed HOG + PCA-50 (on MNIST joined with PCA-50 of the
        deskewed pixels at weight 0.5), then a UMAP embedding fitted on the public split
        (``umap``; about a minute on 2 cores, once per sweep), k-means with k-means++
        seeding. The number of queries s, by measured cluster purity (public labels,
        ``benchmarks/rknn_clustering.py``; figures in ``benchmarks/README.md``): on MNIST the
        UMAP clusters are 97.1% pure at s = 10 and no purer at s = 100, so s = 10 in every
        mode (fewest cells, least noise per label). On Fashion-MNIST purity grows with s (65%
        at s = 10, 78% at 40, 81% at 100): s = 10 in local modes, where the clients' noise
        dominates, 40 below epsilon = 0.1 and 100 from 0.1 up (:func:`small_preset_clusters`).
        The 8x8 digits (298 public images): PCA-40 of the raw pixels, s = 40 (measured best of
        PCA / HOG / HOG-PCA, with and without deskewing, at s = 10, 20, 40). Another
        representation given in ``overrides`` gets its own s (:func:`small_preset_clusters`).

        Student (MNIST / Fashion-MNIST): width 32, 20 epochs, then one self-training round
        (``self_training_rounds`` = 1). Measured on MNIST, central eps = 0.1, s = 10 (labels
        97.12% right, the cluster purity; one thread): width 16 x 15 epochs 98.66%, its
        self-training round 98.66% (a second round 98.80%); width 32 x 20 epochs 98.64%, its
        round 98.94%, on labels the first student made 98.06% right. Digits: width 16, no
        self-training.
        """
        dataset = _enum(DatasetName, "dataset", overrides.get("dataset", cls.dataset))
        mode = _enum(ReleaseMode, "mode", overrides.get("mode", cls.mode))
        if dataset is DatasetName.DIGITS:
            representation = RepresentationConfig(kind=RepresentationKind.PCA, deskew=False,
                                                  components=40)
        else:  # pixels joined to HOG make MNIST's clusters purer, not Fashion-MNIST's
            pixel_weight = 0.5 if dataset is DatasetName.MNIST else 0.0
            representation = RepresentationConfig(
                kind=RepresentationKind.UMAP, manifold=ManifoldConfig(pixel_weight=pixel_weight))
        chosen = overrides.get("representation", representation)
        kind = chosen.kind if isinstance(chosen, RepresentationConfig) else None
        digits = dataset is DatasetName.DIGITS
        values: dict[str, Any] = {
            "clusters": small_preset_clusters(dataset, mode, kind,
                                              float(overrides.get("epsilon", cls.epsilon))),
            "representation": representation,
            "encoder": EncoderConfig(),
            "student": StudentConfig.small() if digits else dataclasses.replace(
                StudentConfig.small(), width=32, epochs=20),
            "self_training_rounds": 0 if digits else 1,
            "preset": Preset.SMALL,
        }
        values.update(overrides)
        return cls(**values)

    @classmethod
    def paper(cls, **overrides: Any) -> RknnConfig:
        """GPU preset: the paper's s = 40, k = 1, a learned encoder and a long student run."""
        values: dict[str, Any] = {
            "clusters": 40,
            "representation": RepresentationConfig(kind=RepresentationKind.ENCODER),
            "encoder": EncoderConfig.gpu(),
            "student": StudentConfig.paper(),
            "preset": Preset.PAPER,
        }
        values.update(overrides)
        return cls(**values)

    @classmethod
    def preset_config(cls, preset: Preset | str, **overrides: Any) -> RknnConfig:
        """The named preset with ``overrides``."""
        preset = _enum(Preset, "preset", preset)
        return cls.small(**overrides) if preset is Preset.SMALL else cls.paper(**overrides)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (enums as their values)."""
        return plain(self)
