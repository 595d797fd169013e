"""``dpkd run dpdfd`` and ``dpkd sweep dpdfd``: DP-DFD records, as published and sound.

Shares the record writing, ``--resume`` / ``--force`` and the sweep report with reverse k-NN
(:mod:`dpkd_audit.cli.sweeps`).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from dpkd_audit.cli.arguments import fraction, int_at_least, positive_float
from dpkd_audit.cli.sweeps import (
    add_dp_sgd_arguments,
    add_sweep_grid_arguments,
    apply_generator_arguments,
    run_single,
    run_sweep,
)

__all__ = ["add_dpdfd_parsers"]

_DATASETS = ["digits", "mnist", "fashion-mnist"]
_MODES = ["published", "sound"]

#: What the epsilons of a DP-DFD sweep mean (appended to its README).
SWEEP_NOTES = """\
**What epsilon means here.** In `published` rows, epsilon is the paper's figure: the epsilon of
*one* released label (selective randomized response). It is not a record-level guarantee: the
teacher saw the private records without noise and the generator was fitted to its BatchNorm
running statistics, so the record-level epsilon is infinite (the ledger holds a
`NonPrivateDpEvent`); even setting that aside, Q labels from one teacher compose to Q * eps
(`epsilon_labels_composed` in each record). In `sound` rows, epsilon is the record-level
(epsilon, delta = 1e-5) guarantee of the whole run: the teacher is trained with DP-SGD and
feature statistics are read through it with the Gaussian mechanism (both charged to the
ledger, composed by RDP; the PLD figure is in the record), and everything after them is
post-processing; its labels also carry a per-label epsilon (`epsilon_per_label`). The two
kinds of epsilon are not comparable: the plot puts them on one axis only for compactness.
"""


def _config(args: argparse.Namespace, *, epsilon: float, mode: str) -> Any:
    from dpkd_audit.pipelines.dpdfd import DpdfdConfig

    overrides: dict[str, Any] = {"dataset": args.dataset, "epsilon": epsilon, "mode": mode,
                                 "seed": args.seed}
    if args.label_epsilon is not None:
        if mode != "sound":
            raise ValueError("--label-epsilon applies to --mode sound only (in published mode "
                             "--epsilon is the per-label epsilon)")
        overrides["label_epsilon"] = args.label_epsilon
    for name in ("stages", "stage_size"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.student_from_teacher is not None:
        if "sound" not in getattr(args, "modes", [mode]):
            raise ValueError("--student-from-teacher / --no-student-from-teacher applies to "
                             "sound runs only (a published student starts from scratch, as "
                             "the paper's)")
        overrides["student_from_teacher"] = args.student_from_teacher
    if args.student_from_teacher_lr is not None:
        if "sound" not in getattr(args, "modes", [mode]) or args.student_from_teacher is False:
            raise ValueError("--student-from-teacher-lr applies to sound runs whose student "
                             "starts from the teacher only; got it with "
                             + ("--no-student-from-teacher" if args.student_from_teacher is False
                                else "no sound mode"))
        overrides["student_from_teacher_learning_rate"] = args.student_from_teacher_lr
    config = DpdfdConfig.preset_config(args.preset, **overrides)
    replace = dataclasses.replace
    if args.teacher_epochs is not None:
        config = replace(config, teacher=replace(config.teacher, training=replace(
            config.teacher.training, epochs=args.teacher_epochs)),
            dp_sgd=replace(config.dp_sgd, epochs=args.teacher_epochs))
    if args.label_loss is not None:
        config = replace(config, student=replace(config.student, loss=args.label_loss))
    return apply_generator_arguments(config, args, mode=mode)


def _summary(record: dict[str, Any]) -> str:
    rl = record["epsilon_record_level"]
    rl_text = "inf (not DP at record level)" if rl is None else \
        f"{rl:.4g} (delta {record['delta']:g})"
    return (f"{record['dataset']} dpdfd {record['mode']} eps={record['epsilon']:g} "
            f"({record['epsilon_kind']}): student {record['test_accuracy']:.4f}, teacher "
            f"{record['teacher_accuracy']:.4f}, labels {record['label_accuracy']:.4f}; "
            f"record-level epsilon {rl_text}; {record['seconds']['total']:.1f} s on "
            f"{record['device']}")


def _cmd_run(args: argparse.Namespace) -> int:
    from dpkd_audit.pipelines import dpdfd

    config = _config(args, epsilon=args.epsilon, mode=args.mode)
    return run_single(args, config, pipeline=dpdfd, summary=_summary)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from dpkd_audit.pipelines.dpdfd import check_configs, sweep, sweep_configs

    base_mode = "sound" if args.label_epsilon is not None and "sound" in args.modes \
        else args.modes[0]
    base = _config(args, epsilon=args.epsilons[0], mode=base_mode)
    configs = sweep_configs(base, epsilons=args.epsilons, modes=args.modes, seeds=args.seeds)
    from dpkd_audit.pipelines.dpdfd.pipeline import ledger_for, preparation_key
    from dpkd_audit.pipelines.dpdfd.sweep import planned_run_events, stages_of

    return run_sweep(args, base=base, configs=configs, check_configs=check_configs,
                     sweep=sweep, summary=_summary, group_key=preparation_key,
                     plan=planned_run_events, ledger_for=ledger_for,
                     stages_of=stages_of,
                     report={"method_title": "DP-DFD",
                             "page_title": f"DP-DFD on {args.dataset}: published and sound",
                             "notes": SWEEP_NOTES, "dashed_metric": "teacher_accuracy"})


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", choices=_DATASETS, default="digits",
                   help="dataset (default digits, embedded; mnist / fashion-mnist need the idx "
                        "files: --data-dir or DPKD_DATA_DIR)")
    p.add_argument("--data-dir", help="directory holding the dataset's idx files")
    p.add_argument("--preset", choices=["small", "paper"], default="small",
                   help="small: CPU-sized (default); paper: the paper's ResNet-34 teacher, "
                        "GPU-sized")
    p.add_argument("--label-epsilon", type=positive_float,
                   help="sound mode: per-label epsilon of the labels (default 10)")
    p.add_argument("--stages", type=int_at_least(1), help="stages T (default: the preset's)")
    p.add_argument("--stage-size", type=int_at_least(2),
                   help="labels per stage (default: the preset's)")
    p.add_argument("--teacher-epochs", type=int_at_least(1),
                   help="teacher epochs (the DP-SGD epochs in sound mode; default: the "
                        "preset's)")
    p.add_argument("--generator-steps", type=int_at_least(1),
                   help="generator training steps (default: the preset's)")
    p.add_argument("--label-loss", choices=["noise-aware", "kl"],
                   help="how the student learns from released labels: noise-aware (default; "
                        "forward correction through the known selective-RR channel) or kl "
                        "(the paper's Eq. 3 as written)")
    p.add_argument("--student-from-teacher", action=argparse.BooleanOptionalAction,
                   default=None,
                   help="sound mode: the student starts from a copy of the DP teacher "
                        "(post-processing; not in the paper; the default) or, with --no-..., "
                        "from scratch")
    p.add_argument("--student-from-teacher-lr", type=positive_float,
                   help="sound mode: Adam learning rate of the student that starts from the "
                        "teacher (default: the preset's, 3e-4)")
    add_dp_sgd_arguments(p, network="DP teacher")
    p.add_argument("--statistics-share", type=fraction,
                   help="sound mode: epsilon of the DP feature-statistics release as a share "
                        "of --epsilon, in [0, 1) (default 0.1; 0: no statistics term)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--quiet", action="store_true", help="no progress bars or stage messages")


def add_dpdfd_parsers(run_methods: argparse._SubParsersAction,
                      sweep_methods: argparse._SubParsersAction) -> None:
    """Add ``dpdfd`` to ``dpkd run`` and ``dpkd sweep``."""
    p = run_methods.add_parser(
        "dpdfd", help="DP-DFD: data-free distillation with selective randomized response",
        description="DP-DFD (teacher, data-free generator, staged selective-RR labels, student). "
                    "--mode published runs the paper (epsilon per label; record-level epsilon "
                    "infinite, recorded as such); --mode sound trains the teacher with DP-SGD "
                    "(epsilon = record-level target at delta 1e-5). Writes OUT/result.json and "
                    "OUT/config.json.")
    p.add_argument("--mode", choices=_MODES, default="published",
                   help="published (the paper) or sound (DP-SGD teacher)")
    p.add_argument("--epsilon", type=positive_float, default=10.0,
                   help="per-label epsilon (published) or record-level target (sound); "
                        "default 10")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="seed of models and noise")
    p.add_argument("--ledger", help="SQLite ledger file to charge (created for the mode if "
                                    "missing; published mode needs an unbounded one)")
    p.add_argument("--json", action="store_true", help="print the result record")
    _add_arguments(p)
    p.set_defaults(func=_cmd_run, label_epsilon=None)

    p = sweep_methods.add_parser(
        "dpdfd", help="DP-DFD over epsilons x modes x seeds",
        description="Runs DP-DFD for every (seed, mode, epsilon); published runs of a seed share "
                    "the teacher and generator. Writes OUT/results.jsonl, OUT/accuracy.png "
                    "(paper numbers as stars) and OUT/README.md. An existing results.jsonl is "
                    "refused before any work unless --resume or --force is given.")
    add_sweep_grid_arguments(p, modes=_MODES, default_mode="published", epsilons_example="1,10")
    _add_arguments(p)
    p.set_defaults(func=_cmd_sweep, seed=0)
