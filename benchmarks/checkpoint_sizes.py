"""Size of each long loop's checkpoint at the paper presets (MNIST shape, 28 x 28, 10 classes).

Runs every checkpointed loop of the three paper presets - the DGD teacher ensemble, baseline
and generator, the DP-DFD teacher and generator, the reverse k-NN student - with the preset's
networks and optimizers but a few records and one step (a checkpoint's size does not depend
on either), inside ``Checkpoints``, and prints the size of the file each wrote. A device
window returns files of at most 16 MiB and carries at most 64 MiB: these sizes say which
loops can continue in a later window (``benchmarks/gpu/paper.sh --resume``).

    python benchmarks/checkpoint_sizes.py
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import torch

from dpkd_audit.pipelines.common.checkpoint import Checkpoints
from dpkd_audit.pipelines.common.ensemble import train_ensemble
from dpkd_audit.pipelines.common.generator import GeneratorTrainer
from dpkd_audit.pipelines.common.student import build_student, fit_classifier
from dpkd_audit.pipelines.common.teacher import train_teacher
from dpkd_audit.pipelines.dgd.config import DgdConfig
from dpkd_audit.pipelines.dpdfd.config import DpdfdConfig
from dpkd_audit.pipelines.rknn.config import RknnConfig

SHAPE, CLASSES = (28, 28), 10


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, *SHAPE), dtype=np.uint8),
            np.arange(n, dtype=np.int64) % CLASSES)


def _one_step_teacher(config, images, labels, device):
    training = dataclasses.replace(config.training, epochs=1, batch_size=len(images))
    return train_teacher(images, labels, num_classes=CLASSES, test_images=images,
                         test_labels=labels, config=dataclasses.replace(config, training=training),
                         seed=0, device=device, progress=False).model


def _one_step_generator(teacher, config, device) -> None:
    trainer = GeneratorTrainer(teacher, image_shape=SHAPE, num_classes=CLASSES,
                               config=dataclasses.replace(config, steps=1, batch_size=2),
                               seed=0, device=device)
    trainer.train(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    images, labels = _data(40, 0)
    dgd, dpdfd, rknn = DgdConfig(queries=1300), DpdfdConfig(), RknnConfig.paper()
    sizes: list[tuple[str, str, int]] = []
    with tempfile.TemporaryDirectory() as folder:
        seen: set[Path] = set()

        def record(method: str, loop: str) -> None:
            new = sorted(set(Path(folder).glob("*.pt")) - seen)
            for path in new:
                sizes.append((method, f"{loop} ({path.name.split('-')[0]})",
                              path.stat().st_size))
            seen.update(new)

        with Checkpoints(folder, every_seconds=1e9):
            ensemble = dataclasses.replace(dgd.ensemble, steps=1, batch_size=1)
            n = ensemble.num_teachers
            many, many_labels = _data(n * 2, 1)
            shards = np.arange(len(many)) % n  # every teacher gets records
            train_ensemble(many, many_labels, shards, num_classes=CLASSES, config=ensemble,
                           test_images=images[:4], test_labels=labels[:4], seed=0,
                           device=device, progress=False)
            record("DGD", f"teacher ensemble: {n} teachers, widths {dgd.ensemble.widths}, Adam")
            baseline = _one_step_teacher(dgd.baseline, images, labels, device)
            record("DGD", f"baseline: {dgd.baseline.architecture.value} width "
                          f"{dgd.baseline.width}, SGD momentum")
            _one_step_generator(baseline, dgd.active_generator, device)
            record("DGD", f"generator: width {dgd.active_generator.width}, Adam")
            teacher = _one_step_teacher(dpdfd.teacher, images, labels, device)
            record("DP-DFD", f"teacher: {dpdfd.teacher.architecture.value} width "
                             f"{dpdfd.teacher.width}, SGD momentum")
            _one_step_generator(teacher, dpdfd.active_generator, device)
            record("DP-DFD", f"generator: width {dpdfd.active_generator.width}, Adam")
            student = dataclasses.replace(rknn.student, epochs=1, batch_size=len(images))
            fit_classifier(lambda shape, g: build_student(shape, CLASSES, student.width,
                                                          generator=g),
                           images, labels, num_classes=CLASSES, test_images=images,
                           test_labels=labels, config=student, seed=0, device=device,
                           progress=False, desc="student")
            record("reverse k-NN", f"student: width {student.width}")
    print("| method | loop | checkpoint (MiB) | comes back from a window (<= 16 MiB) |")
    print("|---|---|---:|---|")
    for method, loop, size in sizes:
        fits = "yes" if size <= 16 * 2**20 else "no"
        print(f"| {method} | {loop} | {size / 2**20:.1f} | {fits} |")


if __name__ == "__main__":
    main()
