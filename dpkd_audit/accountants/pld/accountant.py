"""Privacy loss distributions (PLD): near-exact composition on dp_accounting's PLD classes.

The privacy loss distribution of a pair of output distributions (P, Q) is the law of
L = ln(P(o)/Q(o)) for o ~ P; composition convolves PLDs, and the hockey-stick divergence
delta(eps) = E[(1 - e^(eps - L))_+] (plus the mass at L = +inf) is the exact (eps, delta)
curve (Meiser-Mohammadi 2018; Sommer-Meiser-Mohammadi 2019; Koskela-Jalko-Honkela 2020). The
backend is ``dp_accounting.pld`` (Google) in its *pessimistic* mode, with four changes that keep
its numerical quirks from reaching users (each measured in tests/test_accountant_pld.py):

1. Finite PLDs (pure and (eps, delta) declarations, randomized response, discrete Laplace) are
   discretised here by pessimistic connect-the-dots (Doroshenko, Ghazi, Kamath, Kumar,
   Manurangsi, PETS 2022, Algorithm 1) on the exact curve. dp_accounting's constructors for them
   (``from_privacy_parameters``, ``from_randomized_response``, ``from_discrete_laplace_...``)
   round every atom *up* to the grid, which drifts by up to one grid step per composition:
   10^4 compositions of a 0.05123-DP event come out 0.51 too large at delta = 1e-5.
2. k-fold compositions of finite PLDs are computed exactly, then discretised once: no FFT.
   Two-atom pairs (every pure or (eps, delta) event) as a binomial (Kairouz-Oh-Viswanath 2015,
   Thm 3.3); PLDs whose losses lie on a lattice L Z (k-ary randomized response: +-L and 0;
   discrete Laplace) as a power of their generating polynomial, by repeated squaring with
   direct convolutions (:mod:`dpkd_audit.accountants.pld.exact`). 1000-fold 10-ary RR takes
   milliseconds instead of ~10 s of FFT squaring over a 5e7-point grid.
3. Every history that needs FFT convolutions (more than one kind of release, or a k-fold
   power that is not an exact lattice or binomial one) is composed under an exponential tilt
   (:mod:`dpkd_audit.accountants.pld.tilted`): the single-release pessimistic PLDs are tilted
   towards the epsilon sought, composed by FFT squaring with the truncated tails *dropped and
   bounded* (not moved to +inf), then untilted. dp_accounting's compositions moved 1e-15 to
   +inf per convolution, which after 10^4 steps answered inf at every delta <= 1e-12 and was
   loose near it; the tilted epsilons are finite and tight down to delta = 1e-15 (checked
   against exact enumeration and prv-accountant's brackets in
   tests/test_accountant_pld_tails.py) and cost less (the tilted pmf is narrow).
   :meth:`PLDAccountant.pld` still composes with dp_accounting's FFT (repeated squaring),
   for inspection.
4. Epsilon and delta are evaluated here, in log space, from the pmf: dp_accounting's evaluation
   drifts along the grid by repeated float addition, underflows e^-L above L ~ 745, and sums the
   FFT's negative round-off, which put epsilon *below* the exact value at small deltas (by 0.1
   at delta = 1e-12 after 3000 compositions). Negative round-off is counted as zero here.

Continuous and infinite-support noise (Laplace, Gaussian, discrete Gaussian, Poisson-subsampled
Laplace/Gaussian, mixtures of Gaussians) uses dp_accounting's pessimistic connect-the-dots
constructors.

Event -> PLD (one occurrence; replace-one neighbours unless stated):

- ``LaplaceDpEvent(b)``: Lap(0, b) vs Lap(1, b) (``from_laplace_mechanism(b, sensitivity=1)``).
- ``GaussianDpEvent(s)`` (and ``CalibratedGaussianDpEvent``): N(0, s^2) vs N(1, s^2). All
  Gaussian releases are merged exactly into one Gaussian with 1/s^2 = sum_i count_i / s_i^2
  (a composition of Gaussian mechanisms is a Gaussian mechanism whose shift is the Euclidean
  norm of the shifts: Dong-Roth-Su 2022, Cor. 3.3), so a million Gaussian queries cost one PLD.
- ``DiscreteLaplaceDpEvent(a, Delta)``: DLap(a) at 0 vs at Delta, whose losses
  a(|x - Delta| - |x|) take the Delta + 1 values a (Delta - 2x), x = 0..Delta (a lattice PLD;
  the PLD of dp_accounting's ``from_discrete_laplace_mechanism(a, Delta)``, which is used for
  Delta > 2048). Lattice powers are used where a rough cost model says they are cheaper than
  FFT squaring (always for randomized response in practice).
- ``DiscreteGaussianDpEvent(sigma, Delta)``: ``from_discrete_gaussian_mechanism(sigma, Delta)``,
  the exact 1-D curve of Canonne-Kamath-Steinke 2020, Thm 7 (the event's own scope).
- ``RandomizedResponseDpEvent(p, k)``: its exact three-atom PLD +-L, 0 (REPLACE_ONE only).
  (dp_accounting 0.6.0's own ``PLDAccountant`` ignores ``count`` and ``SelfComposedDpEvent``
  for this event: it composes one release whatever the count.)
- pure epsilon events of this package (``PureDpEvent``, ``CollisionDpEvent``,
  ``SelectiveRandomizedResponseDpEvent``, ``ShuffledLocalDpEvent`` *without* amplification):
  binary randomized response with that epsilon, which dominates every eps-DP pair
  (Kairouz-Oh-Viswanath 2015, Thm 2.2 / Murtagh-Vadhan 2016).
- ``DiscreteGaussianVectorDpEvent(sigma, Delta)``: the multivariate discrete Gaussian has no
  1-D PLD; it enters through its moment generating function, E[e^(lambda L)] <=
  exp(lambda (lambda + 1) rho) with rho = Delta^2 / (2 sigma^2) (CKS 2020, Thm 14): the rest
  of the history keeps its exact PLD and only this part is converted (CKS 2020, Prop. 12; see
  :mod:`.tilted`). Alone, this is the zCDP conversion itself (the RDP accountant's figure);
  composing its declared (eps, delta) pair instead gave inf for ten releases at their delta.
- ``ApproxDpEvent`` / ``ShuffledHistogramDpEvent`` (declared (eps, delta)): the dominating pair
  of (eps, delta)-DP: +inf w.p. delta, +-eps with (1 - delta) times the binary-RR weights
  (KOV 2015, Thm 2.2; dp_accounting ``from_privacy_parameters``).
- ``BitRandomizedResponseDpEvent``: ``bits_changed``-fold composition of binary RR with
  ``epsilon_per_bit`` (the other bits are identically distributed under both neighbours), which is
  tighter than the declared ``bits_changed * epsilon_per_bit``.
- ``LaplaceNoisyMaxDpEvent(b)``: the noisy vote histogram (of which the argmax is a
  post-processing) changes in two coordinates by 1 each: two Laplace(b) releases. This is the
  exact PLD of the histogram and is dominated by binary RR with the declared 2/b.
  Data-independent: ``votes`` are ignored.
- ``GaussianNoisyMaxDpEvent(sigma)``: the histogram shift (-1, +1) has L2 norm sqrt(2): one
  Gaussian release with noise multiplier sigma / sqrt(2). ``votes`` are ignored.
- ``PoissonSampledDpEvent(q, Laplace | Gaussian)``: subsampled PLDs for ADD_OR_REMOVE_ONE only
  (the add and remove directions, Zhu-Dong-Wang 2022); refused under REPLACE_ONE.
- ``MixtureOfGaussiansDpEvent(s, c_i, p_i)``: N(0, s^2) vs sum_i p_i N(c_i, s^2), for
  ADD_OR_REMOVE_ONE only (the relation of the event, Choquette-Choo, Ganesh, Steinke, Thakurta
  2023, and of dp_accounting's ``from_mixture_gaussian_mechanism``, whose REMOVE and ADD
  directions are both composed; checked against quadrature of the hockey-stick integrals in
  tests/test_accountant_pld_sampling.py). One sensitivity is a Gaussian release; {0, c} is the
  Poisson-subsampled Gaussian.
- ``SampledWithoutReplacementDpEvent``: refused (dp_accounting has no PLD for it).
- any other event declaring an (eps, delta) through :class:`dpkd_audit.events.DeclaredGuarantee`
  goes through the (eps, delta) dominating pair.

Sensitivity convention: a noise multiplier is noise scale / sensitivity, the sensitivity being
measured *under the accountant's neighbouring relation*, so the two neighbouring outputs are
shifted by exactly one noise unit whatever the relation. This is the convention of this package's
mechanisms and of :mod:`dpkd_audit.accountants.pure` (Laplace: eps = 1/b), and of dp_accounting's
``RdpAccountant``. dp_accounting's own ``PLDAccountant`` under REPLACE_ONE instead doubles the
shift of a ``GaussianDpEvent`` (its ``AdjacencyType.REPLACE``) and refuses ``LaplaceDpEvent``.

Accuracy (value_discretization_interval h = 1e-4; tolerances asserted in
tests/test_accountant_pld.py against independent references): never below an exact epsilon by
more than 1e-8 (floating-point rounding); above it by at most 1e-8 for one Laplace or Gaussian
release (one grid step h in the last grid cell below the largest loss) and for k-fold binary RR
(binomial), by at most h for k-fold randomized response and discrete Laplace (exact lattice
powers; checked against exact multinomial enumeration down to delta = 1e-14 in
tests/test_accountant_pld_lattice.py), by at most 2 k h^2 + 1e-6 for other (FFT) k-fold
compositions at delta >= 1e-8 (FFT round-off grows at smaller deltas, always on the
pessimistic side in the tests: ~1e-5 at delta = 1e-10). ``target_delta = 0`` is answered
exactly from the events (:meth:`PLDAccountant.pure_epsilon`). Composing k copies one by one,
as one k-fold ``SelfComposedDpEvent`` or with ``count=k`` gives identical results (the history
is grouped before anything is computed); dp_accounting's sequential and one-shot compositions
agree with them to 1e-8.
"""

