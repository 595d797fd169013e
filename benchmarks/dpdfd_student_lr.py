"""DP-DFD's sound student from the teacher: its Adam learning rate, one lever and its curve.

The sound student starts from a copy of the DP teacher (``student_from_teacher``, issue 66) and
is then trained stage by stage on the generator's images and their selective-RR labels with
Adam, cosine-decayed over all stages, at ``student_from_teacher_learning_rate``. Before that
field existed the student used :class:`~dpkd_audit.pipelines.common.distill.DistillConfig`'s
3e-3 (a rate for a fresh student), and the MNIST records of commit bed05c3 showed the student
*below its teacher* after the first 10 stages (about 1 point at epsilon 10), climbing back over
the rest of the run without reaching it: a fine-tuning rate that undoes part of the teacher.
This script measured the lever that made the preset 3e-4: it runs the whole sound pipeline
(DP-SGD teacher, DP statistics, generator, 100 stages) once per learning rate, everything else
the small preset's, and prints the student's test-accuracy curve (every 10 stages) beside the
teacher's accuracy. Each run is its own record-level (epsilon, 1e-5) run, charged to its own
ledger; the curve is measured on the test split, so it chooses a preset, never a run's model.

Usage (one thread; about 37 minutes per learning rate on MNIST):
    python benchmarks/dpdfd_student_lr.py --data-dir ../shared/data/mnist --epsilon 10
        --seed 0 --learning-rates 3e-4 1e-3 [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch
from _jsonl import jsonl_emitter  # benchmarks/ (this script's directory)

from dpkd_audit.devices import describe_device, resolve_device
from dpkd_audit.pipelines.dpdfd import DpdfdConfig
from dpkd_audit.pipelines.dpdfd.pipeline import label_rng, ledger_for, load_data, run
from dpkd_audit.provenance import provenance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--data-dir")
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--learning-rates", type=float, nargs="+", default=[3e-4, 1e-3])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", help="also append every JSON line to this file (flushed)")
    args = parser.parse_args()
    # Every config is built (and so checked) before any work.
    base = DpdfdConfig.small(dataset=args.dataset, mode="sound", epsilon=args.epsilon,
                             seed=args.seed)
    configs = [dataclasses.replace(base, student_from_teacher_learning_rate=lr)
               for lr in args.learning_rates]
    emit = jsonl_emitter(args.out)
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    data = load_data(base, data_dir=args.data_dir)
    emit({"device": describe_device(device), "dataset": args.dataset,
          "epsilon": args.epsilon, "seed": args.seed, "preset_learning_rate":
          base.active_student.learning_rate, "provenance": provenance()})
    for config in configs:
        start = time.perf_counter()
        result = run(config, ledger=ledger_for(config), rng=label_rng(config), data=data,
                     device=device, evaluate_every=10, progress=False)
        record = result.to_record()
        emit({"learning_rate": config.active_student.learning_rate,
              "teacher_accuracy": round(record["teacher_accuracy"], 4),
              "test_accuracy": round(record["test_accuracy"], 4),
              "curve": [[labels, round(acc, 4)] for labels, acc in
                        record["accuracy_per_stage"]],
              "epsilon_record_level": record["epsilon_record_level"],
              "seconds": round(time.perf_counter() - start, 1)})


if __name__ == "__main__":
    main()
