"""``dpkd``: the command line (thin: parse, call the layers below, print)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpkd_audit.cli.arguments import (
    add_executor_arguments,
    fraction,
    int_at_least,
    positive_float,
)
from dpkd_audit.cli.audit_run import add_audit_run_parser
from dpkd_audit.cli.limits import check_size_flags
from dpkd_audit.cli.names import ATTACKS, BATCH_RELATIONS, PLAN_KINDS, SAMPLINGS, name_type
from dpkd_audit.cli.paths import check_output_dir, check_path_arguments, output_file
from dpkd_audit.cli.pipelines import add_pipeline_parsers
from dpkd_audit.cli.plan_file import read_plan_file
from dpkd_audit.cli.report import add_report_parser
from dpkd_audit.cli.sweeps import argv_or_default
from dpkd_audit.cli.user_audit import is_user_target, parse_value, user_audit_record
from dpkd_audit.executor import ExecutorConfig, ExecutorKind, check_workers

__all__ = ["build_parser", "main"]


def _cmd_mechanisms(args: argparse.Namespace) -> int:
    from dpkd_audit.mechanisms import catalogue

    rows = catalogue()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if args.markdown:
        headers = ["mechanism", "example", "sensitivity", "guarantee", "scope", "paper"]
        print("| " + " | ".join(headers) + " |")
        print("|" + "---|" * len(headers))
        for row in rows:
            print("| " + " | ".join(f"`{row[h]}`" if h == "mechanism" else row[h]
                                    for h in headers) + " |")
        return 0
    headers = ["mechanism", "sensitivity", "guarantee", "event", "scope"]
    print(_table(headers, [[r[h] for h in headers] for r in rows]))
    return 0


def _cmd_ledger(args: argparse.Namespace) -> int:
    from dpkd_audit.ledger import Ledger
    from dpkd_audit.ledger.identity import describe_accountant

    # read-only: inspecting never writes, yet still rolls back a crashed writer's journal
    ledger = Ledger.open(args.path, read_only=True)
    spent = ledger.spent()
    charges = ledger.charges()
    accountant = describe_accountant(ledger.identity.accountant)
    integrity = ("chain verified (HMAC-SHA256, keyed)" if ledger.keyed else
                 "chain verified (SHA-256, no key: detects damage and naive edits only)")
    if args.json:
        def finite_or_null(value: float) -> float | None:  # strict JSON: null is infinite
            return None if math.isinf(value) else value

        print(json.dumps({
            "path": str(args.path), "budget_epsilon": finite_or_null(ledger.epsilon),
            "unbounded": math.isinf(ledger.epsilon), "budget_delta": ledger.delta,
            "spent_epsilon": finite_or_null(float(spent.epsilon)),
            "method": spent.epsilon.method, "kind": spent.epsilon.kind.value,
            "accountant": ledger.identity.accountant, "keyed": ledger.keyed,
            "charges": [{"seq": c.seq, "label": c.label, "event": repr(c.event),
                         "created": c.created, "pid": c.pid} for c in charges]},
            indent=2, allow_nan=False))
        return 0
    unbounded = " (unbounded: it records, refuses nothing)" if math.isinf(ledger.epsilon) else ""
    print(f"ledger {args.path}: budget epsilon={ledger.epsilon:g}, delta={ledger.delta:g}"
          f"{unbounded}")
    print(f"accountant {accountant}; {integrity}")
    print(f"spent epsilon={float(spent.epsilon):.6g} ({spent.epsilon.method}, "
          f"{spent.epsilon.kind.value}); remaining {spent.remaining_epsilon:.6g}; "
          f"{len(charges)} charge(s)")
    if charges:
        print(_table(["#", "label", "event"],
                     [[c.seq, c.label, repr(c.event)]
                      for c in charges[max(0, len(charges) - args.last):]]))
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from dpkd_audit.ledger import Ledger
    from dpkd_audit.pipelines.quickstart import QuickstartConfig, run

    config = QuickstartConfig(epsilon=args.epsilon, clusters=args.clusters, k=args.k,
                              seed=args.seed)
    budget = args.budget if args.budget is not None else args.epsilon
    if args.ledger:
        output_file(args.ledger, "--ledger")
    if args.ledger and Path(args.ledger).exists():
        ledger = Ledger.open(args.ledger)
        # A ledger's budget is part of its identity, fixed when it was created.
        if args.budget is not None and args.budget != ledger.epsilon:
            raise ValueError(f"--budget {args.budget:g} differs from the budget epsilon="
                             f"{ledger.epsilon:g} of the existing ledger {args.ledger} (fixed "
                             "when it was created): leave out --budget to use it, or give a "
                             "new --ledger path")
    else:
        ledger = Ledger(epsilon=budget, path=args.ledger)
    result = run(config, ledger=ledger, rng=np.random.default_rng(args.seed))
    spent = ledger.spent()
    record = {
        "task": "reverse k-NN private labelling (label-only quick start)",
        "dataset": "sklearn digits (embedded)", "epsilon": result.epsilon,
        "clusters": config.clusters, "k": config.k,
        "public_size": result.public_size, "private_size": result.private_size,
        "label_accuracy": result.label_accuracy,
        "cluster_purity": result.cluster_purity,
        "ledger": str(args.ledger) if args.ledger else "in memory",
        "ledger_spent_epsilon": float(spent.epsilon), "ledger_budget_epsilon": ledger.epsilon,
        "seconds": round(result.seconds, 3),
    }
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        for key, value in record.items():
            print(f"{key:>30}: {value}")
    return 0


#: Plan fields and the ``dpkd budget`` flags that set them (errors name the flag).
_BUDGET_FLAGS = {
    "target_epsilon": "--target-epsilon", "sampling_probability": "--sampling-probability",
    "num_classes": "--classes", "num_users": "--users", "dataset_size": "--dataset-size",
    "batch_size": "--batch-size", "epochs": "--epochs", "queries": "--queries",
    "noise": "--noise", "delta": "--delta",
}


def _flag_names(message: str) -> str:
    """Name the command's flag where an error message starts with a plan parameter's name."""
    name = message.split(" ", 1)[0]
    return _BUDGET_FLAGS[name] + message[len(name):] if name in _BUDGET_FLAGS else message


def _cmd_budget(args: argparse.Namespace) -> int:
    try:
        return _budget(args)
    except ValueError as exc:
        raise ValueError(_flag_names(str(exc))) from None


#: Plan kinds whose noise parameter follows from a per-release epsilon: noise = f(epsilon).
_NOISE_OF_EPSILON = {
    "laplace": lambda eps: 1.0 / eps,  # Laplace scale / L1 sensitivity
    "randomized-response": lambda eps: eps,  # the noise parameter is epsilon0 itself
    "shuffle": lambda eps: eps,
}


def _noise_of_epsilon(kind: str, epsilon: float, noise: float | None) -> float:
    """``--noise`` from ``dpkd budget --epsilon`` (the per-release epsilon of one query)."""
    if noise is not None:
        raise ValueError("give --noise or --epsilon, not both (--epsilon sets the noise: "
                         "Laplace scale = sensitivity / epsilon)")
    if kind not in _NOISE_OF_EPSILON:
        raise ValueError(f"--epsilon (a per-release epsilon) applies to "
                         f"{', '.join(_NOISE_OF_EPSILON)}; {kind} has no pure per-release "
                         f"epsilon: give --noise")
    return _NOISE_OF_EPSILON[kind](epsilon)


def _mixed_plans(path: str) -> list[Any]:
    """The releases of ``dpkd budget --plan FILE``, each checked, errors naming file and entry.

    The file and every field are checked first (:func:`~dpkd_audit.cli.plan_file.
    read_plan_file`); then each release becomes a :class:`~dpkd_audit.accountants.budget.Plan`.
    """
    from dpkd_audit.accountants.budget import Plan, PlanKind

    plans = []
    for i, entry in enumerate(read_plan_file(path)):
        where = f"--plan {path}, releases[{i}]"
        mechanism = entry["mechanism"]
        noise = entry.get("noise")
        try:
            if entry.get("epsilon") is not None:
                noise = _noise_of_epsilon(mechanism, entry["epsilon"], noise)
            count = "epochs" if mechanism == "dp-sgd" else "queries"
            if noise is None or entry.get(count) is None:
                raise ValueError(f"({mechanism}): needs noise (or epsilon, where the mechanism "
                                 f"has one) and {count}")
            plans.append(Plan(kind=PlanKind(mechanism), noise=noise,
                              queries=entry.get("queries"),
                              sampling_probability=entry.get("sampling_probability"),
                              num_classes=entry.get("classes", 10),
                              num_users=entry.get("users"),
                              dataset_size=entry.get("dataset_size"),
                              batch_size=entry.get("batch_size"), epochs=entry.get("epochs")))
        except ValueError as exc:
            text = str(exc).replace("--epsilon", "epsilon").replace("--noise", "noise")
            raise ValueError(f"{where}{'' if text.startswith('(') else ':'} {text}") from None
    return plans


def _budget_mixed(args: argparse.Namespace) -> int:
    from dpkd_audit.accountants.budget import mixed_budget_table, tightest

    if args.mechanism is not None:
        raise ValueError("--plan FILE holds the releases: give no MECHANISM with it")
    for flag in ("noise", "epsilon", "queries", "target_epsilon", "sampling_probability",
                 "users", "dataset_size", "batch_size", "epochs"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--plan FILE holds the releases: give no "
                             f"--{flag.replace('_', '-')} with it (the inverse, "
                             "--target-epsilon, takes one plan)")
    plans = _mixed_plans(args.plan)
    rows = mixed_budget_table(plans, delta=args.delta)
    if args.json:
        print(json.dumps({"plan": args.plan, "releases": [
            {"mechanism": p.kind.value, "noise": p.noise, "queries": p.queries} for p in plans],
            "delta": args.delta, "rows": [dataclasses.asdict(r) for r in rows],
            "tightest": _row_name(tightest(rows))}, indent=2))
        return 0
    print(f"plan: {len(plans)} releases composed ("
          + "; ".join(f"{p.kind.value} noise={p.noise:g} x {p.queries}" for p in plans)
          + f"); delta={args.delta:g}")
    table = [[r.accountant, r.method, r.kind, ("n/a" if r.epsilon is None
                                                else f"{r.epsilon:.6g}")
              + (f"  ({r.note})" if r.note else "")] for r in rows]
    print(_table(["accountant", "method", "bound", "epsilon"], table))
    print(_tightest_line(tightest(rows)))
    return 0


def _row_name(row: Any) -> str | None:
    return None if row is None else row.accountant


def _tightest_line(row: Any, solved: str | None = None) -> str:
    """The line under a budget table naming the tightest valid answer."""
    if row is None:
        return "tightest valid bound: none is finite"
    if solved is None:
        return f"tightest valid bound: epsilon {row.epsilon:.6g} ({row.accountant})"
    return (f"tightest valid answer: {solved} {row.solved:.6g} at epsilon {row.epsilon:.6g} "
            f"({row.accountant})")


def _budget(args: argparse.Namespace) -> int:
    from dpkd_audit.accountants.budget import (
        NOISE_MEANING,
        Plan,
        PlanKind,
        budget_table,
        solve,
        tightest,
    )

    if args.plan is not None:
        return _budget_mixed(args)
    if args.mechanism is None:
        raise ValueError("give a MECHANISM (or --plan FILE for several releases composed)")
    kind = PlanKind(args.mechanism)
    sgd = kind is PlanKind.DP_SGD
    if args.epsilon is not None:
        args.noise = _noise_of_epsilon(kind.value, args.epsilon, args.noise)
    if sgd and args.queries is not None:
        raise ValueError("--queries is derived for dp-sgd (epochs x ceil(dataset_size / "
                         "batch_size) steps): give --epochs instead")
    if not sgd:
        for name in ("dataset_size", "batch_size", "epochs", "relation"):
            if getattr(args, name) is not None:
                raise ValueError(f"--{name.replace('_', '-')} applies only to the dp-sgd plan; "
                                 f"got {kind.value}")
        if args.sampling != "poisson":
            raise ValueError(f"--sampling applies only to the dp-sgd plan; got {kind.value}")
    from dpkd_audit.accountants.dp_sgd_sampling import BatchRelation, DpSgdSampling

    plan = Plan(kind=kind, noise=args.noise, queries=args.queries,
                sampling_probability=args.sampling_probability, num_classes=args.classes,
                num_users=args.users, dataset_size=args.dataset_size,
                batch_size=args.batch_size, epochs=args.epochs,
                sampling=DpSgdSampling(args.sampling) if sgd else DpSgdSampling.POISSON,
                relation=None if args.relation is None else BatchRelation(args.relation))
    count = "epochs" if sgd else "queries"
    given_count = args.epochs if sgd else args.queries
    if args.target_epsilon is None:
        if args.noise is None or given_count is None:
            raise ValueError(f"give --noise (or --epsilon, where the mechanism has one) and "
                             f"--{count} (or --target-epsilon and one of them)")
        rows = budget_table(plan, delta=args.delta)
        solved_name = None
    else:
        rows = solve(plan, target_epsilon=args.target_epsilon, delta=args.delta)
        solved_name = "noise" if args.noise is None else count
    plan_record = {"mechanism": kind.value, "epsilon": args.epsilon, "noise": args.noise,
                   "noise_meaning": NOISE_MEANING[kind], "queries": plan.queries,
                   "sampling_probability": plan.sampling_probability,
                   "classes": args.classes, "users": args.users}
    if sgd:
        plan_record.update(dataset_size=args.dataset_size, batch_size=args.batch_size,
                           epochs=args.epochs, steps_per_epoch=plan.steps_per_epoch,
                           sampling=args.sampling, relation=args.relation)
    if args.json:
        print(json.dumps({
            "plan": plan_record, "delta": args.delta, "target_epsilon": args.target_epsilon,
            "solved": solved_name, "rows": [dataclasses.asdict(r) for r in rows],
            "tightest": _row_name(tightest(rows, plan if solved_name else None))}, indent=2))
        return 0
    what = (f"{kind.value}, noise={args.noise if args.noise is not None else '?'} "
            f"({NOISE_MEANING[kind]}), {count}="
            f"{given_count if given_count is not None else '?'}")
    if sgd and plan.poisson:
        what += (f", {args.dataset_size} records, batch {args.batch_size} "
                 f"(q = {plan.sampling_probability:.6g}, {plan.steps_per_epoch} steps/epoch)")
    elif sgd:
        what += (f", {args.dataset_size} records, {args.sampling} batches of {args.batch_size} "
                 f"({plan.steps_per_epoch} steps/epoch, each record in one per epoch)")
    print(f"plan: {what}; delta={args.delta:g}")
    headers = ["accountant", "method", "bound", "epsilon"]
    if solved_name:
        headers.insert(3, f"solved {solved_name}")
    table = []
    for r in rows:
        line = [r.accountant, r.method, r.kind,
                "n/a" if r.epsilon is None else f"{r.epsilon:.6g}"]
        if solved_name:
            line.insert(3, "-" if r.solved is None else f"{r.solved:.6g}")
        if r.note:
            line[-1] += f"  ({r.note})"
        table.append(line)
    print(_table(headers, table))
    print(_tightest_line(tightest(rows, plan if solved_name else None), solved_name))
    return 0


#: Most samples (and output values) per side `dpkd audit` accepts.
MAX_AUDIT_SAMPLES = 10**9


def _cmd_audit(args: argparse.Namespace) -> int:
    from dpkd_audit.audit import Attack
    from dpkd_audit.audit.suite import audit_targets, find_target, run_audits
    from dpkd_audit.reports.audit import audit_markdown_table, plot_audit

    if args.all == (args.mechanism is not None):
        raise ValueError("give one MECHANISM, or --all (see `dpkd mechanisms` and GUIDE.md)")
    for flag, value in (("--samples", args.samples), ("--max-values", args.max_values)):
        if value > MAX_AUDIT_SAMPLES:
            raise ValueError(f"{flag} must be at most {MAX_AUDIT_SAMPLES:.0e} per side (the "
                             f"exact samplers draw 1-2 x 10^6 values per second: 10^9 is "
                             f"10-20 minutes per side already); got {value:g}")
    if args.samples > args.max_values:
        print(f"dpkd audit: --samples {args.samples:g} is above --max-values "
              f"{args.max_values:g}: each mechanism gets at most --max-values / (values per "
              f"output) samples per side (raise --max-values for more; the records say how "
              f"many ran)", file=sys.stderr)
    plot_path = output_file(args.plot, "--plot") if args.plot else None
    if plot_path is not None:
        import matplotlib  # noqa: F401  (the plots extra: refused before any audit runs)
    user = not args.all and is_user_target(args.mechanism)
    if not user:
        for flag, value in (("--delta", args.delta), ("--neighbours", args.neighbours),
                            ("--d-in", args.d_in), ("--bounds", args.bounds)):
            if value is not None:
                raise ValueError(f"{flag} applies to your own sampler (MECHANISM as "
                                 "module:function or file.py:function); a package mechanism "
                                 "brings its own")
    attack = Attack(args.attack) if args.attack else None
    rng = np.random.default_rng(args.seed)
    records = []
    command = "dpkd " + " ".join(shlex.quote(a) for a in args.argv)
    executor = ExecutorConfig(kind=args.executor, address=args.address)
    if args.workers is None and executor.kind is ExecutorKind.RAY:
        raise ValueError("--executor ray needs --workers W (parts of the bounding samples per "
                         "input, each drawn by one Ray task)")
    if args.workers is not None:
        check_workers(args.workers, executor)
    if user:
        audits = iter([user_audit_record(args.mechanism, args, samples=args.samples, rng=rng,
                                         attack=attack, executor=executor)])
        targets = [args.mechanism]
    else:
        targets = (audit_targets(include_controls=True) if args.all
                   else [find_target(args.mechanism)])
        audits = run_audits(targets, samples=args.samples, confidence=args.confidence,
                            rng=rng, max_values=args.max_values, attack=attack,
                            epsilon=args.epsilon, workers=args.workers,
                            executor=executor if args.workers is not None else None)
    progress = _progress(len(targets), enabled=args.all and not args.json)
    for record in audits:
        record["command"] = command
        record["device"] = f"cpu ({os.cpu_count()} cores; the auditor is numpy only)"
        records.append(record)
        progress(record["mechanism"])
    if args.json:
        print(json.dumps(records if args.all else records[0], indent=2, default=float))
    else:
        print(audit_markdown_table(records))
        for r in records:
            if r.get("flaw"):
                print(f"- {r['mechanism']}: {r['flaw']}")
        if len(records) == 1:
            print(_audit_notes(records[0]))
        print(f"attack policy: {records[0]['policy']}" if len(records) == 1 else
              "attack policy per mechanism: see --json (auto, float bits included, except "
              "auto_real for controls whose flaw is not the floating-point one)")
    if plot_path is not None:
        path = plot_audit(records, plot_path,
                          title=f"Claimed vs empirical epsilon ({args.confidence:.0%} lower "
                                f"bounds, each valid for its own audit)")
        if not args.json:
            print(f"plot: {path}")
    # Exit status 1 on a violation, for CI gating: a single audited mechanism, or any package
    # mechanism of --all (the positive controls are broken on purpose; their violations are
    # the expected result).
    gating = records if not args.all else [r for r in records if not r["control"]]
    return 1 if any(r["verdict"] == "violation" for r in gating) else 0


def _audit_notes(record: dict[str, Any]) -> str:
    """What the table cannot say of one audit: its inputs, its confirmation, its limits."""
    lines = []
    if record.get("inputs"):
        lines.append(f"inputs audited: x = {record['inputs'][0]}, x' = {record['inputs'][1]}")
    confirmation = record.get("confirmation")
    if confirmation:
        lines.append(f"confirmation on {confirmation['samples']:,} fresh samples per side: "
                     f"epsilon >= {confirmation['epsilon_lower']:.4f} at "
                     f"{confirmation['confidence']:.1%} - "
                     + ("confirmed" if confirmation["confirmed"] else
                        "not confirmed, so no violation is reported"))
    if record.get("unseen_on_other_side"):
        lines.append(f"the event never occurred under the other input in "
                     f"{record['bound_samples']:,} draws: the bound is limited by the sample "
                     "size; if the event is impossible there, no finite epsilon holds")
    best = record.get("claim_attainable")
    if best is not None and record.get("verdict") == "inconclusive":
        from dpkd_audit.audit.attainable import samples_needed

        need = samples_needed(record["epsilon_claimed"], record["delta"],
                              confidence=record["confidence"])
        lines.append(f"with {record['bound_samples']:,} bounding samples per side an audit "
                     f"can show at most {best:.4f} of a mechanism meeting the claim"
                     + (f"; reaching half the claim needs at least {need:,} (more for a "
                        "Gaussian-type mechanism)" if need else ""))
    design = record.get("design")
    if design:
        lines.append(f"real-valued design (float bits excluded): epsilon >= "
                     f"{design['epsilon_lower']:.4f}, {design['verdict']}; event "
                     f"{design['event']}")
    return "\n".join(lines)


def _progress(total: int, *, enabled: bool):
    if not enabled:
        return lambda name: None
    from tqdm import tqdm

    bar = tqdm(total=total, desc="auditing", unit="mechanism", file=sys.stderr)

    def step(name: str) -> None:
        bar.set_postfix_str(name)
        bar.update(1)
        if bar.n >= total:
            bar.close()

    return step


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


#: ``--attack``: an Attack value in any spelling (``float-bits``, ``float_bits``, ``FLOAT_BITS``).
_attack_name = name_type(ATTACKS, "attack")


def _version() -> str:
    """The installed package's version (its metadata), as ``dpkd --version`` prints it."""
    from dpkd_audit.provenance import package_version

    return package_version() or "(not installed: no package metadata)"


