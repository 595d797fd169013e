"""DP-DFD's BatchNorm-statistics term, layer by layer: real images against the generator's.

DP-DFD (Eq. 2) fits its generator with ``CE + alpha * entropy + beta * N``, where ``N`` sums,
over the teacher's BatchNorm layers, the L2 distances between a batch's mean / variance and the
layer's running ones (:func:`~dpkd_audit.pipelines.common.generator.bn_statistics_distance`).
On one H100 the paper preset (ResNet-34 teacher, 36 BatchNorm layers) ended its generator at
``N`` = 1,147 and a student of 56.69%, where the small preset's VGG teacher ends at 1.99 and
94.97% (``reports/gpu/h100-2026-11-27``). This benchmark asks which layers carry that term and
whether real images are any closer: it trains the preset's published teacher, fits its
generator, and prints, per BatchNorm layer, the distance of a batch of real training images,
of real test images and of generator samples.

Usage (CPU, the small preset; a narrow ResNet-34 to see the paper's layer count on 2 cores):
    python benchmarks/dpdfd_bn_terms.py --data-dir ../shared/data --preset small
    python benchmarks/dpdfd_bn_terms.py --data-dir ../shared/data --preset paper \
        --teacher-width 8 --teacher-epochs 1 --generator-steps 200

``--betas 10,1,0.1`` fits one generator per BatchNorm-term weight (the paper's 10 first)
against the same teacher and, for each, labels ``--probe-images`` generator samples with the
teacher's argmax and trains a plain cross-entropy student on them (the DGD small preset's
width-16 student, ``--probe-steps`` steps; no randomized response): its real test accuracy says
what the images teach, whatever the labels' privacy. One JSON object per beta.

On a GPU: ``--preset paper --teacher-epochs 3 --betas 10,1,0.1 --device cuda`` is the window's
run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import numpy as np
import torch

from dpkd_audit.devices import describe_device, resolve_device
from dpkd_audit.pipelines.common.generator import (
    BnStatistics,
    GeneratorTrainer,
    generator_pixel_scale,
)
from dpkd_audit.pipelines.common.progress import StageTimer
from dpkd_audit.pipelines.common.source import fit_source
from dpkd_audit.pipelines.dgd import DgdConfig
from dpkd_audit.pipelines.dgd.student import train_tnar_student
from dpkd_audit.pipelines.dpdfd import DpdfdConfig
from dpkd_audit.pipelines.dpdfd.pipeline import load_data


def _per_layer(teacher: torch.nn.Module, images: torch.Tensor) -> list[dict[str, float]]:
    """Per BatchNorm layer: channels, mean and variance distances, mean running variance."""
    with BnStatistics(teacher) as hooks, torch.no_grad():
        teacher(images)
    return [{"channels": int(mean.numel()),
             "mean": float(torch.linalg.vector_norm(mean - run_mean)),
             "var": float(torch.linalg.vector_norm(var - run_var)),
             "running_var": float(run_var.mean())}
            for mean, var, run_mean, run_var in hooks.pairs]


def _batch(images: np.ndarray, n: int, device: torch.device) -> torch.Tensor:
    x = torch.from_numpy(np.array(images[:n], dtype=np.uint8)).float().div_(255.0)
    return x.unsqueeze(1).to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--data-dir")
    parser.add_argument("--preset", default="small", choices=["small", "paper"])
    parser.add_argument("--teacher-width", type=int, help="override the preset's teacher width")
    parser.add_argument("--teacher-epochs", type=int)
    parser.add_argument("--generator-steps", type=int)
    parser.add_argument("--batch", type=int, default=256, help="images per measured batch")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--betas", help="comma-separated BatchNorm-term weights, one generator "
                        "each (default: the preset's beta)")
    parser.add_argument("--probe-images", type=int, default=5000,
                        help="generator samples labelled by the teacher for the student probe")
    parser.add_argument("--probe-steps", type=int, default=400,
                        help="steps of the probe's plain student (0: no probe)")
    parser.add_argument("--out", help="also write the JSON results to this file (one per line)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    config = DpdfdConfig.preset_config(args.preset, dataset=args.dataset, seed=args.seed,
                                       mode="published", epsilon=10.0)
    replace = dataclasses.replace
    teacher_config = config.teacher
    if args.teacher_width is not None:
        teacher_config = replace(teacher_config, width=args.teacher_width)
    if args.teacher_epochs is not None:
        teacher_config = replace(teacher_config, training=replace(
            teacher_config.training, epochs=args.teacher_epochs))
    generator_config = config.generator
    if args.generator_steps is not None:
        generator_config = replace(generator_config, steps=args.generator_steps)
    data = load_data(replace(config, teacher=teacher_config), data_dir=args.data_dir)
    dataset = data.dataset
    timer = StageTimer(verbose=False)
    teacher, accuracy = fit_source(dataset, config=teacher_config, role="teacher", timer=timer,
                                   seed=config.seed, device=device, progress=True)
    betas = ([generator_config.beta] if args.betas is None
             else [float(b) for b in args.betas.split(",")])
    if any(not b >= 0 for b in betas):
        parser.error(f"--betas must be numbers >= 0; got {args.betas!r}")
    draws = torch.Generator().manual_seed(args.seed + 7)
    real = {"train": _batch(dataset.train_images, args.batch, device),
            "test": _batch(dataset.test_images, args.batch, device)}
    real_layers = {name: _per_layer(teacher, images) for name, images in real.items()}
    test = _batch(dataset.test_images, len(dataset.test_images), device)
    for beta in betas:
        config_beta = replace(generator_config, beta=beta)
        start = time.perf_counter()
        trainer = GeneratorTrainer(teacher, image_shape=dataset.image_shape,
                                   num_classes=dataset.num_classes, config=config_beta,
                                   seed=config.seed + 1, device=device,
                                   pixel_scale=generator_pixel_scale(config_beta,
                                                                     dataset.train_images))
        trainer.train(config_beta.steps, progress=True)
        fitted = trainer.result()
        generator_seconds = time.perf_counter() - start
        layers = dict(real_layers)
        layers["generator"] = _per_layer(
            teacher, fitted.generator.sample(args.batch, draws).to(device))
        out = _result(args, device, teacher_config, accuracy, timer, config_beta, fitted,
                      generator_seconds, layers)
        if args.probe_steps > 0:
            out["probe"] = _probe(fitted.generator, teacher, test, dataset, device, args)
        summary = {k: out[k] for k in ("device", "preset", "teacher", "bn_layers",
                                       "bn_distance_total", "probe") if k in out}
        summary["generator"] = {k: out["generator"][k] for k in (
            "beta", "steps", "class_histogram", "teacher_confident_share", "seconds")}
        print(json.dumps(summary, indent=2), flush=True)
        worst = sorted(range(out["bn_layers"]), reverse=True, key=lambda i: (
            layers["generator"][i]["mean"] + layers["generator"][i]["var"]))
        for i in worst[:8]:
            row = " ".join(f"{name} {layers[name][i]['mean'] + layers[name][i]['var']:9.3f}"
                           for name in layers)
            print(f"layer {i:2d} ({layers['train'][i]['channels']:3d} channels): {row}")
        if args.out:
            with open(args.out, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(out) + "\n")


def _result(args: argparse.Namespace, device: torch.device, teacher_config, accuracy: float,
            timer: StageTimer, generator_config, fitted, generator_seconds: float,
            layers: dict[str, list[dict[str, float]]]) -> dict:
    """One beta's JSON record."""
    totals = {name: round(sum(d["mean"] + d["var"] for d in rows), 4)
              for name, rows in layers.items()}
    return {
        "device": describe_device(device), "dataset": args.dataset, "preset": args.preset,
        "teacher": {"architecture": teacher_config.architecture.value,
                    "width": teacher_config.width,
                    "epochs": teacher_config.training.epochs, "test_accuracy": accuracy,
                    "seconds": round(timer.seconds["teacher"], 1)},
        "generator": {"steps": generator_config.steps, "beta": generator_config.beta,
                      "loss_terms": fitted.loss_terms,
                      "class_histogram": fitted.class_histogram,
                      "teacher_confident_share": fitted.teacher_agreement,
                      "seconds": round(generator_seconds, 1)},
        "batch": args.batch,
        "bn_layers": len(layers["train"]),
        "bn_distance_total": totals,
        "bn_distance_per_layer": {
            name: [{k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}
                   for d in rows] for name, rows in layers.items()},
    }


