"""DGD's generative-stream perturbation: Laplace noise on clipped VAE latent codes.

Wang et al., "Discriminative-generative distillation" (DGD), Section III-E "Privacy Analysis":
"we achieve eps1-differential privacy by adding Laplacian noise with scale 2c/eps1 to the
normalized latent codes, where c is the dimension of latent codes" (experiments: c = 32,
eps1 = 0.01).

**What this protects (read before use).** The paper's neighbouring relation is "any two
different images x_j and x'_j" fed to the VAE: the privacy unit is ONE synthetic image, i.e. one
latent code, and this mechanism is exactly eps-DP for that unit. It gives NO record-level
guarantee for the private training data: the synthetic images come from a generator fitted to a
non-private baseline classifier, and nothing here bounds how much one private record influenced
them (NOTES.md, "DGD"). Record-level accounting must treat the generative stream as non-private
unless the generator itself was trained on DP outputs or public data.

**Sensitivity.** Codes are first *clipped* coordinate-wise to [-clip, clip] (the paper's
"normalized" codes with clip = 1). Values outside the box are moved to its boundary, silently:
that is what makes the sensitivity finite. Any two clipped codes differ by at most 2 clip per
coordinate, so the L1 sensitivity is 2 clip c and Laplace(2 clip c / eps) per coordinate is
eps-DP (Dwork-Roth 2014, Theorem 3.6); for clip = 1 this is the paper's 2c/eps1.

**Float-safe.** The noise is drawn as the package's float-safe Laplace
(:class:`~dpkd_audit.mechanisms.continuous.Laplace`): each row of clipped codes rounded to a
power-of-two grid g, an exact discrete Laplace added on the integers, so no floating-point
artefact (Mironov 2012) can leak the code. One synthetic sample changes one row, c coordinates,
each of which rounding may move by one more grid step: the rounded row's L1 sensitivity is
``floor(2 clip c / g) + c`` grid steps, and g is the largest power of two with
``2 clip c / g >= 512 c`` (the noise is at most 1 + 1/512 times the paper's 2c/eps1).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate
from dpkd_audit.mechanisms.base import Mechanism, Norm, Sensitivity
from dpkd_audit.mechanisms.continuous import (
    LaplaceGrid,
    as_real_array,
    laplace_grid,
    laplace_scale,
)

__all__ = ["LatentCodeLaplace"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LatentCodeLaplace(Mechanism):
    """Laplace(2 clip c / eps) on latent codes clipped to [-clip, clip]^c (DGD, Sec. III-E).

    The privacy unit is ONE synthetic image / latent code, not a private training record (the
    paper's own argument); it gives no record-level guarantee (see the module docstring).

    Input: one code of shape ``(latent_dim,)`` or a batch ``(m, latent_dim)`` whose rows are
    different synthetic samples. Changing one synthetic sample changes one row, so a batch
    release is still eps-DP for the unit (parallel composition over rows, McSherry 2009,
    Theorem 4) and is charged as one event. Output: the clipped codes plus noise, with the same
    shape (``sample`` stacks ``n`` outputs on a new axis 0), on a power-of-two grid (float-safe:
    the exact discrete Laplace of the module docstring; charged as its
    ``DiscreteLaplaceDpEvent``).

    Attributes:
        epsilon: Claimed epsilon per synthetic sample (a normal double > 0, with the scale
            2 clip c / eps in [1e-300, 1e300]); the paper's eps1.
        latent_dim: The latent dimension c (1 <= c <= 10^8).
        clip: Half-width of the clipping box, in (0, 1e300], default 1.
    """

    reference: ClassVar[str] = ("Wang et al. (DGD), Sec. III-E; Dwork-Roth 2014 Thm 3.6; exact "
                                "discrete Laplace on a power-of-two grid (CKS 2020 Alg. 2)")

    epsilon: float
    latent_dim: int
    clip: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon_range(self.epsilon))
        object.__setattr__(self, "latent_dim", _validate.check_size("latent_dim",
                                                                    self.latent_dim))
        clip = _validate.check_positive("clip", self.clip)
        if clip > _validate.MAX_ABS_REAL:
            raise ValueError(f"clip must be a real number in (0, {_validate.MAX_ABS_REAL:g}]; "
                             f"got {clip!r}")
        object.__setattr__(self, "clip", clip)
        _ = self.scale  # refuse an unusable scale (or an infinite sensitivity) now

    @functools.cached_property
    def _sensitivity_value(self) -> float:
        """2 clip c as a double rounded *up* (the product may round down by half an ulp)."""
        value = 2.0 * self.clip * self.latent_dim
        if math.isfinite(value) and Fraction(value) < 2 * Fraction(self.clip) * self.latent_dim:
            value = math.nextafter(value, math.inf)
        return value

    @property
    def sensitivity(self) -> Sensitivity:
        """L1 distance between any two codes of [-clip, clip]^c: 2 clip c."""
        return Sensitivity(value=self._sensitivity_value, norm=Norm.L1)

    @functools.cached_property
    def grid(self) -> LaplaceGrid:
        """The float-safe grid: one row (c coordinates) changed per unit."""
        parameters = (f"epsilon={self.epsilon!r} with clip={self.clip!r} and "
                      f"latent_dim={self.latent_dim}")
        laplace_scale(self._sensitivity_value, self.epsilon, parameters=parameters)
        return laplace_grid(self._sensitivity_value, self.epsilon, self.latent_dim,
                            parameters=parameters)

    @property
    def scale(self) -> float:
        """Laplace scale per coordinate, t g >= 2 clip c / eps (DGD: 2c/eps1)."""
        return float(self.grid.scale) * self.grid.granularity

    @property
    def event(self) -> _dp.DpEvent:
        # Pure (S / t)-DP, S / t <= eps: the discrete Laplace on the grid (module docstring).
        return self.grid.event

    def normalise(self, codes: Any) -> np.ndarray:
        """The codes clipped to [-clip, clip] coordinate-wise (validated like a release input)."""
        return self._check_value(codes)

    def _check_value(self, value: Any) -> np.ndarray:
        arr = as_real_array(value, "codes")
        if arr.ndim not in (1, 2) or arr.shape[-1] != self.latent_dim or arr.shape[0] < 1:
            raise ValueError(f"codes must have shape (latent_dim,) or (m, latent_dim) with "
                             f"latent_dim={self.latent_dim}; got shape {arr.shape}")
        return np.clip(arr, -self.clip, self.clip)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.grid.sample(value, n, rng)

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """The opposite corners of the box, (-clip, ..., -clip) and (clip, ..., clip).

        Their L1 distance is the full sensitivity 2 clip c, spread over all coordinates.
        """
        ones = np.ones(self.latent_dim)
        return -self.clip * ones, self.clip * ones
