"""Positive controls: mechanisms that are wrong on purpose, with their true privacy.

Every control follows the package's mechanism contract (:class:`~dpkd_audit.mechanisms.base.
Mechanism`: frozen keyword-only dataclass, declared ``sensitivity``, vectorised
``sample(value, n, *, rng)``, ``neighbours()``) and claims the guarantee of the *correct*
mechanism it imitates: ``epsilon`` (and ``delta``) is the **claimed** privacy and ``event`` charges
exactly that claim. On top of the contract each control carries

- ``true_epsilon``: the privacy it really has (``math.inf`` where no finite epsilon holds), derived
  in the docstring of each class, and
- ``flaw``: a one-line description of the bug.

``neighbours()`` returns the pair of inputs that exposes the flaw, taken from the papers that use
these mechanisms as benchmarks (Ding, Wang, Wang, Zhang, Kifer, "Detecting violations of
differential privacy", CCS 2018 (StatDP); Bichsel, Steffen, Bogunovic, Vechev, "DP-Sniper",
IEEE S&P 2021; Google's dp_auditorium). An auditor must flag every entry of :data:`CONTROLS`
(``epsilon_lower > epsilon``) and none of :data:`NEGATIVE_CONTROLS`.

Neighbouring relation of the query-based controls (noisy max, sparse vector): every query answer
has sensitivity Delta and *all* answers may move by up to Delta at once (StatDP's ``ALL_DIFFER``);
the declared :class:`~dpkd_audit.mechanisms.base.Sensitivity` is this per-query Delta (``Norm.L1``
of one scalar answer).

This module never imports :mod:`dpkd_audit.audit`'s auditor (the auditor imports it) nor torch.
"""


from __future__ import annotations

from collections.abc import Callable

from dpkd_audit.audit.controls.base import Control
from dpkd_audit.audit.controls.gaussian import GaussianTooLittleNoise
from dpkd_audit.audit.controls.laplace import (
    HalfNoiseLaplace,
    HistogramWrongScale,
    NaiveFloatLaplace,
)
from dpkd_audit.audit.controls.noisy_max import NoisyMaxReturningValue
from dpkd_audit.audit.controls.randomized_response import WrongRandomizedResponse
from dpkd_audit.audit.controls.sparse_vector import (
    SVT_ABORTED,
    SVT_BOTTOM,
    SVT_TOP,
    SparseVector,
    SparseVectorNoCutoff,
    SparseVectorNoisyValues,
    SparseVectorNoQueryNoise,
    SparseVectorUnscaledQueryNoise,
)

__all__ = [
    "CONTROLS",
    "NEGATIVE_CONTROLS",
    "SVT_ABORTED",
    "SVT_BOTTOM",
    "SVT_TOP",
    "Control",
    "GaussianTooLittleNoise",
    "HalfNoiseLaplace",
    "HistogramWrongScale",
    "NaiveFloatLaplace",
    "NoisyMaxReturningValue",
    "SparseVector",
    "SparseVectorNoCutoff",
    "SparseVectorNoQueryNoise",
    "SparseVectorNoisyValues",
    "SparseVectorUnscaledQueryNoise",
    "WrongRandomizedResponse",
]



#: Positive controls with the default claims used by the CLI and the benchmark; each must be
#: flagged by an auditor run on its ``neighbours()``.
CONTROLS: tuple[Callable[[], Control], ...] = (
    lambda: HalfNoiseLaplace(epsilon=1.0),
    lambda: HistogramWrongScale(epsilon=0.5, num_bins=5),
    lambda: NoisyMaxReturningValue(epsilon=1.0, num_classes=5),
    lambda: SparseVectorNoisyValues(epsilon=1.0, num_queries=10, cutoff=1),
    lambda: SparseVectorUnscaledQueryNoise(epsilon=1.0, num_queries=10, cutoff=2),
    lambda: SparseVectorNoQueryNoise(epsilon=1.0, num_queries=10),
    lambda: SparseVectorNoCutoff(epsilon=1.0, num_queries=10),
    lambda: WrongRandomizedResponse(epsilon=1.0, num_classes=10),
    lambda: NaiveFloatLaplace(epsilon=1.0),
    lambda: GaussianTooLittleNoise(epsilon=1.0, delta=1e-5),
)

#: Correct mechanisms built like the controls (same output format and neighbour pattern); an
#: auditor must not flag them.
NEGATIVE_CONTROLS: tuple[Callable[[], Control], ...] = (
    lambda: SparseVector(epsilon=1.0, num_queries=10, cutoff=1),
)