class _VersionAction(argparse._VersionAction):
    """``--version``, whose version is read only when asked for (importlib.metadata: ~40 ms)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        self.version = f"%(prog)s {_version()}"
        super().__call__(parser, namespace, values, option_string)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dpkd`` (one sub-parser per subcommand)."""
    parser = argparse.ArgumentParser(
        prog="dpkd",
        description="Differential-privacy accounting and mechanism auditing for private "
                    "knowledge distillation.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    parser.subcommands = sub.choices  # for errors after parsing: the subcommand's own usage

    p = sub.add_parser("demo", help="quick start on the embedded digits: private reverse k-NN "
                                    "labels released through a ledger")
    p.add_argument("--epsilon", type=positive_float, default=1.0,
                   help="epsilon of the count release (default 1.0)")
    p.add_argument("--clusters", type=int, default=20, help="number of queries s (default 20)")
    p.add_argument("--k", type=int, default=1, help="nearest queries per record (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of split, k-means and noise")
    p.add_argument("--ledger", help="SQLite ledger file (created if missing; resumed if present)")
    p.add_argument("--budget", type=positive_float,
                   help="budget epsilon of a new ledger (default: --epsilon); an existing "
                        "ledger keeps its own, and a different --budget is refused")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser(
        "budget", help="epsilon of a plan under every accountant, or solve it for noise/queries",
        description="Epsilon of a plan before a run, by accountant (method, bound kind, value). "
                    "With --target-epsilon, leave out --noise or --queries (--epochs for "
                    "dp-sgd) to solve for it. dp-sgd: --dataset-size N --batch-size B --epochs "
                    "E --noise SIGMA, Poisson sampling at 1/ceil(N/B) under add/remove-one, "
                    "as Opacus accounts a DataLoader(batch_size=B).")
    p.add_argument("mechanism", type=name_type(PLAN_KINDS, "mechanism"), metavar="MECHANISM",
                   nargs="?",
                   help=f"what each query releases: {', '.join(PLAN_KINDS)} (case, dashes and "
                        "underscores ignored: Laplace = laplace); leave it out with --plan")
    p.add_argument("--plan", metavar="FILE",
                   help='several releases on the same records, composed: a JSON file {"releases": '
                        '[{"mechanism": "laplace", "noise": 40, "queries": 100}, {"mechanism": '
                        '"gaussian", "noise": 5, "queries": 10}, ...]} (each entry takes the '
                        "flags below as keys: epsilon, sampling_probability, classes, users, "
                        "dataset_size, batch_size, epochs)")
    p.add_argument("--noise", type=positive_float,
                   help="noise parameter: Laplace scale / sensitivity, Gaussian sigma / "
                        "sensitivity, noisy-max Laplace scale, or local epsilon0 (RR, shuffle)")
    p.add_argument("--epsilon", type=positive_float,
                   help="per-release epsilon instead of --noise, where the mechanism has one: "
                        "laplace (noise = sensitivity / epsilon), randomized-response and "
                        "shuffle (the local epsilon0)")
    p.add_argument("--queries", type=int, help="number of queries (steps of a subsampled "
                                                 "Gaussian)")
    p.add_argument("--delta", type=float, default=1e-5, help="target delta (default 1e-5)")
    p.add_argument("--target-epsilon", type=positive_float,
                   help="solve for the missing --noise or --queries")
    p.add_argument("--sampling-probability", type=float, help="Poisson rate q (SGD)")
    p.add_argument("--classes", type=int, default=10, help="classes (noisy max, RR)")
    p.add_argument("--users", type=int, help="number of users n (shuffle)")
    p.add_argument("--dataset-size", type=int, help="records N (dp-sgd)")
    p.add_argument("--batch-size", type=int,
                   help="expected batch size B (dp-sgd; Poisson rate 1/ceil(N/B), as Opacus)")
    p.add_argument("--epochs", type=int, help="epochs (dp-sgd)")
    p.add_argument("--sampling", type=name_type(SAMPLINGS, "sampling"), default="poisson",
                   help="how dp-sgd's batches are drawn: poisson (default; Opacus's "
                        "DPDataLoader and accountant), shuffle (DataLoader(shuffle=True) cut "
                        "into fixed batches), sequential (shuffle=False) or balls-in-bins (each "
                        "record to one random step per epoch): each sampler's own upper bound, "
                        "a lower bound for shuffle, and Poisson's figure beside them")
    p.add_argument("--relation", type=name_type(BATCH_RELATIONS, "relation"),
                   help="neighbouring relation of a non-Poisson dp-sgd bound: zero-out "
                        "(default for shuffle/sequential) or replace-one; add/remove-one for "
                        "balls-in-bins")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_budget)

    p = sub.add_parser(
        "audit", help="empirical lower bound on a mechanism's epsilon (or --all of them)",
        description="Audit a mechanism on its worst-case neighbouring pair: a lower bound on "
                    "epsilon valid at the stated confidence, and a verdict against the claim "
                    "(violation, consistent, or inconclusive when the bound shows no power). "
                    "Exit status: 0 consistent or inconclusive, 1 a violation, 2 bad input.")
    p.add_argument("mechanism", nargs="?", metavar="MECHANISM",
                   help="mechanism or positive control class name (e.g. Laplace, "
                        "HalfNoiseLaplace; case, dashes and underscores ignored; see `dpkd "
                        "mechanisms`), or your own sampler as module:function, module:Class "
                        "or path/to/file.py:function (a function sampler(x, n, rng), or an "
                        "object with sample(x, n, *, rng), neighbours() and epsilon)")
    p.add_argument("--all", action="store_true",
                   help="audit every package mechanism and positive control (exit status 1 "
                        "only if a package mechanism is violated)")
    p.add_argument("--epsilon", type=positive_float,
                   help="claimed epsilon to audit (your own sampler: required unless it has an "
                        "epsilon attribute)")
    p.add_argument("--delta", type=fraction,
                   help="your own sampler: claimed delta (default: its delta attribute, or 0)")
    p.add_argument("--neighbours", nargs=2, type=parse_value, metavar=("X", "X'"),
                   help="your own sampler: the neighbouring inputs it is audited on, as JSON "
                        "(0 1, or '[0, 1]' '[0, 2]'; default: its neighbours attribute)")
    p.add_argument("--d-in", type=positive_float, metavar="D",
                   help="another library's object: the input distance of the neighbours "
                        "(OpenDP, Tumult; default 1)")
    p.add_argument("--bounds", type=float, nargs=2, metavar=("LOWER", "UPPER"),
                   help="a python-dp aggregation: the bounds it was built with (python-dp "
                        "does not expose them)")
    p.add_argument("--samples", type=int, default=1_000_000,
                   help="samples per side (default 1e6; capped per mechanism by --max-values, "
                        "not below 2,000 by that cap)")
    p.add_argument("--max-values", type=int, default=5_000_000,
                   help="most output values per side for one mechanism: a mechanism whose "
                        "output is a vector of m values gets at most this / m samples "
                        "(default 5e6)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence (default 0.95)")
    p.add_argument("--attack", type=_attack_name, metavar="ATTACK",
                   help="force an attack: auto, auto-real, threshold, histogram, classifier, "
                        "coordinate, float-bits (the JSON records write float_bits; case, "
                        "dashes and underscores ignored) (default: auto, float bits "
                        "included, for every mechanism of the package and any sampler; "
                        "auto-real for the controls whose flaw is not the floating-point one; "
                        "the result says which ran and why)")
    p.add_argument("--seed", type=int, default=0, help="seed of the audit's randomness")
    p.add_argument("--workers", type=int_at_least(1), metavar="W",
                   help="draw the bounding samples in W parts per input, each from its own "
                        "seed (with --executor ray: one Ray task each; only counts come back)")
    add_executor_arguments(p)
    p.add_argument("--plot", help="write a PNG plot of the results to this path")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("mechanisms", help="list the package's mechanisms")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table")
    p.set_defaults(func=_cmd_mechanisms)

    p = sub.add_parser("ledger", help="show a ledger file: budget, spent epsilon, charges")
    p.add_argument("path", help="the SQLite ledger file")
    p.add_argument("--last", type=int_at_least(0), default=20,
                   help="show the last N charges (default 20; 0 shows none)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_cmd_ledger)

    add_pipeline_parsers(sub)
    add_audit_run_parser(sub)
    add_report_parser(sub)
    return parser


def _dataset_errors() -> tuple[type[Exception], ...]:
    """``DatasetNotFoundError``, if the datasets module (the only one raising it) was loaded.

    So the commands without data (``budget``, ``audit``, ...) do not import it to catch it.
    """
    datasets = sys.modules.get("dpkd_audit.data.datasets")
    return (datasets.DatasetNotFoundError,) if datasets is not None else ()


#: The optional libraries the commands import, and the extra that installs each.
_EXTRAS = {"torch": "pipelines", "faiss": "pipelines", "opacus": "pipelines",
           "sklearn": "pipelines", "umap": "pipelines", "matplotlib": "plots",
           "ray": "distributed"}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpkd`` console script."""
    from dpkd_audit.errors import BudgetExceededError, LedgerError

    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the subcommand's own usage line, naming the flags it accepts
        parser.subcommands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    args.argv = argv_or_default(argv)
    try:
        # the edge: every path and size given is checked before any data is loaded or work done
        check_path_arguments(args)
        check_size_flags(args)
        if getattr(args, "out", None) is not None:  # every --out is a folder: refused before
            check_output_dir(args.out, "--out")      # any data is loaded or work is done
        return args.func(args)
    except (ValueError, BudgetExceededError, LedgerError, *_dataset_errors()) as exc:
        print(f"dpkd {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        extra = _EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"dpkd {args.command}: error: this command needs {exc.name}, which the core "
              f"install leaves out: pip install 'dpkd-audit[{extra}]' (or -e \".[{extra}]\" "
              "in a checkout)", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. a disk that fills up or a path made read-only mid-run
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"dpkd {args.command}: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