def _probe(generator, teacher: torch.nn.Module, test: torch.Tensor, dataset,
           device: torch.device, args: argparse.Namespace) -> dict[str, float]:
    """A plain student trained on teacher-labelled generator samples, tested on real images."""
    latents = torch.Generator().manual_seed(args.seed + 11)
    images = torch.cat([generator.sample(min(1000, args.probe_images - i), latents)
                        for i in range(0, args.probe_images, 1000)]).to(device)
    with torch.inference_mode():
        labels = torch.cat([teacher(images[i:i + 1000]).argmax(dim=1)
                            for i in range(0, len(images), 1000)]).cpu().numpy()
    student = dataclasses.replace(DgdConfig.small(dataset=args.dataset).student,
                                  steps=args.probe_steps, tangent_weight=0.0,
                                  normal_weight=0.0, entropy_weight=0.0)
    start = time.perf_counter()
    result = train_tnar_student(images, labels, codes=None, vae=None,
                                num_classes=dataset.num_classes, config=student,
                                test_images=test, test_labels=dataset.test_labels,
                                seed=args.seed, progress=False)
    return {"images": args.probe_images, "steps": args.probe_steps,
            "student_test_accuracy": round(result.test_accuracy, 4),
            "largest_label_share": round(float(np.bincount(
                labels, minlength=dataset.num_classes).max() / len(labels)), 4),
            "seconds": round(time.perf_counter() - start, 1)}


if __name__ == "__main__":
    main()
