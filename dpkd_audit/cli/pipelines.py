"""``dpkd run METHOD``, ``dpkd sweep METHOD`` and ``dpkd results``: the registry of methods.

Each method's commands live in their own module (:mod:`dpkd_audit.cli.rknn`,
:mod:`~dpkd_audit.cli.dpdfd`, :mod:`~dpkd_audit.cli.dgd`), all built on
:mod:`dpkd_audit.cli.sweeps`; this module only registers them (it imports them, none imports
it) and renders records as the Markdown the guide shows (``results``, GUIDE.md).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dpkd_audit.cli.checkpoints import add_checkpoint_arguments
from dpkd_audit.cli.dgd import add_dgd_parsers
from dpkd_audit.cli.dpdfd import add_dpdfd_parsers
from dpkd_audit.cli.rknn import add_rknn_parsers

__all__ = ["add_pipeline_parsers"]


def add_pipeline_parsers(sub: argparse._SubParsersAction) -> None:
    """Add ``run`` and ``sweep`` (each with a sub-command per method) and ``results``."""
    run = sub.add_parser("run", help="run a pipeline end to end; writes OUT/result.json")
    run_methods = run.add_subparsers(dest="method", metavar="METHOD")
    run_methods.required = True
    sweep = sub.add_parser("sweep", help="several runs; writes results.jsonl, a plot and a "
                                         "README")
    sweep_methods = sweep.add_subparsers(dest="method", metavar="METHOD")
    sweep_methods.required = True
    add_rknn_parsers(run_methods, sweep_methods)
    add_dpdfd_parsers(run_methods, sweep_methods)
    add_dgd_parsers(run_methods, sweep_methods)
    for parser in (*run_methods.choices.values(), *sweep_methods.choices.values()):
        add_checkpoint_arguments(parser)

    p = sub.add_parser(
        "results",
        help="Markdown results table of saved records (the guide's results sections, GUIDE.md)",
        description="Reads result records (results.jsonl of a sweep, result.json of a run, or "
                    "folders holding them) and prints one Markdown table with what its columns "
                    "mean, the cluster purity, and a link to each folder with the "
                    "provenance of its records. GUIDE.md's results sections are this output "
                    "for reports/rknn/*/ (a test keeps them equal).")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="result files (.jsonl, .json) or folders holding results.jsonl")
    p.set_defaults(func=_cmd_results)


def _cmd_results(args: argparse.Namespace) -> int:
    from dpkd_audit.reports.tables import results_overview

    def holds_records(path: str) -> bool:
        folder = Path(path)
        return not folder.is_dir() or any((folder / name).is_file()
                                          for name in ("results.jsonl", "result.json"))

    # A glob such as reports/dgd/*/ also matches folders of folders (ablations/): skip those
    # with a note, unless no path holds records at all (then results_overview says why).
    paths = [p for p in args.paths if holds_records(p)] or args.paths
    for skipped in sorted(set(args.paths) - set(paths)):
        print(f"dpkd results: skipped {skipped}: no results.jsonl or result.json in this folder "
              "(its sub-folders are not read)", file=sys.stderr)
    print(results_overview(paths), end="")
    return 0
