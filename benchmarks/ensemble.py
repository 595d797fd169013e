"""Batched teacher ensemble vs a per-teacher Python loop: seconds and per-teacher accuracy.

Both train the same teachers (DGD's architecture at the chosen widths) on the same hash shards
with the same number of Adam steps and batch size: the batched run is
:func:`~dpkd_audit.pipelines.common.ensemble.train_ensemble` (grouped convolutions, one
optimizer); the loop trains one :class:`TeacherEnsemble` of a single teacher at a time, each
with its own Adam, drawing its mini-batches from its own shard. The loop is timed on
``--loop-teachers`` teachers and scaled to all of them (stated in the output); the accuracy of
those teachers is compared with the batched run's accuracy of the same teachers.

Usage (MNIST, CPU, 2 threads):
    python benchmarks/ensemble.py --data-dir ../shared/data/mnist --teachers 250 \
        --widths 8,16 --steps 300 --batch-size 32 --loop-teachers 25

``--variants`` times only a training step of all teachers in each layout and precision
(random images; for choosing the GPU's form), e.g. on a GPU:
    python benchmarks/ensemble.py --variants --device cuda --teachers 250 --widths 64,128 \
        --batch-size 128 --steps 20
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from dpkd_audit.data import load_dataset
from dpkd_audit.pipelines.common.devices import describe_device, resolve_device
from dpkd_audit.pipelines.common.ensemble import (
    EnsembleConfig,
    TeacherEnsemble,
    shard_of_records,
    train_ensemble,
)


def _loop(images: np.ndarray, labels: np.ndarray, shards: np.ndarray, teachers: list[int], *,
          config: EnsembleConfig, image_shape: tuple[int, int], device: torch.device,
          test_x: torch.Tensor, test_y: torch.Tensor, seed: int) -> tuple[float, list[float]]:
    x_all = torch.from_numpy(np.array(images)).float().div(255.0).to(device)
    y_all = torch.from_numpy(labels.astype(np.int64)).to(device)
    accuracy = []
    start = time.perf_counter()
    for t in teachers:
        generator = torch.Generator().manual_seed(seed + t)
        model = TeacherEnsemble(num_teachers=1, widths=config.widths, image_shape=image_shape,
                                num_classes=10, generator=generator).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: max(0.0, 1.0 - step / config.steps))
        own = torch.from_numpy(np.flatnonzero(shards == t)).to(device)
        for _ in range(config.steps):
            pick = own[torch.randint(own.shape[0], (config.batch_size,), generator=generator)
                       .to(device)]
            loss = F.cross_entropy(model(x_all[pick].unsqueeze(1))[:, 0], y_all[pick])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
        with torch.inference_mode():
            model.eval()
            accuracy.append(float((model(test_x)[:, 0].argmax(1) == test_y).float().mean()))
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, accuracy


def _grouped_forward(model: TeacherEnsemble, x: torch.Tensor, layout: str) -> torch.Tensor:
    """The ensemble's forward with the grouped convolutions in ``layout`` (nchw / nhwc)."""
    n = model.num_teachers
    if x.shape[1] == 1 and n > 1:
        x = x.expand(-1, n, -1, -1)
    x = x.contiguous(memory_format=torch.channels_last if layout == "nhwc"
                     else torch.contiguous_format)
    x = F.max_pool2d(F.relu(F.conv2d(x, model.conv1, model.bias1, padding=1, groups=n)), 2)
    x = F.max_pool2d(F.relu(F.conv2d(x, model.conv2, model.bias2, padding=1, groups=n)), 2)
    x = x.reshape(x.shape[0], n, model.features)
    return torch.einsum("btf,tfk->btk", x, model.head) + model.head_bias


