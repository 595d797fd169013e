"""Opacus's MNIST example loop, unchanged except for the attach lines, audited in one run.

The model, the loaders and the ``train`` / ``test`` functions follow Opacus's own
``examples/mnist.py`` (meta-pytorch/opacus at 88919b6, 2026-05-20: ``SampleConvNet``, SGD with
lr 0.1, batch 64, 10 epochs, sigma 1.0, C 1.0, delta 1e-5; written anew here, not copied). The
only lines that differ from it are marked ``# audit``: an :class:`~dpkd_audit.training_audit.
OpacusAudit` is made, ``privacy_engine.make_private(`` becomes ``audit.make_private(
privacy_engine,``, and ``audit.finish()`` closes it. ``--compare`` trains the same model twice
in one process, without and with the audit (same seeds), their epochs interleaved (epoch 1
without, epoch 1 with, epoch 2 without, ...) so that the machine's drift falls on both sides,
and prints both times and accuracies: what the canaries cost.

Usage:
    python benchmarks/opacus_mnist_audit.py --dataset digits --epochs 2 --canaries 2000
    python benchmarks/opacus_mnist_audit.py --data-dir ../shared/data/mnist --compare \\
        --target-epsilon 8.6 --canaries 100000 --out reports/audits/opacus-mnist-eps8.6
    python benchmarks/opacus_mnist_audit.py --data-dir ../shared/data/mnist --shuffle ...

``--dataset digits`` (scikit-learn's 8x8 digits, upsampled to 28x28) runs in seconds and is
what the tests run. ``--shuffle`` is the positive control of issue 63: a shuffled
``DataLoader`` under ``make_private(..., poisson_sampling=False)``, i.e. shuffled fixed-size
batches accounted as Poisson.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

MNIST_MEAN = 0.1307
MNIST_STD = 0.3081


class SampleConvNet(nn.Module):
    """Opacus's example network: two convolutions with max-pooling, two linear layers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 8, 2, padding=3)
        self.conv2 = nn.Conv2d(16, 32, 4, 2)
        self.fc1 = nn.Linear(32 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))  # [B, 16, 14, 14]
        x = F.max_pool2d(x, 2, 1)  # [B, 16, 13, 13]
        x = F.relu(self.conv2(x))  # [B, 32, 5, 5]
        x = F.max_pool2d(x, 2, 1)  # [B, 32, 4, 4]
        x = x.view(-1, 32 * 4 * 4)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


def train(args, model, device, train_loader, optimizer, privacy_engine, epoch) -> None:
    """One epoch, as Opacus's example trains it."""
    model.train()
    criterion = nn.CrossEntropyLoss()
    losses = []
    for data, target in train_loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = criterion(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    epsilon = privacy_engine.accountant.get_epsilon(delta=args.delta)
    if not args.quiet:
        print(f"Train Epoch: {epoch} \tLoss: {np.mean(losses):.6f} "
              f"(epsilon = {epsilon:.2f}, delta = {args.delta})")


def test(model, device, test_loader) -> float:
    """Test accuracy, as Opacus's example measures it."""
    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            pred = model(data).argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    return correct / len(test_loader.dataset)


def _tensors(args) -> tuple[torch.utils.data.Dataset, torch.utils.data.Dataset]:
    """The train and test sets as normalised 28x28 tensors (MNIST, or digits upsampled)."""
    from dpkd_audit.data import load_dataset

    data = load_dataset(args.dataset, data_dir=args.data_dir)

    def prepare(images: np.ndarray, labels: np.ndarray) -> torch.utils.data.TensorDataset:
        x = torch.from_numpy(np.array(images, dtype=np.float32) / 255.0).unsqueeze(1)
        if x.shape[-1] != 28:
            x = F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
        x = (x - MNIST_MEAN) / MNIST_STD
        return torch.utils.data.TensorDataset(x, torch.from_numpy(np.array(labels)))

    return (prepare(data.train_images, data.train_labels),
            prepare(data.test_images, data.test_labels))


def prepare(args, *, audited: bool) -> dict:
    """Opacus's ``main()`` up to the loop; ``audited`` adds the attach lines."""
    from opacus import PrivacyEngine

    from dpkd_audit.training_audit import OpacusAudit

    device = torch.device(args.device)
    train_set, test_set = _tensors(args)
    train_loader = torch.utils.data.DataLoader(
        train_set, batch_size=args.batch_size, shuffle=args.shuffle, num_workers=0,
        generator=torch.Generator().manual_seed(args.seed))
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=args.test_batch_size)
    with torch.random.fork_rng():
        torch.manual_seed(args.seed)
        model = SampleConvNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0)
    privacy_engine = PrivacyEngine()
    private = {"module": model, "optimizer": optimizer, "data_loader": train_loader,
               "max_grad_norm": args.max_per_sample_grad_norm,
               "poisson_sampling": not args.shuffle,
               "noise_generator": torch.Generator(device=device).manual_seed(args.seed + 1)}
    if args.target_epsilon is not None:
        private.update(target_epsilon=args.target_epsilon, target_delta=args.delta,
                       epochs=args.epochs)
        method = "make_private_with_epsilon"
    else:
        private.update(noise_multiplier=args.sigma)
        method = "make_private"
    audit = None
    if audited:
        audit = OpacusAudit(canaries=args.canaries, epochs=args.epochs,  # audit
                            delta=args.delta, seed=args.audit_seed, dataset=args.dataset,
                            name=f"opacus mnist example (batch {args.batch_size}, "
                                 f"{args.epochs} epochs)")
        model, optimizer, train_loader = getattr(audit, method)(privacy_engine,  # audit
                                                                **private)
    else:
        model, optimizer, train_loader = getattr(privacy_engine, method)(**private)
    return {"audited": audited, "model": model, "optimizer": optimizer, "device": device,
            "train_loader": train_loader, "test_loader": test_loader,
            "privacy_engine": privacy_engine, "audit": audit, "seconds_training": 0.0}


