"""``dpkd report``: one page (HTML, Markdown, PNG) across methods, budgets and audits."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from dpkd_audit.cli.paths import output_dir

__all__ = ["DEFAULT_OUT", "add_report_parser", "committed_reports"]

#: Where ``dpkd report`` without records writes, relative to the repository root.
DEFAULT_OUT = Path("reports") / "overview"

_INTRO = ("Everything committed under reports/ on one page: accuracy against the published and "
          "the record-level epsilon for reverse k-NN, DP-DFD and DGD (published and sound "
          "variants), each run's plan under every accountant, the audits of the mechanisms and "
          "of whole pipelines, and where each record came from. Built by `dpkd report` from the "
          "records alone; the folders' own README files say how each was run.")


def committed_reports() -> Path:
    """The repository root whose ``reports/`` folder holds the committed records.

    Raises:
        ValueError: When the package does not run from a checkout (an installed copy has no
            ``reports/``).
    """
    import dpkd_audit

    root = Path(dpkd_audit.__file__).resolve().parent.parent
    if not (root / "reports").is_dir() or not (root / "pyproject.toml").is_file():
        raise ValueError("no RECORDS given and no committed reports/ folder beside the package "
                         f"(looked in {root}; an installed package has none): give record files "
                         "or folders, e.g. dpkd report results.jsonl --out report/")
    return root


def _cmd_report(args: argparse.Namespace) -> int:
    from dpkd_audit.provenance import package_version
    from dpkd_audit.reports.overview_render import build_report

    if args.records:
        if args.out is None:
            raise ValueError("--out is required when RECORDS are given (the folder the report "
                             "is written to)")
        paths, base, intro = args.records, Path.cwd(), ""
        out = Path(args.out)
    else:
        root = committed_reports()
        paths, base, intro = [root / "reports"], root, _INTRO
        out = Path(args.out) if args.out is not None else root / DEFAULT_OUT
    command = "dpkd " + " ".join(shlex.quote(a) for a in args.argv)
    intro = (intro + " " if intro else "") + (
        f"Command: `{command}` (dpkd-audit {package_version() or 'unknown version'}).")
    files = build_report(paths, out, base=base, title=args.title, intro=intro,
                         prepare=lambda: output_dir(out, "--out"))
    print(f"dpkd report: {files.records} records -> {files.html}, {files.markdown}, "
          f"{len(files.figures)} figures", file=sys.stderr if args.quiet else sys.stdout)
    return 0


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``dpkd report``."""
    p = sub.add_parser(
        "report", help="one page (HTML, Markdown, PNG) of result, audit and pipeline-audit "
                       "records; without RECORDS, the committed reports/",
        description="Reads result records only (results.jsonl, result.json, the mechanism "
                    "audits' results.json, the pipeline audits' audit.json; folders are "
                    "searched for them) and writes OUT/index.html (self-contained: figures "
                    "beside it, no network), OUT/report.md and the PNGs: accuracy against the "
                    "published and the record-level epsilon (infinite record-level runs in a "
                    "column of their own), paper numbers as markers, each run's plan under "
                    "every accountant, the audits (claimed vs lower bound), and the provenance "
                    "of every record. Every number in a table names the record(s) it comes "
                    "from. Without RECORDS it reads the repository's reports/ folder and "
                    f"writes {DEFAULT_OUT}/.")
    p.add_argument("records", nargs="*", metavar="RECORDS",
                   help="record files or folders (default: the committed reports/)")
    p.add_argument("--out", help=f"output folder (default without RECORDS: {DEFAULT_OUT})")
    p.add_argument("--title", default="dpkd-audit: results across methods, budgets and audits",
                   help="page title")
    p.add_argument("--quiet", action="store_true", help="print the summary on stderr")
    p.set_defaults(func=_cmd_report)
