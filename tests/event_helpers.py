"""Comparing privacy plans with what a run charged."""

from __future__ import annotations

from collections.abc import Iterable

from dp_accounting import dp_event as _dp

from dpkd_audit.events import event_to_json


def flat_events(events: Iterable[_dp.DpEvent]) -> list[str]:
    """Events as sorted JSON, every SelfComposedDpEvent(e, n) spelled out as n copies of e.

    A DP-SGD run (a self-composed Poisson-sampled Gaussian) stays one event: plans and ledgers
    both hold it whole.
    """
    out = []
    for event in events:
        if isinstance(event, _dp.SelfComposedDpEvent) and not isinstance(
                event.event, _dp.PoissonSampledDpEvent):
            out.extend([event_to_json(event.event)] * event.count)
        else:
            out.append(event_to_json(event))
    return sorted(out)
