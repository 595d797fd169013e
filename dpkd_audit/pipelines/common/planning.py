"""What a run will charge, read off its pipeline's own pre-run check.

Every pipeline checks, before any work, that its ledger can pay for the run
(``check_run(config, ledger, ...)`` calls ``ledger.check(events)``). :class:`PlanRecorder` is an
unbounded in-memory ledger that keeps those events, so a sweep can plan all its runs' charges
from the code that will make them, and check them against one shared ledger before any run
starts (``dpkd sweep ... --ledger FILE``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from dp_accounting import dp_event as _dp

from dpkd_audit.accountants.base import Accountant, Epsilon
from dpkd_audit.ledger import Ledger

__all__ = ["PlanRecorder", "planned_by_check"]


class PlanRecorder(Ledger):
    """An unbounded, in-memory ledger that records every event a pre-run check asks about.

    Args:
        accountant: The accountant (and neighbouring relation) of the run's own ledger, so
            that the check runs exactly as it would against that ledger.
    """

    def __init__(self, accountant: Accountant) -> None:
        super().__init__(epsilon=math.inf, unbounded=True, accountant=accountant)
        self.planned: list[_dp.DpEvent] = []

    def check(self, events: Sequence[_dp.DpEvent], *, label: str) -> Epsilon:
        """Record ``events`` (the run's plan) and check them as the ledger would."""
        events = list(events)
        result = super().check(events, label=label)
        self.planned.extend(events)
        return result


def planned_by_check(check_run: Callable[..., Any], config: Any, ledger: Ledger,
                     dataset: Any) -> list[_dp.DpEvent]:
    """The events ``check_run(config, ...)`` plans for a run on ``dataset``.

    ``ledger`` is the run's own fresh ledger (its accountant and neighbouring relation are
    used, nothing is charged to it); ``dataset`` gives ``n_train``, ``num_classes`` and
    ``image_shape``.
    """
    recorder = PlanRecorder(ledger.accountant)
    check_run(config, recorder, num_private=dataset.n_train, num_classes=dataset.num_classes,
              image_shape=dataset.image_shape)
    return recorder.planned
