"""The mechanism contract: declared sensitivity, claimed guarantee, event, release and sample.

Every mechanism of the package is a frozen, keyword-only dataclass deriving from
:class:`Mechanism`. It validates its parameters in ``__post_init__`` (``ValueError`` naming the
parameter), derives its noise scale from the declared sensitivity and the privacy parameter, and
exposes:

- ``sensitivity`` (:class:`Sensitivity`: value and :class:`Norm`),
- ``epsilon`` / ``delta`` (the claimed guarantee of one release) and ``guarantee``,
- ``event``: the ``DpEvent`` one release is charged as,
- ``release(value, *, rng, ledger=None)``: validate the input, charge the ledger (which refuses
  and raises before anything is sampled), then return one output,
- ``sample(value, n, *, rng)``: n independent outputs, vectorised (stacked along axis 0),
- ``neighbours()``: a worst-case pair of inputs for auditing.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from dp_accounting import dp_event as _dp

from dpkd_audit import _validate

if TYPE_CHECKING:  # pragma: no cover
    from dpkd_audit.ledger import Ledger

__all__ = ["MAX_GAUSSIAN_EPSILON", "AuditView", "Guarantee", "Mechanism", "Norm", "Sensitivity"]

#: Largest epsilon of the calibrated (epsilon, delta) mechanisms (Gaussian, GNMax, discrete
#: Gaussian). The float calibration evaluates a - b with a, b ~ sqrt(epsilon / 2) (Balle-Wang
#: 2018, Thm 8); up to 1e12 its rounding (< 1e-9 absolute) is far below what the curve
#: resolves, and the result is re-verified in arbitrary precision anyway. Larger epsilons
#: promise nothing useful.
MAX_GAUSSIAN_EPSILON = 1e12



class Norm(enum.Enum):
    """How the declared sensitivity is measured."""

    L1 = "L1"
    L2 = "L2"
    #: One record changes at most ``value`` entries/labels (replace-one neighbours).
    RECORDS = "records"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Sensitivity:
    """A declared sensitivity: how far one record can move the input, and in which norm."""

    value: float
    norm: Norm

    def __post_init__(self) -> None:
        value = _validate.check_positive("sensitivity", self.value)
        if value < _validate.SMALLEST_NORMAL:  # subnormal: scales derived from it lose bits
            raise ValueError(f"sensitivity must be a real number >= "
                             f"{_validate.SMALLEST_NORMAL:g} (a normal double); got {self.value!r}")
        if not isinstance(self.norm, Norm):
            raise ValueError(f"sensitivity norm must be a Norm ({', '.join(n.name for n in Norm)})"
                             f"; got {self.norm!r}")

    def __str__(self) -> str:
        return f"{self.value:.6g} ({self.norm.value})"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Guarantee:
    """What one release promises: (epsilon, delta)-DP; pure when delta == 0."""

    epsilon: float
    delta: float = 0.0

    @property
    def is_pure(self) -> bool:
        """Whether the guarantee is pure epsilon-DP."""
        return self.delta == 0.0

    def __str__(self) -> str:
        if self.is_pure:
            return f"{self.epsilon:g}-DP"
        return f"({self.epsilon:g}, {self.delta:g})-DP"


def coerce_sensitivity(value: Any, norm: Norm, *, integer: bool = False) -> Sensitivity:
    """Turn a number (or a :class:`Sensitivity`) into a Sensitivity measured in ``norm``.

    Raises:
        ValueError: If the value is not > 0, is not an integer where required, or a
            ``Sensitivity`` in another norm is given.
    """
    if isinstance(value, Sensitivity):
        if value.norm is not norm:
            raise ValueError(f"sensitivity must be measured in {norm.value} for this mechanism; "
                             f"got {value.norm.value}")
        value = value.value
    if integer:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return Sensitivity(value=_validate.check_int("sensitivity", value, minimum=1), norm=norm)
    return Sensitivity(value=_validate.check_positive("sensitivity", value), norm=norm)


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class AuditView:
    """A public, fixed reduction of a mechanism's outputs for auditing one neighbouring pair.

    Post-processing: an event on ``apply(outputs)`` is an event on the outputs, so a lower
    bound computed on the view is a lower bound for the mechanism. A view only adds power where
    the raw outputs hide what separates the pair from a black-box attack (a report whose meaning
    depends on a public hash seed; a shuffled multiset).

    Attributes:
        description: What the view keeps, for the audit record.
        apply: Maps a batch of outputs (``sample``'s return value) to an array, one row per
            output.
    """

    description: str
    apply: Callable[[Any], np.ndarray]


class Mechanism(abc.ABC):
    """Abstract base of all mechanisms (concrete ones are frozen keyword-only dataclasses)."""

    #: Short citation of the mechanism's source.
    reference: ClassVar[str] = ""
    #: True for a broken-on-purpose control (:mod:`dpkd_audit.audit.controls`) that samples in
    #: floating point and whose flaw lies elsewhere: the default audit then looks at its
    #: real-valued design only (:func:`dpkd_audit.audit.auditor.resolve_attack`). No package
    #: mechanism sets it; the textbook samplers do not either, so the default audit flags them.
    floating_point_output: ClassVar[bool] = False

    # ----------------------------------------------------------------- declared properties
    @property
    @abc.abstractmethod
    def sensitivity(self) -> Sensitivity:
        """The declared sensitivity the noise is calibrated to."""

    @property
    @abc.abstractmethod
    def event(self) -> _dp.DpEvent:
        """The privacy event one release is charged as."""

    def release_event(self, value: Any) -> _dp.DpEvent:
        """The event a release of the validated ``value`` is charged as (default: :attr:`event`).

        Mechanisms whose noise depends on the size of the released value (the float-safe
        Laplace: one grid step of sensitivity per changed coordinate) override it.
        """
        return self.event

    @property
    def guarantee(self) -> Guarantee:
        """The claimed guarantee of one release."""
        return Guarantee(epsilon=self.epsilon, delta=self.delta)

    # ``epsilon`` is a dataclass field in every concrete mechanism; ``delta`` defaults to 0.
    epsilon: float
    delta: float = 0.0

    @property
    def label(self) -> str:
        """Default ledger label: the mechanism's class name and guarantee."""
        return f"{type(self).__name__} {self.guarantee}"

    # ----------------------------------------------------------------- sampling
    @abc.abstractmethod
    def _check_value(self, value: Any) -> Any:
        """Validate and normalise one input; raise ``ValueError`` naming the problem."""

    @abc.abstractmethod
    def _sample(self, value: Any, n: int, rng: np.random.Generator) -> Any:
        """Draw ``n`` independent outputs for the validated ``value`` (stacked on axis 0)."""

    @abc.abstractmethod
    def neighbours(self) -> tuple[Any, Any]:
        """A worst-case pair of neighbouring inputs (for auditing)."""

    def audit_view(self, x: Any, x_prime: Any) -> AuditView | None:
        """A reduction of the outputs that keeps what separates ``x`` from ``x_prime``, if any.

        Default ``None``: the auditor attacks the raw outputs.
        """
        return None

    def _checked(self, value: Any) -> Any:
        """:meth:`_check_value`, then refuse an input with nothing in it.

        An empty array (any shape with a zero) releases nothing, so it must not be charged
        either: refused here, for every mechanism, before :meth:`release` charges.
        """
        checked = self._check_value(value)
        if isinstance(checked, np.ndarray) and checked.size == 0:
            raise ValueError(f"value must hold at least one entry; got an empty array of shape "
                             f"{checked.shape}")
        return checked

    def _values_per_output(self, value: Any) -> int:
        """Values drawn or returned per output on the validated ``value`` (for the size cap).

        Default: the size of an array input (at least 1). Mechanisms whose outputs or noise are
        larger than their input (noisy max: one noise per class; shufflers: one report per
        user) override it.
        """
        return max(1, int(value.size)) if isinstance(value, np.ndarray) else 1

    def sample(self, value: Any, n: int, *, rng: np.random.Generator) -> Any:
        """``n`` independent outputs on ``value``, vectorised (not charged to any ledger).

        For auditing and simulation only: a release of private data goes through
        :meth:`release` with a ledger.

        Raises:
            ValueError: On an invalid ``value``, ``n`` or ``rng``, or if the ``n`` outputs would
                hold more than :data:`~dpkd_audit._validate.MAX_SAMPLE_VALUES` values (checked
                before anything is drawn).
        """
        n = _validate.check_sample_count(n)
        rng = _validate.check_generator(rng)
        value = self._checked(value)
        _validate.check_output_size(n, self._values_per_output(value))
        return self._sample(value, n, rng)

    def release(self, value: Any, *, rng: np.random.Generator,
                ledger: Ledger | None = None, label: str | None = None) -> Any:
        """One private output on ``value``.

        The input is validated completely (type, dtype, shape, domain, output size) *before*
        the ledger is charged, so an invalid input raises ``ValueError`` and costs nothing.
        With a ``ledger``, the release is then charged: if the ledger refuses
        (``BudgetExceededError``) nothing is sampled and nothing is returned; if it accepts, the
        charge is durably recorded before the output exists.
        """
        rng = _validate.check_generator(rng)
        value = self._checked(value)
        per_output = self._values_per_output(value)
        if per_output > _validate.MAX_SAMPLE_VALUES:
            raise ValueError(f"value must give outputs of at most {_validate.MAX_SAMPLE_VALUES:.0e}"
                             f" values (the largest request a call may allocate); this one "
                             f"needs {per_output}")
        if ledger is not None:
            ledger.charge(self.release_event(value), label=label or self.label)
        return self._first(self._sample(value, 1, rng))

    @staticmethod
    def _first(batch: Any) -> Any:
        if isinstance(batch, np.ndarray):
            out = batch[0]
            return out.item() if isinstance(out, np.generic) else out
        return batch[0]
