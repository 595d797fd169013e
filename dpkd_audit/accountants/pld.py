"""Privacy loss distributions (PLD): near-exact composition through dp_accounting's PLD backend.

The privacy loss distribution of a pair of output distributions (P, Q) is the law of
L = ln(P(o)/Q(o)) for o ~ P; composition convolves PLDs, and the hockey-stick divergence
delta(eps) = E[(1 - e^(eps - L))_+] (plus the mass at L = +inf) is the exact (eps, delta)
curve (Meiser-Mohammadi 2018; Sommer-Meiser-Mohammadi 2019; Koskela-Jalko-Honkela 2020). The
backend is ``dp_accounting.pld`` (Google), used in its *pessimistic* mode only, so every
returned epsilon is an upper bound up to floating-point rounding:

- additive noise (Laplace, Gaussian, discrete Laplace, discrete Gaussian, Poisson-subsampled
  Laplace/Gaussian) goes through dp_accounting's pessimistic "connect-the-dots" discretisation
  (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, PETS 2022, Algorithm 1);
- every other event is reduced to a *finite* dominating PLD (atoms and a mass at +inf) that is
  discretised here with the same connect-the-dots rule, evaluated on the exact hockey-stick
  curve at the grid points bracketing each atom. dp_accounting's own constructors for these
  (``from_privacy_parameters``, ``from_randomized_response``) round each atom *up* to the grid,
  which drifts by up to one grid step per composition: 10^4 compositions of a 0.05123-DP event
  come out 0.51 too large at delta = 1e-5 (interval 1e-4), against 1.2e-4 with connect-the-dots.

Event -> PLD (one occurrence; replace-one neighbours unless stated):

- ``LaplaceDpEvent(b)``: Lap(0, b) vs Lap(1, b) (``from_laplace_mechanism(b, sensitivity=1)``).
- ``GaussianDpEvent(s)`` (and ``CalibratedGaussianDpEvent``): N(0, s^2) vs N(1, s^2). All
  Gaussian releases are merged exactly into one Gaussian with 1/s^2 = sum_i count_i / s_i^2
  (a composition of Gaussian mechanisms is a Gaussian mechanism whose shift is the Euclidean
  norm of the shifts: Dong-Roth-Su 2022, Cor. 3.3), so a million Gaussian queries cost one PLD.
- ``DiscreteLaplaceDpEvent(a, Delta)``: ``from_discrete_laplace_mechanism(a, Delta)``.
- ``DiscreteGaussianDpEvent(sigma, Delta)``: ``from_discrete_gaussian_mechanism(sigma, Delta)``,
  the exact 1-D curve of Canonne-Kamath-Steinke 2020, Thm 7 (the event's own scope).
- ``RandomizedResponseDpEvent(p, k)``: its exact three-atom PLD (REPLACE_ONE only).
- pure epsilon events of this package (``PureDpEvent``, ``CollisionDpEvent``,
  ``SelectiveRandomizedResponseDpEvent``, ``ShuffledLocalDpEvent`` *without* amplification):
  binary randomized response with that epsilon, which dominates every eps-DP pair
  (Kairouz-Oh-Viswanath 2015, Thm 2.2 / Murtagh-Vadhan 2016).
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
- any other event declaring an (eps, delta) through :class:`dpkd_audit.events.DeclaredGuarantee`
  goes through the (eps, delta) dominating pair.

Sensitivity convention: a noise multiplier is noise scale / sensitivity, the sensitivity being
measured *under the accountant's neighbouring relation*, so the two neighbouring outputs are
shifted by exactly one noise unit whatever the relation. This is the convention of this package's
mechanisms and of :mod:`dpkd_audit.accountants.pure` (Laplace: eps = 1/b), and of dp_accounting's
``RdpAccountant``. dp_accounting's own ``PLDAccountant`` under REPLACE_ONE instead doubles the
shift of a ``GaussianDpEvent`` (its ``AdjacencyType.REPLACE``) and refuses ``LaplaceDpEvent``.

Accuracy (value_discretization_interval h = 1e-4, checked in tests/test_accountant_pld.py): a
single Laplace or Gaussian release is within 1e-9 of the exact epsilon; k-fold compositions are
pessimistic and within a few times k * h^2 + 1e-6 of the exact value for the event types with
exact references (binary RR: binomial sum; Gaussian: Balle-Wang 2018, Thm 8); composing k copies
one by one, as one k-fold ``SelfComposedDpEvent`` or with ``count=k`` agrees to 1e-9.
"""

