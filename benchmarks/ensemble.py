"""Batched teacher ensemble vs a per-teacher Python loop: seconds and per-teacher accuracy.

Both train the same teachers (DGD's architecture at the chosen widths) on the same hash shards
with the same number of Adam steps and batch size: the batched run is
:func:`~dpkd_audit.pipelines.common.ensemble.train_ensemble` (grouped convolutions, one
optimizer); the loop trains one :class:`TeacherEnsemble` of a single teacher at a time, each
with its own Adam, drawing its mini-batches from its own shard. The loop is timed on
``--loop-teachers`` teachers and scaled to all of them (stated in the output); the accuracy of
those teachers is compared with the batched run's accuracy of the same teachers. The loop is
timed before and after the batched run and the two times averaged (a shared machine's speed
drifts over minutes; a linear drift cancels).

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
import copy
import json
import platform
import time

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from dpkd_audit.data import load_dataset
from dpkd_audit.devices import describe_device, resolve_device
from dpkd_audit.pipelines.common.ensemble import (
    EnsembleConfig,
    EnsembleKernel,
    TeacherEnsemble,
    choose_kernel,
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


def _variants(args: argparse.Namespace, device: torch.device) -> dict:
    """Milliseconds per training step of all teachers: kernel x layout x precision."""
    widths = tuple(int(w) for w in args.widths.split(","))
    model = TeacherEnsemble(num_teachers=args.teachers, widths=widths, image_shape=(28, 28),
                            num_classes=10, generator=torch.Generator().manual_seed(0)).to(device)
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.rand(args.batch_size, args.teachers, 28, 28, device=device, generator=gen)
    y = torch.randint(0, 10, (args.batch_size, args.teachers), device=device, generator=gen)
    out = {"device": describe_device(device), "teachers": args.teachers, "widths": list(widths),
           "batch_size": args.batch_size, "torch": torch.__version__,
           "cudnn_benchmark": torch.backends.cudnn.benchmark}
    forms = [("grouped_nhwc", EnsembleKernel.GROUPED), ("grouped_nchw", EnsembleKernel.GROUPED),
             ("im2col", EnsembleKernel.IM2COL), ("loop", EnsembleKernel.LOOP)]
    precisions = ("fp32", "tf32", "bf16") if device.type == "cuda" else ("fp32",)
    for name, kernel in forms:
        for precision in precisions:
            if name == "loop" and precision != "fp32":
                continue
            torch.backends.cudnn.allow_tf32 = precision == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            trial = copy.deepcopy(model)
            trial.kernel = kernel
            optimizer = torch.optim.Adam(trial.parameters(), lr=1e-3)
            layout = torch.contiguous_format if name == "grouped_nchw" else None

            def step(trial=trial, optimizer=optimizer, layout=layout,
                     precision=precision) -> None:
                inputs = x if layout is None else x.contiguous(memory_format=layout)
                with torch.autocast(device.type, dtype=torch.bfloat16,
                                    enabled=precision == "bf16"):
                    if layout is None:
                        logits = trial(inputs)
                    else:  # grouped convolutions without channels-last
                        logits = _grouped_nchw(trial, inputs)
                    loss = F.cross_entropy(logits.reshape(-1, 10).float(), y.reshape(-1))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            key = f"{name}_{precision}_ms_per_step"
            try:
                for _ in range(2):  # autotuning and allocation outside the timer
                    step()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                for _ in range(args.steps):
                    step()
                if device.type == "cuda":
                    torch.cuda.synchronize()
                out[key] = round(1000 * (time.perf_counter() - start) / args.steps, 2)
            except torch.cuda.OutOfMemoryError:
                out[key] = "out of memory"
            del trial, optimizer
            if device.type == "cuda":
                torch.cuda.empty_cache()
            print(json.dumps({key: out[key]}), flush=True)
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's defaults
    torch.backends.cuda.matmul.allow_tf32 = False
    if device.type == "cuda":
        kernel, timings = choose_kernel(model, batch_size=args.batch_size, device=device)
        out["auto_kernel"] = kernel.value
        out["auto_timings_ms"] = {k: round(1000 * v, 2) for k, v in timings.items()}
    return out


def _grouped_nchw(model: TeacherEnsemble, x: torch.Tensor) -> torch.Tensor:
    """The grouped kernel's forward without channels-last (for the variants only)."""
    n = model.num_teachers
    x = F.max_pool2d(F.relu(F.conv2d(x, model.conv1, model.bias1, padding=1, groups=n)), 2)
    x = F.max_pool2d(F.relu(F.conv2d(x, model.conv2, model.bias2, padding=1, groups=n)), 2)
    x = x.reshape(x.shape[0], n, model.features)
    return torch.einsum("btf,tfk->btk", x, model.head) + model.head_bias


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
    parser.add_argument("--kernel", default="auto",
                        choices=[k.value for k in EnsembleKernel],
                        help="the batched run's kernel (default auto: loop on CPU, the faster "
                             "of grouped and im2col on CUDA)")
    parser.add_argument("--out", help="also write the JSON result to this file")
    parser.add_argument("--cudnn-benchmark", action="store_true",
                        help="let cuDNN time its convolution algorithms for each shape "
                             "(torch.backends.cudnn.benchmark; off by default in PyTorch)")
    parser.add_argument("--variants", action="store_true",
                        help="only time one training step of all teachers per kernel "
                             "(grouped NHWC / NCHW, im2col, loop) and precision (fp32; on CUDA "
                             "also TF32 and bf16 autocast), on random images")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    if args.variants:
        out = _variants(args, device)
        print(json.dumps(out, indent=2))
        if args.out:
            with open(args.out, "w", encoding="utf-8") as handle:
                json.dump(out, handle, indent=2)
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
                       device=device, progress=False, kernel=args.kernel)
        torch.cuda.synchronize()
    loop_teachers = list(range(min(args.loop_teachers, args.teachers)))
    test_x = torch.from_numpy(np.array(test_images)).float().div(255.0).unsqueeze(1).to(device)
    test_y = torch.from_numpy(test_labels.astype(np.int64)).to(device)

    def loop() -> tuple[float, list[float]]:
        return _loop(data.train_images, data.train_labels, shards, loop_teachers,
                     config=config, image_shape=data.image_shape, device=device,
                     test_x=test_x, test_y=test_y, seed=0)

    # the loop is timed before and after the batched run and the two averaged: a shared
    # machine's speed drifts over minutes, and a drift that is linear in time cancels
    loop_before, loop_accuracy = loop()
    start = time.perf_counter()
    batched = train_ensemble(data.train_images, data.train_labels, shards, num_classes=10,
                             config=config, test_images=test_images, test_labels=test_labels,
                             seed=0, device=device, progress=False, kernel=args.kernel)
    if device.type == "cuda":
        torch.cuda.synchronize()
    batched_seconds = time.perf_counter() - start
    loop_after, _ = loop()
    loop_seconds = (loop_before + loop_after) / 2
    loop_all = loop_seconds * args.teachers / len(loop_teachers)
    same = [batched.teacher_accuracy[t] for t in loop_teachers]
    out = {
        "device": describe_device(device), "machine": platform.machine(),
        "teachers": args.teachers, "widths": list(widths), "steps": args.steps,
        "batch_size": args.batch_size, "kernel": batched.kernel.value,
        "kernel_timings_ms": {k: round(1000 * v, 2) for k, v in batched.kernel_timings.items()},
        "batched_seconds": round(batched_seconds, 2),
        "loop_seconds_measured": round(loop_seconds, 2),
        "loop_seconds_before_after": [round(loop_before, 2), round(loop_after, 2)],
        "loop_teachers_measured": len(loop_teachers),
        "loop_seconds_scaled_to_all": round(loop_all, 2),
        "speedup_batched_vs_loop": round(loop_all / batched_seconds, 2),
        "accuracy_batched_same_teachers": round(float(np.mean(same)), 4),
        "accuracy_loop": round(float(np.mean(loop_accuracy)), 4),
        "accuracy_batched_all_teachers": round(float(np.mean(batched.teacher_accuracy)), 4),
    }
    print(json.dumps(out, indent=2))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(out, handle, indent=2)


if __name__ == "__main__":
    main()