def run(args, sides: list[dict]) -> list[dict]:
    """The epochs, the sides interleaved (each epoch of every side in turn, timed)."""
    for epoch in range(1, args.epochs + 1):
        for side in sides:
            start = time.perf_counter()
            train(args, side["model"], side["device"], side["train_loader"],
                  side["optimizer"], side["privacy_engine"], epoch)
            side["seconds_training"] += time.perf_counter() - start
    out = []
    for side in sides:
        accuracy = test(side["model"], side["device"], side["test_loader"])
        row = {"audited": side["audited"], "seconds_training": side["seconds_training"],
               "test_accuracy": accuracy,
               "noise_multiplier": float(side["optimizer"].noise_multiplier),
               "epsilon_opacus": float(side["privacy_engine"].get_epsilon(args.delta))}
        if side["audit"] is not None:
            row["result"] = side["audit"].finish(  # audit
                test_accuracy=accuracy, seconds_training=side["seconds_training"])
        out.append(row)
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist", choices=["mnist", "digits"])
    p.add_argument("--data-dir", help="folder with MNIST's idx files")
    p.add_argument("-b", "--batch-size", type=int, default=64)
    p.add_argument("--test-batch-size", type=int, default=1024)
    p.add_argument("-n", "--epochs", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--sigma", type=float, default=1.0)
    p.add_argument("--target-epsilon", type=float,
                   help="make_private_with_epsilon at this target (Opacus calibrates sigma)")
    p.add_argument("-c", "--max-per-sample-grad-norm", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--audit-seed", type=int, default=0)
    p.add_argument("--canaries", type=int, default=100_000)
    p.add_argument("--shuffle", action="store_true",
                   help="positive control: a shuffled DataLoader with poisson_sampling=False")
    p.add_argument("--compare", action="store_true",
                   help="train without and with the audit in one process (time, accuracy)")
    p.add_argument("--threads", type=int, help="torch threads")
    p.add_argument("--out", help="folder for audit.json and compare.json")
    p.add_argument("--quiet", action="store_true")
    return p


def main(argv: list[str] | None = None) -> dict:
    args = _parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="Secure RNG turned off")
    warnings.filterwarnings("ignore", message="Full backward hook")
    sides = [prepare(args, audited=False)] if args.compare else []
    sides.append(prepare(args, audited=True))
    runs = run(args, sides)
    audited = runs[-1]
    result = audited["result"]
    print(result.summary())
    summary = {"dataset": args.dataset, "epochs": args.epochs, "batch_size": args.batch_size,
               "canaries": args.canaries, "shuffle": args.shuffle,
               "runs": [{k: v for k, v in r.items() if k != "result"} for r in runs],
               "torch_threads": torch.get_num_threads()}
    if args.compare:
        plain = runs[0]
        summary["time_ratio"] = audited["seconds_training"] / plain["seconds_training"]
        summary["accuracy_change"] = audited["test_accuracy"] - plain["test_accuracy"]
        print(f"training {plain['seconds_training']:.1f} s without the audit, "
              f"{audited['seconds_training']:.1f} s with it (x{summary['time_ratio']:.3f}); "
              f"test accuracy {plain['test_accuracy']:.4f} -> {audited['test_accuracy']:.4f}")
    if args.out:
        command = "python benchmarks/opacus_mnist_audit.py " + " ".join(
            sys.argv[1:] if argv is None else argv)
        path = result.save(args.out, command=command)
        (Path(args.out) / "compare.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote {path} and {Path(args.out) / 'compare.json'}")
    summary["result"] = result
    return summary


if __name__ == "__main__":
    main()
