"""One privacy budget for a whole sweep: ``dpkd sweep ... --ledger FILE [--ledger-epsilon E]``.

Without ``--ledger`` every run of a sweep is its own experiment with its own fresh ledger. With
it, the sweep's runs are releases about the same private records, and their budgets compose:
before any run starts (on this machine or as Ray tasks), every run's charges are planned from
the pipeline's own pre-run check (``planned_run_events``), checked together against the ledger,
and then charged to it by this process alone, in one transaction (all or nothing: a sweep paused
or killed while charging leaves none of its plan). Runs never write the ledger file themselves,
so no two hosts write it at once (SQLite's locking is not safe on a network file system: keep
the file on the driver's local disk).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpkd_audit.cli.arguments import positive_float
from dpkd_audit.cli.paths import output_file

__all__ = ["add_ledger_arguments", "reserve_sweep_budget"]


def add_ledger_arguments(p: argparse.ArgumentParser) -> None:
    """``--ledger`` and ``--ledger-epsilon`` of ``dpkd sweep``."""
    p.add_argument("--ledger", metavar="FILE",
                   help="one SQLite ledger for the whole sweep: every run's charges are "
                        "planned, checked together and charged before any run starts "
                        "(default: each run its own fresh ledger)")
    p.add_argument("--ledger-epsilon", type=positive_float, metavar="E",
                   help="budget of a new --ledger file (the whole sweep's epsilon; its delta "
                        "is the runs' delta, its accountant that of the method's ledgers)")


def reserve_sweep_budget(args: argparse.Namespace, configs: Sequence[Any],
                         checked: Mapping[Any, Any], *,
                         plan: Callable[[Any, Mapping[Any, Any]], list[Any]],
                         ledger_for: Callable[[Any], Any],
                         point_key: Callable[[Any], tuple[Any, ...]]) -> int:
    """Plan, check and charge every run of the sweep to ``--ledger``; return the charges made.

    With ``--resume``, charges already in the ledger for the same point of the same output
    folder (same label) are not made again; otherwise every run is charged (it releases
    again).

    Raises:
        ValueError: For a missing ``--ledger-epsilon`` on a new file, or one that contradicts
            an existing file's budget.
        BudgetExceededError: When the sweep does not fit the budget (nothing charged).
    """
    from dpkd_audit.ledger import Ledger

    if not getattr(args, "ledger", None):
        if getattr(args, "ledger_epsilon", None) is not None:
            raise ValueError("--ledger-epsilon applies with --ledger FILE only")
        return 0
    path = output_file(args.ledger, "--ledger")
    out = str(Path(args.out).resolve())
    planned: list[tuple[str, Any]] = []
    for config in configs:
        events = plan(config, checked)
        planned.extend((f"sweep {out}: run {point_key(config)}, charge {i}/{len(events)}", e)
                       for i, e in enumerate(events, start=1))
    label = f"sweep {out}"
    if path.exists():
        ledger = Ledger.open(path)
        try:
            if args.ledger_epsilon is not None and not math.isclose(
                    ledger.epsilon, args.ledger_epsilon, rel_tol=1e-12):
                raise ValueError(f"--ledger-epsilon {args.ledger_epsilon:g} differs from the "
                                 f"budget of {path} ({ledger.epsilon:g}): a ledger's budget "
                                 "never changes; drop --ledger-epsilon or use another file")
            if args.resume:
                done = {c.label: c.event for c in ledger.charges()}
                for name, event in planned:
                    # the run will release with this plan's parameters: what the ledger holds
                    # for it must be exactly that (issue 33: a resume with another --delta
                    # released at a delta that was never charged)
                    if name in done and done[name] != event:
                        raise ValueError(
                            f"--resume: {name!r} was charged to {path} as {done[name]!r}, but "
                            f"this sweep plans {event!r} for it (another --delta, epsilon or "
                            "configuration?); resume with the parameters of the first run, or "
                            "write to another --out")
                planned = [(name, e) for name, e in planned if name not in done]
            if planned:
                ledger.check([e for _, e in planned], label=label)
        except BaseException:
            ledger.close()
            raise
    else:
        if args.ledger_epsilon is None:
            raise ValueError(f"--ledger {path} does not exist: give --ledger-epsilon E, the "
                             "budget of the whole sweep, to create it")
        accountant = ledger_for(configs[0]).accountant
        delta = float(getattr(configs[0], "delta", 0.0) or 0.0)
        if planned:  # checked in memory first: a refused plan leaves no file behind
            Ledger(epsilon=args.ledger_epsilon, delta=delta, accountant=accountant).check(
                [e for _, e in planned], label=label)
        ledger = Ledger(epsilon=args.ledger_epsilon, delta=delta, accountant=accountant,
                        path=path)
    try:
        if planned:  # one transaction: a pause or a kill leaves all of the plan or none of it
            ledger.charge_all([(event, name) for name, event in planned])
    finally:
        ledger.close()
    return len(planned)
