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

import abc
import dataclasses
import functools
import itertools
import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from dp_accounting import dp_event as _dp
from scipy import integrate, special

from dpkd_audit import _validate
from dpkd_audit._privacy_math import (
    analytic_gaussian_delta,
    calibrate_analytic_gaussian,
    smallest_satisfying,
)
from dpkd_audit.events import ApproxDpEvent, PureDpEvent
from dpkd_audit.mechanisms.base import Mechanism, Norm, Sensitivity, coerce_sensitivity
from dpkd_audit.mechanisms.continuous import as_real_array

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

#: Sparse-vector output code of a query answered "below the threshold" (bottom).
SVT_BOTTOM = 0
#: Sparse-vector output code of a query answered "above the threshold" (top).
SVT_TOP = 1
#: Sparse-vector output code of a query not answered because the cut-off c was reached.
SVT_ABORTED = -1

#: Largest epsilon accepted by the randomized-response control (as for RandomizedResponse).
_MAX_RR_EPSILON = 700.0
#: 2^53: numpy's ``Generator.random()`` returns k / 2^53 for a uniform integer k in [0, 2^53).
_TWO_53 = float(1 << 53)


def _check_finite(name: str, value: Any) -> float:
    """A finite real number (any sign), as float; ValueError naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a finite real number; got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite real number; got {value!r}")
    return value


def _real_vector(value: Any, length: int, name: str = "value") -> np.ndarray:
    """A finite float64 vector of shape ``(length,)``; ValueError otherwise."""
    arr = as_real_array(value, name)
    if arr.shape != (length,):
        raise ValueError(f"{name} must be a vector of shape ({length},); got shape {arr.shape}")
    return arr


def _laplace_cdf(x: float, scale: float) -> float:
    """CDF of Lap(0, scale) at x, accurate in both tails."""
    if x < 0:
        return 0.5 * math.exp(x / scale)
    return 1.0 - 0.5 * math.exp(-x / scale)


def _laplace_sf(x: float, scale: float) -> float:
    """Survival function P(Lap(0, scale) >= x), accurate in both tails."""
    return _laplace_cdf(-x, scale)


# =============================================================================== base class


class Control(Mechanism):
    """A mechanism whose claimed guarantee (``epsilon``/``delta``) is known to be right or wrong.

    Concrete controls are frozen keyword-only dataclasses. ``epsilon`` and ``delta`` are the
    *claimed* guarantee (what the buggy code promises and what ``event`` charges);
    ``true_epsilon`` is the real one (at the claimed ``delta``), ``math.inf`` when unbounded.
    """

    #: One-line description of the bug.
    flaw: ClassVar[str] = ""

    @property
    @abc.abstractmethod
    def true_epsilon(self) -> float:
        """The smallest epsilon for which the mechanism is (epsilon, delta)-DP (inf: none)."""

    @property
    def is_private_as_claimed(self) -> bool:
        """Whether the claim holds (``true_epsilon <= epsilon``): True for negative controls."""
        return self.true_epsilon <= self.epsilon * (1.0 + 1e-12)

    @property
    def event(self) -> _dp.DpEvent:
        """The claimed guarantee, as the buggy code would charge it."""
        if self.delta == 0.0:
            return PureDpEvent(self.epsilon)
        return ApproxDpEvent(self.epsilon, self.delta)


# ====================================================================== Laplace, too little noise


@dataclasses.dataclass(frozen=True, kw_only=True)
class HalfNoiseLaplace(Control):
    """Laplace mechanism with half the noise it needs: value + Lap(Delta_1 / (2 epsilon)).

    The correct mechanism adds Lap(Delta_1/epsilon) (Dwork-McSherry-Nissim-Smith 2006;
    Dwork-Roth 2014, Thm 3.6); this one divides the scale by two (e.g. a factor-2 slip in the
    sensitivity, as when add/remove and replace-one neighbours are confused).

    True epsilon: with scale b the density ratio on inputs at L1 distance Delta_1 is
    exp((|y - x'|_1 - |y - x|_1)/b) <= exp(Delta_1/b), with equality for every y beyond both
    inputs (e.g. y <= min(x, x') in one dimension). So the true epsilon is
    Delta_1 / b = 2 epsilon, attained on ``neighbours() = (0, Delta_1)`` by the event {y <= 0}.

    Attributes:
        epsilon: Claimed epsilon (> 0).
        sensitivity: L1 sensitivity Delta_1 (a number or a ``Sensitivity`` in L1), default 1.
    """

    #: audited as a real-valued design: its flaw is not the floating-point one
    floating_point_output = True

    reference: ClassVar[str] = "Dwork-Roth 2014 Thm 3.6 (correct scale Delta/eps); noise halved"
    flaw: ClassVar[str] = "Laplace scale Delta/(2 eps) instead of Delta/eps: true epsilon 2 eps"

    epsilon: float
    sensitivity: Sensitivity | float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L1))

    @property
    def scale(self) -> float:
        """The (wrong) Laplace scale Delta_1 / (2 epsilon)."""
        return self.sensitivity.value / (2.0 * self.epsilon)

    @property
    def true_epsilon(self) -> float:
        """Delta_1 / scale = 2 epsilon (the Laplace density ratio bound is attained)."""
        return self.sensitivity.value / self.scale

    def _check_value(self, value: Any) -> np.ndarray:
        return as_real_array(value)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return value + rng.laplace(0.0, self.scale, size=(n, *value.shape))

    def neighbours(self) -> tuple[float, float]:
        """(0, Delta_1): every output below 0 has likelihood ratio exactly e^(2 eps)."""
        return (0.0, float(self.sensitivity.value))


# ====================================================================== histogram, wrong scale


@dataclasses.dataclass(frozen=True, kw_only=True)
class HistogramWrongScale(Control):
    """Noisy histogram with Laplace scale epsilon instead of 1/epsilon.

    StatDP's "incorrect histogram" benchmark (Ding et al., CCS 2018, Sec. 6): the correct
    histogram release adds Lap(1/epsilon) to every count (a histogram has L1 sensitivity 1 under
    add/remove-one neighbours, Dwork-Roth 2014, Sec. 3.3), this one adds Lap(epsilon). Output: the
    noisy count vector, shape ``(num_bins,)`` per sample.

    Neighbouring relation: **add/remove one record** (L1 sensitivity 1; under replace-one it would
    be 2 and every epsilon below doubles). Only epsilon in (0, 1) is accepted: for epsilon >= 1
    the wrong scale is at least the right one and the release is private.

    True epsilon: one record changes one count by 1, and the density ratio of Lap(b) noise on a
    shift of 1 is at most e^(1/b), attained for every output of that bin outside the segment
    between the two counts. With b = epsilon: true epsilon = 1/epsilon (> epsilon).

    Attributes:
        epsilon: Claimed epsilon, in (0, 1).
        num_bins: Number of histogram bins (an integer >= 1).
    """

    #: audited as a real-valued design: its flaw is not the floating-point one
    floating_point_output = True

    reference: ClassVar[str] = "Ding et al. CCS 2018 (StatDP), incorrect histogram; Dwork-Roth 3.3"
    flaw: ClassVar[str] = "Laplace scale eps instead of 1/eps on each count: true epsilon 1/eps"

    epsilon: float
    num_bins: int = 5

    def __post_init__(self) -> None:
        eps = _validate.check_epsilon(self.epsilon)
        if eps >= 1.0:
            raise ValueError("epsilon must be a real number in (0, 1) for HistogramWrongScale "
                             f"(for epsilon >= 1 the wrong scale is not a violation); got {eps!r}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "num_bins",
                           _validate.check_int("num_bins", self.num_bins, minimum=1))

    @property
    def sensitivity(self) -> Sensitivity:
        """L1 sensitivity 1 of a histogram under add/remove-one neighbours."""
        return Sensitivity(value=1.0, norm=Norm.L1)

    @property
    def scale(self) -> float:
        """The (wrong) Laplace scale: epsilon."""
        return self.epsilon

    @property
    def true_epsilon(self) -> float:
        """1 / scale = 1/epsilon (Laplace with sensitivity 1 and scale epsilon)."""
        return 1.0 / self.scale

    def _check_value(self, value: Any) -> np.ndarray:
        counts = _real_vector(value, self.num_bins)
        if np.any(counts < 0):
            raise ValueError(f"value must be a histogram of non-negative counts; got minimum "
                             f"{counts.min()!r}")
        return counts

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return value + rng.laplace(0.0, self.scale, size=(n, self.num_bins))

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """The empty histogram and the histogram of one record in bin 0."""
        first = np.zeros(self.num_bins)
        second = first.copy()
        second[0] = 1.0
        return first, second


# ====================================================================== noisy max with its value


@dataclasses.dataclass(frozen=True, kw_only=True)
class NoisyMaxReturningValue(Control):
    """Report-noisy-max that releases the noisy maximum *value* (optionally with its index).

    Report noisy max releases only argmax_j (q_j + Lap(2 Delta/epsilon)), which is epsilon-DP for
    any queries of sensitivity Delta (Dwork-Roth 2014, Sec. 3.3, Claim 3.9 and the remark on
    non-monotone queries; StatDP's ``noisy_max_v1a``). Returning the maximum value instead is
    StatDP's "incorrect noisy max" (``noisy_max_v1b``, Ding et al. CCS 2018, Sec. 6); the value
    is not covered by the argmax analysis.

    True epsilon (queries q in R^k, all k answers may move by up to Delta): the density of
    (I, V) at (i, v) is f(v - q_i) prod_{j != i} F(v - q_j), with f, F the pdf and cdf of
    Lap(b), b = 2 Delta/epsilon. Both f and F are e^(1/b)-log-Lipschitz, so each of the k factors
    changes by at most e^(Delta/b): the ratio is <= e^(k Delta / b). For v below every q_j and
    q'_j all factors are in the left tail, f(v - q) = e^((v - q)/b)/(2b) and F(v - q) =
    e^((v - q)/b)/2, and with q' = q + Delta (1, ..., 1) the ratio is exactly e^(k Delta/b); the
    density of V alone, d/dv prod_j F(v - q_j), has the same ratio there. Hence
    true epsilon = k Delta / b = k epsilon / 2, with or without the index; it exceeds the claim
    only for k >= 3, so ``num_classes >= 3`` is required.

    Attributes:
        epsilon: Claimed epsilon (> 0).
        num_classes: Number of queries k (an integer >= 3).
        sensitivity: Per-query sensitivity Delta, default 1.
        with_index: Release (index, value) as a float row of length 2 instead of the value alone.
    """

    #: audited as a real-valued design: its flaw is not the floating-point one
    floating_point_output = True

    reference: ClassVar[str] = "Ding et al. CCS 2018 (StatDP) noisy_max_v1b; Dwork-Roth 2014 3.3"
    flaw: ClassVar[str] = ("report noisy max releases the noisy maximum value: true epsilon "
                           "k eps / 2 instead of eps")

    epsilon: float
    num_classes: int = 5
    sensitivity: Sensitivity | float = 1.0
    with_index: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        object.__setattr__(self, "num_classes",
                           _validate.check_int("num_classes", self.num_classes, minimum=3))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L1))
        if not isinstance(self.with_index, bool):
            raise ValueError(f"with_index must be a bool; got {self.with_index!r}")

    @property
    def scale(self) -> float:
        """Laplace scale b = 2 Delta / epsilon of the (correct) index-only mechanism."""
        return 2.0 * self.sensitivity.value / self.epsilon

    @property
    def true_epsilon(self) -> float:
        """The true epsilon k Delta / b = k epsilon / 2 (see the class docstring)."""
        return self.num_classes * self.sensitivity.value / self.scale

    def _check_value(self, value: Any) -> np.ndarray:
        return _real_vector(value, self.num_classes)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        noisy = value + rng.laplace(0.0, self.scale, size=(n, self.num_classes))
        index = np.argmax(noisy, axis=1)
        top = noisy[np.arange(n), index]
        if self.with_index:
            return np.column_stack([index.astype(np.float64), top])
        return top

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """All-zero answers and all-Delta answers.

        q = (0, ..., 0) and q' = (Delta, ..., Delta): every output value below 0 has likelihood
        ratio exactly e^(k eps / 2).
        """
        zeros = np.zeros(self.num_classes)
        return zeros, zeros + self.sensitivity.value


# ====================================================================== sparse vector technique


@dataclasses.dataclass(frozen=True, kw_only=True)
class _SparseVectorBase(Control):
    """Common machinery of the sparse-vector variants of Lyu, Su, Li (VLDB 2017).

    Notation of Lyu, Su, Li, "Understanding the Sparse Vector Technique for Differential
    Privacy", PVLDB 10(6), 2017: queries q_1..q_m with sensitivity Delta each, public threshold T,
    threshold noise rho ~ Lap(b_rho) drawn once, query noise nu_i ~ Lap(b_nu) drawn per query;
    query i is answered "top" when q_i + nu_i >= T + rho, else "bottom"; variants with a cut-off
    c stop after the c-th top (the remaining queries are "aborted").

    Output (binary variants): an ``int8`` array of shape ``(n, num_queries)`` with codes
    :data:`SVT_TOP` (1), :data:`SVT_BOTTOM` (0) and :data:`SVT_ABORTED` (-1).
    """

    #: Whether the variant stops after ``cutoff`` tops.
    _has_cutoff: ClassVar[bool] = True

    epsilon: float
    num_queries: int = 10
    threshold: float = 0.0
    sensitivity: Sensitivity | float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        object.__setattr__(self, "num_queries",
                           _validate.check_int("num_queries", self.num_queries, minimum=2))
        object.__setattr__(self, "threshold", _check_finite("threshold", self.threshold))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L1))

    # ---------------------------------------------------------------- scales (per variant)
    @property
    def cutoff_or_none(self) -> int | None:
        """The cut-off c, or None for the variants without one."""
        return getattr(self, "cutoff", None) if self._has_cutoff else None

    @property
    @abc.abstractmethod
    def threshold_scale(self) -> float:
        """Scale b_rho of the threshold noise rho."""

    @property
    @abc.abstractmethod
    def query_scale(self) -> float:
        """Scale b_nu of the query noise nu_i (0 for no query noise)."""

    # ---------------------------------------------------------------- sampling
    def _check_value(self, value: Any) -> np.ndarray:
        return _real_vector(value, self.num_queries)

    def _noisy(self, value: np.ndarray, n: int,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(noisy query answers (n, m), top indicator (n, m)) before the cut-off."""
        rho = rng.laplace(0.0, self.threshold_scale, size=(n, 1))
        if self.query_scale > 0:
            noisy = value + rng.laplace(0.0, self.query_scale, size=(n, self.num_queries))
        else:
            noisy = np.broadcast_to(value, (n, self.num_queries))
        return noisy, noisy >= self.threshold + rho

    def _codes(self, top: np.ndarray) -> np.ndarray:
        codes = top.astype(np.int8)
        c = self.cutoff_or_none
        if c is not None:
            # number of tops strictly before each query; >= c means the mechanism has stopped
            before = np.cumsum(top, axis=1, dtype=np.int32) - top
            codes[before >= c] = SVT_ABORTED
        return codes

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return self._codes(self._noisy(value, n, rng)[1])

    # ---------------------------------------------------------------- neighbours
    def _pattern_size(self) -> int:
        c = self.cutoff_or_none
        return c if c is not None else self.num_queries // 2

    def neighbours(self) -> tuple[np.ndarray, np.ndarray]:
        """Two blocks of answers on either side of the threshold, swapped in the neighbour.

        q = (T, ..., T, T+Delta, ..., T+Delta) and q' has the two blocks swapped. The last h
        queries form the "above" block, h = c for variants with a cut-off and h = floor(m/2)
        otherwise. This is StatDP's "one below, rest above" / "x-shape" family (Ding et al.
        2018, ``statdp.generators``): every query moves by Delta, the first m - h up and the last
        h down, which makes the outcome (bottom^(m-h), top^h) as much likelier under q than
        under q' as the variant allows (for variants with a cut-off its privacy loss tends to
        the Lyu-Su-Li bound Delta/b_rho + 2 c Delta/b_nu as m grows).
        """
        m, h, t, d = self.num_queries, self._pattern_size(), self.threshold, self.sensitivity.value
        first = np.full(m, t)
        first[m - h:] = t + d
        second = np.full(m, t + d)
        second[m - h:] = t
        return first, second

    def distinguishing_outcome(self) -> tuple[int, ...]:
        """The code vector (bottom^(m-h), top^h) that is much likelier under ``neighbours()[0]``."""
        m, h = self.num_queries, self._pattern_size()
        return (SVT_BOTTOM,) * (m - h) + (SVT_TOP,) * h

    # ---------------------------------------------------------------- exact probabilities
    def _consistent(self, outcome: np.ndarray) -> bool:
        if not np.all(np.isin(outcome, (SVT_TOP, SVT_BOTTOM, SVT_ABORTED))):
            return False
        return bool(np.array_equal(self._codes(outcome[None, :] == SVT_TOP)[0], outcome))

    def outcome_probability(self, value: Any, outcome: Any) -> float:
        """Exact probability that the code vector equals ``outcome`` on input ``value``.

        Conditionally on rho the queries are independent, so
        P(outcome) = int p_rho(r) prod_{top i} P(nu_i >= T + r - q_i)
        prod_{bottom i} P(nu_i < T + r - q_i) dr (aborted queries contribute 1). Computed by
        adaptive quadrature (breakpoints at the kinks r = 0 and r = q_i - T; the tails beyond
        60 noise scales, below e^-60, are dropped), or in closed form without query noise,
        where the integrand is the Laplace density on an interval. An outcome the cut-off rules
        out has probability 0.

        Args:
            value: The query answers (a vector of length ``num_queries``).
            outcome: A code vector of length ``num_queries`` (entries 1, 0, -1).
        """
        q = self._check_value(value)
        o = np.asarray(outcome)
        if o.shape != (self.num_queries,) or o.dtype.kind not in "iu":
            raise ValueError(f"outcome must be an integer code vector of shape "
                             f"({self.num_queries},); got {o.dtype} array of shape {o.shape}")
        if not self._consistent(o):
            return 0.0
        t, b_rho, b_nu = self.threshold, self.threshold_scale, self.query_scale
        tops = [float(qi) - t for qi, oi in zip(q, o, strict=True) if oi == SVT_TOP]
        bottoms = [float(qi) - t for qi, oi in zip(q, o, strict=True) if oi == SVT_BOTTOM]
        if b_nu == 0.0:
            # top i <=> rho <= q_i - T ; bottom i <=> rho > q_i - T
            hi = min(tops, default=math.inf)
            lo = max(bottoms, default=-math.inf)
            if hi <= lo:
                return 0.0
            upper = 1.0 if hi == math.inf else _laplace_cdf(hi, b_rho)
            lower = 0.0 if lo == -math.inf else _laplace_cdf(lo, b_rho)
            return max(0.0, upper - lower)

        def integrand(r: float) -> float:
            dens = math.exp(-abs(r) / b_rho) / (2.0 * b_rho)
            for s in tops:
                dens *= _laplace_sf(r - s, b_nu)
            for s in bottoms:
                dens *= _laplace_cdf(r - s, b_nu)
            return dens

        kinks = sorted({0.0, *tops, *bottoms})
        span = 60.0 * max(b_rho, b_nu)
        edges = [kinks[0] - span, *kinks, kinks[-1] + span]
        total = 0.0
        for a, b in itertools.pairwise(edges):
            if b > a:
                total += integrate.quad(integrand, a, b, epsabs=1e-15, epsrel=1e-11,
                                        limit=200)[0]
        return total


@dataclasses.dataclass(frozen=True, kw_only=True)
class _SparseVectorWithCutoff(_SparseVectorBase):
    """Sparse vector with a cut-off: stops after ``cutoff`` tops."""

    cutoff: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "cutoff", _validate.check_int("cutoff", self.cutoff, minimum=1))
        if self.num_queries < self.cutoff + 1:
            raise ValueError(f"num_queries must be an integer >= cutoff + 1 = {self.cutoff + 1} "
                             f"(the neighbouring pair needs a query below the threshold); got "
                             f"{self.num_queries!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SparseVector(_SparseVectorWithCutoff):
    """The correct sparse vector technique, Lyu-Su-Li 2017 Alg. 1 (a negative control).

    epsilon_1 = epsilon/2, rho ~ Lap(Delta/epsilon_1); epsilon_2 = epsilon - epsilon_1,
    nu_i ~ Lap(2 c Delta/epsilon_2); tops and bottoms are released, stop after c tops.

    True epsilon = epsilon (Lyu-Su-Li 2017, privacy of Alg. 1): for any output, map rho to
    rho + Delta (density ratio <= e^(Delta/b_rho) = e^(epsilon_1)); then every bottom stays a
    bottom under the neighbour for free (q'_i <= q_i + Delta), and each of the at most c tops
    needs nu_i shifted by at most 2 Delta (ratio <= e^(2 Delta/b_nu) = e^(epsilon_2 / c)). Total
    epsilon_1 + c epsilon_2/c = epsilon; the bound is approached on ``neighbours()`` as m grows.

    Attributes:
        epsilon: Claimed (and true) epsilon (> 0).
        num_queries: Number of queries m (an integer >= cutoff + 1), default 10.
        cutoff: Maximum number of tops c (an integer >= 1), default 1.
        threshold: Public threshold T (finite), default 0.
        sensitivity: Per-query sensitivity Delta, default 1.
    """

    reference: ClassVar[str] = "Lyu-Su-Li PVLDB 2017, Alg. 1 (correct SVT)"
    flaw: ClassVar[str] = "none: correct sparse vector (negative control)"

    @property
    def threshold_scale(self) -> float:
        """b_rho = Delta / epsilon_1 = 2 Delta / epsilon."""
        return 2.0 * self.sensitivity.value / self.epsilon

    @property
    def query_scale(self) -> float:
        """b_nu = 2 c Delta / epsilon_2 = 4 c Delta / epsilon."""
        return 4.0 * self.cutoff * self.sensitivity.value / self.epsilon

    @property
    def true_epsilon(self) -> float:
        """epsilon_1 + 2 c Delta / b_nu = epsilon (the claim holds)."""
        return self.sensitivity.value / self.threshold_scale \
            + 2.0 * self.cutoff * self.sensitivity.value / self.query_scale


@dataclasses.dataclass(frozen=True, kw_only=True)
class SparseVectorNoisyValues(_SparseVectorWithCutoff):
    """Sparse vector that releases the noisy answer of each top: Lyu-Su-Li 2017 Alg. 3.

    Alg. 3 reproduces the variant of Roth's 2011 lecture notes: epsilon_1 = epsilon/2,
    rho ~ Lap(Delta/epsilon_1), nu_i ~ Lap(c Delta/epsilon_2), and for a top the value
    q_i + nu_i is output instead of "top". dp_auditorium's ``SVT3`` and StatDP's ``iSVT4``
    implement it as a benchmark.

    Output: a ``float64`` array of shape ``(n, 2 m)``: columns 0..m-1 hold the codes (1.0 top,
    0.0 bottom, -1.0 aborted) and columns m..2m-1 the released noisy answers (0.0 where
    nothing was released, i.e. for bottoms and aborted queries).

    True epsilon: unbounded (``math.inf``) over query streams (Lyu-Su-Li 2017: Alg. 3 is not
    epsilon'-DP for any finite epsilon'). A released value a = q_j + nu_j >= T + rho caps rho at
    a - T, which breaks the rho-shift argument of Alg. 1: for a -> -inf, rho is pushed into the
    left tail, where every earlier bottom has probability F(T + rho - q_i) ~ e^((T + rho -
    q_i)/b_nu)/2, and moving those m - 1 answers by Delta multiplies the density by
    e^((m - 1) Delta / b_nu), unbounded in m. With a fixed m = ``num_queries`` the loss is
    finite but large: on ``neighbours()`` (c = 1, m = 10, epsilon = 1) the code vector alone
    already has log-ratio about 1.49 (outcome (bottom^9, top), probability about 0.015), and
    events that use the value reach about 2.4.

    Attributes:
        epsilon: Claimed epsilon (> 0).
        num_queries: Number of queries m (an integer >= cutoff + 1), default 10.
        cutoff: Maximum number of tops c (an integer >= 1), default 1.
        threshold: Public threshold T (finite), default 0.
        sensitivity: Per-query sensitivity Delta, default 1.
    """

    #: audited as a real-valued design: its flaw is not the floating-point one
    floating_point_output = True

    reference: ClassVar[str] = "Lyu-Su-Li PVLDB 2017, Alg. 3 (Roth 2011 lecture notes)"
    flaw: ClassVar[str] = "sparse vector releases the noisy query answer of every top: not DP"

    @property
    def threshold_scale(self) -> float:
        """b_rho = Delta / epsilon_1 = 2 Delta / epsilon."""
        return 2.0 * self.sensitivity.value / self.epsilon

    @property
    def query_scale(self) -> float:
        """b_nu = c Delta / epsilon_2 = 2 c Delta / epsilon."""
        return 2.0 * self.cutoff * self.sensitivity.value / self.epsilon

    @property
    def true_epsilon(self) -> float:
        """math.inf (no finite epsilon holds over query streams; see the class docstring)."""
        return math.inf

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        noisy, top = self._noisy(value, n, rng)
        codes = self._codes(top)
        released = np.where(codes == SVT_TOP, noisy, 0.0)
        return np.concatenate([codes.astype(np.float64), released], axis=1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SparseVectorUnscaledQueryNoise(_SparseVectorWithCutoff):
    """Sparse vector whose one noisy threshold serves c tops with unscaled query noise: Alg. 4.

    Lyu-Su-Li 2017 Alg. 4 (from Lee and Clifton 2014): epsilon_1 = epsilon/4,
    rho ~ Lap(Delta/epsilon_1), epsilon_2 = 3 epsilon/4, nu_i ~ Lap(Delta/epsilon_2), stop after
    c tops. The noisy threshold is drawn once and reused for all c tops (it is never refreshed,
    which is fine by itself, see Alg. 1), but the query noise is calibrated as if there were a
    single top: it does not grow with c.

    True epsilon = (1 + 6c) epsilon / 4 (Lyu-Su-Li 2017, the privacy of Alg. 4; also
    dp_auditorium's ``SVT4``): the rho-shift argument of Alg. 1 costs Delta/b_rho = epsilon/4
    plus 2 Delta/b_nu = 3 epsilon/2 per top, i.e. epsilon/4 + 3 c epsilon/2. The bound is the
    supremum over query streams: with m = ``num_queries`` fixed the loss on ``neighbours()`` is
    slightly below it (c = 2, m = 10, epsilon = 1: about 3.19 versus 3.25, on the outcome
    (bottom^8, top, top) of probability about 0.005).

    Attributes:
        epsilon: Claimed epsilon (> 0).
        num_queries: Number of queries m (an integer >= cutoff + 1), default 10.
        cutoff: Maximum number of tops c (an integer >= 1), default 1.
        threshold: Public threshold T (finite), default 0.
        sensitivity: Per-query sensitivity Delta, default 1.
    """

    reference: ClassVar[str] = "Lyu-Su-Li PVLDB 2017, Alg. 4 (Lee-Clifton 2014)"
    flaw: ClassVar[str] = ("sparse vector reuses one noisy threshold for c tops but its query "
                           "noise ignores c: true epsilon (1 + 6c) eps / 4")

    @property
    def threshold_scale(self) -> float:
        """b_rho = Delta / epsilon_1 = 4 Delta / epsilon."""
        return 4.0 * self.sensitivity.value / self.epsilon

    @property
    def query_scale(self) -> float:
        """b_nu = Delta / epsilon_2 = 4 Delta / (3 epsilon)."""
        return 4.0 * self.sensitivity.value / (3.0 * self.epsilon)

    @property
    def true_epsilon(self) -> float:
        """Delta/b_rho + 2 c Delta/b_nu = (1 + 6c) epsilon / 4."""
        return (1.0 + 6.0 * self.cutoff) * self.epsilon / 4.0


@dataclasses.dataclass(frozen=True, kw_only=True)
class SparseVectorNoQueryNoise(_SparseVectorBase):
    """Sparse vector with no query noise and no cut-off: Lyu-Su-Li 2017 Alg. 5.

    Alg. 5 (from Stoddard et al. 2014): epsilon_1 = epsilon/2, rho ~ Lap(Delta/epsilon_1), the
    queries are compared to T + rho without noise, and every query is answered (no cut-off).

    True epsilon: ``math.inf``, already with two queries. Without query noise all answers are
    a deterministic function of rho: query i is a top iff rho <= q_i - T. On
    ``neighbours()`` (q = (T, ..., T, T+Delta, ..., T+Delta), q' the blocks swapped) the outcome
    (bottom^(m-h), top^h) happens under q whenever 0 < rho <= Delta (probability
    (1 - e^(-epsilon/2))/2, about 0.197 for epsilon = 1) and never under q', where a top of the
    last block would need rho <= 0 and a bottom of the first block rho > Delta.

    Attributes:
        epsilon: Claimed epsilon (> 0).
        num_queries: Number of queries m (an integer >= 2), default 10.
        threshold: Public threshold T (finite), default 0.
        sensitivity: Per-query sensitivity Delta, default 1.
    """

    reference: ClassVar[str] = "Lyu-Su-Li PVLDB 2017, Alg. 5 (Stoddard et al. 2014)"
    flaw: ClassVar[str] = "sparse vector adds no noise to the queries (and has no cut-off): not DP"
    _has_cutoff: ClassVar[bool] = False

    @property
    def threshold_scale(self) -> float:
        """b_rho = Delta / epsilon_1 = 2 Delta / epsilon."""
        return 2.0 * self.sensitivity.value / self.epsilon

    @property
    def query_scale(self) -> float:
        """0: no query noise."""
        return 0.0

    @property
    def true_epsilon(self) -> float:
        """math.inf (outcomes possible under one input and impossible under its neighbour)."""
        return math.inf


@dataclasses.dataclass(frozen=True, kw_only=True)
class SparseVectorNoCutoff(_SparseVectorBase):
    """Sparse vector with no cut-off: Lyu-Su-Li 2017 Alg. 6.

    Alg. 6 (from Chen et al. 2015): epsilon_1 = epsilon/2, rho ~ Lap(Delta/epsilon_1),
    epsilon_2 = epsilon/2, nu_i ~ Lap(Delta/epsilon_2), and every query is answered: there is
    no cut-off, so the number of tops, and with it the privacy loss, is unbounded.

    True epsilon: ``math.inf`` over query streams (Lyu-Su-Li 2017). Conditionally on rho each
    answer is a randomized response whose loss is at most Delta/b_nu = epsilon/2, and with the
    two blocks of ``neighbours()`` (h = floor(m/2) queries up, m - h down) the losses add up:
    the outcome (bottom^(m-h), top^h) has log-ratio growing roughly linearly in m (about 2.35
    for m = 6 and 4.03 for m = 10 at epsilon = 1, probabilities 0.021 and 0.0022). For a fixed
    m the loss is at most m epsilon / 2.

    Attributes:
        epsilon: Claimed epsilon (> 0).
        num_queries: Number of queries m (an integer >= 2), default 10.
        threshold: Public threshold T (finite), default 0.
        sensitivity: Per-query sensitivity Delta, default 1.
    """

    reference: ClassVar[str] = "Lyu-Su-Li PVLDB 2017, Alg. 6 (Chen et al. 2015)"
    flaw: ClassVar[str] = "sparse vector without a cut-off answers unboundedly many tops: not DP"
    _has_cutoff: ClassVar[bool] = False

    @property
    def threshold_scale(self) -> float:
        """b_rho = Delta / epsilon_1 = 2 Delta / epsilon."""
        return 2.0 * self.sensitivity.value / self.epsilon

    @property
    def query_scale(self) -> float:
        """b_nu = Delta / epsilon_2 = 2 Delta / epsilon."""
        return 2.0 * self.sensitivity.value / self.epsilon

    @property
    def true_epsilon(self) -> float:
        """math.inf over query streams (the loss grows with the number of queries)."""
        return math.inf


# ====================================================================== randomized response


@dataclasses.dataclass(frozen=True, kw_only=True)
class WrongRandomizedResponse(Control):
    """k-ary randomized response whose keep probability uses the binary formula.

    Correct k-ary RR keeps the label w.p. e^eps/(e^eps + k - 1) and reports each other label
    w.p. 1/(e^eps + k - 1) (Warner 1965; Kairouz-Oh-Viswanath 2016). This one keeps it w.p.
    p = e^eps/(e^eps + 1) (the k = 2 formula) and otherwise reports a uniform *other* label,
    each w.p. (1 - p)/(k - 1) = 1/((e^eps + 1)(k - 1)).

    True epsilon: outputs other than x and x' have the same probability under both inputs; the
    output y = x has probability p under x and (1 - p)/(k - 1) under x', so
    true epsilon = ln(p (k - 1)/(1 - p)) = epsilon + ln(k - 1), larger than epsilon for k >= 3
    (``num_classes >= 3`` is required). Attained on ``neighbours() = (0, 1)`` by the output 0.

    Attributes:
        epsilon: Claimed epsilon (> 0, <= 700).
        num_classes: Number of labels k (an integer >= 3).
    """

    reference: ClassVar[str] = "Kairouz-Oh-Viswanath JMLR 2016 (correct k-ary RR); binary formula"
    flaw: ClassVar[str] = ("k-ary randomized response keeps the label w.p. e^eps/(e^eps+1): true "
                           "epsilon eps + ln(k-1)")

    epsilon: float
    num_classes: int = 10

    def __post_init__(self) -> None:
        eps = _validate.check_epsilon(self.epsilon)
        if eps > _MAX_RR_EPSILON:
            raise ValueError(f"epsilon must be a real number in (0, {_MAX_RR_EPSILON:g}] for "
                             f"randomized response; got {eps!r}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "num_classes",
                           _validate.check_int("num_classes", self.num_classes, minimum=3))

    @property
    def sensitivity(self) -> Sensitivity:
        """One record changes one label (replace-one neighbours)."""
        return Sensitivity(value=1, norm=Norm.RECORDS)

    @property
    def keep_probability(self) -> float:
        """Keep probability p = e^eps / (e^eps + 1) (the binary formula, wrong for k >= 3)."""
        return float(special.expit(self.epsilon))

    @property
    def other_probability(self) -> float:
        """(1 - p) / (k - 1) = 1 / ((e^eps + 1)(k - 1)) for each other label."""
        return float(special.expit(-self.epsilon)) / (self.num_classes - 1)

    @property
    def true_epsilon(self) -> float:
        """ln(p / ((1 - p)/(k - 1))) = epsilon + ln(k - 1)."""
        return self.epsilon + math.log(self.num_classes - 1)

    def _check_value(self, value: Any) -> np.ndarray:
        arr = np.asarray(value)
        if arr.dtype.kind not in "iu":
            raise ValueError(f"value must be integer labels in [0, {self.num_classes}) (integer "
                             f"dtype); got dtype {arr.dtype}")
        if arr.size and (int(arr.min()) < 0 or int(arr.max()) >= self.num_classes):
            raise ValueError(f"value must be integer labels in [0, {self.num_classes}); got "
                             f"entries in [{arr.min()}, {arr.max()}]")
        return arr.astype(np.int64)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        k = self.num_classes
        out = np.broadcast_to(value, (n, *value.shape)).copy()
        flip = rng.random(out.shape) < float(special.expit(-self.epsilon))
        out[flip] = (out[flip] + rng.integers(1, k, size=int(flip.sum()))) % k
        return out

    def neighbours(self) -> tuple[int, int]:
        """Labels 0 and 1; the output 0 has ratio e^eps (k - 1)."""
        return (0, 1)


# ====================================================================== naive floating point


@dataclasses.dataclass(frozen=True, kw_only=True)
class NaiveFloatLaplace(Control):
    """Textbook floating-point Laplace sampler (Mironov, CCS 2012): value + Lap(Delta/epsilon).

    Mironov, "On significance of the least significant bits for differential privacy", CCS 2012
    (the attack on the textbook sampler): the noise is drawn as sign * b * (-ln U) with U a
    uniform double, and added to the input in floating point. Here U = 1 - ``rng.random()``, a
    multiple j/2^53 of 2^-53 (j = 1..2^53, exact), the sign is a fair coin, b = Delta/epsilon,
    and the output is fl(x + s fl(b fl(-ln U))) (numpy's ``Generator.laplace``, and therefore
    the package's continuous :class:`~dpkd_audit.mechanisms.continuous.Laplace`, uses the same
    inverse-CDF construction and shares the artefact). Over the reals the distribution is
    exactly Lap(b).

    True epsilon: ``math.inf``. The noise takes at most 2^54 values, spaced about b 2^-53/U
    apart, while the doubles near z are spaced ulp(z); wherever b 2^-53/U > ulp(z) (near 0,
    where ulp(z) is tiny, and in the tails, e.g. |z| >= 2 for b = 1) only some doubles are
    reachable, and which ones depends on the input through the rounding of x + z. On
    ``neighbours() = (0, Delta)`` many outputs of one input are impossible under the other
    (:meth:`attainable` decides it exactly): about 60% of the outputs of either input
    (measured for epsilon from 0.1 to 2 and Delta from 0.3 to 5), and with Delta = b = 1 most
    outputs of x = 1 in [2, 3). A generic bit-level feature also shows it: on [2, 3), x = 1
    yields fl(1 + z) with z in [1, 2), whose ties round to even, so the lowest mantissa bit is
    0 with probability 3/4 (1/2 under x = 0); the event {y in [2, 3), lowest bit 0} has
    probability ratio about 4.08 (ln 1.41 > epsilon = 1).

    Attributes:
        epsilon: Claimed epsilon (> 0).
        sensitivity: L1 sensitivity Delta (a number or a ``Sensitivity`` in L1), default 1.
    """

    reference: ClassVar[str] = "Mironov CCS 2012 (floating-point Laplace is not DP)"
    flaw: ClassVar[str] = ("textbook floating-point Laplace x + s b (-ln U): output bit patterns "
                           "depend on x, true epsilon infinite")

    epsilon: float
    sensitivity: Sensitivity | float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L1))

    @property
    def scale(self) -> float:
        """The (correct over the reals) Laplace scale b = Delta / epsilon."""
        return self.sensitivity.value / self.epsilon

    @property
    def true_epsilon(self) -> float:
        """math.inf (outputs possible under one input and impossible under the other)."""
        return math.inf

    def _check_value(self, value: Any) -> np.ndarray:
        return as_real_array(value)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        shape = (n, *value.shape)
        uniform = 1.0 - rng.random(shape)              # j / 2^53, j = 1..2^53, exact
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return value + sign * (self.scale * -np.log(uniform))

    def _outputs_for(self, x: float, sign: np.ndarray, j: np.ndarray) -> np.ndarray:
        """The sampler's exact output for uniform j/2^53 and the given signs (same arithmetic)."""
        return np.asarray(x) + sign * (self.scale * -np.log(j / _TWO_53))

    def attainable(self, value: float, outputs: Any) -> np.ndarray:
        """Whether each double in ``outputs`` can be produced by the sampler on input ``value``.

        Exact, deterministic support check (Mironov 2012's observation made executable): an
        output y > x needs sign +1 and y < x sign -1; the map j -> fl(x + s fl(b fl(-ln(j/2^53))))
        is monotone in j, so y is attainable iff one j in a window around
        j* = 2^53 exp(-|y - x|/b) reproduces y exactly; the window is widened until its end
        values bracket y. y == x is attainable (U = 1).

        Args:
            value: The input x (a finite real number).
            outputs: Doubles to check (any shape).

        Returns:
            A boolean array of the shape of ``outputs``.
        """
        x = _check_finite("value", value)
        y = np.asarray(outputs, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise ValueError("outputs must be finite")
        flat = y.ravel()
        result = flat == x
        todo = np.flatnonzero(~result)
        sign = np.where(flat[todo] > x, 1.0, -1.0)
        centre = np.clip(np.floor(_TWO_53 * np.exp(-np.abs(flat[todo] - x) / self.scale)),
                         1.0, _TWO_53)
        half = 8
        pending = np.arange(todo.size)
        while pending.size:
            offsets = np.arange(-half, half + 1, dtype=np.float64)
            j = np.clip(centre[pending, None] + offsets[None, :], 1.0, _TWO_53)
            vals = self._outputs_for(x, sign[pending, None], j)
            target = flat[todo[pending], None]
            hit = np.any(vals == target, axis=1)
            lo = np.min(vals, axis=1)
            hi = np.max(vals, axis=1)
            at_edge = (j[:, 0] == 1.0) | (j[:, -1] == _TWO_53)
            bracketed = (lo <= target[:, 0]) & (target[:, 0] <= hi)
            done = hit | bracketed | at_edge
            result[todo[pending[done]]] = hit[done]
            pending = pending[~done]
            half *= 8
            if half > 1 << 24 and pending.size:  # pragma: no cover - cannot happen for doubles
                raise RuntimeError("attainable: search window did not bracket the output")
        return result.reshape(y.shape)

    def neighbours(self) -> tuple[float, float]:
        """(0, Delta): the pair of Mironov's demonstration."""
        return (0.0, float(self.sensitivity.value))


# ====================================================================== Gaussian, too little noise


@dataclasses.dataclass(frozen=True, kw_only=True)
class GaussianTooLittleNoise(Control):
    """Gaussian mechanism calibrated for half the L2 sensitivity: sigma is half what it must be.

    The correct sigma is the smallest for which N(0, sigma^2) with L2 sensitivity Delta is
    (epsilon, delta)-DP (Balle-Wang ICML 2018, Thm 8 / Alg. 1); this one calibrates to Delta/2
    (e.g. confusing add/remove with replace-one neighbours), so sigma = sigma*(epsilon, delta,
    Delta)/2 (the exact curve depends on Delta/sigma only).

    True epsilon (at the claimed delta): the smallest epsilon' with
    delta(epsilon'; sigma, Delta) <= delta on the exact curve of Balle-Wang Thm 8, found by
    bisection (``_privacy_math.smallest_satisfying``); e.g. epsilon = 1, delta = 1e-5 gives
    about 2.15. :attr:`delta_at_claimed_epsilon` is the real delta at the claimed epsilon.

    Attributes:
        epsilon: Claimed epsilon (> 0).
        delta: Claimed delta, in (0, 1).
        sensitivity: L2 sensitivity Delta (a number or a ``Sensitivity`` in L2), default 1.
    """

    #: audited as a real-valued design: its flaw is not the floating-point one
    floating_point_output = True

    reference: ClassVar[str] = "Balle-Wang ICML 2018, Thm 8 (exact curve); sigma halved"
    flaw: ClassVar[str] = ("Gaussian noise calibrated for half the L2 sensitivity (sigma / 2): "
                           "true epsilon at the claimed delta is larger")

    epsilon: float
    delta: float
    sensitivity: Sensitivity | float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _validate.check_epsilon(self.epsilon))
        object.__setattr__(self, "delta", _validate.check_delta(self.delta, allow_zero=False))
        object.__setattr__(self, "sensitivity", coerce_sensitivity(self.sensitivity, Norm.L2))

    @functools.cached_property
    def sigma(self) -> float:
        """sigma*(epsilon, delta, Delta/2) = sigma*(epsilon, delta, Delta)/2."""
        return calibrate_analytic_gaussian(self.epsilon, self.delta, self.sensitivity.value / 2.0)

    @property
    def delta_at_claimed_epsilon(self) -> float:
        """Real delta at the claimed epsilon (Balle-Wang Thm 8), larger than the claim."""
        return analytic_gaussian_delta(self.epsilon, self.sigma, self.sensitivity.value)

    @functools.cached_property
    def true_epsilon(self) -> float:
        """Smallest epsilon' with delta(epsilon'; sigma, Delta) <= delta (Balle-Wang Thm 8)."""
        d, s = self.sensitivity.value, self.sigma

        def curve(e: float) -> float:
            return analytic_gaussian_delta(e, s, d)

        hi = max(1.0, self.epsilon)
        while curve(hi) > self.delta:
            hi *= 2.0
        return smallest_satisfying(curve, self.delta, 0.0, hi)

    def _check_value(self, value: Any) -> np.ndarray:
        return as_real_array(value)

    def _sample(self, value: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        return value + rng.normal(0.0, self.sigma, size=(n, *value.shape))

    def neighbours(self) -> tuple[float, float]:
        """(0, Delta): the privacy-loss distribution of a Gaussian depends only on |x - x'|."""
        return (0.0, float(self.sensitivity.value))


# ====================================================================== registries

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
