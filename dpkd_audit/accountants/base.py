"""The accountant contract shared by every accountant of the package.

Same surface as dp_accounting's ``PrivacyAccountant``: ``compose(event, count=1) -> self``,
``get_epsilon(target_delta)``, ``get_delta(target_epsilon)``, a neighbouring relation fixed at
construction, and a two-phase compose: the whole event tree is checked first, and only then is
the state mutated, so a refused event leaves the accountant unchanged. Identical events are
grouped (``count`` x event) and evaluated lazily.
"""

from __future__ import annotations

import abc
import copy
import enum
from collections import Counter
from typing import Self

from dp_accounting import dp_event as _dp
from dp_accounting import privacy_accountant as _pa

from dpkd_audit import _validate

__all__ = [
    "Accountant",
    "BoundKind",
    "Epsilon",
    "NeighboringRelation",
    "UnsupportedEventError",
]

NeighboringRelation = _pa.NeighboringRelation


class BoundKind(enum.Enum):
    """What an epsilon value means."""

    UPPER_BOUND = "upper bound"
    ESTIMATE = "estimate"
    DATA_DEPENDENT = "data-dependent"


class Epsilon(float):
    """A float epsilon that also says which method produced it and what kind of bound it is."""

    method: str
    kind: BoundKind

    def __new__(cls, value: float, *, method: str, kind: BoundKind) -> Epsilon:
        obj = super().__new__(cls, value)
        obj.method = method
        obj.kind = kind
        return obj

    def __repr__(self) -> str:
        return f"Epsilon({float(self)!r}, method={self.method!r}, kind={self.kind.value!r})"

    def __reduce__(self):  # keep pickling (multiprocessing) working
        return (_make_epsilon, (float(self), self.method, self.kind))


def _make_epsilon(value: float, method: str, kind: BoundKind) -> Epsilon:
    return Epsilon(value, method=method, kind=kind)


class UnsupportedEventError(ValueError):
    """An accountant was given an event it cannot account for; the message names the event.

    Attributes:
        event: The offending (leaf) event, when known.
        reason: Why it is unsupported (may be empty).
    """

    def __init__(self, message: str, *, event: object = None, reason: str = "") -> None:
        super().__init__(message)
        self.event = event
        self.reason = reason


class Accountant(abc.ABC):
    """Base class: grouped lazy composition with a two-phase ``compose``.

    Subclasses implement :meth:`_check_leaf` (raise ``UnsupportedEventError`` for unknown leaf
    events) and the two queries. The composed history is kept as a multiset of leaf events
    (``self._counts``), with ``NonPrivateDpEvent`` and ``NoOpDpEvent`` handled here.
    """

    #: Human-readable name of the method, attached to every epsilon returned.
    method: str = "abstract"

    def __init__(self, neighboring_relation: NeighboringRelation =
                 NeighboringRelation.REPLACE_ONE) -> None:
        if not isinstance(neighboring_relation, NeighboringRelation):
            raise ValueError(
                "neighboring_relation must be a dp_accounting NeighboringRelation "
                f"({', '.join(r.name for r in NeighboringRelation)}); got {neighboring_relation!r}")
        self._relation = neighboring_relation
        self._counts: Counter[_dp.DpEvent] = Counter()
        self._non_private = False

    @property
    def neighboring_relation(self) -> NeighboringRelation:
        """The neighbouring relation fixed at construction."""
        return self._relation

    def supports(self, event: _dp.DpEvent) -> bool:
        """Whether :meth:`compose` would accept ``event``."""
        try:
            self._leaves(event, 1)
        except UnsupportedEventError:
            return False
        return True

    def compose(self, event: _dp.DpEvent, count: int = 1) -> Self:
        """Compose ``count`` copies of ``event``; all-or-nothing.

        Raises:
            UnsupportedEventError: If any part of ``event`` is not supported (the message names
                it); the accountant is then unchanged.
            ValueError: If ``count`` is not an integer >= 1.
        """
        count = _validate.check_int("count", count, minimum=1)
        leaves = self._leaves(event, count)  # phase 1: check everything, mutate nothing
        self._check_totals(leaves)
        for leaf, n in leaves.items():  # phase 2: mutate
            if isinstance(leaf, _dp.NonPrivateDpEvent):
                self._non_private = True
            else:
                self._counts[leaf] += n
        if leaves:
            self._on_compose(leaves)
        return self

    def _check_totals(self, leaves: Counter[_dp.DpEvent]) -> None:
        """Phase-1 hook: refuse ``leaves`` the accountant cannot compute exactly.

        Raises ``UnsupportedEventError`` if adding ``leaves`` (with their counts) to the history
        would leave the range the accountant computes exactly (no-op by default).
        """
        return None

    def _on_compose(self, leaves: Counter[_dp.DpEvent]) -> None:
        """Hook run after phase 2 with the composed leaves; must not fail (no-op by default)."""
        return None

    def copy(self) -> Self:
        """An independent copy of this accountant and its history."""
        return copy.deepcopy(self)

    @property
    def is_empty(self) -> bool:
        """True while nothing has been composed."""
        return not self._counts and not self._non_private

    @property
    def is_non_private(self) -> bool:
        """True once a ``NonPrivateDpEvent`` has been composed (epsilon is then infinite)."""
        return self._non_private

    def _leaves(self, event: _dp.DpEvent, count: int) -> Counter[_dp.DpEvent]:
        out: Counter[_dp.DpEvent] = Counter()
        self._collect(event, count, out)
        return out

    def _collect(self, event: _dp.DpEvent, count: int, out: Counter) -> None:
        if not isinstance(event, _dp.DpEvent):
            raise UnsupportedEventError(
                f"{type(self).__name__} accepts dp_accounting DpEvents; got "
                f"{type(event).__name__}: {event!r}")
        if isinstance(event, _dp.NoOpDpEvent):
            return
        if isinstance(event, _dp.NonPrivateDpEvent):
            out[event] += count
        elif isinstance(event, _dp.SelfComposedDpEvent):
            _validate.check_int("SelfComposedDpEvent.count", event.count, minimum=0)
            if event.count:
                self._collect(event.event, count * event.count, out)
        elif isinstance(event, _dp.ComposedDpEvent):
            for sub in event.events:
                self._collect(sub, count, out)
        else:
            self._check_leaf(event)
            out[event] += count

    @abc.abstractmethod
    def _check_leaf(self, event: _dp.DpEvent) -> None:
        """Raise ``UnsupportedEventError`` naming ``event`` if it cannot be accounted."""

    @abc.abstractmethod
    def get_epsilon(self, target_delta: float) -> Epsilon:
        """Smallest epsilon this accountant can certify at ``target_delta``."""

    @abc.abstractmethod
    def get_delta(self, target_epsilon: float) -> float:
        """Smallest delta this accountant can certify at ``target_epsilon``."""

    def _unsupported(self, event: _dp.DpEvent, why: str = "") -> UnsupportedEventError:
        return UnsupportedEventError(
            f"{type(self).__name__} cannot account for {type(event).__name__} ({event!r})"
            + (f": {why}" if why else ""), event=event, reason=why)
