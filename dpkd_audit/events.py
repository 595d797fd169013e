"""Privacy events: dp_accounting's ``DpEvent`` vocabulary plus the few events it lacks.

The package's mechanisms describe each release with a ``dp_accounting.DpEvent`` wherever one
exists (``LaplaceDpEvent``, ``DiscreteLaplaceDpEvent``, ``RandomizedResponseDpEvent``,
``SelfComposedDpEvent``, ``ComposedDpEvent``, ``NonPrivateDpEvent``, ...), so that users can hand
our events to dp_accounting and back. This module adds frozen subclasses for what dp_accounting
does not model. Each of them that promises a per-release guarantee exposes it through
:meth:`DeclaredGuarantee.guarantee`, which the basic-composition accountant uses; the tighter
accountants (RDP, PLD, shuffle, PATE) read the structural fields instead.

Events are immutable and hashable (vectors are stored as tuples), so identical events can be
grouped and composed lazily, and they round-trip through :func:`event_to_json` /
:func:`event_from_json` for the persistent ledger.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
from typing import Any

import attr
import dp_accounting
from dp_accounting import dp_event as _dp

from dpkd_audit._math.privacy import analytic_gaussian_delta, discrete_gaussian_delta, zcdp_delta

__all__ = [
    "ApproxDpEvent",
    "BitRandomizedResponseDpEvent",
    "CalibratedGaussianDpEvent",
    "CollisionDpEvent",
    "DeclaredGuarantee",
    "DiscreteGaussianDpEvent",
    "DiscreteGaussianVectorDpEvent",
    "GaussianNoisyMaxDpEvent",
    "LaplaceNoisyMaxDpEvent",
    "PureDpEvent",
    "SelectiveRandomizedResponseDpEvent",
    "ShuffledHistogramDpEvent",
    "ShuffledLocalDpEvent",
    "event_from_json",
    "event_to_json",
    "validate_event",
]

# Declared guarantees are checked against the exact curve up to this relative slack, which only
# absorbs the rounding of bisection-calibrated noise (never a real shortfall).
_CALIBRATION_SLACK = 1e-9
#: Largest discrete Gaussian sigma whose declared guarantee is checked (a grid of 80 sigma
#: points, 8e6 at this bound); the package's exact sampler stops at 30,000.
_MAX_CHECKED_DISCRETE_SIGMA = 1e5


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


def _check_eps(name: str, value: float) -> None:
    _require(isinstance(value, (int, float)) and not isinstance(value, bool)
             and math.isfinite(value) and value > 0,
             f"{name} must be a finite real number > 0; got {value!r}")


def _check_delta(name: str, value: float) -> None:
    _require(isinstance(value, (int, float)) and not isinstance(value, bool)
             and 0 <= value < 1, f"{name} must be a real number in [0, 1); got {value!r}")


def _check_count(name: str, value: int, minimum: int) -> None:
    _require(isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
             f"{name} must be an integer >= {minimum}; got {value!r}")


class DeclaredGuarantee:
    """Mixin for events that promise ``(epsilon, delta)`` per release."""

    def guarantee(self) -> tuple[float, float]:
        """The (epsilon, delta) one occurrence of this event satisfies."""
        raise NotImplementedError


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PureDpEvent(_dp.DpEvent, DeclaredGuarantee):
    """Any mechanism that is ``epsilon``-DP (pure), with no further structure known."""

    epsilon: float

    def __attrs_post_init__(self) -> None:
        _check_eps("epsilon", self.epsilon)

    def guarantee(self) -> tuple[float, float]:
        return (float(self.epsilon), 0.0)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ApproxDpEvent(_dp.DpEvent, DeclaredGuarantee):
    """Any mechanism that is ``(epsilon, delta)``-DP, with no further structure known."""

    epsilon: float
    delta: float

    def __attrs_post_init__(self) -> None:
        # epsilon = 0 is allowed: (0, delta)-DP is a valid statement (e.g. very large noise).
        _require(isinstance(self.epsilon, (int, float)) and not isinstance(self.epsilon, bool)
                 and math.isfinite(self.epsilon) and self.epsilon >= 0,
                 f"epsilon must be a finite real number >= 0; got {self.epsilon!r}")
        _check_delta("delta", self.delta)

    def guarantee(self) -> tuple[float, float]:
        return (float(self.epsilon), float(self.delta))


@attr.s(frozen=True, slots=True, auto_attribs=True)
class CalibratedGaussianDpEvent(_dp.GaussianDpEvent, DeclaredGuarantee):
    """A Gaussian mechanism whose noise was calibrated to ``(epsilon, delta)``.

    It *is* a ``GaussianDpEvent`` (dp_accounting's RDP and PLD accountants read
    ``noise_multiplier`` = sigma / L2 sensitivity), and additionally declares the (epsilon, delta)
    it was calibrated for, checked at construction against the exact curve of Balle-Wang 2018,
    Theorem 8.
    """

    epsilon: float = attr.ib(kw_only=True)
    delta: float = attr.ib(kw_only=True)

    def __attrs_post_init__(self) -> None:
        _check_eps("noise_multiplier", self.noise_multiplier)
        _check_eps("epsilon", self.epsilon)
        _check_delta("delta", self.delta)
        actual = analytic_gaussian_delta(self.epsilon, self.noise_multiplier)
        _require(actual <= self.delta * (1 + _CALIBRATION_SLACK),
                 f"noise_multiplier={self.noise_multiplier} does not give ({self.epsilon}, "
                 f"{self.delta})-DP: its exact delta at that epsilon is {actual}")

    def guarantee(self) -> tuple[float, float]:
        return (float(self.epsilon), float(self.delta))


@attr.s(frozen=True, slots=True, auto_attribs=True)
class DiscreteGaussianDpEvent(_dp.DpEvent, DeclaredGuarantee):
    """Discrete Gaussian N_Z(0, sigma^2) noise on integers of sensitivity ``sensitivity``.

    Canonne-Kamath-Steinke 2020: (Delta^2/(2 sigma^2))-zCDP (Thm 14) and the exact (epsilon,
    delta) curve of Theorem 7, which is exact for one-dimensional releases and for vectors of L2
    sensitivity 1 (whose only integer shifts are +-e_j); for vectors with sensitivity >= 2 it can
    understate delta, so the mechanism refuses them. The declared pair is checked against
    Theorem 7 at construction.
    """

    sigma: float
    sensitivity: int
    epsilon: float
    delta: float

    def __attrs_post_init__(self) -> None:
        _check_eps("sigma", self.sigma)
        _require(self.sigma <= _MAX_CHECKED_DISCRETE_SIGMA,
                 f"sigma must be <= {_MAX_CHECKED_DISCRETE_SIGMA:g} (the declared guarantee is "
                 f"checked over the pmf on [-40 sigma, 40 sigma]); got {self.sigma!r}")
        _check_count("sensitivity", self.sensitivity, 1)
        _check_eps("epsilon", self.epsilon)
        _check_delta("delta", self.delta)
        # A certified upper bound (every rounding charged against the claim), so no absolute
        # slack is needed: a claimed delta of 1e-300 is checked as such.
        actual = discrete_gaussian_delta(self.epsilon, self.sigma, self.sensitivity)
        _require(actual <= self.delta * (1 + _CALIBRATION_SLACK),
                 f"sigma={self.sigma} does not give ({self.epsilon}, {self.delta})-DP: its exact "
                 f"delta at that epsilon is {actual}")

    def guarantee(self) -> tuple[float, float]:
        return (float(self.epsilon), float(self.delta))


@attr.s(frozen=True, slots=True, auto_attribs=True)
class DiscreteGaussianVectorDpEvent(_dp.DpEvent, DeclaredGuarantee):
    """Discrete Gaussian N_Z(0, sigma^2) noise on every coordinate of an integer vector query.

    ``sensitivity`` bounds the L2 norm of the shift between neighbours (a real number: the grid
    sensitivity of the float-safe Gaussian, Delta_2 / g + sqrt(c)). Canonne-Kamath-Steinke 2020,
    Theorem 14: the independent coordinates' Renyi divergences add, each at most alpha shift_j^2
    / (2 sigma^2) (their Proposition 5 for integer shifts), so the release is (Delta^2 /
    (2 sigma^2))-zCDP; the declared (epsilon, delta) is that of the zCDP conversion
    (:func:`dpkd_audit._math.privacy.zcdp_delta`, CKS 2020 Prop. 12), checked at construction.
    Theorem 7's exact curve is one-dimensional and is not claimed here.
    """

    sigma: float
    sensitivity: float
    epsilon: float
    delta: float

    def __attrs_post_init__(self) -> None:
        _check_eps("sigma", self.sigma)
        _check_eps("sensitivity", self.sensitivity)
        _check_eps("epsilon", self.epsilon)
        _check_delta("delta", self.delta)
        actual = zcdp_delta(self.epsilon, self.rho)
        _require(actual <= self.delta * (1 + _CALIBRATION_SLACK),
                 f"sigma={self.sigma} with sensitivity={self.sensitivity} does not give "
                 f"({self.epsilon}, {self.delta})-DP: its zCDP bound on delta is {actual}")

    @property
    def rho(self) -> float:
        """The zCDP parameter Delta^2 / (2 sigma^2)."""
        return float(self.sensitivity) ** 2 / (2.0 * float(self.sigma) ** 2)

    def guarantee(self) -> tuple[float, float]:
        return (float(self.epsilon), float(self.delta))


@attr.s(frozen=True, slots=True, auto_attribs=True)
class BitRandomizedResponseDpEvent(_dp.DpEvent, DeclaredGuarantee):
    """Per-bit randomized response on a binary vector (reverse k-NN paper, Local DP section).

    Each of ``num_bits`` bits is flipped with probability 1/(e^eps_bit + 1); one record changes at
    most ``bits_changed`` bits (2kr for a reverse k-NN answer), so one report is
    (bits_changed * eps_bit)-DP (basic composition over the changed bits).
    """

    epsilon_per_bit: float
    num_bits: int
    bits_changed: int

    def __attrs_post_init__(self) -> None:
        _check_eps("epsilon_per_bit", self.epsilon_per_bit)
        _check_count("num_bits", self.num_bits, 1)
        _check_count("bits_changed", self.bits_changed, 1)
        _require(self.bits_changed <= self.num_bits,
                 f"bits_changed must be <= num_bits={self.num_bits}; got {self.bits_changed}")

    def guarantee(self) -> tuple[float, float]:
        return (float(self.epsilon_per_bit) * self.bits_changed, 0.0)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class CollisionDpEvent(_dp.DpEvent, DeclaredGuarantee):
    """The (d, c, epsilon, l)-Collision mechanism (Wang et al. IJCAI 2021); pure epsilon-LDP.

    Reverse k-NN paper, Definition 5: domain size d, cardinality c, Bloom filter length l.
    """

    epsilon: float
    domain_size: int
    cardinality: int
    bloom_length: int

    def __attrs_post_init__(self) -> None:
        _check_eps("epsilon", self.epsilon)
        _check_count("domain_size", self.domain_size, 1)
        _check_count("cardinality", self.cardinality, 1)
        _check_count("bloom_length", self.bloom_length, 2)
        _require(self.cardinality <= self.domain_size,
                 f"cardinality must be <= domain_size={self.domain_size}; got {self.cardinality}")
        _require(self.bloom_length > self.cardinality,
                 f"bloom_length must be > cardinality={self.cardinality} (Definition 5 needs a "
                 f"non-hashed cell); got {self.bloom_length}")

    def guarantee(self) -> tuple[float, float]:
        return (float(self.epsilon), 0.0)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class SelectiveRandomizedResponseDpEvent(_dp.DpEvent, DeclaredGuarantee):
    """One label released by DP-DFD's selective randomized response (Algorithm 1): pure eps."""

    epsilon: float
    num_classes: int

    def __attrs_post_init__(self) -> None:
        _check_eps("epsilon", self.epsilon)
        _check_count("num_classes", self.num_classes, 2)

    def guarantee(self) -> tuple[float, float]:
        return (float(self.epsilon), 0.0)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ShuffledLocalDpEvent(_dp.DpEvent, DeclaredGuarantee):
    """``num_users`` reports of a local ``local_epsilon``-DP randomizer, uniformly shuffled.

    Without amplification the shuffled output is a post-processing of the local reports, so it
    is ``local_epsilon``-DP (the guarantee declared here); the amplified central epsilon of
    Feldman-McMillan-Talwar 2021 is computed by the shuffle accountant from ``num_users``.
    """

    local_epsilon: float
    num_users: int

    def __attrs_post_init__(self) -> None:
        _check_eps("local_epsilon", self.local_epsilon)
        _check_count("num_users", self.num_users, 1)

    def guarantee(self) -> tuple[float, float]:
        return (float(self.local_epsilon), 0.0)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ShuffledHistogramDpEvent(_dp.DpEvent, DeclaredGuarantee):
    """Multi-message shuffled histogram (Ghazi et al. 2020): (epsilon, delta)-DP, shuffle model.

    ``epsilon`` and ``delta`` are the central guarantee for the analyzer's full view (+1 and -1
    message counts per bin) of ``num_users`` users and ``num_bins`` bins, as computed by
    :func:`dpkd_audit.mechanisms.shuffle.shuffled_histogram_delta`.
    """

    epsilon: float
    delta: float
    num_users: int
    num_bins: int

    def __attrs_post_init__(self) -> None:
        _check_eps("epsilon", self.epsilon)
        _check_delta("delta", self.delta)
        _check_count("num_users", self.num_users, 1)
        _check_count("num_bins", self.num_bins, 1)

    def guarantee(self) -> tuple[float, float]:
        return (float(self.epsilon), float(self.delta))


