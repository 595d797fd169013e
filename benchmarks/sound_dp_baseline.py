"""Levers of issue 66 on the sound DGD run's DP baseline, one at a time.

The sound DGD student ends at its DP baseline's accuracy (the model every later stage reads
the private data through), so its levers are DP-SGD's. For each record-level target epsilon
the sound DGD plan (DP-SGD baseline + feature statistics + LNMax queries, the small preset)
is calibrated, the DP baseline trained for several seeds and its test accuracy's mean and
standard deviation printed. Only the baseline is trained: the later stages are
post-processing of it and of the queries.

Levers (each a flag; the preset's value when not given):

- ``--accountants rdp pld``: calibrating by RDP (the default, Opacus's) or PLD
  (``DpSgdConfig.accountant``, ``dpkd run dgd --accountant pld``): both valid upper bounds,
  PLD the tighter, so it buys less noise for the same record-level epsilon;
- ``--architecture``: the baseline's network (``scatter-cnn``: Tramer-Boneh's ScatterNet +
  CNN);
- ``--epochs``, ``--batch-size``, ``--learning-rate``, ``--momentum``, ``--max-grad-norm``,
  ``--lr-schedule``: DP-SGD's hyper-parameters, one or more values each (every combination
  is trained; sigma is recalibrated for each; ``--curves`` prints the per-epoch accuracy).

Usage: python benchmarks/sound_dp_baseline.py [--dataset digits] [--epsilons 2 4 8]
       [--seeds 3] [--accountants rdp pld] [--data-dir DIR] [--architecture A] [--epochs E]
       [--batch-size B ...] [--learning-rate LR ...] [--momentum M ...] [--max-grad-norm C ...]
       [--lr-schedule constant cosine] [--curves]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import statistics
import time

from dpkd_audit.accountants.dp_sgd import DpSgdAccountant
from dpkd_audit.pipelines import dgd
from dpkd_audit.pipelines.common import dp_teacher
from dpkd_audit.pipelines.common.dp_teacher import train_dp_teacher
from dpkd_audit.pipelines.common.teacher import TeacherArchitecture
from dpkd_audit.pipelines.dgd.config import DgdConfig


def _memoised_frontend() -> None:
    """Compute a fixed frontend's output once per image set for the whole process (many
    points train on the same images; the values are the ones each run would compute)."""
    real = dp_teacher.frontend_features
    memo: dict[tuple, object] = {}

    def cached(frontend, x, **kwargs):
        key = (type(frontend).__name__, tuple(x.shape), float(x.double().sum()))
        if key not in memo:
            memo[key] = real(frontend, x, **kwargs)
        return memo[key]

    dp_teacher.frontend_features = cached


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="digits")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[2.0, 4.0, 8.0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--accountants", nargs="+", choices=[a.value for a in DpSgdAccountant],
                        default=[a.value for a in DpSgdAccountant],
                        help="which calibrations to train (one per process runs them side by "
                             "side)")
    parser.add_argument("--architecture", choices=[a.value for a in TeacherArchitecture],
                        default=None)
    for flag, kind in (("--epochs", int), ("--batch-size", int), ("--learning-rate", float),
                       ("--momentum", float), ("--max-grad-norm", float)):
        parser.add_argument(flag, type=kind, nargs="+", default=None,
                            help="one or more values (every combination is trained)")
    parser.add_argument("--lr-schedule", nargs="+", choices=["constant", "cosine"],
                        default=None, help="one or more learning-rate schedules")
    parser.add_argument("--curves", action="store_true",
                        help="also print each seed's test accuracy after every epoch")
    args = parser.parse_args()
    _memoised_frontend()
    names = ("epochs", "batch_size", "learning_rate", "momentum", "max_grad_norm", "lr_schedule")
    grid = [dict(zip(names, values, strict=True)) for values in itertools.product(
        *[getattr(args, name) or [None] for name in names])]
    data = None
    for epsilon, accountant, point in itertools.product(
            args.epsilons, map(DpSgdAccountant, args.accountants), grid):
        tuned = {name: value for name, value in point.items() if value is not None}
        base = DgdConfig.small(dataset=args.dataset, mode="sound", epsilon=epsilon)
        config = dataclasses.replace(
            base, dp_sgd=dataclasses.replace(base.dp_sgd, accountant=accountant, **tuned))
        if args.architecture is not None:
            config = dataclasses.replace(config, dp_baseline=dataclasses.replace(
                config.dp_baseline, architecture=args.architecture))
        if data is None:
            data = dgd.check_configs([config], data_dir=args.data_dir, progress=False)
        dataset = data[config.dataset].dataset
        plan = dgd.check_run(config, dgd.ledger_for(config), num_private=dataset.n_train,
                             num_classes=dataset.num_classes, image_shape=dataset.image_shape)
        accuracies, curves = [], []
        start = time.perf_counter()
        for seed in range(args.seeds):
            result = train_dp_teacher(
                dataset.train_images, dataset.train_labels, num_classes=dataset.num_classes,
                test_images=dataset.test_images, test_labels=dataset.test_labels,
                teacher=config.dp_baseline, config=config.dp_sgd, plan=plan.dp_sgd,
                ledger=dgd.ledger_for(config), seed=seed, device="cpu", progress=False)
            accuracies.append(result.test_accuracy)
            curves.append(result.test_accuracy_per_epoch)
        spread = statistics.stdev(accuracies) if len(accuracies) > 1 else math.nan
        print(f"{args.dataset} eps={epsilon:g} {accountant.name} "
              f"{config.dp_baseline.architecture.value} {config.dp_sgd.epochs} epochs, batch "
              f"{config.dp_sgd.batch_size}, lr {config.dp_sgd.learning_rate:g}, momentum "
              f"{config.dp_sgd.momentum:g}, C {config.dp_sgd.max_grad_norm:g}, "
              f"{config.dp_sgd.lr_schedule.value} schedule: sigma "
              f"{plan.dp_sgd.noise_multiplier:.4f}, {plan.queries} queries, RDP "
              f"{plan.dp_sgd.epsilon_rdp:.4f} / PLD {plan.dp_sgd.epsilon_pld:.4f}; DP "
              f"baseline {statistics.mean(accuracies):.4f} +- {spread:.4f} over "
              f"{len(accuracies)} seeds ({time.perf_counter() - start:.0f} s)", flush=True)
        if args.curves:
            for seed, curve in enumerate(curves):
                print(f"  seed {seed} per epoch: " + " ".join(f"{a:.4f}" for a in curve),
                      flush=True)


if __name__ == "__main__":
    main()