from __future__ import annotations

import copy
import math
import numbers
from collections import Counter
from typing import Any

from dp_accounting import dp_event as _dp
from dp_accounting.pld import privacy_loss_distribution as _pld

from dpkd_audit import _validate
from dpkd_audit._math.privacy import analytic_gaussian_delta
from dpkd_audit.accountants.base import Accountant, BoundKind, Epsilon, NeighboringRelation
from dpkd_audit.accountants.binomial import MAX_EXACT_COUNT
from dpkd_audit.accountants.pld import tilted
from dpkd_audit.accountants.pld.evaluation import (
    _gaussian_epsilon,
    _pld_delta,
    _pld_epsilon,
)
from dpkd_audit.accountants.pld.specs import (
    _MAX_GRID_POINTS,
    _MAX_SUBSAMPLED_GAUSSIAN_NOISE,
    _MIN_MIXED_GAUSSIAN_NOISE,
    _MIN_SUBSAMPLED_GAUSSIAN_NOISE,
    _TARGET_BINS,
    _build_spec_pld,
    _grid_points,
    _grid_width,
    _hashable_mixture,
    _is_real,
    _lattice_atoms,
    _lattice_is_cheaper,
    _max_loss,
    _Spec,
    _spec_pld,
    _spec_power,
)
from dpkd_audit.accountants.pld.tilted import (
    Release,
    chernoff_tilt,
    pmf_arrays,
    tilt_for_mean,
    tilted_table,
)
from dpkd_audit.events import (
    ApproxDpEvent,
    BitRandomizedResponseDpEvent,
    CollisionDpEvent,
    DeclaredGuarantee,
    DiscreteGaussianDpEvent,
    DiscreteGaussianVectorDpEvent,
    GaussianNoisyMaxDpEvent,
    LaplaceNoisyMaxDpEvent,
    PureDpEvent,
    SelectiveRandomizedResponseDpEvent,
    ShuffledHistogramDpEvent,
    ShuffledLocalDpEvent,
)

