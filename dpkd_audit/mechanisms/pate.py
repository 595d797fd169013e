"""PATE noisy-argmax aggregation of teacher votes: LNMax (Laplace) and GNMax (Gaussian).

The input of one query is a vote histogram: ``votes[c]`` is the number of teachers that predicted
class ``c`` (a non-negative integer vector of length ``num_classes``). Every teacher is trained on
a disjoint shard of the private data, so replacing one private record changes at most one
teacher, which *moves one vote*: one count goes down by 1 and another goes up by 1. The histogram
therefore has L1 sensitivity 2 and L2 sensitivity sqrt(2) under replace-one neighbours.

Only the argmax of the noisy histogram is released (an ``int``): it is a post-processing of the
noisy histogram, so every guarantee of the noisy histogram carries over (Dwork-Roth 2014,
Proposition 2.1). Ties of the noisy counts have probability 0 (continuous noise); ``numpy.argmax``
would return the smallest index.

The noise is drawn by numpy's floating-point samplers (``Generator.laplace`` / ``normal``), as in
the PATE reference code. Mironov's (2012) attack on floating-point Laplace reads the low-order
bits of a *released noisy value*; here no noisy value leaves the mechanism, only the index of the
largest one.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import itertools
import math
from typing import Any, ClassVar, Self

import numpy as np
from dp_accounting import dp_event as _dp
from scipy import integrate, special

from dpkd_audit import _validate
from dpkd_audit._math.privacy import analytic_gaussian_delta, smallest_satisfying
from dpkd_audit.events import GaussianNoisyMaxDpEvent, LaplaceNoisyMaxDpEvent
from dpkd_audit.mechanisms.base import Mechanism, Norm, Sensitivity
from dpkd_audit.mechanisms.continuous import (
    MAX_GAUSSIAN_EPSILON,
    calibrated_gaussian_sigma,
    laplace_scale,
)

__all__ = ["MAX_VOTES", "GaussianNoisyMax", "LaplaceNoisyMax", "check_vote_histograms"]

#: L1 sensitivity of a vote histogram under replace-one neighbours (one vote moves).
_L1_SENSITIVITY = 2
#: L2 sensitivity of a vote histogram under replace-one neighbours: ||(+1, -1)||_2.
_L2_SENSITIVITY = math.sqrt(2.0)
#: Noise arrays are built in blocks of at most this many entries (bounds peak memory).
_BLOCK_ENTRIES = 1 << 22


#: Largest vote count accepted: counts must be exact in float64, where the noise is added
#: (a count above 2^53 would be rounded, which could stretch the sensitivity beyond one vote).
MAX_VOTES = 1 << 53


def check_vote_histograms(votes: Any, num_classes: int, *, name: str = "votes",
                          ndim: int = 1) -> np.ndarray:
    """Validate vote histograms: non-negative integers, last axis of length ``num_classes``.

    Args:
        votes: One histogram (``ndim=1``, shape ``(num_classes,)``) or a matrix of histograms
            (``ndim=2``, shape ``(m, num_classes)``, one query per row). Integer arrays, or float
            arrays holding integral values, are accepted; booleans, strings and objects are not.
            Every count must be in [0, 2^53] (:data:`MAX_VOTES`), checked in exact integer
            arithmetic before any conversion (a ``uint64`` 2^64 - 1 is refused, not read as -1).
        num_classes: Number of classes k.
        name: Parameter name used in error messages.
        ndim: 1 for one histogram, 2 for a matrix of histograms.

    Returns:
        The histograms as an ``int64`` array.

    Raises:
        ValueError: On a wrong shape, a non-integral, negative, too large, NaN or infinite
            entry, or a non-numeric input.
    """
    shape_text = "(num_classes,)" if ndim == 1 else "(m, num_classes)"
    arr = _validate.as_integer_array(
        votes, name, minimum=0, maximum=MAX_VOTES, allow_integral_float=True,
        what=f"an array of non-negative integer vote counts of shape {shape_text}")
    if arr.ndim != ndim or arr.shape[-1] != num_classes or (ndim == 2 and arr.shape[0] < 1):
        raise ValueError(f"{name} must have shape {shape_text} with num_classes={num_classes}"
                         f"{' and m >= 1' if ndim == 2 else ''}; got shape {arr.shape}")
    return arr


class _NoisyMax(Mechanism):
    """Shared machinery of the noisy-argmax aggregators (not a mechanism by itself).

    Subclasses are frozen dataclasses with a ``num_classes`` field and define the per-count noise
    (sampler, log-density, log-cdf and a width beyond which its tails are negligible).

    **Floating-point noise, and why it is kept** (issue 32). The noise is drawn with numpy's
    textbook samplers, but only the *index* of the largest noisy count is released, never a
    noisy value: Mironov's (2012) attack reads the low bits of a released double, which the
    index does not carry. The index differs from the real-valued design's only when rounding
    reorders two noisy counts, i.e. when two of them fall within an ulp of each other (about
    2^-52 times their size): for noise densities bounded by 1 / scale that happens with
    probability at most about k^2 2^-52 per release, far below any delta a claim uses; the
    auditor's float-bits attack has no bits to read (the output is an integer). The package's
    float-safe samplers (exact discrete noise) would cost 20x the time for no measurable gain.
    """

    num_classes: int

    # ------------------------------------------------------------------ noise of one count
    @abc.abstractmethod
    def _noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """Independent noise for every count."""

    @abc.abstractmethod
    def _noise_logpdf(self, x: np.ndarray) -> np.ndarray:
        """Log-density of the noise of one count."""

    @abc.abstractmethod
    def _noise_logcdf(self, x: np.ndarray) -> np.ndarray:
        """Log-cdf of the noise of one count."""

    @abc.abstractmethod
    def _tail_width(self) -> float:
        """Half-width outside of which the noise has mass below ~1e-26."""

    @abc.abstractmethod
    def _default_lead(self) -> int:
        """Default vote lead of the runner-up class in :meth:`neighbours`."""

    # ------------------------------------------------------------------ mechanism contract
    def _check_value(self, value: Any) -> np.ndarray:
        return check_vote_histograms(value, self.num_classes)

    def _values_per_output(self, value: Any) -> int:
        return self.num_classes  # one noise draw per class for every output

    def _noisy_argmax(self, votes: np.ndarray, rows: int, rng: np.random.Generator,
                      ) -> np.ndarray:
        """Argmax of ``votes + noise`` for ``rows`` rows (``votes`` is (k,) or (rows, k))."""
        k = self.num_classes
        out = np.empty(rows, dtype=np.int64)
        block = max(1, _BLOCK_ENTRIES // k)
        for start in range(0, rows, block):  # a few large blocks, never one row at a time
            stop = min(rows, start + block)
            base = votes if votes.ndim == 1 else votes[start:stop]
            noisy = base + self._noise((stop - start, k), rng)
            out[start:stop] = np.argmax(noisy, axis=1)
        return out

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return self._noisy_argmax(value, n, rng)

    def aggregate(self, vote_matrix: Any, *, rng: np.random.Generator) -> np.ndarray:
        """Noisy-argmax labels for many queries at once, one independent query per row.

        Not charged to any ledger: the caller charges ``m`` copies of :attr:`event` (or of
        :meth:`event_with_votes` per row) before using the labels of private data.

        Args:
            vote_matrix: Vote histograms, shape ``(m, num_classes)``.
            rng: Source of randomness.

        Returns:
            ``(m,)`` int64 labels.
        """
        rng = _validate.check_generator(rng)
        shape = getattr(vote_matrix, "shape", None)
        if isinstance(shape, tuple) and len(shape) == 2:
            # An array: refuse an oversized request before converting it (no int64 copy).
            _validate.check_output_size(shape[0], self.num_classes, name="vote_matrix rows",
                                        what="noise draws per row")
        matrix = check_vote_histograms(vote_matrix, self.num_classes, name="vote_matrix",
                                       ndim=2)
        _validate.check_output_size(matrix.shape[0], self.num_classes, name="vote_matrix rows",
                                    what="noise draws per row")
        return self._noisy_argmax(matrix, matrix.shape[0], rng)

    def output_pmf(self, votes: Any) -> np.ndarray:
        """Exact probability of every released label on ``votes`` (numerical integration).

        P[argmax = j] = integral of f(x - v_j) * prod_{i != j} F(x - v_i) dx, where f and F are
        the density and cdf of the noise of one count (the noisy count of class j is the largest
        and equals x). Integrated by ``scipy.integrate.quad`` piecewise between the vote counts
        (the kinks of the Laplace integrand), relative tolerance 1e-10.

        Args:
            votes: One vote histogram of length ``num_classes``.

        Returns:
            A float array of length ``num_classes`` (sums to 1 up to the quadrature error).
        """
        v = check_vote_histograms(votes, self.num_classes).astype(np.float64)
        width = self._tail_width()
        knots = np.unique(v)
        edges = np.concatenate([[knots[0] - width], knots, [knots[-1] + width]])
        pmf = np.empty(self.num_classes)
        for j in range(self.num_classes):
            others = np.delete(v, j)

            def integrand(x: float, j: int = j, others: np.ndarray = others) -> float:
                log_value = (self._noise_logpdf(np.asarray(x - v[j]))
                             + np.sum(self._noise_logcdf(x - others)))
                return float(np.exp(log_value))

            pieces = [integrate.quad(integrand, lo, hi, epsabs=1e-300, epsrel=1e-10,
                                     limit=200)[0]
                      for lo, hi in itertools.pairwise(edges)]
            pmf[j] = math.fsum(pieces)
        return pmf

    def neighbours(self, *, lead: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """A worst-case pair of vote histograms: one vote moves from class 1 to class 0.

        ``h = (0, lead, 0, ..., 0)`` and ``h' = (1, lead - 1, 0, ..., 0)`` (both have ``lead``
        teachers). The informative output is label 0: it needs the noise of class 0 to beat the
        lead of class 1 by a margin that shrinks by 2 votes from ``h`` to ``h'``, while the other
        classes (0 votes) hardly matter. Both changed counts act in the direction of the event,
        which is what makes the privacy loss of report-noisy-max largest (Dwork-Roth 2014,
        proof of Claim 3.9, where the two effects are bounded separately). Use
        :meth:`output_pmf` on both histograms for the exact loss of the pair.

        Args:
            lead: Votes of class 1 in ``h`` (an integer in [2, 2^53]); default per subclass
                (see its docstring), capped at 2^53.

        Returns:
            The two ``int64`` histograms.
        """
        lead = (min(self._default_lead(), MAX_VOTES) if lead is None
                else _validate.check_int("lead", lead, minimum=2, maximum=MAX_VOTES))
        h = np.zeros(self.num_classes, dtype=np.int64)
        h_prime = np.zeros(self.num_classes, dtype=np.int64)
        h[1] = lead
        h_prime[0], h_prime[1] = 1, lead - 1
        return h, h_prime


@dataclasses.dataclass(frozen=True, kw_only=True)
class LaplaceNoisyMax(_NoisyMax):
    """PATE LNMax: argmax of the vote histogram plus Laplace(2/epsilon) noise on every count.

    Papernot, Abadi, Erlingsson, Goodfellow, Talwar, "Semi-supervised knowledge transfer for deep
    learning from private training data", ICLR 2017, Eq. (1) / Section 3: Laplace noise of scale
    1/gamma on every count is (2 gamma)-DP per query. Equivalently (used here), scale
    b = 2/epsilon gives epsilon-DP: the histogram has L1 sensitivity 2 under replace-one
    neighbours (one vote moves), so the noisy histogram is epsilon-DP by the Laplace mechanism
    (Dwork-Roth 2014, Theorem 3.6) and its argmax by post-processing (Proposition 2.1); see also
    Dwork-Roth Claim 3.9 (report noisy max). DGD (Eq. 3) uses the same aggregation with
    Lap(2/eps0), scale 40 <-> eps0 = 0.05.

    ``neighbours()`` defaults to ``lead = max(2, ceil(4 b))``. For two classes the exact
    privacy loss of label 0 on that pair is ``epsilon + ln((2b + lead - 2) / (2b + lead))``
    (the difference of two Laplace(b) variables has tail ``(1 + x/(2b)) e^{-x/b} / 2``): about
    ``5 epsilon / 6`` for epsilon <= 1 (never below 0.72 epsilon, the worst being epsilon = 4
    where the lead rounds to 2), with probability of label 0 under ``h`` about 2.7% for
    epsilon <= 2 (1.2% at epsilon = 5, tiny beyond). The loss tends to
    ``epsilon`` only as the lead grows and the event becomes rare; pass a larger ``lead`` to
    trade probability for loss.

    Attributes:
        epsilon: Claimed epsilon of one query (a normal double with the scale 2/epsilon in
            [1e-300, 1e300]).
        num_classes: Number of classes k (2 <= k <= 10^8).
    """

    reference: ClassVar[str] = "Papernot et al. ICLR 2017 (PATE), Eq. 1; Dwork-Roth 2014 Claim 3.9"

    epsilon: float
    num_classes: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon_range(self.epsilon))
        object.__setattr__(self, "num_classes",
                           _validate.check_size("num_classes", self.num_classes, minimum=2))
        _ = self.scale  # refuse an unusable scale now

    @classmethod
    def from_noise_scale(cls, noise_scale: float, num_classes: int) -> Self:
        """The LNMax with Laplace scale ``noise_scale`` per count: epsilon = 2 / noise_scale.

        PATE 2017 Section 3 (scale 1/gamma <-> 2 gamma-DP); e.g. DGD's scale 40 gives 0.05.
        """
        noise_scale = _validate.check_positive("noise_scale", noise_scale)
        _validate.check_noise_scale(noise_scale, parameters=f"noise_scale={noise_scale!r}",
                                    what="Laplace scale")
        epsilon = _L1_SENSITIVITY / noise_scale
        if not epsilon >= _validate.SMALLEST_NORMAL:
            raise ValueError(f"noise_scale must be a real number in [{_validate.MIN_NOISE_SCALE:g}"
                             f", {_validate.MAX_NOISE_SCALE:g}]; got {noise_scale!r}")
        return cls(epsilon=epsilon, num_classes=num_classes)

    @property
    def sensitivity(self) -> Sensitivity:
        return Sensitivity(value=_L1_SENSITIVITY, norm=Norm.L1)

    @functools.cached_property
    def scale(self) -> float:
        """The Laplace scale b >= 2 / epsilon of the noise on each count (rounded up)."""
        return laplace_scale(float(_L1_SENSITIVITY), self.epsilon,
                             parameters=f"epsilon={self.epsilon!r} (sensitivity 2 votes)")

    @property
    def event(self) -> _dp.DpEvent:
        return LaplaceNoisyMaxDpEvent(noise_scale=self.scale, num_classes=self.num_classes)

    def event_with_votes(self, votes: Any) -> LaplaceNoisyMaxDpEvent:
        """The event of one query on ``votes``, with the histogram attached.

        For the data-dependent analysis (PATE 2017, Section 3.3: moments accountant using the
        vote gap).
        """
        hist = check_vote_histograms(votes, self.num_classes)
        return LaplaceNoisyMaxDpEvent(noise_scale=self.scale, num_classes=self.num_classes,
                                      votes=tuple(int(x) for x in hist))

    def _noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return rng.laplace(0.0, self.scale, size=shape)

    def _noise_logpdf(self, x: np.ndarray) -> np.ndarray:
        # Laplace(b): f(x) = exp(-|x|/b) / (2b).
        return -np.abs(x) / self.scale - math.log(2.0 * self.scale)

    def _noise_logcdf(self, x: np.ndarray) -> np.ndarray:
        # Laplace(b): F(x) = e^{x/b}/2 for x < 0, 1 - e^{-x/b}/2 for x >= 0.
        z = np.asarray(x, dtype=np.float64) / self.scale
        neg = np.minimum(z, 0.0)
        pos = np.maximum(z, 0.0)
        return np.where(z < 0, neg - math.log(2.0), np.log1p(-0.5 * np.exp(-pos)))

    def _tail_width(self) -> float:
        return 60.0 * self.scale  # P[|Lap(b)| > 60 b] = e^{-60} ~ 1e-26

    def _default_lead(self) -> int:
        return max(2, math.ceil(min(4.0 * self.scale, float(MAX_VOTES))))


@dataclasses.dataclass(frozen=True, kw_only=True)
class GaussianNoisyMax(_NoisyMax):
    """PATE GNMax: argmax of the vote histogram plus N(0, sigma^2) noise on every count.

    Papernot, Song, Mironov, Raghunathan, Talwar, Erlingsson, "Scalable private learning with
    PATE", ICLR 2018, Section 4.1. The histogram has L2 sensitivity sqrt(2) under replace-one
    neighbours (one vote moves), so sigma is the smallest value for which the Gaussian mechanism
    with that sensitivity is (epsilon, delta)-DP (Balle-Wang ICML 2018, Theorem 8); the argmax
    is a post-processing. This is the data-independent guarantee; the data-dependent RDP
    analysis of PATE 2018 (Section 4.2) uses :meth:`event_with_votes`.

    ``neighbours()`` defaults to ``lead = max(2, round(epsilon sigma^2 + 1))``. For two classes,
    label 0 is released iff ``X > lead`` under ``h`` and ``X + 2 > lead`` under ``h'`` with
    X = Z_0 - Z_1 ~ N(0, 2 sigma^2): a Gaussian mechanism of sensitivity 2 and standard
    deviation sqrt(2) sigma (the same curve as sensitivity sqrt(2) and sigma), observed through
    the threshold ``lead``. The Neyman-Pearson set at ``epsilon`` is the half-line above
    ``epsilon sigma^2 + 1``, so at that lead the pair attains the claimed delta up to the
    rounding of the lead to an integer: the guarantee is tight for k = 2.

    The sensitivity used is the double nearest sqrt(2), which is *above* sqrt(2), so the
    calibration is conservative; sigma is re-verified on the exact curve in arbitrary precision.

    Attributes:
        epsilon: Claimed epsilon of one query, a normal double <= 1e12.
        delta: Claimed delta of one query, in [1e-300, 1).
        num_classes: Number of classes k (2 <= k <= 10^8).
    """

    reference: ClassVar[str] = ("Papernot et al. ICLR 2018 (PATE GNMax), Sec. 4.1; "
                                "Balle-Wang ICML 2018 Thm 8")

    epsilon: float
    delta: float
    num_classes: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon_range(
            self.epsilon, maximum=MAX_GAUSSIAN_EPSILON))
        object.__setattr__(self, "delta", _validate.check_mechanism_delta(self.delta))
        object.__setattr__(self, "num_classes",
                           _validate.check_size("num_classes", self.num_classes, minimum=2))
        _ = self.sigma  # calibrate (and verify) now: refuse before any release

    @classmethod
    def from_sigma(cls, sigma: float, num_classes: int, delta: float) -> Self:
        """The GNMax with noise ``sigma`` per count, claiming the smallest epsilon at ``delta``.

        The epsilon is the smallest one (to 1e-12 relative, rounded up) at which
        N(0, sigma^2) with L2 sensitivity sqrt(2) is (epsilon, delta)-DP (Balle-Wang 2018,
        Theorem 8). The resulting mechanism recalibrates sigma from (epsilon, delta), which
        gives back ``sigma`` to about 1e-9 relative.

        Raises:
            ValueError: If sigma is not > 0, delta not in (0, 1), or the noise is so large that
                no epsilon >= 1e-12 is needed (pass a smaller sigma or delta).
        """
        sigma = _validate.check_positive("sigma", sigma)
        delta = _validate.check_delta(delta, allow_zero=False)

        def curve(eps: float) -> float:
            return analytic_gaussian_delta(eps, sigma, _L2_SENSITIVITY)

        lo = 1e-12
        if curve(lo) <= delta:
            raise ValueError(f"sigma={sigma} gives ({lo}, {delta})-DP already; the epsilon "
                             "of this GNMax is below the resolution of from_sigma")
        hi = 1.0
        while curve(hi) > delta:
            hi *= 2.0
        epsilon = smallest_satisfying(curve, delta, lo, hi, rel_tol=1e-12)
        return cls(epsilon=epsilon, delta=delta, num_classes=num_classes)

    @property
    def sensitivity(self) -> Sensitivity:
        return Sensitivity(value=_L2_SENSITIVITY, norm=Norm.L2)

    @functools.cached_property
    def sigma(self) -> float:
        """Standard deviation of the noise on each count (Balle-Wang 2018, Algorithm 1)."""
        return calibrated_gaussian_sigma(self.epsilon, self.delta, _L2_SENSITIVITY)

    @property
    def event(self) -> _dp.DpEvent:
        return GaussianNoisyMaxDpEvent(sigma=self.sigma, num_classes=self.num_classes,
                                       epsilon=self.epsilon, delta=self.delta)

    def event_with_votes(self, votes: Any) -> GaussianNoisyMaxDpEvent:
        """The event of one query on ``votes``, with the histogram attached.

        For the data-dependent RDP analysis of PATE 2018 (Section 4.2, Theorem 6).
        """
        hist = check_vote_histograms(votes, self.num_classes)
        return GaussianNoisyMaxDpEvent(sigma=self.sigma, num_classes=self.num_classes,
                                       epsilon=self.epsilon, delta=self.delta,
                                       votes=tuple(int(x) for x in hist))

    def _noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        return rng.normal(0.0, self.sigma, size=shape)

    def _noise_logpdf(self, x: np.ndarray) -> np.ndarray:
        return -0.5 * (np.asarray(x) / self.sigma) ** 2 - math.log(self.sigma
                                                                  * math.sqrt(2 * math.pi))

    def _noise_logcdf(self, x: np.ndarray) -> np.ndarray:
        return special.log_ndtr(np.asarray(x, dtype=np.float64) / self.sigma)

    def _tail_width(self) -> float:
        return 12.0 * self.sigma  # P[|N(0, sigma^2)| > 12 sigma] ~ 3.6e-33

    def _default_lead(self) -> int:
        lead = self.epsilon * (self.sigma * self.sigma) + 1.0  # may be inf: capped below
        return max(2, round(min(lead, float(MAX_VOTES))))
