"""``dpkd run rknn`` and ``dpkd sweep rknn``: reverse k-NN records.

Built on the shared record writing, ``--resume`` / ``--force`` and sweep report of
:mod:`dpkd_audit.cli.sweeps`.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpkd_audit.cli.checkpoints import resumed_fields
from dpkd_audit.cli.paths import output_file
from dpkd_audit.cli.sweeps import (
    EVALUATOR_FILE,
    _command,
    _out_dir,
    _write_json,
    add_sweep_grid_arguments,
    run_sweep,
)

__all__ = ["add_rknn_parsers", "clusters_help"]

_DATASETS = ["digits", "mnist", "fashion-mnist"]

_MODES = ["central", "local-rr", "local-collision", "shuffle", "shuffle-multi"]

_REPRESENTATIONS = ["pca", "hog", "hog-pca", "encoder", "umap"]  # RepresentationKind (tested)


class _LazyHelp(str):
    """A help text computed only when help is shown; the string itself is a short fallback.

    The defaults of ``--clusters`` are read off the presets, which live beside torch; computing
    them when the parser is built would import torch for every ``dpkd`` command.
    """

    compute: Callable[[], str]

    def __new__(cls, fallback: str, compute: Callable[[], str]) -> _LazyHelp:
        text = super().__new__(cls, fallback)
        text.compute = compute
        return text


class _LazyHelpFormatter(argparse.HelpFormatter):
    """Shows a :class:`_LazyHelp` as the text it computes."""

    def _format_action(self, action: argparse.Action) -> str:
        if isinstance(action.help, _LazyHelp):
            action = copy.copy(action)
            action.help = action.help.compute().replace("%", "%%")
        return super()._format_action(action)


def clusters_help() -> str:
    """Help of ``--clusters``: the default number of queries of every preset and dataset.

    Read off :meth:`~dpkd_audit.pipelines.rknn.RknnConfig.preset_config`, so it cannot drift
    from the code.
    """
    from dpkd_audit.pipelines.rknn.config import SMALL_EPSILON, Preset, ReleaseMode, RknnConfig

    below, above = SMALL_EPSILON / 10, SMALL_EPSILON * 10
    parts = []
    for preset in Preset:
        by_value: dict[str, list[str]] = {}
        for dataset in _DATASETS:
            cases: dict[int, list[str]] = {}
            for mode in ReleaseMode:
                small, large = (RknnConfig.preset_config(preset, dataset=dataset, mode=mode,
                                                         epsilon=eps).clusters
                                for eps in (below, above))
                if small == large:
                    cases.setdefault(small, []).append(mode.value)
                else:
                    cases.setdefault(small, []).append(f"{mode.value} eps < {SMALL_EPSILON:g}")
                    cases.setdefault(large, []).append(f"{mode.value} eps >= {SMALL_EPSILON:g}")
            value = (str(next(iter(cases))) if len(cases) == 1 else " or ".join(
                f"{v} ({', '.join(labels)})" for v, labels in cases.items()))
            by_value.setdefault(value, []).append(dataset)
        if len(by_value) == 1:
            parts.append(f"--preset {preset.value}: {next(iter(by_value))}")
        else:
            parts.append(f"--preset {preset.value}: " + ", ".join(
                f"{value} for {' and '.join(datasets)}" for value, datasets in by_value.items()))
    return "number of queries s (default: " + "; ".join(parts) + ")"


def _rknn_config(args: argparse.Namespace, *, epsilon: float, mode: str) -> Any:
    from dpkd_audit.pipelines.common.representations import RepresentationConfig
    from dpkd_audit.pipelines.rknn import RknnConfig

    overrides: dict[str, Any] = {"dataset": args.dataset, "epsilon": epsilon, "mode": mode,
                                 "k": args.k, "seed": args.seed, "split_seed": args.split_seed,
                                 "central_noise": args.noise, "soft_labels": args.soft_labels,
                                 "simulate_local": args.simulate_local,
                                 "public_size": args.public_size}
    if args.delta is not None:
        overrides["delta"] = args.delta
    if args.clusters is not None:
        overrides["clusters"] = args.clusters
    if args.representation is not None:  # the preset's s depends on it: pass it in
        default = RknnConfig.preset_config(args.preset, **overrides).representation
        overrides["representation"] = dataclasses.replace(default, kind=args.representation)
    config = RknnConfig.preset_config(args.preset, **overrides)
    if args.student_epochs is not None:
        config = dataclasses.replace(config, student=dataclasses.replace(
            config.student, epochs=args.student_epochs))
    if args.encoder_epochs is not None:
        config = dataclasses.replace(config, encoder=dataclasses.replace(
            config.encoder, epochs=args.encoder_epochs))
    if args.self_training_rounds is not None:
        config = dataclasses.replace(config, self_training_rounds=args.self_training_rounds)
    if not isinstance(config.representation, RepresentationConfig):  # pragma: no cover
        raise ValueError("internal error: representation config")
    return config


def _summary(record: dict[str, Any]) -> str:
    eps_rl = record["epsilon_record_level"]
    eps_text = "inf" if eps_rl is None else f"{eps_rl:.4g}"
    delta_text = f", delta {record['delta']:g}" if record["delta"] else ""
    return (f"{record['dataset']} {record['mode']} eps={record['epsilon']:g}: test accuracy "
            f"{record['test_accuracy']:.4f}, label accuracy {record['label_accuracy']:.4f} "
            f"(cluster purity {record['cluster_purity']:.4f}); record-level "
            f"epsilon {eps_text}{delta_text}; "
            f"{record['seconds']['total']:.1f} s on {record['device']}")


def _cmd_run_rknn(args: argparse.Namespace) -> int:
    from dpkd_audit.ledger import Ledger
    from dpkd_audit.pipelines.rknn import (
        check_configs,
        ledger_for,
        release_rng,
        run,
        splits_key,
    )
    from dpkd_audit.provenance import provenance

    config = _rknn_config(args, epsilon=args.epsilon, mode=args.mode)
    # before anything is written; the data loaded here is the run's (loaded once)
    checked = check_configs([config], data_dir=args.data_dir, progress=not args.quiet)
    out = _out_dir(args.out)
    if args.ledger:
        output_file(args.ledger, "--ledger")
        ledger = (Ledger.open(args.ledger) if Path(args.ledger).exists()
                  else ledger_for(config, path=args.ledger))
    else:
        ledger = ledger_for(config)
    command = _command(args.argv)
    _write_json(out / "config.json", {"command": command, "argv": args.argv,
                                      "config": config.to_dict(), "provenance": provenance()})
    result = run(config, ledger=ledger, rng=release_rng(config), device=args.device,
                 splits=checked[splits_key(config)], progress=not args.quiet)
    record = {**result.to_record(command=command), **resumed_fields()}
    _write_json(out / "result.json", record)
    _write_json(out / EVALUATOR_FILE, result.to_evaluator_record(command=command))
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        print(_summary(record))
        print(f"wrote {out / 'result.json'} (and {out / EVALUATOR_FILE}: evaluator-only, "
              "not private)")
    return 0


def _cmd_sweep_rknn(args: argparse.Namespace) -> int:
    from dpkd_audit.pipelines.rknn import check_configs, sweep, sweep_configs

    base = _rknn_config(args, epsilon=args.epsilons[0], mode=args.modes[0])
    # each point from its own preset (s depends on mode and epsilon), seed-major as
    # sweep_configs orders them
    per_point = [sweep_configs(_rknn_config(args, epsilon=eps, mode=mode), epsilons=[eps],
                               modes=[mode], seeds=args.seeds)
                 for mode in args.modes for eps in args.epsilons]
    configs = sorted((c for group in per_point for c in group),
                     key=lambda c: args.seeds.index(c.seed))
    from dpkd_audit.pipelines.rknn.pipeline import preparation_key
    from dpkd_audit.pipelines.rknn.release import ledger_for
    from dpkd_audit.pipelines.rknn.sweep import planned_run_events, stages_of

    return run_sweep(args, base=base, configs=configs, check_configs=check_configs,
                     sweep=sweep, summary=_summary, group_key=preparation_key,
                     plan=planned_run_events, ledger_for=ledger_for, stages_of=stages_of)


def _add_rknn_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", choices=_DATASETS, default="digits",
                   help="dataset (default digits, embedded; mnist / fashion-mnist need the idx "
                        "files: --data-dir or DPKD_DATA_DIR)")
    p.add_argument("--data-dir", help="directory holding the dataset's idx files")
    p.add_argument("--clusters", type=int, help=_LazyHelp(
        "number of queries s (default: set by --preset and --dataset)", clusters_help))
    p.add_argument("--k", type=int, default=1, help="nearest queries per record (default 1)")
    p.add_argument("--delta", type=float,
                   help="target delta (shuffle modes only; default 1e-5)")
    p.add_argument("--preset", choices=["small", "paper"], default="small",
                   help="small: CPU-sized (default); paper: GPU-sized (encoder, long student)")
    p.add_argument("--representation", choices=_REPRESENTATIONS,
                   help="override the preset's representation (fitted on public data only)")
    p.add_argument("--noise", choices=["discrete", "continuous"], default="discrete",
                   help="Laplace noise of the central release (default discrete, exact)")
    p.add_argument("--soft-labels", action="store_true",
                   help="train on normalised noisy counts instead of the noisy argmax")
    p.add_argument("--simulate-local", action="store_true",
                   help="local-rr: draw the clients' aggregate from its exact law")
    p.add_argument("--public-size", type=int, help="public split size (default: half the test "
                                                   "set)")
    p.add_argument("--student-epochs", type=int, help="override the student's epochs")
    p.add_argument("--encoder-epochs", type=int, help="override the encoder's epochs")
    p.add_argument("--self-training-rounds", type=int,
                   help="rounds of self-training on the public split after the first student "
                        "(default: 1 in the small preset on MNIST / Fashion-MNIST, else 0)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the public/test split")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--quiet", action="store_true", help="no progress bars or stage messages")


def add_rknn_parsers(run_methods: argparse._SubParsersAction,
                     sweep_methods: argparse._SubParsersAction) -> None:
    """Add ``dpkd run rknn`` and ``dpkd sweep rknn``."""
    p = run_methods.add_parser(
        "rknn", help="reverse k-NN private labelling + student",
        formatter_class=_LazyHelpFormatter,
        description="Reverse k-NN private labelling (representation on public data, k-means "
                    "queries, private votes released under the chosen model, student CNN). "
                    "Writes OUT/result.json and OUT/config.json.")
    p.add_argument("--epsilon", type=float, default=0.1, help="target epsilon (default 0.1)")
    p.add_argument("--mode", choices=_MODES, default="central", help="release model")
    p.add_argument("--seed", type=int, default=0, help="seed of k-means, models and noise")
    p.add_argument("--ledger", help="SQLite ledger file to charge (created with the run's "
                                    "budget if missing)")
    p.add_argument("--json", action="store_true", help="print the result record")
    _add_rknn_arguments(p)
    p.set_defaults(func=_cmd_run_rknn)

    p = sweep_methods.add_parser(
        "rknn", help="reverse k-NN over epsilons x modes x seeds",
        formatter_class=_LazyHelpFormatter,
        description="Runs reverse k-NN for every (seed, mode, epsilon), reusing the "
                    "representation and queries; each run has its own budget. Writes "
                    "OUT/results.jsonl, OUT/accuracy.png (paper numbers as stars) and "
                    "OUT/README.md. An existing OUT/results.jsonl is refused before any work "
                    "unless --resume or --force is given.")
    add_sweep_grid_arguments(p, modes=_MODES, default_mode="central",
                             epsilons_example="0.01,0.04,0.1,1", modes_name="release models")
    _add_rknn_arguments(p)
    p.set_defaults(func=_cmd_sweep_rknn, seed=0)