__all__ = [
    "DEFAULT_VALUE_DISCRETIZATION_INTERVAL",
    "PLDAccountant",
    "laplace_delta",
    "laplace_epsilon",
]

#: Default grid step of the privacy-loss values (dp_accounting's default).
DEFAULT_VALUE_DISCRETIZATION_INTERVAL = 1e-4

_NON_PRIVATE: _Spec = ("non-private",)

#: Spec kind of a release known by its zCDP bound only (no 1-D PLD): composed through its
#: moment generating function (:mod:`dpkd_audit.accountants.pld.tilted`).
_ZCDP = "zcdp"

#: Grid points a tilted composition may span before its step is doubled (its FFTs are
#: ~10 ms; the composed tilted pmf is narrower than the whole loss range, see :mod:`.tilted`).
_TILTED_BINS = 2.0 ** 18


# =========================================================================== closed forms


def laplace_delta(epsilon: float, noise_multiplier: float) -> float:
    """Exact delta(epsilon) of one Laplace release: Lap(0, b) vs Lap(1, b), b = noise_multiplier.

    With eps0 = 1/b, the privacy loss at output x is L(x) = (|x - 1| - |x|)/b: +eps0 for x <= 0,
    -eps0 for x >= 1 and (1 - 2x)/b in between. The hockey-stick divergence (Barthe-Olmedo 2013;
    Balle-Barthe-Gaboardi 2018, Def. 2) delta(eps) = P[L > eps] - e^eps Q[L > eps] counts the
    outputs x < x* = (1 - b eps)/2; with P[X < x*] = 1 - e^(-x*/b)/2 and
    Q[X < x*] = e^((x* - 1)/b)/2 both terms are e^((eps - eps0)/2)/2, so

        delta(eps) = 1 - e^((eps - eps0)/2)   for |eps| < eps0,  0 for eps >= eps0,

    and 1 - e^eps for eps <= -eps0. (The same curve is dp_accounting's
    ``LaplacePrivacyLoss.get_delta_for_epsilon``; tests check it against mpmath quadrature.)

    Args:
        epsilon: Real epsilon (negative values are allowed: the curve is defined for all reals).
        noise_multiplier: Laplace scale / sensitivity, finite and > 0.

    Returns:
        The exact delta.
    """
    b = _validate.check_positive("noise_multiplier", noise_multiplier)
    if not (isinstance(epsilon, numbers.Real) and not math.isnan(epsilon)):
        raise ValueError(f"epsilon must be a real number; got {epsilon!r}")
    eps0 = 1.0 / b
    if epsilon >= eps0:
        return 0.0
    if epsilon <= -eps0:
        return float(-math.expm1(epsilon))
    return float(-math.expm1(0.5 * (epsilon - eps0)))


def laplace_epsilon(delta: float, noise_multiplier: float) -> float:
    """Exact smallest epsilon >= 0 of one Laplace release at ``delta`` (inverse of laplace_delta).

    eps(delta) = max(0, 1/b + 2 ln(1 - delta)), from delta = 1 - e^((eps - 1/b)/2).

    Args:
        delta: Target delta in [0, 1].
        noise_multiplier: Laplace scale / sensitivity, finite and > 0.
    """
    delta = _validate.check_probability("delta", delta)
    b = _validate.check_positive("noise_multiplier", noise_multiplier)
    if delta == 1.0:
        return 0.0
    return max(0.0, 1.0 / b + 2.0 * math.log1p(-delta))


# =========================================================================== accountant


