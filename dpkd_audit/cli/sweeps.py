"""What every ``dpkd run METHOD`` / ``dpkd sweep METHOD`` shares: records, resume, reports.

Writing records (each with its provenance: package version, git commit, time, library
versions), ``--resume`` / ``--force``, the sweep grid flags, Ray execution of a sweep's runs and
the sweep's plot and README. The method commands (:mod:`dpkd_audit.cli.rknn`,
:mod:`~dpkd_audit.cli.dpdfd`, :mod:`~dpkd_audit.cli.dgd`) build on it;
:mod:`dpkd_audit.cli.pipelines` registers them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dpkd_audit.cli.arguments import add_executor_arguments, choice_list
from dpkd_audit.cli.checkpoints import resumed_fields
from dpkd_audit.cli.names import TEACHER_ARCHITECTURES
from dpkd_audit.cli.paths import output_dir, output_file
from dpkd_audit.cli.sweep_ledger import add_ledger_arguments, reserve_sweep_budget
from dpkd_audit.executor import (
    ExecutorConfig,
    ExecutorKind,
    apply_threads,
    capture_threads,
    map_unordered,
    put,
    resolve,
    submit,
)

__all__ = ["add_dp_sgd_arguments", "add_sweep_grid_arguments", "apply_generator_arguments",
           "argv_or_default", "run_single", "run_sweep", "write_sweep_report"]


def _command(argv: list[str]) -> str:
    return shlex.join(["dpkd", *argv])


def _float_list(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") \
            from exc
    if not values or any(not (0 < v < float("inf")) for v in values):
        raise argparse.ArgumentTypeError(f"expected finite numbers > 0, got {text!r}")
    return values


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") \
            from exc
    if not values or any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected integers >= 0, got {text!r}")
    return values


#: Evaluator-only diagnostics of ``dpkd run`` / ``dpkd sweep`` (computed from private data
#: without noise; never part of the records, never to be published with them).
EVALUATOR_FILE = "evaluator.json"
EVALUATOR_LINES = "evaluator.jsonl"


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, allow_nan=False) + "\n")
    tmp.replace(path)


def _out_dir(path: str) -> Path:
    return output_dir(path, "--out")


def _point_key(config: Any) -> tuple[Any, ...]:
    """A sweep point's identity for ``--resume``: (mode, target epsilon, seed)."""
    return (config.mode.value, float(config.epsilon), int(config.seed))


def _record_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """The :func:`_point_key` of the config a record was made with."""
    return (record["mode"], float(record["epsilon"]), int(record["seed"]))


def _done_keys(path: Path, record_key: Callable[[Mapping[str, Any]], tuple[Any, ...]]
               ) -> set[tuple[Any, ...]]:
    """The points ``--resume`` skips: the keys of the records in ``OUT/results.jsonl``.

    The file is input like any record file: a regular file of bounded size, each line JSON
    with the keys a point is known by, else one error naming the file and line.
    """
    from dpkd_audit.reports.records import MAX_RECORD_FILE_BYTES
    from dpkd_audit.reports.safe_json import load_json, read_regular_file

    if not os.path.lexists(path):
        return set()
    raw = read_regular_file(path, max_bytes=MAX_RECORD_FILE_BYTES, what="--resume")
    keys = set()
    for number, line in enumerate(raw.decode("utf-8", "replace").splitlines(), start=1):
        if line.strip():
            record = load_json(line, str(path), number)
            try:
                keys.add(record_key(record))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{number}: --resume cannot tell which run this record "
                                 f"is ({type(exc).__name__}: {exc}); fix or move the file, or "
                                 "pass --force") from None
    return keys