def _votes_field(value: Any) -> tuple[int, ...] | None:
    if value is None:
        return None
    return tuple(int(v) for v in value)


def _check_votes(votes: tuple[int, ...] | None, num_classes: int) -> None:
    if votes is None:
        return
    _require(len(votes) == num_classes,
             f"votes must have num_classes={num_classes} entries; got {len(votes)}")
    _require(min(votes) >= 0, f"votes must be non-negative counts; got {votes}")


@attr.s(frozen=True, slots=True, auto_attribs=True)
class LaplaceNoisyMaxDpEvent(_dp.DpEvent, DeclaredGuarantee):
    """PATE LNMax: argmax of a vote histogram plus Laplace(noise_scale) noise on each count.

    Changing one teacher (one private record's shard) moves one vote: one count -1, another +1.
    Papernot et al. 2017 (PATE), Section 3 / Dwork-Roth 2014 Claim 3.9: (2 / noise_scale)-DP per
    query. ``votes`` (optional) keeps the histogram for the data-dependent analysis.
    """

    noise_scale: float
    num_classes: int
    votes: tuple[int, ...] | None = attr.ib(default=None, converter=_votes_field)

    def __attrs_post_init__(self) -> None:
        _check_eps("noise_scale", self.noise_scale)
        _check_count("num_classes", self.num_classes, 2)
        _check_votes(self.votes, self.num_classes)

    def guarantee(self) -> tuple[float, float]:
        return (2.0 / float(self.noise_scale), 0.0)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class GaussianNoisyMaxDpEvent(_dp.DpEvent, DeclaredGuarantee):
    """PATE GNMax: argmax of a vote histogram plus N(0, sigma^2) noise on each count.

    Papernot et al. 2018, Section 4.1. One teacher's change moves the histogram by L2 norm
    sqrt(2); the declared (epsilon, delta) is that of the Gaussian mechanism with sensitivity
    sqrt(2) (Balle-Wang 2018 Thm 8), of which the argmax is a post-processing; checked at
    construction. ``votes`` (optional) keeps the histogram for the data-dependent analysis.
    """

    sigma: float
    num_classes: int
    epsilon: float
    delta: float
    votes: tuple[int, ...] | None = attr.ib(default=None, converter=_votes_field)

    def __attrs_post_init__(self) -> None:
        _check_eps("sigma", self.sigma)
        _check_count("num_classes", self.num_classes, 2)
        _check_eps("epsilon", self.epsilon)
        _check_delta("delta", self.delta)
        actual = analytic_gaussian_delta(self.epsilon, self.sigma, math.sqrt(2.0))
        _require(actual <= self.delta * (1 + _CALIBRATION_SLACK),
                 f"sigma={self.sigma} does not give ({self.epsilon}, {self.delta})-DP: its exact "
                 f"delta at that epsilon is {actual}")
        _check_votes(self.votes, self.num_classes)

    def guarantee(self) -> tuple[float, float]:
        return (float(self.epsilon), float(self.delta))