from __future__ import annotations

import copy
import functools
import math
import numbers
from collections import Counter
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as _pld

from dpkd_audit import _validate
from dpkd_audit.accountants.base import Accountant, BoundKind, Epsilon, NeighboringRelation
from dpkd_audit.events import (
    ApproxDpEvent,
    BitRandomizedResponseDpEvent,
    CollisionDpEvent,
    DeclaredGuarantee,
    DiscreteGaussianDpEvent,
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

# Gaussian PLDs drop noise mass below e^-50 (~2e-22) into the +inf atom (pessimistic).
_LOG_MASS_TRUNCATION = -50.0

_Spec = tuple  # a hashable description of one PLD: ("kind", parameters...)
_NON_PRIVATE: _Spec = ("non-private",)


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


# =========================================================================== PLD building


def _finite_pld(losses: np.ndarray, probs: np.ndarray, infinity_mass: float,
                interval: float) -> _pld.PrivacyLossDistribution:
    """Pessimistic connect-the-dots PLD of a finite (symmetric) privacy-loss distribution.

    Doroshenko et al. 2022, Algorithm 1: given the exact hockey-stick curve at grid points
    eps_1 < ... < eps_m, the PLD on those points whose curve interpolates them (linearly in
    e^eps) dominates the original, because delta is convex in e^eps (a mean of hinge functions),
    and it keeps the mean loss (no per-composition drift). The grid is the two grid points
    bracketing every atom, so the curve is exact between atoms.
    """
    losses = np.asarray(losses, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    grid = np.unique(np.concatenate([np.floor(losses / interval),
                                     np.ceil(losses / interval)])).astype(np.int64)
    points = grid * interval
    above = losses[None, :] > points[:, None]
    terms = np.where(above, probs[None, :] * -np.expm1(points[:, None] - losses[None, :]), 0.0)
    deltas = np.minimum(1.0, infinity_mass + terms.sum(axis=1))
    pmf = pld_pmf.create_pmf_pessimistic_connect_dots(interval, grid, deltas)
    return _pld.PrivacyLossDistribution(pmf)


def _binary_rr_atoms(epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """Atoms of binary randomized response: +eps w.p. e^eps/(1+e^eps), -eps otherwise."""
    upper = 1.0 / (1.0 + math.exp(-epsilon))
    return np.array([epsilon, -epsilon]), np.array([upper, 1.0 - upper])


@functools.lru_cache(maxsize=128)
def _spec_pld(spec: _Spec, interval: float) -> _pld.PrivacyLossDistribution:
    """The PLD of one occurrence of ``spec`` (cached: PLD objects are never mutated)."""
    kind = spec[0]
    if kind == "binary-rr":
        losses, probs = _binary_rr_atoms(spec[1])
        return _finite_pld(losses, probs, 0.0, interval)
    if kind == "approx-dp":
        eps, delta = spec[1], spec[2]
        losses, probs = _binary_rr_atoms(eps)
        return _finite_pld(losses, (1.0 - delta) * probs, delta, interval)
    if kind == "randomized-response":
        p, k = spec[1], spec[2]
        keep = 1.0 - p + p / k  # P[report = input]; any other bucket has p/k
        loss = math.log1p(k * (1.0 - p) / p)  # ln(keep / (p/k))
        losses = [loss, -loss] + ([0.0] if k > 2 else [])
        probs = [keep, p / k] + ([(k - 2) * p / k] if k > 2 else [])
        return _finite_pld(np.array(losses), np.array(probs), 0.0, interval)
    if kind == "laplace":
        return _pld.from_laplace_mechanism(
            spec[1], sensitivity=1, pessimistic_estimate=True,
            value_discretization_interval=interval, use_connect_dots=True)
    if kind == "gaussian":
        return _pld.from_gaussian_mechanism(
            spec[1], sensitivity=1, pessimistic_estimate=True,
            value_discretization_interval=interval,
            log_mass_truncation_bound=_LOG_MASS_TRUNCATION, use_connect_dots=True,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)  # q = 1: shift by 1
    if kind == "discrete-laplace":
        return _pld.from_discrete_laplace_mechanism(
            spec[1], sensitivity=spec[2], pessimistic_estimate=True,
            value_discretization_interval=interval, use_connect_dots=True)
    if kind == "discrete-gaussian":
        return _pld.from_discrete_gaussian_mechanism(
            spec[1], sensitivity=spec[2], pessimistic_estimate=True,
            value_discretization_interval=interval, use_connect_dots=True)
    if kind == "poisson-laplace":
        return _pld.from_laplace_mechanism(
            spec[2], sensitivity=1, pessimistic_estimate=True,
            value_discretization_interval=interval, sampling_prob=spec[1],
            use_connect_dots=True)
    if kind == "poisson-gaussian":
        return _pld.from_gaussian_mechanism(
            spec[2], sensitivity=1, pessimistic_estimate=True,
            value_discretization_interval=interval,
            log_mass_truncation_bound=_LOG_MASS_TRUNCATION, sampling_prob=spec[1],
            use_connect_dots=True, neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
    raise AssertionError(f"unknown PLD spec {spec!r}")  # pragma: no cover - internal


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# =========================================================================== accountant


class PLDAccountant(Accountant):
    """Privacy-loss-distribution accountant (pessimistic dp_accounting PLDs; see module doc).

    Identical releases are grouped: each distinct PLD is built once (cached), raised to its
    total count with one FFT self-convolution (``self_compose``), and the distinct ones are
    convolved; Gaussian releases are merged exactly into one Gaussian. The composed PLD is kept
    until the history changes, so queries after a compose cost one PLD evaluation.

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
        self._powers: dict[tuple[_Spec, int], _pld.PrivacyLossDistribution] = {}
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
        self._specs(event)

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
        return [((f"poisson-{kind}", float(q), noise), 1)]

    # ------------------------------------------------------------------ composition
    def _grouped_specs(self) -> Counter:
        totals: Counter = Counter()
        for event, count in self._counts.items():
            for spec, multiplicity in self._specs(event):
                totals[spec] += count * multiplicity
        gaussian = [(spec, n) for spec, n in totals.items() if spec[0] == "gaussian"]
        if len(gaussian) > 1 or (gaussian and gaussian[0][1] > 1):
            # Dong-Roth-Su 2022, Cor. 3.3: composing Gaussian mechanisms with shifts 1/s_i is
            # the Gaussian mechanism with shift sqrt(sum 1/s_i^2) (exact).
            inverse_square = math.fsum(n / spec[1] ** 2 for spec, n in gaussian)
            for spec, _ in gaussian:
                del totals[spec]
            totals[("gaussian", 1.0 / math.sqrt(inverse_square))] += 1
        return totals

    def pld(self) -> _pld.PrivacyLossDistribution | None:
        """The composed (pessimistic) PLD of the history; None while empty or non-private."""
        if self._non_private:
            return None
        key = frozenset(self._counts.items())
        if self._composed is not None and self._composed[0] == key:
            return self._composed[1]
        totals = self._grouped_specs()
        composed = None
        if _NON_PRIVATE not in totals:
            powers: dict[tuple[_Spec, int], _pld.PrivacyLossDistribution] = {}
            for spec, n in sorted(totals.items(), key=repr):
                power = self._powers.get((spec, n))
                if power is None:
                    single = _spec_pld(spec, self._interval)
                    power = single if n == 1 else single.self_compose(n)
                powers[(spec, n)] = power
                composed = power if composed is None else composed.compose(power)
            self._powers = powers  # keep only what the current history uses
        self._composed = (key, composed)
        return composed

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

    # ------------------------------------------------------------------ queries
    def get_epsilon(self, target_delta: float) -> Epsilon:
        """Smallest epsilon whose (pessimistic) hockey-stick divergence is <= ``target_delta``.

        Returns infinity after a non-private event or when ``target_delta`` is below the mass
        the PLD puts at +inf (e.g. a declared delta, or Gaussian tails below e^-50).
        """
        target_delta = _validate.check_probability("target_delta", target_delta)
        if self._is_infinite():
            value = math.inf
        else:
            composed = self.pld()
            value = 0.0 if composed is None else max(
                0.0, float(composed.get_epsilon_for_delta(target_delta)))
        return Epsilon(value, method=self.method, kind=BoundKind.UPPER_BOUND)

    def get_delta(self, target_epsilon: float) -> float:
        """Pessimistic hockey-stick divergence at ``target_epsilon`` (1 if non-private)."""
        if not (_is_real(target_epsilon) and target_epsilon >= 0):
            raise ValueError(f"target_epsilon must be a real number >= 0; got {target_epsilon!r}")
        if self._is_infinite():
            return 1.0
        composed = self.pld()
        if composed is None:
            return 0.0
        return float(min(1.0, max(0.0, composed.get_delta_for_epsilon(float(target_epsilon)))))