def run_sweep(args: argparse.Namespace, *, base: Any, configs: list[Any],
              check_configs: Callable[..., Any], sweep: Callable[..., Iterable[Any]],
              summary: Callable[[dict[str, Any]], str],
              report: Mapping[str, Any] | None = None,
              point_key: Callable[[Any], tuple[Any, ...]] = _point_key,
              record_key: Callable[[Mapping[str, Any]], tuple[Any, ...]] = _record_key,
              group_key: Callable[[Any], Any] | None = None,
              plan: Callable[[Any, Mapping[Any, Any]], list[Any]] | None = None,
              ledger_for: Callable[[Any], Any] | None = None,
              stages_of: Callable[..., Any] | None = None,
              ) -> int:
    """The body of every ``dpkd sweep METHOD``: check, write ``results.jsonl``, report.

    Every point is checked (``check_configs``) before anything is written; an existing
    ``results.jsonl`` is refused unless ``--resume`` (skip the runs it holds) or ``--force``;
    ``sweep.json`` records the command, argv, base config and provenance; each result is
    appended as soon as it exists; the plot and README come from the records alone
    (:func:`write_sweep_report`, with ``report`` as its keyword arguments).

    Args:
        args: The parsed arguments (``out``, ``resume``, ``force``, ``data_dir``, ``quiet``,
            ``argv``, ``device``, ``dataset``).
        base: The base config (``to_dict()``).
        configs: The sweep's points (with ``mode``, ``epsilon``, ``seed``).
        check_configs: The method's ``check_configs(configs, data_dir=, progress=)``.
        sweep: The method's ``sweep(configs, device=, checked=, progress=)``.
        summary: One line per record.
        report: Keyword arguments of :func:`write_sweep_report`.
        point_key: A point's identity for ``--resume`` (default: mode, epsilon, seed).
        record_key: The same identity read off a saved record.
        group_key: With ``--executor ray``: runs with the same key share stages (the
            method's sharing key); ``stages_of`` computes a group's stages once, as one Ray
            task, and every run is its own task, handed them through the object store; records
            are appended as runs finish (completion order). Without it, every run computes its
            own stages.
        stages_of: The method's ``stages_of(configs, checked=, device=)``.
        plan: The method's ``planned_run_events(config, checked)``; with ``--ledger FILE``
            every run's charges are planned, checked and charged to it before any run starts
            (:mod:`dpkd_audit.cli.sweep_ledger`).
        ledger_for: The method's ``ledger_for(config)`` (the accountant of a new ``--ledger``).
    """
    from dpkd_audit.provenance import provenance

    # the executor first (Ray installed? --address only with ray?): before any check or charge
    kind = ExecutorKind(getattr(args, "executor", "local"))
    executor = ExecutorConfig(kind=kind, address=getattr(args, "address", None),
                              num_cpus=float(torch_threads()),
                              num_gpus=1.0 if str(args.device or "").startswith("cuda") else 0.0)
    results_path = Path(args.out) / "results.jsonl"
    evaluator_path = Path(args.out) / EVALUATOR_LINES
    if results_path.exists() and not (args.resume or args.force):
        raise ValueError(f"{results_path} exists: pass --resume to keep it and add the missing "
                         "runs, or --force to overwrite it")
    # every point, before anything is written; the data loaded here is the sweep's
    checked = check_configs(configs, data_dir=args.data_dir, progress=not args.quiet)
    if plan is not None:  # --ledger: the whole sweep's charges, before any run starts
        charged = reserve_sweep_budget(args, configs, checked, plan=plan, ledger_for=ledger_for,
                                       point_key=point_key)
        if charged:
            print(f"charged {charged} planned charges of the sweep to {args.ledger}",
                  file=sys.stderr)
    elif getattr(args, "ledger", None):
        raise ValueError("--ledger is not supported by this sweep")
    out = _out_dir(args.out)
    command = _command(args.argv)
    if args.resume:
        done = _done_keys(results_path, record_key)
        configs = [c for c in configs if point_key(c) not in done]
    else:
        results_path.unlink(missing_ok=True)
        evaluator_path.unlink(missing_ok=True)
    _write_json(out / "sweep.json", {"command": command, "argv": args.argv,
                                     "base_config": base.to_dict(),
                                     "provenance": provenance()})
    def write(record: dict[str, Any], evaluator: dict[str, Any] | None) -> None:
        with results_path.open("a") as fh:
            fh.write(json.dumps(record, allow_nan=False) + "\n")
        if evaluator is not None:  # kept out of the released records
            with evaluator_path.open("a") as fh:
                fh.write(json.dumps(evaluator, allow_nan=False) + "\n")
        print(summary(record), flush=True)

    threads = capture_threads() if kind is ExecutorKind.RAY else ()
    if configs and executor.kind is ExecutorKind.LOCAL:
        for result in sweep(configs, device=args.device, checked=checked,
                            progress=not args.quiet):
            write(*_records_of(result, command))
    elif configs:
        # one Ray task per group of runs that share stages computes them once (stages_of);
        # then one task per run, handed the stages through the object store
        groups: dict[Any, list[int]] = {}
        for i, config in enumerate(configs):
            groups.setdefault(group_key(config) if group_key else i, []).append(i)
        shared = put((configs, checked), executor)  # the data and the grid travel once
        stage_of: dict[int, Any] = {}
        for indices in groups.values():
            if len(indices) > 1 and stages_of is not None:
                ref = submit(stages_task, stages_of, [configs[i] for i in indices], args.device,
                             threads, shared, config=executor)
                stage_of.update(dict.fromkeys(indices, ref))
        items = [(sweep, i, stage_of.get(i), args.device, command, threads)
                 for i in range(len(configs))]
        for _, (record, evaluator) in map_unordered(
                sweep_point, items, config=executor, shared=shared,
                describe=lambda item: f"sweep run {point_key(configs[item[1]])}"):
            write(record, evaluator)
    plot, readme = write_sweep_report(out, command=command, dataset=args.dataset,
                                      **dict(report or {}))
    print(f"wrote {results_path}, {plot}, {readme}")
    return 0