class PLDAccountant(Accountant):
    """Privacy-loss-distribution accountant (pessimistic dp_accounting PLDs; see module doc).

    Identical releases are grouped: each distinct PLD is built once (cached) and raised to its
    total count (an exact binomial for pure and (eps, delta) releases, repeated FFT squaring
    otherwise), then the distinct ones are convolved. Gaussian releases are merged exactly into
    one Gaussian; a history of Gaussians only is answered from its exact curve (Balle-Wang
    2018, Thm 8) without discretisation. The composed PLD is kept until the history changes, so
    queries after a compose cost one evaluation.

    Args:
        neighboring_relation: ``REPLACE_ONE`` (default, the package's relation) or
            ``ADD_OR_REMOVE_ONE`` (needed for ``PoissonSampledDpEvent``).
        value_discretization_interval: Grid step of the privacy-loss values (> 0, at most 1).
            Smaller is tighter and slower; the error of a k-fold composition is roughly
            k * interval^2 plus floating-point noise.
    """

    method = "PLD (dp_accounting)"

    def __init__(self, neighboring_relation: NeighboringRelation =
                 NeighboringRelation.REPLACE_ONE,
                 value_discretization_interval: float =
                 DEFAULT_VALUE_DISCRETIZATION_INTERVAL) -> None:
        super().__init__(neighboring_relation)
        if neighboring_relation not in (NeighboringRelation.REPLACE_ONE,
                                        NeighboringRelation.ADD_OR_REMOVE_ONE):
            raise ValueError(
                "neighboring_relation must be NeighboringRelation.REPLACE_ONE or "
                f"ADD_OR_REMOVE_ONE for PLDAccountant; got {neighboring_relation!r}")
        interval = _validate.check_positive("value_discretization_interval",
                                            value_discretization_interval)
        if interval > 1.0:
            raise ValueError("value_discretization_interval must be a real number in (0, 1]; "
                             f"got {value_discretization_interval!r}")
        self._interval = interval
        self._powers: dict[tuple[_Spec, int, float], _pld.PrivacyLossDistribution] = {}
        self._composed: tuple[frozenset, _pld.PrivacyLossDistribution | None] | None = None

    @property
    def value_discretization_interval(self) -> float:
        """Grid step of the privacy-loss values."""
        return self._interval

    def __deepcopy__(self, memo: dict) -> PLDAccountant:
        # PLD objects are immutable (every operation returns a new one): share them, copy state.
        new = copy.copy(self)
        new._counts = Counter(self._counts)
        new._powers = dict(self._powers)
        return new

    # ------------------------------------------------------------------ event -> PLD specs
    def _check_leaf(self, event: _dp.DpEvent) -> None:
        for spec, _ in self._specs(event):
            points = _grid_points(spec, self._interval)
            if points > _MAX_GRID_POINTS:
                raise self._unsupported(
                    event, f"its privacy losses span about {points:.2g} grid points at "
                           f"value_discretization_interval={self._interval:g} (limit "
                           f"{_MAX_GRID_POINTS:.0e}); use a coarser interval")

    def _nonnegative(self, event: _dp.DpEvent, name: str, value: Any) -> float:
        if not (_is_real(value) and math.isfinite(value) and value >= 0):
            raise self._unsupported(event, f"{name} must be a finite real number >= 0; got "
                                           f"{value!r}")
        return float(value)

    def _specs(self, event: _dp.DpEvent) -> list[tuple[_Spec, int]]:
        """The PLDs one occurrence of ``event`` composes, with multiplicities.

        Raises:
            UnsupportedEventError: naming ``event`` when it cannot be mapped.
        """
        if isinstance(event, GaussianNoisyMaxDpEvent):
            return [(("gaussian", float(event.sigma) / math.sqrt(2.0)), 1)]
        if isinstance(event, LaplaceNoisyMaxDpEvent):
            return [(("laplace", float(event.noise_scale)), 2)]
        if isinstance(event, DiscreteGaussianDpEvent):
            return [(("discrete-gaussian", float(event.sigma), int(event.sensitivity)), 1)]
        if isinstance(event, BitRandomizedResponseDpEvent):
            return [(("binary-rr", float(event.epsilon_per_bit)), int(event.bits_changed))]
        if isinstance(event, ShuffledLocalDpEvent):
            return [(("binary-rr", float(event.local_epsilon)), 1)]
        if isinstance(event, (PureDpEvent, CollisionDpEvent,
                              SelectiveRandomizedResponseDpEvent)):
            return [(("binary-rr", float(event.epsilon)), 1)]
        if isinstance(event, DiscreteGaussianVectorDpEvent):
            return [((_ZCDP, float(event.rho)), 1)]
        if isinstance(event, (ApproxDpEvent, ShuffledHistogramDpEvent)):
            return [self._declared_spec(float(event.epsilon), float(event.delta))]
        if isinstance(event, _dp.GaussianDpEvent):
            s = self._nonnegative(event, "noise_multiplier", event.noise_multiplier)
            return [(("gaussian", s) if s > 0 else _NON_PRIVATE, 1)]
        if isinstance(event, _dp.LaplaceDpEvent):
            b = self._nonnegative(event, "noise_multiplier", event.noise_multiplier)
            return [(("laplace", b) if b > 0 else _NON_PRIVATE, 1)]
        if isinstance(event, _dp.DiscreteLaplaceDpEvent):
            a = self._nonnegative(event, "noise_parameter", event.noise_parameter)
            sens = event.sensitivity
            if not (isinstance(sens, numbers.Integral) and not isinstance(sens, bool)
                    and sens >= 1):
                raise self._unsupported(event, f"sensitivity must be an integer >= 1; got "
                                               f"{sens!r}")
            return [(("discrete-laplace", a, int(sens)) if a > 0 else _NON_PRIVATE, 1)]
        if isinstance(event, _dp.RandomizedResponseDpEvent):
            return self._randomized_response_specs(event)
        if isinstance(event, _dp.PoissonSampledDpEvent):
            return self._poisson_specs(event)
        if isinstance(event, _dp.MixtureOfGaussiansDpEvent):
            return self._mixture_specs(event)
        if isinstance(event, _dp.SampledWithoutReplacementDpEvent):
            raise self._unsupported(
                event, "no privacy loss distribution is verified for sampling without "
                       "replacement: dp_accounting's PLD has none (its PLDAccountant refuses "
                       "this event), and the amplification (a fixed-size batch, replace-one "
                       "neighbours; Balle-Barthe-Gaboardi 2018) is not implemented here. Use "
                       "RDPAccountant, or PoissonSampledDpEvent with ADD_OR_REMOVE_ONE")
        if isinstance(event, DeclaredGuarantee):
            eps, delta = event.guarantee()
            return [self._declared_spec(float(eps), float(delta))]
        raise self._unsupported(event, "no privacy loss distribution is known for this event")

    @staticmethod
    def _declared_spec(epsilon: float, delta: float) -> tuple[_Spec, int]:
        if delta == 0.0:
            return (("binary-rr", epsilon), 1)
        return (("approx-dp", epsilon, delta), 1)

    def _randomized_response_specs(self, event: _dp.RandomizedResponseDpEvent
                                   ) -> list[tuple[_Spec, int]]:
        if self.neighboring_relation is not NeighboringRelation.REPLACE_ONE:
            raise self._unsupported(
                event, "randomized response changes one record's bucket, so its PLD is defined "
                       "for REPLACE_ONE neighbours; this accountant uses "
                       f"{self.neighboring_relation.name}")
        k = event.num_buckets
        if not (isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= 1):
            raise self._unsupported(event, f"num_buckets must be an integer >= 1; got {k!r}")
        p = event.noise_parameter
        if not (_is_real(p) and 0 <= p <= 1):
            raise self._unsupported(event, f"noise_parameter must be in [0, 1]; got {p!r}")
        if k == 1 or p == 1:
            return []  # output independent of the input
        if p == 0:
            return [(_NON_PRIVATE, 1)]
        return [(("randomized-response", float(p), int(k)), 1)]

    def _poisson_specs(self, event: _dp.PoissonSampledDpEvent) -> list[tuple[_Spec, int]]:
        if self.neighboring_relation is not NeighboringRelation.ADD_OR_REMOVE_ONE:
            raise self._unsupported(
                event, "Poisson subsampling amplifies privacy for add/remove neighbours (a "
                       "record is in the batch with probability q); construct "
                       "PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE) to account for it "
                       f"(this accountant uses {self.neighboring_relation.name})")
        q = event.sampling_probability
        if not (_is_real(q) and 0 <= q <= 1):
            raise self._unsupported(event, f"sampling_probability must be in [0, 1]; got {q!r}")
        inner = event.event
        if isinstance(inner, _dp.GaussianDpEvent):
            kind = "gaussian"
        elif isinstance(inner, _dp.LaplaceDpEvent):
            kind = "laplace"
        else:
            raise self._unsupported(
                event, "the subsampled event must be a GaussianDpEvent or LaplaceDpEvent; got "
                       f"{type(inner).__name__}")
        noise = self._nonnegative(event, "event.noise_multiplier", inner.noise_multiplier)
        if q == 0:
            return []
        if noise == 0:
            return [(_NON_PRIVATE, 1)]
        if q == 1:
            return [((kind, noise), 1)]
        if kind == "gaussian" and noise > _MAX_SUBSAMPLED_GAUSSIAN_NOISE:
            # The hockey-stick divergence is jointly convex, so the subsampled pair
            # ((1 - q) P + q Q, P) is dominated by (Q, P): the unsubsampled Gaussian is an
            # upper bound (a negligible loss of tightness at this noise; dp_accounting's
            # subsampled construction overflows there).
            return [((kind, noise), 1)]
        if kind == "gaussian" and noise < _MIN_SUBSAMPLED_GAUSSIAN_NOISE:
            raise self._unsupported(
                event, f"a subsampled Gaussian with noise multiplier {noise:g} < "
                       f"{_MIN_SUBSAMPLED_GAUSSIAN_NOISE:g} needs a PLD too costly to build "
                       "(its epsilon is in the hundreds or more); use RDPAccountant")
        return [((f"poisson-{kind}", float(q), noise), 1)]

    def _mixture_specs(self, event: _dp.MixtureOfGaussiansDpEvent) -> list[tuple[_Spec, int]]:
        """N(0, s^2) vs sum_i p_i N(c_i, s^2) (Choquette-Choo, Ganesh, Steinke, Thakurta 2023).

        Defined for add/remove neighbours (dp_accounting's ``MixtureGaussianPrivacyLoss``: the
        REMOVE and ADD directions). One sensitivity c is the Gaussian mechanism with noise
        multiplier s/c; sensitivities {0, c} with probabilities {1 - q, q} are the
        Poisson-subsampled Gaussian (q, s/c) (the same PLD in dp_accounting); both are mapped
        to those specs (exact). Zero-probability components are dropped.
        """
        if self.neighboring_relation is not NeighboringRelation.ADD_OR_REMOVE_ONE:
            raise self._unsupported(
                event, "the mixture of Gaussians mechanism (one neighbour gives N(0, s^2), the "
                       "other the mixture) is defined for add/remove neighbours, as in "
                       "dp_accounting's PLD; construct "
                       "PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE) (this accountant "
                       f"uses {self.neighboring_relation.name})")
        sigma = self._nonnegative(event, "standard_deviation", event.standard_deviation)
        sens, probs = self._mixture_components(event)
        positive = [(c, p) for c, p in zip(sens, probs, strict=True) if p > 0]
        if max(c for c, _ in positive) == 0.0:
            return []  # the sensitive record never moves the output
        if sigma == 0.0:
            return [(_NON_PRIVATE, 1)]
        if len(positive) == 1:
            return [(("gaussian", sigma / positive[0][0]), 1)]
        if len(positive) == 2 and positive[0][0] == 0.0:
            return [(("poisson-gaussian", positive[1][1], sigma / positive[1][0]), 1)]
        return [(("mixture-gaussian", sigma, tuple(c for c, _ in positive),
                  tuple(p for _, p in positive)), 1)]

    def _mixture_components(self, event: _dp.MixtureOfGaussiansDpEvent
                            ) -> tuple[list[float], list[float]]:
        """Validated (sensitivities, sampling_probs), merged and sorted by sensitivity."""
        try:
            sens, probs = list(event.sensitivities), list(event.sampling_probs)
        except TypeError:
            raise self._unsupported(event, "sensitivities and sampling_probs must be "
                                           "sequences of real numbers") from None
        if not sens or len(sens) != len(probs):
            raise self._unsupported(event, "sensitivities and sampling_probs must be non-empty "
                                           f"and of equal length; got {len(sens)} and "
                                           f"{len(probs)}")
        if not all(_is_real(c) and math.isfinite(c) and c >= 0 for c in sens):
            raise self._unsupported(event, "sensitivities must be finite real numbers >= 0; "
                                           f"got {sens!r}")
        if not all(_is_real(p) and 0 <= p <= 1 for p in probs):
            raise self._unsupported(event, f"sampling_probs must be in [0, 1]; got {probs!r}")
        if not math.isclose(math.fsum(probs), 1.0, rel_tol=1e-9):
            raise self._unsupported(event, "sampling_probs must sum to 1; got sum "
                                           f"{math.fsum(probs)!r}")
        merged: dict[float, float] = {}  # equal sensitivities are one component
        for c, p in zip(sens, probs, strict=True):
            merged[float(c)] = merged.get(float(c), 0.0) + float(p)
        ordered = sorted(merged.items())
        return [c for c, _ in ordered], [p for _, p in ordered]

    def _collect(self, event: _dp.DpEvent, count: int, out: Counter) -> None:
        # dp_accounting's MixtureOfGaussiansDpEvent is usually built from lists (unhashable):
        # store it with tuples so that it can be counted like every other event.
        if isinstance(event, _dp.MixtureOfGaussiansDpEvent):
            event = _hashable_mixture(event)
        super()._collect(event, count, out)

    # ------------------------------------------------------------------ composition
    def _check_totals(self, leaves: Counter) -> None:
        """Refuse more than ``MAX_EXACT_COUNT`` compositions of one exact two-atom pair."""
        totals = self._grouped_specs()
        for leaf, n in leaves.items():
            if isinstance(leaf, _dp.NonPrivateDpEvent):
                continue
            for spec, multiplicity in self._specs(leaf):
                totals[spec] += n * multiplicity
                if spec[0] in ("binary-rr", "approx-dp") and totals[spec] > MAX_EXACT_COUNT:
                    raise self._unsupported(
                        leaf, f"{totals[spec]} compositions exceed the {MAX_EXACT_COUNT:.0e} "
                              "whose binomial the exact composition holds; RDPAccountant "
                              "takes any count")

    def _grouped_specs(self) -> Counter:
        totals: Counter = Counter()
        for event, count in self._counts.items():
            for spec, multiplicity in self._specs(event):
                totals[spec] += count * multiplicity
        gaussian = [(spec, n) for spec, n in totals.items() if spec[0] == "gaussian"]
        if len(gaussian) > 1 or (gaussian and gaussian[0][1] > 1):
            # Dong-Roth-Su 2022, Cor. 3.3: composing Gaussian mechanisms with shifts 1/s_i is
            # the Gaussian mechanism with shift sqrt(sum 1/s_i^2) (exact).
            # Scaled by the smallest s so that s^2 neither underflows nor overflows.
            smallest = min(spec[1] for spec, _ in gaussian)
            scaled = math.fsum(n * (smallest / spec[1]) ** 2 for spec, n in gaussian)
            for spec, _ in gaussian:
                del totals[spec]
            totals[("gaussian", smallest / math.sqrt(scaled))] += 1
        return totals

    def _only_gaussian(self) -> float | None:
        """The merged noise multiplier if the history is Gaussian releases only, else None."""
        if self._non_private:
            return None
        totals = self._grouped_specs()
        if len(totals) == 1:
            (spec, n), = totals.items()
            if spec[0] == "gaussian" and n == 1:
                return float(spec[1])
        return None

    def pld(self) -> _pld.PrivacyLossDistribution | None:
        """The composed (pessimistic) PLD of the history; None while empty or non-private.

        Releases known by their zCDP bound only (:class:`DiscreteGaussianVectorDpEvent`) are not
        part of it: they enter the epsilons and deltas through their moment generating
        function (:mod:`.tilted`).
        """
        if self._non_private:
            return None
        key = frozenset(self._counts.items())
        if self._composed is not None and self._composed[0] == key:
            return self._composed[1]
        totals = self._pld_specs()
        composed = None
        if _NON_PRIVATE not in totals:
            interval = self._checked_interval(totals)
            powers: dict[tuple[_Spec, int, float], _pld.PrivacyLossDistribution] = {}
            for spec, n in totals:
                power = self._powers.get((spec, n, interval))
                if power is None:
                    power = _spec_power(spec, n, interval)
                powers[(spec, n, interval)] = power
                composed = power if composed is None else composed.compose(power)
            self._powers = powers  # keep only what the current history uses
        self._composed = (key, composed)
        return composed

    def _pld_specs(self) -> list[tuple[_Spec, int]]:
        """The history's specs with a PLD (zCDP-only releases left out), in a fixed order."""
        return [(spec, n) for spec, n in sorted(self._grouped_specs().items(), key=repr)
                if spec[0] != _ZCDP]

    def _zcdp_rho(self) -> float:
        """Total zCDP parameter of the releases known by their zCDP bound only."""
        return math.fsum(n * spec[1] for spec, n in self._grouped_specs().items()
                         if spec[0] == _ZCDP)

    def _checked_interval(self, totals: list[tuple[_Spec, int]]) -> float:
        """The grid step, after refusing histories whose PLD cannot be built (named)."""
        interval = self.effective_interval()
        if interval > 1.0:
            raise self._unsupported(
                next(iter(self._counts)),
                f"the history's privacy losses span ~{interval * _TARGET_BINS:.3g}, beyond "
                "what a PLD grid (step <= 1) can hold; use RDPAccountant")
        for spec, n in totals:
            largest = n * _max_loss(spec) / interval
            if math.isfinite(largest) and largest > 1e18:
                raise self._unsupported(
                    next(e for e in self._counts if any(
                        sp == spec for sp, _ in self._specs(e))),
                    f"its {n} releases reach privacy losses of {n * _max_loss(spec):.3g}, "
                    f"beyond the PLD grid's integer range at interval {interval:g} (the "
                    "pure epsilon, which every other accountant reports, is exact there)")
            if spec[0] == "gaussian" and spec[1] < _MIN_MIXED_GAUSSIAN_NOISE:
                raise self._unsupported(
                    next(e for e in self._counts if isinstance(e, _dp.GaussianDpEvent)),
                    f"the Gaussian releases (merged noise multiplier {spec[1]:.3g} < "
                    f"{_MIN_MIXED_GAUSSIAN_NOISE:g}) composed with other events need a "
                    "PLD too costly to build (their epsilon is in the thousands); use "
                    "RDPAccountant")
        return interval

    def _uses_fft(self, totals: list[tuple[_Spec, int]]) -> bool:
        """Whether the composed PLD goes through FFT convolutions (truncating its tails)."""
        if len(totals) != 1:
            return len(totals) > 1
        (spec, n), = totals
        if n == 1 or spec[0] in ("binary-rr", "approx-dp"):
            return False
        atoms = _lattice_atoms(spec)
        return not (atoms is not None
                    and _lattice_is_cheaper(atoms, n, self.effective_interval()))

    def _releases(self) -> tuple[float, list[list[Release]]]:
        """(grid step, the single-release pmfs with counts per direction) for :mod:`.tilted`.

        The grid is sized by the single releases (not by their counts, as the FFT path's
        :meth:`effective_interval` is): the tilted composition stays narrow, and a count
        search reuses the cached single-release PLDs.
        """
        totals = self._pld_specs()
        self._checked_interval(totals)  # refuses what no grid can hold, naming the event
        single = math.fsum(_grid_width(spec, 1) for spec, _ in totals) / _TARGET_BINS
        # independent kinds' spreads add in quadrature (their sum's standard deviation)
        composed = math.sqrt(math.fsum(_grid_width(spec, n) ** 2 for spec, n in totals)
                             ) / _TILTED_BINS
        interval = self._interval
        while interval < max(single, composed):  # powers of two: a count search reuses them
            interval *= 2.0
        remove: list[Release] = []
        add: list[Release] = []
        for spec, n in totals:
            single = (_build_spec_pld(spec, interval) if spec[0] == "gaussian"
                      else _spec_pld(spec, interval))
            remove.append(Release(*pmf_arrays(single._pmf_remove), count=n))
            add.append(remove[-1] if single._symmetric
                       else Release(*pmf_arrays(single._pmf_add), count=n))
        directions = [remove] if all(a is r for a, r in zip(add, remove, strict=True)) else [
            remove, add]
        return interval, directions

    def _tilted_epsilon(self, delta: float) -> float:
        """Epsilon at ``delta`` from the tilted composition (the larger over directions).

        A direction whose Chernoff bound (an upper bound on its epsilon) is already below
        another direction's answer is not composed.
        """
        interval, directions = self._releases()
        rho = self._zcdp_rho()
        bounds = []
        for releases in directions:
            survival = math.fsum(r.count * math.log1p(-r.infinity_mass) if r.infinity_mass < 1
                                 else -math.inf for r in releases)
            residual = delta + math.expm1(survival)  # delta minus the +inf mass
            if residual <= 0.0:
                return math.inf
            bounds.append((chernoff_tilt(releases, interval, rho, math.log(residual)),
                           releases))
        worst = 0.0
        for (lam, chernoff), releases in sorted(bounds, key=lambda b: -b[0][1]):
            if chernoff <= worst:
                break
            worst = max(worst, _tilted_epsilon_one(releases, interval, rho, delta, lam,
                                                   chernoff))
        return worst

    def _tilted_delta(self, epsilon: float) -> float:
        """Delta at ``epsilon`` from the tilted composition (the larger over directions)."""
        interval, directions = self._releases()
        rho = self._zcdp_rho()
        return max(tilted_table(releases, interval,
                                tilt_for_mean(releases, interval, rho, epsilon),
                                rho).delta(epsilon) for releases in directions)

    def effective_interval(self) -> float:
        """The grid step the composed PLD of the current history is built with.

        ``value_discretization_interval``, enlarged where building the history's PLD by FFT
        would take more than about ``_TARGET_BINS`` grid points (e.g. a thousand Laplace
        releases of scale 0.5): see :func:`_grid_width`. A coarser grid is still pessimistic
        (every value stays an upper bound), only less tight: the k-fold error bound 2 k h^2 of
        the module docstring holds with h = this interval.
        """
        if self._non_private:
            return self._interval
        totals = self._grouped_specs()
        if len(totals) == 1:
            (spec, n), = totals.items()
            if spec[0] in ("binary-rr", "approx-dp") or (
                    (atoms := _lattice_atoms(spec)) is not None
                    and _lattice_is_cheaper(atoms, n, self._interval)):
                return self._interval  # an exact power, discretised once: no FFT grid
        width = math.fsum(_grid_width(spec, n) for spec, n in totals.items())
        return max(self._interval, width / _TARGET_BINS)

    def event_pld(self, event: _dp.DpEvent, count: int = 1) -> _pld.PrivacyLossDistribution:
        """The pessimistic PLD of ``count`` occurrences of ``event`` alone (for inspection).

        Raises:
            UnsupportedEventError: If the event cannot be accounted (the message names it).
            ValueError: If the event is non-private (no PLD) or has no privacy cost.
        """
        scratch = PLDAccountant(self.neighboring_relation, self._interval)
        scratch.compose(event, count)
        result = scratch.pld()
        if result is None:
            raise ValueError(f"{type(event).__name__} has no finite PLD (non-private or no-op): "
                             f"{event!r}")
        return result

    def _is_infinite(self) -> bool:
        if self._non_private:
            return True
        return any(spec == _NON_PRIVATE for event in self._counts
                   for spec, _ in self._specs(event))

    def pure_epsilon(self) -> float:
        """Exact epsilon at delta = 0: sum of the largest losses; inf unless all are pure DP.

        Computed from the events, not from the discretised PLD: dp_accounting's PLDs carry a
        spurious mass at +inf of order 1e-15 (tail truncation of the FFT convolutions,
        rounding at the top of the connect-the-dots grid), which would turn every delta = 0
        query into infinity.
        """
        if self._is_infinite():
            return math.inf
        return math.fsum(n * _max_loss(spec) for spec, n in self._grouped_specs().items())

    # ------------------------------------------------------------------ queries
    def get_epsilon(self, target_delta: float) -> Epsilon:
        """Smallest epsilon whose (pessimistic) hockey-stick divergence is <= ``target_delta``.

        ``target_delta = 0`` gives the exact pure epsilon (:meth:`pure_epsilon`). Returns
        infinity after a non-private event or when ``target_delta`` is below the mass the PLD
        puts at +inf (a declared delta, or Gaussian tails below e^-50 ~ 2e-22). Below
        ``TILT_BELOW_DELTA``, where FFT compositions would push their truncated tails to +inf,
        and with zCDP-only releases, the epsilon comes from the tilted composition
        (:mod:`.tilted`): finite and tight down to delta = 1e-15.
        """
        target_delta = _validate.check_probability("target_delta", target_delta)
        pure = self.pure_epsilon()
        sigma = self._only_gaussian()
        if target_delta == 0.0 or self._is_infinite():
            value = pure
        elif sigma is not None:
            value = _gaussian_epsilon(sigma, target_delta)
        else:
            value = min(pure, self._epsilon_at(target_delta))
        return Epsilon(value, method=self.method, kind=BoundKind.UPPER_BOUND)

    def _epsilon_at(self, delta: float) -> float:
        """Epsilon at ``delta`` > 0 of a history that is not Gaussian releases only.

        Exact powers where one kind of finite PLD is composed; the tilted composition
        (:mod:`.tilted`) wherever FFT convolutions or zCDP-only releases enter.
        """
        if self._zcdp_rho() > 0.0 or self._uses_fft(self._pld_specs()):
            return self._tilted_epsilon(delta)
        composed = self.pld()
        return 0.0 if composed is None else _pld_epsilon(composed, delta)

    def get_delta(self, target_epsilon: float) -> float:
        """Pessimistic hockey-stick divergence at ``target_epsilon`` (1 if non-private)."""
        if not (_is_real(target_epsilon) and target_epsilon >= 0):
            raise ValueError(f"target_epsilon must be a real number >= 0; got {target_epsilon!r}")
        if self._is_infinite():
            return 1.0
        sigma = self._only_gaussian()
        if sigma is not None:
            return analytic_gaussian_delta(float(target_epsilon), sigma)
        if target_epsilon >= self.pure_epsilon():  # 0 for an empty history
            return 0.0
        if self._zcdp_rho() > 0.0 or self._uses_fft(self._pld_specs()):
            return self._tilted_delta(float(target_epsilon))
        composed = self.pld()
        return 0.0 if composed is None else min(1.0, _pld_delta(composed, float(target_epsilon)))


