"""Which released labels sound DGD's student should train on (issue 30, the eps-10 "dip").

One sound DGD run (``dpkd_audit.pipelines.dgd.run`` with ``label_filter='none'``, so every
stage, charge and label is the pipeline's own) is intercepted at its student: the same
student (the preset's ``sound_student``, distilling the DP baseline on the unlabelled images)
is then trained on four label sets of the same queried images:

- ``every label``: the released labels, all of them (the paper; the pipeline's own student);
- ``baseline-agreement``: only the released labels equal to the DP baseline's class for their
  image (``LabelFilter.BASELINE_AGREEMENT``, the sound default);
- ``first 105``: the first 105 released labels (what eps = 3 buys);
- ``DP baseline's labels``: the DP baseline's classes for all queried images (no ensemble).

Everything but the first is post-processing of DP outputs. Prints one JSON line per student.
Usage (2 threads; about 35 minutes for MNIST at eps 10):
    python benchmarks/dgd_label_filter.py --data-dir ../shared/data/mnist --epsilon 10
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch
from _jsonl import jsonl_emitter  # benchmarks/ (this script's directory)

from dpkd_audit.pipelines.dgd import pipeline as dgd
from dpkd_audit.pipelines.dgd.config import DgdConfig
from dpkd_audit.pipelines.dgd.queries import LabelFilter, kept_labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist", choices=["digits", "mnist",
                                                               "fashion-mnist"])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="also append the JSON lines here")
    args = parser.parse_args()
    emit = jsonl_emitter(args.out)
    config = DgdConfig.small(dataset=args.dataset, mode="sound", epsilon=args.epsilon,
                             seed=args.seed, label_filter=LabelFilter.NONE)
    seen: dict[str, Any] = {}
    select, student = dgd.select_queries, dgd.train_tnar_student

    def recording_select(probabilities: torch.Tensor, *rest: Any) -> np.ndarray:
        seen["probabilities"] = probabilities
        seen["chosen"] = select(probabilities, *rest)
        return seen["chosen"]

    def variants(images: torch.Tensor, labels: np.ndarray, **kwargs: Any) -> Any:
        baseline = seen["probabilities"][torch.from_numpy(seen["chosen"])].argmax(1).cpu()
        baseline = baseline.numpy()
        agree = kept_labels(labels, baseline, LabelFilter.BASELINE_AGREEMENT)
        sets = (("every label", np.arange(len(labels)), labels),
                ("baseline-agreement", agree, labels),
                ("first 105", np.arange(min(105, len(labels))), labels),
                ("DP baseline's labels", np.arange(len(labels)), baseline))
        result = None
        for name, index, source in sets:
            start = time.perf_counter()
            trained = student(images[torch.from_numpy(index).to(images.device)], source[index],
                              **kwargs)
            emit({"dataset": args.dataset, "epsilon": args.epsilon, "seed": args.seed,
                  "labels": name, "labelled": int(index.size), "queries": len(labels),
                  "agreement": float(np.mean(labels == baseline)),
                  "test_accuracy": trained.test_accuracy,
                  "seconds": round(time.perf_counter() - start, 1)})
            result = result or trained
        return result

    dgd.select_queries, dgd.train_tnar_student = recording_select, variants
    data = dgd.load_data(config, data_dir=args.data_dir, progress=False)
    result = dgd.run(config, ledger=dgd.ledger_for(config), rng=dgd.label_rng(config),
                     data=data, progress=False)
    emit({"dataset": args.dataset, "epsilon": args.epsilon, "seed": args.seed,
          "dp_baseline_accuracy": result.baseline_accuracy,
          "epsilon_record_level": result.epsilon_record_level})


if __name__ == "__main__":
    main()