def _records_of(result: Any, command: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    record = {**result.to_record(command=command), **resumed_fields()}
    evaluator = (result.to_evaluator_record(command=command)
                 if hasattr(result, "to_evaluator_record") else None)
    return record, evaluator


def torch_threads() -> int:
    """Torch threads of this process (Ray workers are given as many: identical floats)."""
    import torch

    return torch.get_num_threads()


def stages_task(stages_of: Callable[..., Any], configs: list[Any], device: Any,
                threads: tuple[tuple[str, int], ...], shared: tuple[list[Any], Any]) -> Any:
    """A Ray task: the stages a group of runs shares (the method's ``stages_of``)."""
    apply_threads(threads)  # the driver's thread counts: the driver's rounding
    return stages_of(configs, checked=shared[1], device=device)


def sweep_point(item: tuple[Any, ...], shared: tuple[list[Any], Any]
                ) -> tuple[dict[str, Any], Any]:
    """A Ray task: one run of the sweep, with its group's stages, as its record(s)."""
    sweep, index, stages, device, command, threads = item
    apply_threads(threads)
    configs, checked = shared
    (result,) = list(sweep(configs, device=device, checked=checked, progress=False,
                           stages=resolve(stages), only={index}))
    return _records_of(result, command)


def add_sweep_grid_arguments(p: argparse.ArgumentParser, *, modes: Sequence[str],
                             default_mode: str, epsilons_example: str,
                             modes_name: str = "modes", epsilons_required: bool = True,
                             epsilons_help: str = "comma-separated target epsilons") -> None:
    """The grid flags of every ``dpkd sweep METHOD``: epsilons, modes, seeds, resume/force."""
    p.add_argument("--epsilons", type=_float_list, required=epsilons_required,
                   help=f"{epsilons_help}, e.g. {epsilons_example}")
    p.add_argument("--modes", type=choice_list(modes), default=[default_mode],
                   help=f"comma-separated {modes_name} (default {default_mode})")
    p.add_argument("--seeds", type=_int_list, default=[0], help="comma-separated seeds")
    add_executor_arguments(p)
    add_ledger_arguments(p)
    existing = p.add_mutually_exclusive_group()
    existing.add_argument("--resume", action="store_true",
                          help="keep OUT/results.jsonl and skip the runs already in it")
    existing.add_argument("--force", action="store_true",
                          help="overwrite OUT/results.jsonl (without --resume or --force, an "
                               "existing one is refused before any work)")


def write_sweep_report(out: Path, *, command: str, dataset: str,
                       method_title: str = "Reverse k-NN", page_title: str | None = None,
                       notes: str = "", dashed_metric: str = "label_accuracy",
                       ) -> tuple[Path, Path]:
    """Write ``OUT/accuracy.png`` and ``OUT/README.md`` of a sweep from ``OUT/results.jsonl``.

    Built from the saved records alone (so a committed sweep's page can be rebuilt without
    rerunning it).

    Args:
        out: The sweep's folder.
        command: The command that made it.
        dataset: Dataset name for the titles.
        method_title: Method name for the plot title.
        page_title: The page's heading (default: "Reverse k-NN labelling on DATASET").
        notes: Markdown added at the end of the page (what the epsilons mean, ...).
        dashed_metric: The accuracy drawn dashed beside the test accuracy (a record key:
            label accuracy by default, ``"teacher_accuracy"`` for methods with a teacher).

    Returns:
        The paths of the plot and of the page.
    """
    from dpkd_audit.reports.accuracy import plot_accuracy
    from dpkd_audit.reports.records import load_records
    from dpkd_audit.reports.tables import sweep_readme

    records = load_records(out / "results.jsonl")
    plot = plot_accuracy(records, out / "accuracy.png",
                         title=f"{method_title} on {dataset}: accuracy vs epsilon",
                         dashed_metric=dashed_metric)
    readme = sweep_readme(records, command=command,
                          title=page_title or f"Reverse k-NN labelling on {dataset}",
                          plot_name=plot.name)
    readme += ("\nEach run is a separate experiment with its own budget (a fresh ledger); "
               "releasing all of them on the same private data would compose.\n")
    if notes:
        readme += "\n" + notes.rstrip() + "\n"
    (out / "README.md").write_text(readme)
    return plot, out / "README.md"


def argv_or_default(argv: list[str] | None) -> list[str]:
    """The argument list ``main`` parses (for recording the command)."""
    return list(sys.argv[1:] if argv is None else argv)


def add_dp_sgd_arguments(p: argparse.ArgumentParser, *, network: str) -> None:
    """``--dp-architecture`` and ``--accountant`` (read by :func:`apply_generator_arguments`).

    Args:
        p: The parser of ``dpkd run|sweep dgd|dpdfd``.
        network: What the method calls its DP-SGD network ("DP baseline", "DP teacher").
    """
    p.add_argument("--dp-architecture", choices=TEACHER_ARCHITECTURES,
                   help=f"sound mode: the network of the {network} trained with DP-SGD "
                        "(scatter-cnn: Tramer-Boneh's ScatterNet + CNN, a fixed scattering "
                        "transform then a small tanh CNN). Default: the preset's")
    p.add_argument("--accountant", choices=["rdp", "pld"],
                   help="sound mode: the accountant that calibrates the DP-SGD noise and keeps "
                        "the run's ledger: rdp (default, Opacus's) or pld (tighter: less noise "
                        "for the same record-level epsilon; a named departure)")


def apply_generator_arguments(config: Any, args: argparse.Namespace, *, mode: str) -> Any:
    """The sound-mode flags on a DP-DFD or DGD config.

    ``--statistics-share``, ``--generator-steps``, ``--accountant`` and ``--dp-architecture``.

    Both configs hold ``generator`` (published mode), ``sound_generator`` and ``statistics``
    (the sound mode's DP feature statistics, whose term the sound generator weighs by
    ``beta``: a share of 0 turns both off).

    Raises:
        ValueError: ``--statistics-share``, ``--accountant`` or ``--dp-architecture`` where no
            sound run is asked for.
    """
    replace = dataclasses.replace
    if args.statistics_share is not None:
        if "sound" not in getattr(args, "modes", [mode]):
            raise ValueError("--statistics-share applies to sound runs only")
        share = args.statistics_share
        config = replace(config, statistics=replace(config.statistics, epsilon_share=share),
                         sound_generator=replace(config.sound_generator,
                                                 beta=config.sound_generator.beta
                                                 if share > 0 else 0.0))
    if args.generator_steps is not None:
        config = replace(config,
                         generator=replace(config.generator, steps=args.generator_steps),
                         sound_generator=replace(config.sound_generator,
                                                 steps=args.generator_steps))
    if getattr(args, "accountant", None) is not None:
        if "sound" not in getattr(args, "modes", [mode]):
            raise ValueError("--accountant applies to sound runs only")
        config = replace(config, dp_sgd=replace(config.dp_sgd, accountant=args.accountant))
    if getattr(args, "dp_architecture", None) is not None:
        if "sound" not in getattr(args, "modes", [mode]):
            raise ValueError("--dp-architecture applies to sound runs only")
        field = "dp_baseline" if hasattr(config, "dp_baseline") else "dp_teacher"
        config = replace(config, **{field: replace(getattr(config, field),
                                                   architecture=args.dp_architecture)})
    return config


def run_single(args: argparse.Namespace, config: Any, *, pipeline: Any,
               summary: Callable[[Mapping[str, Any]], str]) -> int:
    """``dpkd run`` of a DP-DFD or DGD config: check, charge, run, write, print.

    ``pipeline`` is the method's package (``dpkd_audit.pipelines.dpdfd`` or ``.dgd``): its
    ``check_configs``, ``check_run``, ``ledger_for``, ``label_rng`` and ``run``. A ``--ledger``
    file (opened, or created for the mode) must be able to pay before any work; without one the
    run gets a fresh ledger that fits its mode. Writes ``OUT/config.json`` before the run and
    ``OUT/result.json`` after it.
    """
    from dpkd_audit.ledger import Ledger
    from dpkd_audit.provenance import provenance

    data = pipeline.check_configs([config], data_dir=args.data_dir, progress=not args.quiet)
    if args.ledger:
        output_file(args.ledger, "--ledger")
        ledger = (Ledger.open(args.ledger) if Path(args.ledger).exists()
                  else pipeline.ledger_for(config, path=args.ledger))
        # the given ledger (not only a fresh one) must be able to pay, before any work
        dataset = data[config.dataset].dataset
        pipeline.check_run(config, ledger, num_private=dataset.n_train,
                           num_classes=dataset.num_classes, image_shape=dataset.image_shape)
    else:
        ledger = pipeline.ledger_for(config)
    out = _out_dir(args.out)
    command = _command(args.argv)
    _write_json(out / "config.json", {"command": command, "argv": args.argv,
                                      "config": config.to_dict(), "provenance": provenance()})
    result = pipeline.run(config, ledger=ledger, rng=pipeline.label_rng(config),
                          device=args.device, data=data[config.dataset],
                          progress=not args.quiet)
    record = {**result.to_record(command=command), **resumed_fields()}
    _write_json(out / "result.json", record)
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        print(summary(record))
        print(f"wrote {out / 'result.json'}")
    return 0