#: A tilted table's epsilon is accepted when its bound on the dropped tails is at most this
#: share of the target delta there (it is then within the grid of the exact epsilon).
_ACCEPTED_DROPPED_SHARE = 1e-3


def _tilted_epsilon_one(releases: list[Release], interval: float, rho: float, delta: float,
                        lam: float, chernoff: float) -> float:
    """Epsilon at ``delta`` of one direction, from tilts until one's dropped tails are negligible.

    Every tilt gives an upper bound; the smallest is returned, as soon as a tilt's bound on
    its dropped tails is at most ``_ACCEPTED_DROPPED_SHARE`` of delta at its answer. Tilts
    tried: the Chernoff-optimal one (its tilted mean is the Chernoff bound, a few tilted
    standard deviations above the answer: right for small deltas); none (lambda ~ 0, right
    for deltas far above the 1e-13 truncation, e.g. where the Chernoff optimum runs to the
    largest loss of a bounded PLD: 4 Laplace releases at delta 1e-3); the saddle point of the
    best answer so far (tilted mean at it). ``lam`` and ``chernoff``: the Chernoff-optimal
    tilt and its bound (:func:`.tilted.chernoff_tilt`).
    """
    candidates = [lam] + ([tilted.LAMBDA_MIN] if delta >= 1e-10 else [])
    best = math.inf
    for attempt in range(len(candidates) + 1):
        if attempt == len(candidates):
            if not math.isfinite(best):
                break
            lam = tilt_for_mean(releases, interval, rho, best)
        else:
            lam = candidates[attempt]
        table = tilted_table(releases, interval, lam, rho)
        eps = table.epsilon(delta, upper=min(best, chernoff) if math.isfinite(best)
                            else chernoff)
        best = min(best, eps)
        if math.isfinite(eps) and table.dropped_bound(eps) <= _ACCEPTED_DROPPED_SHARE * delta:
            break
    return best
