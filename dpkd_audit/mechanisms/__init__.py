"""Mechanisms: noise-adding objects with a declared sensitivity, a claimed guarantee and an event.

Every mechanism is a frozen, keyword-only dataclass (see :class:`~dpkd_audit.mechanisms.base.
Mechanism`) with ``sensitivity``, ``epsilon``/``delta``, ``event``, ``release(value, *, rng,
ledger=None)``, vectorised ``sample(value, n, *, rng)`` and ``neighbours()``.
:func:`catalogue` lists them with an example configuration, derived from the code itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dpkd_audit.mechanisms.base import AuditView, Guarantee, Mechanism, Norm, Sensitivity
from dpkd_audit.mechanisms.continuous import Gaussian, Laplace, TextbookGaussian, TextbookLaplace
from dpkd_audit.mechanisms.dgd import LatentCodeLaplace
from dpkd_audit.mechanisms.discrete import DiscreteGaussian, DiscreteLaplace
from dpkd_audit.mechanisms.pate import GaussianNoisyMax, LaplaceNoisyMax
from dpkd_audit.mechanisms.randomized_response import RandomizedResponse
from dpkd_audit.mechanisms.rknn import (
    BitRandomizedResponse,
    Collision,
    ReverseKnnCountRelease,
    noisy_argmax,
    reverse_knn_answers,
    reverse_knn_counts,
)
from dpkd_audit.mechanisms.selective_rr import SelectiveRandomizedResponse
from dpkd_audit.mechanisms.shuffle import ShuffledHistogram, ShuffledRandomizer

__all__ = [
    "CATALOGUE",
    "AuditView",
    "BitRandomizedResponse",
    "CatalogueEntry",
    "Collision",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "Gaussian",
    "GaussianNoisyMax",
    "Guarantee",
    "Laplace",
    "LaplaceNoisyMax",
    "LatentCodeLaplace",
    "Mechanism",
    "Norm",
    "RandomizedResponse",
    "ReverseKnnCountRelease",
    "SelectiveRandomizedResponse",
    "Sensitivity",
    "ShuffledHistogram",
    "ShuffledRandomizer",
    "TextbookGaussian",
    "TextbookLaplace",
    "catalogue",
    "example_text",
    "noisy_argmax",
    "reverse_knn_answers",
    "reverse_knn_counts",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class CatalogueEntry:
    """One mechanism of the package with an example configuration and its privacy scope.

    Attributes:
        example: The example configuration (the guide's table, GUIDE.md).
        scope: What one release protects.
        audit: The configuration ``dpkd audit`` checks, where the example's privacy loss is too
            small or too rare to measure with 10^6 samples per side (epsilon 0.01 over 32
            coordinates, 400-cell count matrices, 10,000 shuffled users, delta 1e-5): the same
            code path at a size and claim where an audit has power (see GUIDE.md's audit
            power table). ``None``: the example itself.
    """

    example: Callable[[], Mechanism]
    scope: str
    audit: Callable[[], Mechanism] | None = None

    def audited(self) -> Mechanism:
        """The configuration to audit."""
        return (self.audit or self.example)()


CATALOGUE: tuple[CatalogueEntry, ...] = (
    CatalogueEntry(example=lambda: Laplace(epsilon=1.0), scope="central"),
    CatalogueEntry(example=lambda: Gaussian(epsilon=1.0, delta=1e-5), scope="central"),
    CatalogueEntry(example=lambda: DiscreteLaplace(epsilon=1.0), scope="central, integers"),
    CatalogueEntry(example=lambda: DiscreteGaussian(epsilon=1.0, delta=1e-5),
                   scope="central, integers"),
    CatalogueEntry(example=lambda: RandomizedResponse(epsilon=1.0, num_classes=10),
                   scope="local, one label"),
    CatalogueEntry(example=lambda: ReverseKnnCountRelease(epsilon=0.1, k=2, num_queries=40,
                                                          num_classes=10),
                   scope="central, vote-count matrix",
                   audit=lambda: ReverseKnnCountRelease(epsilon=1.0, k=1, num_queries=2,
                                                        num_classes=2)),
    CatalogueEntry(example=lambda: BitRandomizedResponse(epsilon=1.0, k=2, num_queries=10,
                                                         num_classes=10),
                   scope="local, one client's answer"),
    CatalogueEntry(example=lambda: Collision(epsilon=1.0, domain_size=100, cardinality=2),
                   scope="local, one client's answer"),
    CatalogueEntry(example=lambda: ShuffledRandomizer(
        local=RandomizedResponse(epsilon=1.0, num_classes=10), num_users=10_000, delta=1e-6),
        scope="shuffle, one user's report",
        audit=lambda: ShuffledRandomizer(local=RandomizedResponse(epsilon=2.0, num_classes=2),
                                         num_users=10, delta=1e-3)),
    CatalogueEntry(example=lambda: ShuffledHistogram(epsilon=1.0, delta=1e-6, num_users=1000,
                                                     num_bins=10),
                   scope="shuffle, one user's bin"),
    CatalogueEntry(example=lambda: LaplaceNoisyMax.from_noise_scale(40.0, 10),
                   scope="one teacher's vote",
                   audit=lambda: LaplaceNoisyMax(epsilon=1.0, num_classes=2)),
    CatalogueEntry(example=lambda: GaussianNoisyMax(epsilon=1.0, delta=1e-5, num_classes=10),
                   scope="one teacher's vote",
                   audit=lambda: GaussianNoisyMax(epsilon=1.0, delta=1e-2, num_classes=2)),
    CatalogueEntry(example=lambda: SelectiveRandomizedResponse(epsilon=1.0, num_classes=10),
                   scope="one teacher label (not record level)"),
    CatalogueEntry(example=lambda: LatentCodeLaplace(epsilon=0.01, latent_dim=32),
                   scope="one synthetic sample (not record level)",
                   audit=lambda: LatentCodeLaplace(epsilon=1.0, latent_dim=2)),
)


def catalogue() -> list[dict[str, str]]:
    """One row per mechanism: name, sensitivity, guarantee, event, scope and paper.

    Every field is read off an example instance, so the table cannot drift from the code.
    """
    rows = []
    for entry in CATALOGUE:
        mech = entry.example()
        rows.append({
            "mechanism": type(mech).__name__,
            "example": example_text(mech),
            "sensitivity": str(mech.sensitivity),
            "guarantee": str(mech.guarantee),
            "event": type(mech.event).__name__,
            "scope": entry.scope,
            "paper": type(mech).reference,
        })
    return rows


def example_text(mech: Mechanism) -> str:
    """The constructor arguments of a mechanism, as ``name=value`` text."""
    parts = []
    for field in dataclasses.fields(mech):
        value = getattr(mech, field.name)
        if isinstance(value, Mechanism):
            value = type(value).__name__
        elif isinstance(value, Sensitivity) or value is None:
            continue
        parts.append(f"{field.name}={value:g}" if isinstance(value, float)
                     else f"{field.name}={value}")
    return ", ".join(parts)
