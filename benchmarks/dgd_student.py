"""Why DGD's published student collapsed, and what caps it: the student's terms and the labels.

MNIST, the small preset's non-private baseline and generator (DAFL's recipe, 500 steps), 20,000
synthetic images, the VAE, 1,300 queries chosen as the preset does (``confident``). Two parts:

1. **Students on the baseline's own labels** of the 1,300 images (no ensemble noise), 400 steps,
   tested on the real test split, with the largest share of one class among their test
   predictions:
   - ``cross-entropy``: no unlabelled terms;
   - ``paper, reconstructions``: TNAR (tangent, normal) + entropy, weights 1, acting on VAE
     reconstructions (DGD's Eq. 4 read literally; the package before issue 30);
   - ``paper, synthetic``: the same terms on the synthetic images themselves (TNAR's way);
   - ``paper, synthetic, ramp-up 0.5``: with the weights ramped up over half the steps;
   - ``entropy only``, ``TNAR without entropy``;
   - ``preset``: the small preset's student (synthetic images, entropy weight 0.1).
2. **Who can label DAFL's images as the baseline does**: independent ``dgd-cnn`` teachers of
   width 8 (the baseline's network) trained on n real training records (three draws each),
   their real test accuracy and their agreement with the baseline's labels on the 20,000
   synthetic images: n = 240 (a DGD teacher's shard) with and without augmentation, 2,400,
   24,000. The ensemble's labels can only be as close to the baseline's as its teachers are.

Not a privacy experiment. Usage (2 threads):
    python benchmarks/dgd_student.py --data-dir ../shared/data/mnist [--parts students,teachers]
        [--out FILE.jsonl]
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch
from _jsonl import jsonl_emitter  # benchmarks/ (this script's directory)

from dpkd_audit.devices import describe_device, resolve_device
from dpkd_audit.pipelines.common.generator import GeneratorTrainer, generator_pixel_scale
from dpkd_audit.pipelines.common.student import StudentConfig
from dpkd_audit.pipelines.common.teacher import TeacherConfig, train_teacher
from dpkd_audit.pipelines.common.vae import train_vae
from dpkd_audit.pipelines.dgd import DgdConfig, select_queries
from dpkd_audit.pipelines.dgd.pipeline import load_data
from dpkd_audit.pipelines.dgd.student import train_tnar_student


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--data-dir")
    parser.add_argument("--parts", default="students,teachers")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", help="also append every JSON line to this file (flushed)")
    args = parser.parse_args()
    emit = jsonl_emitter(args.out)
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    # the paper's generator (DAFL's loss alone), as when these figures were measured
    config = DgdConfig.small(dataset=args.dataset, generator_statistics="none")
    dataset = load_data(config, data_dir=args.data_dir).dataset
    trained = train_teacher(dataset.train_images, dataset.train_labels,
                            num_classes=dataset.num_classes, test_images=dataset.test_images,
                            test_labels=dataset.test_labels, config=config.baseline,
                            seed=config.seed, device=device, progress=False)
    baseline = trained.model.eval()
    trainer = GeneratorTrainer(
        baseline, image_shape=dataset.image_shape, num_classes=dataset.num_classes,
        config=config.generator, seed=config.seed + 1, device=device,
        pixel_scale=generator_pixel_scale(config.generator, dataset.train_images))
    trainer.train(config.generator.steps)
    latents = torch.Generator().manual_seed(config.seed + 2)
    synthetic = torch.cat([trainer.generator.sample(1000, latents)
                           for _ in range(config.synthetic // 1000)])
    with torch.inference_mode():
        probabilities = torch.cat([torch.softmax(baseline(synthetic[i:i + 1000]), dim=1)
                                   for i in range(0, synthetic.shape[0], 1000)])
    labels_all = probabilities.argmax(dim=1)
    test = torch.from_numpy(np.array(dataset.test_images)).float().div(255.0).unsqueeze(1)
    emit({"device": describe_device(device), "dataset": args.dataset,
          "baseline_test_accuracy": round(trained.test_accuracy, 4),
          "generator": trainer.result().class_histogram,
          "synthetic": config.synthetic, "queries": config.queries})
    parts = args.parts.split(",")
    if "students" in parts:
        vae = train_vae(synthetic, config=config.vae, seed=config.seed + 3, device=device,
                        progress=False).vae
        with torch.no_grad():
            codes = torch.cat([vae.encode(synthetic[i:i + 1000])[0]
                               for i in range(0, synthetic.shape[0], 1000)])
        chosen = select_queries(probabilities, config.queries, config.selection)
        rest = torch.from_numpy(np.setdiff1d(np.arange(synthetic.shape[0]), chosen))
        paper = dataclasses.replace(config.student, entropy_weight=1.0)
        off = {"tangent_weight": 0.0, "normal_weight": 0.0}
        variants = {
            "cross-entropy": dataclasses.replace(paper, entropy_weight=0.0, **off),
            "paper, reconstructions": dataclasses.replace(
                paper, unlabelled_input="reconstruction"),
            "paper, synthetic": paper,
            "paper, synthetic, ramp-up 0.5": dataclasses.replace(paper, rampup=0.5),
            "entropy only": dataclasses.replace(paper, **off),
            "TNAR without entropy": dataclasses.replace(paper, entropy_weight=0.0),
            "preset (entropy 0.1)": config.student,
        }
        for name, student in variants.items():
            start = time.perf_counter()
            result = train_tnar_student(
                synthetic[chosen], labels_all[chosen].numpy(), codes=codes[rest],
                unlabelled=synthetic[rest], vae=vae, num_classes=dataset.num_classes,
                config=student, test_images=test, test_labels=dataset.test_labels,
                seed=config.seed + 4, progress=False)
            with torch.no_grad():
                counts = torch.bincount(result.model(test).argmax(dim=1),
                                        minlength=dataset.num_classes)
            share = float(counts.max() / counts.sum())
            emit({"student": name, "test_accuracy": round(result.test_accuracy, 4),
                  "largest_class_share": round(share, 3),
                  "curve": [round(a, 4) for _, a in result.curve],
                  "seconds": round(time.perf_counter() - start, 1)})
    if "teachers" in parts:
        draws = np.random.default_rng(0)
        for n, epochs, augment in ((240, 40, False), (240, 40, True), (2400, 20, False),
                                   (24000, 4, False)):
            accuracy, agreement = [], []
            for seed in range(3):
                index = draws.choice(dataset.n_train, n, replace=False)
                teacher = TeacherConfig(architecture="dgd-cnn", width=8, training=StudentConfig(
                    epochs=epochs, batch_size=32, learning_rate=3e-3, optimizer="adamw",
                    label_smoothing=0.0, augment=augment))
                fitted = train_teacher(
                    dataset.train_images[index], dataset.train_labels[index],
                    num_classes=dataset.num_classes, test_images=dataset.test_images,
                    test_labels=dataset.test_labels, config=teacher, seed=seed, device=device,
                    progress=False)
                with torch.no_grad():
                    read = torch.cat([fitted.model(synthetic[i:i + 2000]).argmax(dim=1)
                                      for i in range(0, synthetic.shape[0], 2000)])
                accuracy.append(round(fitted.test_accuracy, 4))
                agreement.append(round(float((read == labels_all).float().mean()), 4))
            emit({"teacher_records": n, "epochs": epochs, "augment": augment,
                  "test_accuracy": accuracy,
                  "agreement_with_baseline_on_synthetic": agreement})


if __name__ == "__main__":
    main()