# --------------------------------------------------------------------------- serialisation

_ALLOWED_MODULES = ("dp_accounting.dp_event", __name__)


def _encode(value: Any) -> Any:
    if isinstance(value, _dp.DpEvent):
        cls = type(value)
        fields = {f.name: _encode(getattr(value, f.name)) for f in attr.fields(cls)}
        return {"__event__": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}
    if isinstance(value, (list, tuple)):
        return {"__seq__": type(value).__name__, "items": [_encode(v) for v in value]}
    if isinstance(value, float) and not math.isfinite(value):
        return {"__float__": repr(value)}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"cannot serialise event field of type {type(value).__name__}: {value!r}")


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "__event__" in value:
            module_name, _, class_name = value["__event__"].partition(":")
            if module_name not in _ALLOWED_MODULES:
                raise ValueError(f"refusing to load an event from module {module_name!r}")
            cls = getattr(importlib.import_module(module_name), class_name, None)
            if not (isinstance(cls, type) and issubclass(cls, _dp.DpEvent)):
                raise ValueError(f"unknown event class {value['__event__']!r}")
            fields = {k: _decode(v) for k, v in value["fields"].items()}
            init = {f.name: fields[f.name] for f in attr.fields(cls) if f.name in fields}
            return cls(**init)
        if "__seq__" in value:
            items = [_decode(v) for v in value["items"]]
            return tuple(items) if value["__seq__"] == "tuple" else items
        if "__float__" in value:
            return float(value["__float__"])
    return value


