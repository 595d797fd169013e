"""``dpkd audit-run PIPELINE``: an empirical lower bound on a whole pipeline's epsilon.

Writes ``OUT/audit.json`` (the record: claim, bound, confidence, verdict, canary, runs, event,
score histograms, seconds, config, command, provenance) and ``OUT/audit.png`` (score histograms
of the two sides and the bound against the claim). Exit status 1 when the bound refutes the
claim (for CI gating), 0 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from dpkd_audit.cli.arguments import int_at_least, positive_float
from dpkd_audit.cli.pipelines import (
    _MODES,
    _add_rknn_arguments,
    _command,
    _out_dir,
    _rknn_config,
    _write_json,
)

__all__ = ["add_audit_run_parser"]


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from exc
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def _cmd_audit_run_rknn(args: argparse.Namespace) -> int:
    from dpkd_audit.audit.training import MIN_RUNS
    from dpkd_audit.pipelines.rknn import check_configs, splits_key
    from dpkd_audit.pipelines.rknn.audit import audit_release
    from dpkd_audit.provenance import provenance
    from dpkd_audit.reports.training_audit import plot_pipeline_audit, score_histogram

    if args.runs < MIN_RUNS:
        raise ValueError(f"--runs must be >= {MIN_RUNS} for the many-run audit of rknn (the "
                         f"event is chosen on 20% of the runs and bounded on the rest); got "
                         f"{args.runs}")
    config = _rknn_config(args, epsilon=args.epsilon, mode=args.mode)
    checked = check_configs([config], data_dir=args.data_dir, progress=not args.quiet)
    out = _out_dir(args.out)
    result = audit_release(config, runs=args.runs, confidence=args.confidence,
                           seed=args.audit_seed, splits=checked[splits_key(config)].splits,
                           progress=not args.quiet)
    record: dict[str, Any] = result.to_record(command=_command(args.argv),
                                              provenance=provenance())
    record["score_name"] = ("canary score: released count of the canary's label minus that of "
                            "its other label, summed over its k queries")
    record["score_histogram"] = score_histogram(result.scores[True], result.scores[False])
    record["audit_seed"] = args.audit_seed
    _write_json(out / "audit.json", record)
    plot_pipeline_audit(record, out / "audit.png")
    print(f"{result.audit}\nwrote {out / 'audit.json'} and {out / 'audit.png'}")
    if args.json:
        print(json.dumps(record, indent=2))
    return 1 if result.audit.violation else 0


def add_audit_run_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``audit-run`` (a sub-command per pipeline) to ``dpkd``."""
    parser = sub.add_parser(
        "audit-run", help="empirical lower bound on a whole pipeline's epsilon (many runs)")
    pipelines = parser.add_subparsers(dest="pipeline", metavar="PIPELINE")
    pipelines.required = True
    p = pipelines.add_parser(
        "rknn", help="reverse k-NN: the release path re-run with and without one record's label",
        description="Re-runs the reverse k-NN release path (votes -> mechanism -> labels, each "
                    "run charged to its own ledger) RUNS times on each of two datasets that "
                    "differ in one record's label (replace-one, the relation of the claim), "
                    "with the representation and queries fitted once on public data; bounds "
                    "epsilon from every output of the runs. Exit status 1 on a violation.")
    p.add_argument("--epsilon", type=positive_float, default=1.0,
                   help="claimed (target) epsilon of the runs (default 1)")
    p.add_argument("--mode", choices=_MODES, default="central", help="release model")
    p.add_argument("--runs", type=int_at_least(1), default=20_000,
                   help="runs per side (default 20000; >= 40)")
    p.add_argument("--confidence", type=_confidence, default=0.95,
                   help="confidence of the bound (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="seed of the pipeline's k-means")
    p.add_argument("--audit-seed", type=int_at_least(0), default=0,
                   help="seed of the canary choice and of the runs' noise (default 0)")
    p.add_argument("--json", action="store_true", help="print the record")
    _add_rknn_arguments(p)
    p.set_defaults(func=_cmd_audit_run_rknn)
