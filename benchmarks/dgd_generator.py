"""How fast a data-free generator's images teach a student: accuracy against images seen.

For each generator recipe, the generator is fitted to the small preset's non-private DGD
baseline (or DP-DFD's teacher with ``--method dpdfd``) and, at each checkpoint (generator
images seen = steps x batch), 20,000 images are sampled, ``--queries`` of them are labelled by
the baseline itself (no ensemble noise; ``confident`` selection, the CPU preset's) and a plain
cross-entropy student (the small preset's width-16 student, no TNAR terms, ``--student-steps``)
is trained on them and tested on the real test split. Also printed per checkpoint: the pixel
mean of the samples (real: ``real_pixel_mean``), the baseline's confident share (max softmax >
0.9) and the largest class share among the samples' baseline labels.

Recipes (``--recipes``):
- ``current``: the generator before issue 30 (0.5 (tanh + 1) output, Adam lr 0.01 with betas
  (0.5, 0.999) and a cosine schedule over ``--steps``, information entropy in base e, BatchNorm
  eps 1e-5, width 64, batch 128);
- ``dafl``: DAFL's MNIST recipe (Chen et al. 2019, its code): tanh + BatchNorm(affine=False)
  output, Adam lr 0.2 constant with default betas, log10 entropy, BatchNorm eps 0.8, width 128,
  batch 512 (200 x 120 = 24,000 steps in DAFL: about 5 s a step on 2 CPU cores, so run it with
  ``--device cuda`` or few ``--steps``);
- ``dafl-small``: ``dafl`` at width 64 and batch 128 (the CPU preset's candidate);
- ``dafl-small-lr0.02``, ``dafl-small-lr0.05``: the same at a lower constant learning rate;
- ``dgd-paper``: ``dafl`` with DGD's schedule (Sec. IV: 200 rounds at 0.2, ten times smaller
  every 80; with DAFL's 120 steps a round: 0.1x at steps 9,600 and 19,200).

Constant and step schedules are trained on from one checkpoint to the next (Adam's moments
start afresh at each checkpoint); cosine ones are refitted from scratch for each.

Not a privacy experiment (the baseline and its labels are not private). Usage (2 threads):
    python benchmarks/dgd_generator.py --data-dir ../shared/data/mnist --recipes current,dafl-small
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import torch
from _jsonl import jsonl_emitter  # benchmarks/ (this script's directory)

from dpkd_audit.devices import describe_device, resolve_device
from dpkd_audit.pipelines.common.generator import (
    GeneratorConfig,
    GeneratorOutput,
    GeneratorSchedule,
    GeneratorTrainer,
    pixel_scale_of,
)
from dpkd_audit.pipelines.common.teacher import train_teacher
from dpkd_audit.pipelines.dgd import DgdConfig, QuerySelection, select_queries
from dpkd_audit.pipelines.dgd.config import DAFL_RECIPE
from dpkd_audit.pipelines.dgd.pipeline import load_data
from dpkd_audit.pipelines.dgd.student import train_tnar_student
from dpkd_audit.pipelines.dpdfd import DpdfdConfig

_DAFL = DAFL_RECIPE


def recipes(base: GeneratorConfig) -> dict[str, GeneratorConfig]:
    """The recipes by name (``base`` gives the loss weights of the method)."""
    replace = dataclasses.replace
    current = replace(base, width=64, batch_size=128, learning_rate=0.01,
                      schedule=GeneratorSchedule.COSINE, betas=(0.5, 0.999),
                      output=GeneratorOutput.SQUASHED, bn_eps=1e-5, entropy_base=float(np.e))
    small = replace(base, width=64, batch_size=128, **_DAFL)
    return {"current": current,
            "dafl": replace(base, width=128, batch_size=512, **_DAFL),
            "dafl-small": small,
            "dafl-small-lr0.02": replace(small, learning_rate=0.02),
            "dafl-small-lr0.05": replace(small, learning_rate=0.05),
            "dgd-paper": replace(base, width=128, batch_size=512, **{
                **_DAFL, "schedule": GeneratorSchedule.STEP, "decay_every": 9600})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--data-dir")
    parser.add_argument("--method", choices=["dgd", "dpdfd"], default="dgd")
    parser.add_argument("--recipes", default="current,dafl-small")
    parser.add_argument("--checkpoints", default="250,500,1000,2000",
                        help="comma-separated generator steps at which to evaluate")
    parser.add_argument("--queries", type=int, default=1300)
    parser.add_argument("--student-steps", type=int, default=400)
    parser.add_argument("--synthetic", type=int, default=20000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--baseline-width", type=int,
                        help="width of the baseline (default: the small preset's)")
    parser.add_argument("--out", help="also append every JSON line to this file (flushed)")
    args = parser.parse_args()
    emit = jsonl_emitter(args.out)

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    if args.method == "dgd":
        # the recipes vary the paper's generator (DAFL's loss alone)
        config = DgdConfig.small(dataset=args.dataset, generator_statistics="none")
        source, generator_base, student = config.baseline, config.generator, config.student
    else:
        dp = DpdfdConfig.small(dataset=args.dataset)
        source, generator_base = dp.teacher, dp.generator
        student = DgdConfig.small(dataset=args.dataset).student
    if args.baseline_width is not None:
        source = dataclasses.replace(source, width=args.baseline_width)
    student = dataclasses.replace(student, steps=args.student_steps, tangent_weight=0.0,
                                  normal_weight=0.0, entropy_weight=0.0)
    table = recipes(generator_base)
    chosen = args.recipes.split(",")
    unknown = sorted(set(chosen) - set(table))
    if unknown:
        parser.error(f"--recipes: unknown {unknown}; known: {sorted(table)}")
    checkpoints = sorted({int(c) for c in args.checkpoints.split(",")})
    dataset = load_data(config if args.method == "dgd" else DgdConfig.small(
        dataset=args.dataset), data_dir=args.data_dir).dataset
    trained = train_teacher(dataset.train_images, dataset.train_labels,
                            num_classes=dataset.num_classes, test_images=dataset.test_images,
                            test_labels=dataset.test_labels, config=source, seed=0,
                            device=device, progress=False)
    teacher = trained.model.eval()
    test = torch.from_numpy(np.array(dataset.test_images)).float().div(255.0).unsqueeze(1)
    scale = pixel_scale_of(dataset.train_images)
    emit({"device": describe_device(device), "dataset": args.dataset, "method": args.method,
          "teacher": f"{source.architecture.value} width {source.width}",
          "teacher_test_accuracy": round(trained.test_accuracy, 4),
          "real_pixel_mean": round(scale[0], 4), "real_pixel_std": round(scale[1], 4),
          "queries": args.queries, "student_steps": args.student_steps,
          "synthetic": args.synthetic})
    for name in chosen:
        recipe = table[name]
        trainer = GeneratorTrainer(
            teacher, image_shape=dataset.image_shape, num_classes=dataset.num_classes,
            config=recipe, seed=args.seed, device=device,
            pixel_scale=scale if recipe.needs_pixel_scale else None)
        taken = 0
        for checkpoint in checkpoints:
            if recipe.schedule is GeneratorSchedule.COSINE:
                # A cosine schedule depends on the length of the run: refit from scratch.
                trainer = GeneratorTrainer(
                    teacher, image_shape=dataset.image_shape, num_classes=dataset.num_classes,
                    config=recipe, seed=args.seed, device=device,
                    pixel_scale=scale if recipe.needs_pixel_scale else None)
                trainer.train(checkpoint)
            else:
                trainer.train(checkpoint - taken)
            taken = checkpoint
            latents = torch.Generator().manual_seed(2)
            synthetic = torch.cat([trainer.generator.sample(1000, latents)
                                   for _ in range(args.synthetic // 1000)]).to(device)
            with torch.inference_mode():
                probabilities = torch.cat([torch.softmax(teacher(synthetic[i:i + 1000]), dim=1)
                                           for i in range(0, synthetic.shape[0], 1000)])
            picked = select_queries(probabilities.cpu(), args.queries, QuerySelection.CONFIDENT)
            start = time.perf_counter()
            result = train_tnar_student(
                synthetic[picked], probabilities[picked].argmax(dim=1).cpu().numpy(),
                codes=None, vae=None, num_classes=dataset.num_classes, config=student,
                test_images=test.to(device), test_labels=dataset.test_labels, seed=0,
                progress=False)
            labels = probabilities.argmax(dim=1).cpu()
            shares = torch.bincount(labels, minlength=dataset.num_classes).float()
            emit({
                "recipe": name, "steps": checkpoint, "images_seen": checkpoint
                * recipe.batch_size, "generator_seconds": round(trainer.seconds, 1),
                "student_test_accuracy": round(result.test_accuracy, 4),
                "student_seconds": round(time.perf_counter() - start, 1),
                "synthetic_pixel_mean": round(float(synthetic.mean()), 4),
                "teacher_confident_share": round(float(
                    (probabilities.max(dim=1).values > 0.9).float().mean()), 4),
                "largest_class_share": round(float(shares.max() / shares.sum()), 4),
                "loss_terms": {k: round(v, 4) for k, v in trainer.loss_terms.items()}})


if __name__ == "__main__":
    main()