def _variants(args: argparse.Namespace, device: torch.device) -> None:
    """Milliseconds per training step of all teachers: layouts x precisions (for the GPU)."""
    widths = tuple(int(w) for w in args.widths.split(","))
    model = TeacherEnsemble(num_teachers=args.teachers, widths=widths, image_shape=(28, 28),
                            num_classes=10, generator=torch.Generator().manual_seed(0)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(args.batch_size, args.teachers, 28, 28, device=device, generator=gen)
    y = torch.randint(0, 10, (args.batch_size, args.teachers), device=device, generator=gen)
    out = {"device": describe_device(device), "teachers": args.teachers, "widths": list(widths),
           "batch_size": args.batch_size}
    for layout in ("nhwc", "nchw"):
        for precision in ("fp32", "bf16", "tf32"):
            if precision != "fp32" and device.type != "cuda":
                continue
            torch.backends.cudnn.allow_tf32 = precision == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"

            def step(layout: str = layout, precision: str = precision) -> None:
                with torch.autocast(device.type, dtype=torch.bfloat16,
                                    enabled=precision == "bf16"):
                    logits = _grouped_forward(model, x, layout)
                    loss = F.cross_entropy(logits.reshape(-1, 10).float(), y.reshape(-1))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            for _ in range(3):  # autotuning and allocation outside the timer
                step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            out[f"{layout}_{precision}_ms_per_step"] = round(
                1000 * (time.perf_counter() - start) / args.steps, 2)
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default for convolutions
    torch.backends.cuda.matmul.allow_tf32 = False
    print(json.dumps(out, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--data-dir")
    parser.add_argument("--teachers", type=int, default=250)
    parser.add_argument("--widths", default="8,16")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--loop-teachers", type=int, default=25,
                        help="teachers the loop trains (its time is scaled to --teachers)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", action="store_true",
                        help="only time one training step of all teachers per layout (NHWC, "
                             "NCHW) and precision (fp32; on CUDA also TF32 and bf16 autocast), "
                             "on random images: which form the GPU runs fastest")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    if args.variants:
        _variants(args, device)
        return
    data = load_dataset(args.dataset, data_dir=args.data_dir)
    widths = tuple(int(w) for w in args.widths.split(","))
    config = EnsembleConfig(num_teachers=args.teachers, widths=widths, steps=args.steps,
                            batch_size=args.batch_size, learning_rate=args.learning_rate)
    shards = shard_of_records(data.train_images, args.teachers, key=b"benchmark-ensemble")
    test_images, test_labels = data.test_images[:2000], data.test_labels[:2000]
    if device.type == "cuda":  # CUDA context, cuDNN autotuning and allocator outside the timer
        warm = EnsembleConfig(num_teachers=args.teachers, widths=widths, steps=2,
                              batch_size=args.batch_size, learning_rate=args.learning_rate)
        train_ensemble(data.train_images, data.train_labels, shards, num_classes=10,
                       config=warm, test_images=test_images, test_labels=test_labels, seed=0,
                       device=device, progress=False)
        torch.cuda.synchronize()
    start = time.perf_counter()
    batched = train_ensemble(data.train_images, data.train_labels, shards, num_classes=10,
                             config=config, test_images=test_images, test_labels=test_labels,
                             seed=0, device=device, progress=False)
    if device.type == "cuda":
        torch.cuda.synchronize()
    batched_seconds = time.perf_counter() - start
    loop_teachers = list(range(min(args.loop_teachers, args.teachers)))
    test_x = torch.from_numpy(np.array(test_images)).float().div(255.0).unsqueeze(1).to(device)
    test_y = torch.from_numpy(test_labels.astype(np.int64)).to(device)
    loop_seconds, loop_accuracy = _loop(
        data.train_images, data.train_labels, shards, loop_teachers, config=config,
        image_shape=data.image_shape, device=device, test_x=test_x, test_y=test_y, seed=0)
    loop_all = loop_seconds * args.teachers / len(loop_teachers)
    same = [batched.teacher_accuracy[t] for t in loop_teachers]
    out = {
        "device": describe_device(device), "machine": platform.machine(),
        "teachers": args.teachers, "widths": list(widths), "steps": args.steps,
        "batch_size": args.batch_size, "batched_seconds": round(batched_seconds, 2),
        "loop_seconds_measured": round(loop_seconds, 2),
        "loop_teachers_measured": len(loop_teachers),
        "loop_seconds_scaled_to_all": round(loop_all, 2),
        "speedup_batched_vs_loop": round(loop_all / batched_seconds, 2),
        "accuracy_batched_same_teachers": round(float(np.mean(same)), 4),
        "accuracy_loop": round(float(np.mean(loop_accuracy)), 4),
        "accuracy_batched_all_teachers": round(float(np.mean(batched.teacher_accuracy)), 4),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
