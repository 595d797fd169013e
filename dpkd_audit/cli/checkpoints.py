"""``--checkpoint-dir`` / ``--checkpoint-every`` of every ``dpkd run METHOD`` and ``dpkd sweep``.

The run's long loops save their state in the folder and continue from it when the same
command is given again (:mod:`dpkd_audit.pipelines.common.checkpoint`); a sweep also takes
``--resume``, which skips the runs its ``results.jsonl`` already holds.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from dpkd_audit.cli.arguments import positive_float
from dpkd_audit.cli.paths import check_output_dir

__all__ = ["add_checkpoint_arguments", "resumed_fields"]


def add_checkpoint_arguments(p: argparse.ArgumentParser) -> None:
    """Add the checkpoint flags to a run or sweep parser and wrap its command."""
    p.add_argument("--checkpoint-dir", metavar="DIR",
                   help="save the long training loops' state in DIR (as private as the data) "
                        "and continue from it when the command is run again; a checkpoint of "
                        "other code is refused")
    p.add_argument("--checkpoint-every", type=positive_float, default=120.0, metavar="S",
                   help="seconds between two saves of a running loop (default 120; a loop "
                        "also saves when it ends and on SIGINT)")
    command = p.get_default("func")
    if command is not None:
        p.set_defaults(func=_with_checkpoints(command))


def _with_checkpoints(command: Callable[[argparse.Namespace], int]
                      ) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        if args.checkpoint_dir is None:
            return command(args)
        check_output_dir(args.checkpoint_dir, "--checkpoint-dir")  # before any work
        if getattr(args, "executor", "local") != "local":
            raise ValueError("--checkpoint-dir works with --executor local only (Ray workers "
                             f"would each need the folder); got --executor {args.executor}")
        from dpkd_audit.pipelines.common.checkpoint import Checkpoints

        checkpoints = Checkpoints(args.checkpoint_dir, every_seconds=args.checkpoint_every)
        with checkpoints:
            status = command(args)
        if checkpoints.resumed and not getattr(args, "quiet", False):
            loops = ", ".join(f"{stage} at {step}/{total}"
                              for stage, step, total in checkpoints.resumed)
            print(f"resumed from {args.checkpoint_dir}: {loops}", file=sys.stderr)
        return status
    return run


def resumed_fields() -> dict[str, Any]:
    """A record's ``resumed_loops`` under ``--checkpoint-dir``; nothing without it.

    The loops that continued from a checkpoint since the previous record (none: ``[]``).

    A resumed loop's stage seconds count only the part this process ran.
    """
    from dpkd_audit.pipelines.common.checkpoint import active_checkpoints

    checkpoints = active_checkpoints()
    return {} if checkpoints is None else {"resumed_loops": checkpoints.take_resumed()}
