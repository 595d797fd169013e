"""Reverse k-NN's student with and without self-training, per student width and epochs.

Public data only, as the small preset sees it: the preset's representation (fitted on the
public split) and s queries; every public image gets its cluster's most common public label
(the purity labelling: on MNIST at s = 10 it is what every committed run released, no noise
flipped a query's label; here it stands in for the release, which is not drawn). Then, per
``--students`` entry ``WIDTH:EPOCHS``, :func:`train_self_trained_student` with ``--rounds``
rounds; the figures are each round's last-epoch accuracy on the student-test split and the
share of public images whose training labels are right. The test split is read for the
report only, never to pick a round or a variant inside a run.

Usage (2 threads):
    python benchmarks/rknn_self_training.py --dataset mnist --data-dir ../shared/data/mnist \
        --students 16:15,32:20 --rounds 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np
import torch

from dpkd_audit.pipelines.common.self_training import train_self_trained_student
from dpkd_audit.pipelines.rknn import RknnConfig
from dpkd_audit.pipelines.rknn.pipeline import load_data, prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--data-dir")
    parser.add_argument("--epsilon", type=float, default=0.1,
                        help="only picks the preset's s (no release is drawn)")
    parser.add_argument("--students", default="16:15,32:20")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = RknnConfig.small(dataset=args.dataset, mode="central", epsilon=args.epsilon)
    loaded = load_data(config, data_dir=args.data_dir)
    prepared = prepare(config, device="cpu", splits=loaded)
    splits = loaded.splits
    assignment, truth = prepared.queries.assignment, splits.public_labels
    classes = splits.dataset.num_classes
    majority = np.array([np.bincount(truth[assignment == c], minlength=classes).argmax()
                         for c in range(config.clusters)])
    labels = majority[assignment]
    for entry in args.students.split(","):
        width, epochs = (int(v) for v in entry.split(":"))
        student = dataclasses.replace(config.student, width=width, epochs=epochs)
        start = time.perf_counter()
        result = train_self_trained_student(
            splits.public_images, labels, rounds=args.rounds, num_classes=classes,
            test_images=splits.student_test_images, test_labels=splits.student_test_labels,
            config=student, seed=config.seed, device=torch.device("cpu"), progress=False)
        print(json.dumps({
            "dataset": args.dataset, "clusters": config.clusters, "width": width,
            "epochs": epochs, "label_accuracy_per_round": [
                round(float(np.mean(y == truth)), 4)
                for y in (labels, *result.labels_per_round)],
            "test_accuracy_per_round": [round(a, 4) for a in result.test_accuracy_per_round],
            "seconds": round(time.perf_counter() - start, 1)}), flush=True)


if __name__ == "__main__":
    main()