def _rebuild(value: Any) -> Any:
    """``value`` with every event in it rebuilt through its class's constructor, innermost first."""
    if isinstance(value, _dp.DpEvent):
        cls = type(value)
        init = {f.alias: _rebuild(getattr(value, f.name)) for f in attr.fields(cls) if f.init}
        return cls(**init)
    if isinstance(value, (list, tuple)):
        return type(value)(_rebuild(v) for v in value)
    return value


def validate_event(event: Any, name: str = "event") -> dp_accounting.DpEvent:
    """Check ``event`` exactly as its constructors do, nested events included; return it rebuilt.

    A frozen event can still be built around its constructor (``object.__new__``,
    ``object.__setattr__`` on a frozen instance) with values the constructor refuses, such as a
    negative epsilon (issue 65: a ledger charged one and its spent epsilon went down). This
    calls the constructor of every event in ``event`` again, with its fields, so its own checks
    run (this module's ``__attrs_post_init__``, dp_accounting's and their converters); nothing
    is checked twice in another way.

    Args:
        event: The event to check.
        name: How to name it in an error message (e.g. ``"event #2 ('label')"``).

    Returns:
        An equal event, built by the constructors (what a caller should keep and account for).

    Raises:
        ValueError: If ``event`` is not a dp_accounting ``DpEvent``, or a constructor refuses
            one of its (nested) events; the message names ``name``, the event and the field.
    """
    if not isinstance(event, _dp.DpEvent):
        raise ValueError(f"{name} must be a dp_accounting DpEvent; got {type(event).__name__}")
    try:
        return _rebuild(event)
    except Exception as exc:  # any refusal by a constructor, or a field that is not there
        shown = object.__repr__(event)
        with contextlib.suppress(Exception):  # a repr that fails on the bad field keeps this
            shown = repr(event)
        if len(shown) > 200:
            shown = shown[:197] + "..."
        raise ValueError(f"{name} {shown} is not a valid {type(event).__name__} (it was built "
                         f"around its constructor's checks): {type(exc).__name__}: {exc}") \
            from exc


def event_to_json(event: dp_accounting.DpEvent) -> str:
    """Serialise a DpEvent (dp_accounting's or ours, nested ones included) to canonical JSON."""
    if not isinstance(event, _dp.DpEvent):
        raise ValueError(f"event must be a dp_accounting DpEvent; got {type(event).__name__}")
    return json.dumps(_encode(event), sort_keys=True, separators=(",", ":"))


def event_from_json(text: str) -> dp_accounting.DpEvent:
    """Inverse of :func:`event_to_json`; only dp_accounting's and this module's classes load."""
    event = _decode(json.loads(text))
    if not isinstance(event, _dp.DpEvent):
        raise ValueError("JSON does not describe a DpEvent")
    return event
