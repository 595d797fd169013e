"""The sparse vector technique.

The correct one (a negative control) and the broken variants of Lyu, Su, Li (VLDB 2017).
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
import math
from typing import Any, ClassVar

import numpy as np
from scipy import integrate

from dpkd_audit import _validate
from dpkd_audit.audit.controls.base import (
    Control,
    _check_finite,
    _laplace_cdf,
    _laplace_sf,
    _real_vector,
)
from dpkd_audit.mechanisms.base import Norm, Sensitivity, coerce_sensitivity

#: Sparse-vector output code of a query answered "below the threshold" (bottom).
SVT_BOTTOM = 0
#: Sparse-vector output code of a query answered "above the threshold" (top).
SVT_TOP = 1
#: Sparse-vector output code of a query not answered because the cut-off c was reached.
SVT_ABORTED = -1


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
