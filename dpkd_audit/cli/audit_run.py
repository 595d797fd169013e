"""``dpkd audit-run PIPELINE``: an empirical lower bound on a whole pipeline's epsilon.

- ``rknn``: many runs of the release path with and without one record's label.
- ``dpdfd`` / ``dgd``: one run with canaries (Steinke-Nasr-Jagielski 2023): white-box gradient
  canaries in the sound mode's DP-SGD teacher / baseline, against the DP-SGD event's own
  epsilon; or mislabeled records through the whole run, scored on the released student, against
  the run's claim (published: the paper's epsilon). ``--analysis steinke|fdp|gaussian|all``
  (:class:`~dpkd_audit.audit.training.OneRunAnalysis`, default all): the guesses against
  (epsilon, delta)-DP, the same guesses against the claim's Gaussian trade-off curve, the
  scores fitted as two Gaussians (an estimate under that model), or the three side by side;
  the exit status follows the selected one (Steinke's with all). ``--guesses`` (each side) and
  ``--guesses-out`` (with it, ``--guesses`` is the "in" count; 0 out: "in" guesses only), fixed
  before the run.

Writes ``OUT/audit.json`` (the record: claim, bound, confidence, verdict, canary, runs, event,
score histograms, seconds, config, command, provenance) and ``OUT/audit.png`` (score histograms
of the two sides and the bound against the claim). Exit status 1 when the bound refutes the
claim (for CI gating), 0 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from dpkd_audit.cli.arguments import int_at_least, positive_float
from dpkd_audit.cli.limits import MAX_AUDIT_RUNS
from dpkd_audit.cli.names import ONE_RUN_ANALYSES
from dpkd_audit.cli.rknn import _MODES, _add_rknn_arguments, _rknn_config
from dpkd_audit.cli.sweeps import _command, _out_dir, _write_json

__all__ = ["add_audit_run_parser"]


def _confidence(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}") from exc
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def _analysis(text: str) -> Any:
    """``--analysis``: a :class:`~dpkd_audit.audit.training.OneRunAnalysis` by its value."""
    from dpkd_audit.audit.training import OneRunAnalysis

    try:
        return OneRunAnalysis.parse(text)
    except ValueError as exc:
        allowed = ", ".join(m.value for m in OneRunAnalysis)
        raise argparse.ArgumentTypeError(f"must be one of {allowed}; got {text!r}") from exc


def _analyses(args: argparse.Namespace, bound: Any, headline: str) -> tuple[dict[str, Any], int]:
    """The selected analyses' record fields and lines side by side; the exit status.

    Prints ``headline`` and one line per analysis; the exit status is 1 when the deciding
    analysis (the one selected; Steinke's with ``all``) refutes the claim.
    """
    from dpkd_audit.audit.training import one_run_analyses

    fields = one_run_analyses(bound, args.analysis)
    lines = [headline]
    for name, entry in fields["analyses"].items():
        value = entry["epsilon_lower"]
        if value is None:
            lines.append(f"  {name:<9} n/a (needs delta > 0 and two canaries on each side)")
            continue
        relation = "~" if name == "gaussian" else ">="
        extra = (f" (plug-in {entry['epsilon_estimate']:.4f}; an estimate under the Gaussian "
                 f"model of the scores)" if name == "gaussian" else "")
        lines.append(f"  {name:<9} epsilon {relation} {value:.4f} at {bound.confidence:.0%}: "
                     f"{entry['verdict']}{extra}")
    deciding = fields["analyses"][fields["deciding"]]["verdict"]
    lines.append(f"  exit status from {fields['deciding']}")
    print("\n".join(lines))
    return fields, 1 if deciding == "violation" else 0


def _cmd_audit_run_rknn(args: argparse.Namespace) -> int:
    from dpkd_audit.audit.training import MIN_RUNS
    from dpkd_audit.pipelines.rknn import check_configs, splits_key
    from dpkd_audit.pipelines.rknn.audit import audit_release
    from dpkd_audit.provenance import provenance
    from dpkd_audit.reports.training_audit import plot_pipeline_audit, score_histogram

    if args.runs > MAX_AUDIT_RUNS:
        raise ValueError(f"--runs must be at most {MAX_AUDIT_RUNS:,} per side (each run is a "
                         f"whole release path and its outputs are kept for the bound: the "
                         f"default 20,000 take minutes); got {args.runs:,}")
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
    record["device"] = f"cpu ({os.cpu_count()} cores; the release path is numpy only)"
    _write_json(out / "audit.json", record)
    plot_pipeline_audit(record, out / "audit.png")
    print(f"{result.audit}\nwrote {out / 'audit.json'} and {out / 'audit.png'}")
    if args.json:
        print(json.dumps(record, indent=2))
    return 1 if result.audit.violation else 0


def _one_run_config(args: argparse.Namespace) -> tuple[Any, Any]:
    """The pipeline module and the config a ``dpkd run`` with these options would use."""
    if args.pipeline == "dgd":
        from dpkd_audit.cli.dgd import _config as dgd_config
        from dpkd_audit.pipelines import dgd as pipeline

        if args.mode == "published" and args.epsilon is not None:
            raise ValueError("--epsilon applies to --mode sound only; published DGD's epsilon "
                             "follows from --queries")
        if args.mode == "sound" and args.epsilon is None:
            raise ValueError("--mode sound needs --epsilon (the record-level target, > 0)")
        return pipeline, dgd_config(args, mode=args.mode, queries=args.queries,
                                    epsilon=args.epsilon)
    from dpkd_audit.cli.dpdfd import _config as dpdfd_config
    from dpkd_audit.pipelines import dpdfd as pipeline

    if args.epsilon is None:
        raise ValueError("--epsilon is required (published: the per-label epsilon; sound: the "
                         "record-level target)")
    return pipeline, dpdfd_config(args, epsilon=args.epsilon, mode=args.mode)


def _cmd_audit_run_one_run(args: argparse.Namespace) -> int:
    from dpkd_audit.audit.training import MIN_CANARIES, resolve_guesses

    if args.canaries < MIN_CANARIES:
        raise ValueError(f"--canaries must be >= {MIN_CANARIES}; got {args.canaries}")
    # fixed before the run, refused before any work; --guesses alone: both sides
    guesses = resolve_guesses(args.canaries, args.guesses, args.guesses_out,
                              names=("--guesses", "--guesses-out"))
    kind = args.canary_kind or ("gradient" if args.mode == "sound" else "mislabeled")
    if kind == "gradient" and args.mode != "sound":
        raise ValueError("--canary-kind gradient audits a DP-SGD model: it needs --mode sound "
                         "(published runs train without DP-SGD); use --canary-kind mislabeled")
    pipeline, config = _one_run_config(args)
    if kind == "gradient":
        return _audit_dp_sgd(args, pipeline, config, guesses)
    return _audit_record_level(args, pipeline, config, guesses)


def _write_one_run(args: argparse.Namespace, config: Any, fields: dict[str, Any],
                   scores: Any, included: Any, score_name: str) -> Path:
    from dpkd_audit.devices import describe_device, resolve_device
    from dpkd_audit.provenance import provenance
    from dpkd_audit.reports.training_audit import plot_pipeline_audit, score_histogram

    out = _out_dir(args.out)
    record: dict[str, Any] = {"pipeline": args.pipeline, "dataset": config.dataset.value,
                              "mode": config.mode.value, **fields, "seed": config.seed,
                              "audit_seed": args.audit_seed, "config": config.to_dict(),
                              "command": _command(args.argv), "provenance": provenance()}
    record["device"] = describe_device(resolve_device(args.device))
    record["score_name"] = score_name
    record["side_labels"] = {"x": "inserted canaries", "x_prime": "canaries left out"}
    record["score_histogram"] = score_histogram(scores[included], scores[~included])
    _write_json(out / "audit.json", record)
    plot_pipeline_audit(record, out / "audit.png")
    if args.json:
        print(json.dumps(record, indent=2))
    return out


def _guess_counts(bound: Any) -> str:
    """``"(50 in, 50 out)"``: the two sides of the guesses a one-run bound made."""
    return f"({bound.guesses_in:,} in, {bound.guesses_out:,} out)"


def _audit_record_level(args: argparse.Namespace, pipeline: Any, config: Any,
                        guesses: tuple[int, int]) -> int:
    from dpkd_audit.pipelines.common.record_audit import audit_record_level
    from dpkd_audit.training_audit.canaries import RecordCanaries

    canaries = RecordCanaries(count=args.canaries, seed=args.audit_seed)
    data = pipeline.load_data(config, data_dir=args.data_dir, progress=not args.quiet)
    canaries.choose(data.dataset.train_labels, data.dataset.num_classes)  # fits, before work
    _out_dir(args.out)
    result = audit_record_level(pipeline, config, data=data, canaries=canaries,
                                guesses=guesses[0], guesses_out=guesses[1],
                                confidence=args.confidence,
                                device=args.device, progress=not args.quiet)
    bound = result.bound
    fields, code = _analyses(
        args, bound, f"{args.pipeline} {config.mode.value}, released student: claimed "
        f"{bound.epsilon_claimed:.4g} at delta {bound.delta:g}; {bound.correct:,} of "
        f"{bound.guesses:,} guesses right {_guess_counts(bound)}, {bound.canaries:,} mislabeled "
        f"canaries; student test accuracy {result.test_accuracy:.4f}")
    out = _write_one_run(args, config, {**result.to_record(), **fields}, result.scores,
                         result.included,
                         "canary score: log p(wrong label) - log p(true label) of the student")
    print(f"wrote {out / 'audit.json'} and {out / 'audit.png'}")
    return code


def _audit_dp_sgd(args: argparse.Namespace, pipeline: Any, config: Any,
                  guesses: tuple[int, int]) -> int:
    from dpkd_audit.pipelines.common.dp_sgd_audit import audit_dp_sgd
    from dpkd_audit.training_audit.canaries import GradientCanaries

    if args.pipeline == "dgd":
        role, model = "baseline", config.dp_baseline
    else:
        role, model = "teacher", config.dp_teacher
    canaries = GradientCanaries(count=args.canaries, seed=args.audit_seed)
    data = pipeline.load_data(config, data_dir=args.data_dir, progress=not args.quiet).dataset
    ledger = pipeline.ledger_for(config)
    n = int(data.train_images.shape[0])
    if args.pipeline == "dgd":
        plan = pipeline.check_run(config, ledger, num_private=n, num_classes=data.num_classes,
                                  image_shape=data.image_shape).dp_sgd
    else:
        plan = pipeline.planned_dp_sgd(config, n, image_shape=data.image_shape)
    _out_dir(args.out)
    result = audit_dp_sgd(data, role=role, teacher=model, dp_sgd=config.dp_sgd, plan=plan,
                          ledger=ledger, canaries=canaries, guesses=guesses[0],
                          guesses_out=guesses[1], confidence=args.confidence,
                          seed=config.seed, device=args.device, progress=not args.quiet)
    bound = result.bound
    fields, code = _analyses(
        args, bound, f"{args.pipeline} sound DP-SGD {role}: claimed {result.epsilon_dp_sgd:.4g} "
        f"for DP-SGD at delta {bound.delta:g} (run target {config.epsilon:g}); {bound.correct:,} "
        f"of {bound.guesses:,} guesses right {_guess_counts(bound)}, {bound.canaries:,} canaries")
    out = _write_one_run(args, config, {**result.to_record(), **fields}, result.scores,
                         result.included,
                         "canary score: log-likelihood ratio of the canary's coordinate over "
                         "every step's update")
    print(f"wrote {out / 'audit.json'} and {out / 'audit.png'}")
    return code


def _add_one_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=["published", "sound"], default="sound",
                   help="sound (default) or published")
    p.add_argument("--canary-kind", choices=["gradient", "mislabeled"],
                   help="gradient: white-box Dirac canaries in DP-SGD, the DP-SGD model "
                        "audited against its own epsilon (sound only; the sound default); "
                        "mislabeled: records with a wrong label, the whole run audited through "
                        "its released student against the run's claim (published default)")
    p.add_argument("--epsilon", type=positive_float,
                   help="sound: record-level target of the run; published DP-DFD: the "
                        "per-label epsilon (published DGD: from --queries)")
    p.add_argument("--canaries", type=int, default=1000,
                   help="gradient canaries m (default 1000; >= 2), each inserted with "
                        "probability 1/2")
    p.add_argument("--guesses", type=int,
                   help="guesses on each side, fixed before the run (default: 5%% of "
                        "--canaries; in [1, --canaries / 2]); with --guesses-out, the 'in' "
                        "guesses on the highest scores only (in [0, --canaries])")
    p.add_argument("--guesses-out", type=int,
                   help="'out' guesses on the lowest scores, fixed before the run (default: "
                        "--guesses, i.e. the same count on each side; 0: 'in' guesses only); "
                        "--guesses + --guesses-out at most --canaries, not both 0. 'in' "
                        "guesses on the top scores are the surer ones on DP-SGD gradient "
                        "canaries (benchmarks/one_run_design.py)")
    p.add_argument("--confidence", type=_confidence, default=0.95,
                   help="confidence of the bound (default 0.95)")
    p.add_argument("--analysis", type=_analysis, default="all",
                   metavar="{" + ",".join(ONE_RUN_ANALYSES) + "}",
                   help="how the one run is analysed: steinke (the guesses against "
                        "(epsilon, delta)-DP, distribution-free), fdp (the same guesses against "
                        "the claim's Gaussian trade-off curve), gaussian (the scores fitted as "
                        "two Gaussians: an estimate under that model) or all (default: the "
                        "three side by side); the exit status follows the one selected, "
                        "Steinke's with all")
    p.add_argument("--seed", type=int_at_least(0), default=0,
                   help="seed of the model and its mini-batches")
    p.add_argument("--audit-seed", type=int_at_least(0), default=0,
                   help="seed of the canaries' inclusion, coordinates and sampling")
    p.add_argument("--json", action="store_true", help="print the record")


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

    from dpkd_audit.cli import dgd as dgd_cli
    from dpkd_audit.cli import dpdfd as dpdfd_cli

    for name, module, what in (("dpdfd", dpdfd_cli, "DP-DFD's DP-SGD teacher"),
                               ("dgd", dgd_cli, "DGD's DP-SGD baseline")):
        p = pipelines.add_parser(
            name, help=f"{name}: one run with canaries (gradient canaries in {what}, or "
                       "mislabeled records through the released student)",
            description=f"One run with --canaries canaries, each inserted with probability "
                        "1/2, bounded by the one-run method of Steinke, Nasr, Jagielski 2023. "
                        f"--canary-kind gradient (sound mode's default): {what} trained exactly "
                        "as a sound run would (the plan calibrated for --epsilon, charged to a "
                        "fresh ledger) with Dirac gradient canaries, against the DP-SGD event's "
                        "own epsilon. --canary-kind mislabeled (published mode's default): the "
                        "whole pipeline run once on its private split with mislabeled canary "
                        "records, the released student scored on them, against the run's "
                        "claim (published: the paper's epsilon; sound: the record-level "
                        "target). Exit status 1 on a violation.")
        _add_one_run_arguments(p)
        if name == "dgd":
            p.add_argument("--queries", type=int_at_least(1),
                           help="label queries of the run (default: the most that fit "
                                "--query-share of --epsilon)")
        module._add_arguments(p)
        p.set_defaults(func=_cmd_audit_run_one_run)
