"""``dpkd run dgd`` and ``dpkd sweep dgd``: DGD records, as published and sound.

Shares the record writing, ``--resume`` / ``--force`` and the sweep report with reverse k-NN
and DP-DFD (:mod:`dpkd_audit.cli.sweeps`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any

from dpkd_audit.cli.arguments import fraction, int_at_least, non_negative_float, positive_float
from dpkd_audit.cli.sweeps import (
    add_dp_sgd_arguments,
    add_sweep_grid_arguments,
    apply_generator_arguments,
    run_single,
    run_sweep,
)

__all__ = ["add_dgd_parsers"]

_DATASETS = ["digits", "mnist", "fashion-mnist"]
_MODES = ["published", "sound"]

#: What the epsilons of a DGD sweep mean (appended to its README).
SWEEP_NOTES = """\
**What epsilon means here.** In `published` rows, epsilon is the paper's figure for the label
queries, Q eps0^2 + eps0 sqrt(-2 Q ln delta) with eps0 = 0.05 (Laplace scale 40) and delta =
1e-5; the same queries by RDP / PLD (data-independent, `epsilon_queries_rdp` /
`epsilon_queries_pld`) and PATE's data-dependent figure (`epsilon_data_dependent`, itself not
private to publish) are in each record. It is not a record-level guarantee: the baseline
classifier saw the private records without noise and the generator, the synthetic set, the VAE
and the student's unlabelled training all derive from it, so the record-level epsilon is
infinite (the ledger holds a `NonPrivateDpEvent`). In `sound` rows, epsilon is the record-level
(epsilon, delta = 1e-5) guarantee of the whole run: the baseline is trained with DP-SGD, feature
statistics for the generator are released through it by the Gaussian mechanism, and the
queries are LNMax releases, all charged to one ledger under add/remove-one neighbours (RDP; the
PLD figure is in the record); the generator, the synthetic set, the VAE and the student's
distillation from the DP baseline are post-processing. The *published eps* of a sound row is
the paper's formula for its queries alone. Sound records leave out the figures computed from
the teachers without noise (their accuracies, the data-dependent epsilon). The two kinds of
epsilon are not comparable: the plot puts them on one axis only for compactness.
"""


def _config(args: argparse.Namespace, *, mode: str, queries: int | None,
            epsilon: float | None) -> Any:
    from dpkd_audit.pipelines.dgd import DgdConfig

    overrides: dict[str, Any] = {"dataset": args.dataset, "mode": mode, "seed": args.seed,
                                 "epsilon": epsilon}
    if queries is not None:
        overrides["queries"] = queries
    if args.distillation_weight is not None and "sound" not in getattr(args, "modes", [mode]):
        raise ValueError("--distillation-weight applies to sound runs only (published runs use "
                         "the paper's student)")
    if args.label_filter is not None and "sound" not in getattr(args, "modes", [mode]):
        raise ValueError("--label-filter applies to sound runs only (published runs train on "
                         "every released label, as the paper)")
    if args.student_init is not None and "sound" not in getattr(args, "modes", [mode]):
        raise ValueError("--student-init applies to sound runs only (a published student "
                         "starts from scratch, as the paper)")
    published_only = {"--balance-weight": args.balance_weight,
                      "--labelled-loss": args.labelled_loss,
                      "--unlabelled-terms": args.unlabelled_terms,
                      "--unlabelled-input": args.unlabelled_input}
    given = [flag for flag, value in published_only.items() if value is not None]
    if given and "published" not in getattr(args, "modes", [mode]):
        verb = "applies" if len(given) == 1 else "apply"
        raise ValueError(f"{', '.join(given)} {verb} to the published student only (a sound "
                         "run trains its own student: no unlabelled terms, cross-entropy on the "
                         "kept labels); drop it or add the published mode")
    if args.generator_statistics is not None and "published" not in getattr(args, "modes",
                                                                              [mode]):
        raise ValueError("--generator-statistics applies to published runs only (a sound "
                         "generator matches statistics released with noise: "
                         "--statistics-share)")
    for name in ("noise_scale", "query_share", "synthetic", "selection", "distillation_weight",
                 "label_filter", "generator_statistics", "student_init"):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    # A label filter may keep no label, so a student without the distillation term trains on
    # every label: --distillation-weight 0 implies --label-filter none unless it is given.
    if args.distillation_weight == 0 and args.label_filter is None:
        overrides["label_filter"] = "none"
    config = DgdConfig.preset_config(args.preset, **overrides)
    replace = dataclasses.replace
    # The latent-code perturbation protects the unlabelled synthetic images only if the student
    # sees nothing but reconstructions from the released codes: --latent-epsilon implies
    # --unlabelled-input reconstruction unless it is given (and then checked by the config).
    unlabelled_input = args.unlabelled_input or (
        "reconstruction" if args.latent_epsilon is not None else None)
    student = {name: value for name, value in (
        ("unlabelled_input", unlabelled_input), ("balance_weight", args.balance_weight),
        ("labelled_loss", args.labelled_loss), ("unlabelled_terms", args.unlabelled_terms))
        if value is not None}
    if student:
        config = replace(config, student=replace(config.student, **student))
    if args.latent_epsilon is not None:
        config = replace(config, latent_epsilon=args.latent_epsilon)
    if args.teachers is not None:
        config = replace(config, ensemble=replace(config.ensemble, num_teachers=args.teachers))
    if args.ensemble_steps is not None:
        config = replace(config, ensemble=replace(config.ensemble, steps=args.ensemble_steps))
    if args.ensemble_augment is not None:
        config = replace(config, ensemble=replace(config.ensemble,
                                                  augment=args.ensemble_augment))
    if args.student_steps is not None:
        config = replace(config, student=replace(config.student, steps=args.student_steps),
                         sound_student=replace(config.sound_student, steps=args.student_steps))
    return apply_generator_arguments(config, args, mode=mode)


def _summary(record: Mapping[str, Any]) -> str:
    rl = record["epsilon_record_level"]
    rl_text = "inf (not DP at record level)" if rl is None else \
        f"{rl:.4g} (delta {record['delta']:g})"
    return (f"{record['dataset']} dgd {record['mode']} eps={record['epsilon']:.4g} "
            f"({record['epsilon_kind']}), {record['queries']} queries (RDP "
            f"{record['epsilon_queries_rdp']:.4g}): student {record['test_accuracy']:.4f}, "
            f"baseline {record['baseline_accuracy']:.4f}; record-level epsilon {rl_text}; "
            f"{record['seconds']['total']:.1f} s on {record['device']}")


def _cmd_run(args: argparse.Namespace) -> int:
    from dpkd_audit.pipelines import dgd

    if args.mode == "published" and args.epsilon is not None:
        raise ValueError("--epsilon applies to --mode sound only (the record-level target); "
                         "published DGD's epsilon follows from --queries")
    if args.mode == "sound" and args.epsilon is None:
        raise ValueError("--mode sound needs --epsilon (the record-level target, > 0)")
    config = _config(args, mode=args.mode, queries=args.queries, epsilon=args.epsilon)
    return run_single(args, config, pipeline=dgd, summary=_summary)


def _point_key(config: Any) -> tuple[Any, ...]:
    return (config.mode.value, config.epsilon, config.queries, config.seed)


def _record_key(record: Mapping[str, Any]) -> tuple[Any, ...]:
    saved = record["config"]
    return (record["mode"], saved["epsilon"], saved["queries"], int(record["seed"]))


def _cmd_sweep(args: argparse.Namespace) -> int:
    from dpkd_audit.pipelines.dgd import check_configs, sweep, sweep_configs

    if "sound" not in args.modes and args.epsilons:
        raise ValueError("--epsilons applies to sound points only (published DGD's epsilon "
                         "follows from --queries)")
    mode = args.modes[0]
    base = _config(args, mode=mode, queries=(args.queries or [None])[0],
                   epsilon=(args.epsilons or [None])[0] if mode == "sound" else None)
    configs = sweep_configs(base, modes=args.modes, seeds=args.seeds,
                            queries=args.queries or (), epsilons=args.epsilons or ())
    from dpkd_audit.pipelines.dgd.pipeline import ensemble_key, ledger_for
    from dpkd_audit.pipelines.dgd.sweep import planned_run_events, stages_of

    return run_sweep(args, base=base, configs=configs, check_configs=check_configs,
                     sweep=sweep, summary=_summary, point_key=_point_key,
                     record_key=_record_key, group_key=ensemble_key,
                     plan=planned_run_events, ledger_for=ledger_for,
                     stages_of=stages_of,
                     report={"method_title": "DGD",
                             "page_title": f"DGD on {args.dataset}: published and sound",
                             "notes": SWEEP_NOTES, "dashed_metric": "teacher_accuracy"})


def _query_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.replace(" ", "").split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be comma-separated integers >= 1, e.g. 27,400,750,1300; got {text!r}"
        ) from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"must be comma-separated integers >= 1, e.g. 27,400,750,1300; got {text!r}")
    return values


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", choices=_DATASETS, default="digits",
                   help="dataset (default digits, embedded; mnist / fashion-mnist need the idx "
                        "files: --data-dir or DPKD_DATA_DIR)")
    p.add_argument("--data-dir", help="directory holding the dataset's idx files")
    p.add_argument("--preset", choices=["small", "paper"], default="small",
                   help="small: CPU-sized (default); paper: the paper's sizes, GPU-sized")
    p.add_argument("--noise-scale", type=positive_float,
                   help="Laplace scale of each vote count (default 40: eps0 = 0.05)")
    p.add_argument("--query-share", type=fraction,
                   help="sound mode without --queries: share of --epsilon the queries may take "
                        "(default: 0.1 in the small preset on mnist and fashion-mnist, else "
                        "0.5)")
    p.add_argument("--selection", choices=["first", "confident"],
                   help="which synthetic images are queried: first (random, the paper) or "
                        "confident (the baseline's most confident per class; small preset "
                        "default)")
    p.add_argument("--teachers", type=int_at_least(2),
                   help="teachers in the ensemble (default 250; 25 on digits)")
    p.add_argument("--ensemble-steps", type=int_at_least(1),
                   help="training steps of the ensemble (default: the preset's)")
    p.add_argument("--ensemble-augment", action=argparse.BooleanOptionalAction,
                   help="augment each teacher's mini-batches (random shift, rotation and "
                        "zoom; not in DGD). Default: the preset's (small: on, with 600 steps, "
                        "for MNIST's published runs; off otherwise)")
    p.add_argument("--generator-steps", type=int_at_least(1),
                   help="generator training steps (default: the preset's)")
    p.add_argument("--student-steps", type=int_at_least(1),
                   help="student training steps (default: the preset's)")
    p.add_argument("--synthetic", type=int_at_least(3),
                   help="size of the synthetic set (default: the preset's)")
    p.add_argument("--generator-statistics", choices=["none", "exact"],
                   help="published mode: what the generator matches besides DAFL's loss: none "
                        "(the paper) or exact (the private data's feature statistics read "
                        "through the baseline without noise; a departure, no less private than "
                        "the published baseline). Default: the preset's")
    add_dp_sgd_arguments(p, network="DP baseline")
    p.add_argument("--statistics-share", type=fraction,
                   help="sound mode: epsilon of the DP feature-statistics release (through the "
                        "DP baseline, for the generator) as a share of --epsilon, in [0, 1) "
                        "(default 0.1; 0: no statistics term)")
    p.add_argument("--distillation-weight", type=non_negative_float,
                   help="sound mode: weight of the DP baseline's soft labels on the unlabelled "
                        "synthetic images in the student's loss (default 1; 0: the paper's "
                        "student)")
    p.add_argument("--label-filter", choices=["baseline-agreement", "none"],
                   help="sound mode: which released labels the student trains on: "
                        "baseline-agreement (those equal to the DP baseline's class for their "
                        "image; post-processing, default) or none (every one, as the paper; "
                        "implied by --distillation-weight 0)")
    p.add_argument("--student-init", choices=["scratch", "baseline"],
                   help="sound mode: where the student starts: baseline (a copy of the DP "
                        "baseline, its architecture and weights; post-processing; default) or "
                        "scratch (a fresh student, as the paper)")
    p.add_argument("--latent-epsilon", type=positive_float,
                   help="the paper's optional latent-code perturbation eps1 (0.01 in its "
                        "experiments; off by default): protects one synthetic image, not a "
                        "record, and is added to the published epsilon only")
    p.add_argument("--unlabelled-input", choices=["synthetic", "reconstruction"],
                   help="where the published student's TNAR and entropy terms act: synthetic "
                        "(the unlabelled synthetic images, as TNAR does; default) or "
                        "reconstruction (their VAE reconstructions, DGD's Eq. 4 read literally; "
                        "implied by --latent-epsilon)")
    p.add_argument("--balance-weight", type=non_negative_float,
                   help="published student: weight of the class-balance term on the unlabelled "
                        "images (entropy of their mean prediction, maximised; not in DGD; "
                        "default: the preset's, 0.1 in small, 0 in paper)")
    p.add_argument("--labelled-loss", choices=["cross-entropy", "generalized-cross-entropy"],
                   help="published student: loss on the queried images: cross-entropy (the "
                        "paper's, default) or generalized-cross-entropy (Zhang and Sabuncu "
                        "2018, q 0.7, meant for wrong labels; not in DGD; measured on MNIST at "
                        "1,300 queries: 89.80%% against 91.21%%)")
    p.add_argument("--unlabelled-terms", choices=["adversarial-kl", "random-feature"],
                   help="published student: form of the tangent and normal terms: "
                        "adversarial-kl (TNAR's virtual-adversarial KL, default) or "
                        "random-feature (DGD's Eq. 6 as printed: random noise along the "
                        "tangent / normal directions, squared distance of backbone features; "
                        "on the digits it collapses the backbone at the preset's norms)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--quiet", action="store_true", help="no progress bars or stage messages")


def add_dgd_parsers(run_methods: argparse._SubParsersAction,
                    sweep_methods: argparse._SubParsersAction) -> None:
    """Add ``dgd`` to ``dpkd run`` and ``dpkd sweep``."""
    p = run_methods.add_parser(
        "dgd", help="DGD: teacher ensemble, data-free generator, VAE, LNMax queries, TNAR student",
        description="DGD (batched teacher ensemble, baseline + data-free generator + VAE, LNMax "
                    "label queries, semi-supervised TNAR student). --mode published runs the "
                    "paper (epsilon by its formula for --queries; record-level epsilon "
                    "infinite, recorded as such); --mode sound trains the baseline with DP-SGD "
                    "(--epsilon = record-level target of baseline + queries at delta 1e-5). "
                    "Writes OUT/result.json and OUT/config.json.")
    p.add_argument("--mode", choices=_MODES, default="published",
                   help="published (the paper) or sound (DP-SGD baseline)")
    p.add_argument("--queries", type=int_at_least(1),
                   help="label queries (published default 1300, 200 on digits; sound default: "
                        "the most that fit --query-share of --epsilon)")
    p.add_argument("--epsilon", type=positive_float,
                   help="sound mode: record-level target of the whole run")
    p.add_argument("--seed", type=int_at_least(0), default=0, help="seed of models and noise")
    p.add_argument("--ledger", help="SQLite ledger file to charge (created for the mode if "
                                    "missing; published mode needs an unbounded one)")
    p.add_argument("--json", action="store_true", help="print the result record")
    _add_arguments(p)
    p.set_defaults(func=_cmd_run)

    p = sweep_methods.add_parser(
        "dgd", help="DGD over query counts x epsilons x modes x seeds",
        description="Runs DGD for every (seed, mode, queries / epsilon); runs of a seed share "
                    "the teacher ensemble, and published runs also the baseline, generator and "
                    "VAE. Writes OUT/results.jsonl, OUT/accuracy.png (paper numbers as stars) "
                    "and OUT/README.md. An existing results.jsonl is refused before any work "
                    "unless --resume or --force is given.")
    p.add_argument("--queries", type=_query_list,
                   help="comma-separated query counts (published points; sound points take "
                        "each with every epsilon if given), e.g. 27,400,750,1300")
    add_sweep_grid_arguments(p, modes=_MODES, default_mode="published", epsilons_example="1,3,10",
                             epsilons_required=False,
                             epsilons_help="comma-separated record-level targets of sound "
                                           "points")
    _add_arguments(p)
    p.set_defaults(func=_cmd_sweep, seed=0)
