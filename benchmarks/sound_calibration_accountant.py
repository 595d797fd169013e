"""One lever of issue 66: calibrating the sound DGD run's DP-SGD noise by PLD instead of RDP.

For each record-level target epsilon, the sound DGD plan (DP-SGD baseline + feature
statistics + LNMax queries, the small preset) is calibrated under RDP (the default, Opacus's)
and under PLD (``DpSgdConfig.accountant``, ``dpkd run dgd --accountant pld``); both are valid
upper bounds, PLD the tighter, so it buys less noise for the same record-level epsilon. The
DP baseline (the model every later stage reads the private data through) is then trained
with each sigma for several seeds; its test accuracy's mean and standard deviation are
printed. Only the baseline is trained: the later stages are post-processing of it and of
the queries, which both calibrations leave alike.

Usage: python benchmarks/sound_calibration_accountant.py [--dataset digits] [--epsilons 2 4 8]
       [--seeds 3] [--accountants rdp pld] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time

from dpkd_audit.accountants.dp_sgd import DpSgdAccountant
from dpkd_audit.pipelines import dgd
from dpkd_audit.pipelines.common.dp_teacher import train_dp_teacher
from dpkd_audit.pipelines.dgd.config import DgdConfig


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
    args = parser.parse_args()
    data = None
    for epsilon in args.epsilons:
        for accountant in map(DpSgdAccountant, args.accountants):
            base = DgdConfig.small(dataset=args.dataset, mode="sound", epsilon=epsilon)
            config = dataclasses.replace(
                base, dp_sgd=dataclasses.replace(base.dp_sgd, accountant=accountant))
            if data is None:
                data = dgd.check_configs([config], data_dir=args.data_dir, progress=False)
            dataset = data[config.dataset].dataset
            plan = dgd.check_run(config, dgd.ledger_for(config), num_private=dataset.n_train,
                                 num_classes=dataset.num_classes,
                                 image_shape=dataset.image_shape)
            accuracies = []
            start = time.perf_counter()
            for seed in range(args.seeds):
                result = train_dp_teacher(
                    dataset.train_images, dataset.train_labels,
                    num_classes=dataset.num_classes, test_images=dataset.test_images,
                    test_labels=dataset.test_labels, teacher=config.dp_baseline,
                    config=config.dp_sgd, plan=plan.dp_sgd, ledger=dgd.ledger_for(config),
                    seed=seed, device="cpu", progress=False)
                accuracies.append(result.test_accuracy)
            spread = statistics.stdev(accuracies) if len(accuracies) > 1 else math.nan
            print(f"{args.dataset} eps={epsilon:g} {accountant.name}: sigma "
                  f"{plan.dp_sgd.noise_multiplier:.4f}, {plan.queries} queries, RDP "
                  f"{plan.dp_sgd.epsilon_rdp:.4f} / PLD {plan.dp_sgd.epsilon_pld:.4f}; DP "
                  f"baseline {statistics.mean(accuracies):.4f} +- {spread:.4f} over "
                  f"{len(accuracies)} seeds ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
