"""How much a student learns from DGD's synthetic images, per generator and query selection.

DGD's student sees only synthetic images; its accuracy on real test images is bounded by how
much those images carry. This benchmark isolates that from the ensemble's label noise: it fits
the small preset's baseline (non-private) on MNIST, fits a generator to it in each variant,
samples 20,000 images, picks 1,300 queries (``first``: the paper's random images, or
``confident``: the baseline's most confident per class) and trains the small preset's student
(no TNAR terms) on them **with the baseline's own labels**, then reports its real test accuracy.

Variants:
- ``dafl-400``: DAFL's loss (CE + 5 x information entropy + 0.1 x activation), 400 steps;
- ``dafl-2000``: the same, the small preset's steps (2,000 on MNIST: its published generator);
- ``dafl+stats-1000``: DAFL's loss + 10 x the distance to feature statistics released through
  the baseline by the Gaussian mechanism at (eps, delta) = (1, 1e-5) (the sound variant's term;
  here through the non-private baseline, to compare generators on one model), 1,000 steps;
- ``dafl+exact-stats-1000``: the same term against the private set's statistics without
  noise (what a published-mode generator could read from its non-private baseline, as
  DeepInversion reads BatchNorm statistics; not in the DGD paper): the same release at
  eps = 1e7 with clip norm 1e6, so no record is clipped and the noise's standard deviation is
  below 1e-5 per statistic.

``--variants`` runs a subset. Then, if ``dafl+stats-1000`` ran, on its images the sound
variant's student with the baseline's soft
labels on the unlabelled images (``distillation_weight`` 1) and 105 labelled queries (what
half of a record-level eps = 3 buys), three ways: the paper's TNAR and entropy terms (weight 1,
400 steps), none of them (400 steps), none of them with 3,000 steps (the small preset's
``sound_student``).

Not a privacy experiment: the baseline and its labels are not private. Usage (2 threads):
    python benchmarks/dgd_synthetic.py --data-dir ../shared/data/mnist
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time

import numpy as np
import torch

from dpkd_audit.devices import describe_device, resolve_device
from dpkd_audit.ledger import Ledger
from dpkd_audit.pipelines.common.dp_statistics import (
    FeatureStatistics,
    StatisticsConfig,
    release_feature_statistics,
    statistics_coordinates,
    statistics_mechanism,
)
from dpkd_audit.pipelines.common.generator import GeneratorTrainer
from dpkd_audit.pipelines.common.teacher import train_teacher
from dpkd_audit.pipelines.common.vae import train_vae
from dpkd_audit.pipelines.dgd import DgdConfig, QuerySelection, select_queries
from dpkd_audit.pipelines.dgd.pipeline import load_data
from dpkd_audit.pipelines.dgd.student import train_tnar_student

VARIANTS = ("dafl-400", "dafl-small", "dafl+stats-1000", "dafl+exact-stats-1000")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--data-dir")
    parser.add_argument("--queries", type=int, default=1300)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants",
                        default=",".join(VARIANTS),
                        help="comma-separated; dafl-small is the small preset's generator")
    args = parser.parse_args()
    chosen_variants = args.variants.split(",")
    unknown = sorted(set(chosen_variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; known: {list(VARIANTS)}")
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    base = DgdConfig.small(dataset=args.dataset, queries=args.queries,
                           generator_statistics="none")  # the paper's generator
    dataset = load_data(base, data_dir=args.data_dir).dataset
    trained = train_teacher(dataset.train_images, dataset.train_labels,
                            num_classes=dataset.num_classes, test_images=dataset.test_images,
                            test_labels=dataset.test_labels, config=base.baseline, seed=0,
                            device=device, progress=False)
    baseline = trained.model.eval()
    test = torch.from_numpy(np.array(dataset.test_images)).float().div(255.0).unsqueeze(1)
    print(json.dumps({"device": describe_device(device), "dataset": args.dataset,
                      "baseline_test_accuracy": round(trained.test_accuracy, 4),
                      "real_pixel_mean": round(float(test.mean()), 4),
                      "queries": args.queries}), flush=True)
    def statistics(clip_norm: float, epsilon: float):
        share = StatisticsConfig(epsilon_share=0.5, clip_norm=clip_norm)
        return release_feature_statistics(
            baseline, dataset.train_images, config=share,
            mechanism=statistics_mechanism(
                share, target_epsilon=2 * epsilon, delta=1e-5,
                coordinates=statistics_coordinates(share, baseline, dataset.image_shape)),
            ledger=Ledger(epsilon=math.inf, unbounded=True), rng=np.random.default_rng(0),
            device=device)

    reference = statistics(16.0, 1.0)
    exact = statistics(1e6, 1e7)
    student = dataclasses.replace(base.student, tangent_weight=0.0, normal_weight=0.0,
                                  entropy_weight=0.0)
    stats_generator = dataclasses.replace(base.generator, beta=10.0, steps=1000)
    variants = {
        "dafl-400": (dataclasses.replace(base.generator, steps=400), None),
        "dafl-small": (base.generator, None),
        "dafl+stats-1000": (stats_generator, reference),
        "dafl+exact-stats-1000": (stats_generator, exact),
    }
    rows = []
    kept = None
    for name in chosen_variants:
        config, statistics = variants[name]
        start = time.perf_counter()
        trainer = GeneratorTrainer(
            baseline, image_shape=dataset.image_shape, num_classes=dataset.num_classes,
            config=config, seed=1, device=device,
            statistics=None if statistics is None else FeatureStatistics(baseline, statistics))
        trainer.train(config.steps)
        seconds = time.perf_counter() - start
        latents = torch.Generator().manual_seed(2)
        synthetic = torch.cat([trainer.generator.sample(1000, latents) for _ in range(20)])
        with torch.inference_mode():
            probabilities = torch.cat([torch.softmax(baseline(synthetic[i:i + 1000]), dim=1)
                                       for i in range(0, synthetic.shape[0], 1000)])
        for selection in (QuerySelection.FIRST, QuerySelection.CONFIDENT):
            chosen = select_queries(probabilities, args.queries, selection)
            result = train_tnar_student(
                synthetic[chosen], probabilities[chosen].argmax(dim=1).numpy(), codes=None,
                vae=None, num_classes=dataset.num_classes, config=student, test_images=test,
                test_labels=dataset.test_labels, seed=0, progress=False)
            rows.append({"generator": name, "steps": config.steps, "selection": selection.value,
                         "generator_seconds": round(seconds, 1),
                         "student_test_accuracy": round(result.test_accuracy, 4),
                         "synthetic_pixel_mean": round(float(synthetic.mean()), 4),
                         "baseline_confident_share": round(float(
                             (probabilities.max(dim=1).values > 0.9).float().mean()), 4)})
            print(json.dumps(rows[-1]), flush=True)
        if name == "dafl+stats-1000":
            kept = (synthetic, probabilities)
    if kept is None:
        return
    synthetic, probabilities = kept
    vae = train_vae(synthetic, config=base.vae, seed=3, device=device, progress=False).vae
    with torch.no_grad():
        codes = torch.cat([vae.encode(synthetic[i:i + 1000])[0]
                           for i in range(0, synthetic.shape[0], 1000)])
    chosen = select_queries(probabilities, 105, QuerySelection.CONFIDENT)
    rest = torch.from_numpy(np.setdiff1d(np.arange(synthetic.shape[0]), chosen))
    sound = base.sound_student
    for name, config in (("paper terms, 400 steps", dataclasses.replace(
                              sound, tangent_weight=1.0, normal_weight=1.0, entropy_weight=1.0,
                              steps=400)),
                         ("no terms, 400 steps", dataclasses.replace(sound, steps=400)),
                         (f"no terms, {sound.steps} steps (sound_student)", sound)):
        start = time.perf_counter()
        result = train_tnar_student(
            synthetic[chosen], probabilities[chosen].argmax(dim=1).numpy(), codes=codes[rest],
            vae=vae, num_classes=dataset.num_classes, config=config, test_images=test,
            test_labels=dataset.test_labels, seed=0, soft_images=synthetic[rest],
            soft_targets=probabilities[rest], distillation_weight=1.0, progress=False)
        print(json.dumps({"sound student": name, "queries": 105, "distillation_weight": 1.0,
                          "student_test_accuracy": round(result.test_accuracy, 4),
                          "seconds": round(time.perf_counter() - start, 1)}), flush=True)


if __name__ == "__main__":
    main()
