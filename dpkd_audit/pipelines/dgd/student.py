"""DGD's semi-supervised student: labelled queries + TNAR on VAE reconstructions + entropy.

DGD Sec. III-D, Eq. 1, 5 and 6: the student minimises the cross-entropy on the few synthetic
images labelled by the teacher ensemble (E_s) plus, on the many unlabelled synthetic images
embedded by the VAE and reconstructed (x = decoder(mu)), the tangent and normal adversarial
regularizers of Yu et al. (CVPR 2019) and the entropy of the predictions (E_u; the terms are
the named functions of :mod:`~dpkd_audit.pipelines.common.tnar`). Paper: 500 Adam iterations,
batch 128, learning rate 1e-3 decayed linearly to 0.

Everything here is post-processing of the released labels and of synthetic data.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (conventional alias)
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.pipelines.common.progress import TailMeans, progress_counter
from dpkd_audit.pipelines.common.student import (
    StudentConfig,
    _predict_tensor,
    augment_batch,
    build_student,
)
from dpkd_audit.pipelines.common.tnar import (
    entropy_regularization,
    normal_regularization,
    tangent_basis,
    tangent_regularization,
)
from dpkd_audit.pipelines.common.vae import ConvVae

__all__ = ["TnarConfig", "TnarStudentResult", "soft_cross_entropy", "train_tnar_student"]


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of -sum_k t_k log softmax(logits)_k (targets rows sum to 1).

    Equal to KL(t || p) + H(t): the gradient in the logits is that of the KL divergence.
    """
    return -(targets * F.log_softmax(logits, dim=1)).sum(dim=1).mean()


@dataclasses.dataclass(frozen=True, kw_only=True)
class TnarConfig:
    """The student and its semi-supervised training.

    Attributes:
        width: Channels of the student's first block (>= 1).
        steps: Adam steps (>= 1); DGD uses 500.
        batch_size: Labelled images per step (>= 1; drawn with replacement).
        unlabelled_batch_size: VAE reconstructions per step (>= 2).
        learning_rate: Adam's learning rate (> 0), decayed linearly to 0 (DGD: 1e-3).
        tangent_weight: Weight of the tangent regularizer (>= 0).
        normal_weight: Weight of the normal regularizer (>= 0).
        entropy_weight: Weight of the entropy term (>= 0).
        tangent_epsilon: L2 norm of the tangent perturbation (> 0).
        normal_epsilon: L2 norm of the normal perturbation (> 0).
        xi: Size of the power step's probe (> 0).
        augment: Random affine augmentation of the labelled images (shift 10%, rotation 10
            degrees, zoom 10%; not in the paper, which has no augmentation).
    """

    width: int = 32
    steps: int = 500
    batch_size: int = 128
    unlabelled_batch_size: int = 128
    learning_rate: float = 1e-3
    tangent_weight: float = 1.0
    normal_weight: float = 1.0
    entropy_weight: float = 1.0
    tangent_epsilon: float = 2.0
    normal_epsilon: float = 1.0
    xi: float = 0.1
    augment: bool = False

    def __post_init__(self) -> None:
        _validate.check_int("width", self.width, minimum=1)
        _validate.check_int("steps", self.steps, minimum=1)
        _validate.check_int("batch_size", self.batch_size, minimum=1)
        _validate.check_int("unlabelled_batch_size", self.unlabelled_batch_size, minimum=2)
        _validate.check_positive("learning_rate", self.learning_rate)
        for name in ("tangent_weight", "normal_weight", "entropy_weight"):
            _validate.check_nonnegative(name, getattr(self, name))
        for name in ("tangent_epsilon", "normal_epsilon", "xi"):
            _validate.check_positive(name, getattr(self, name))
        if not isinstance(self.augment, bool):
            raise ValueError(f"augment must be True or False; got {self.augment!r}")

    @property
    def regularized(self) -> bool:
        """Whether any unlabelled term is used (else the VAE is not read)."""
        return (self.tangent_weight + self.normal_weight + self.entropy_weight) > 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class TnarStudentResult:
    """A trained student (eval mode) and its figures."""

    model: nn.Module = dataclasses.field(repr=False)
    test_accuracy: float
    loss_terms: dict[str, float]
    curve: tuple[tuple[int, float], ...]
    seconds: float


def _accuracy(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    predictions = _predict_tensor(model, images, 1000).argmax(dim=1)
    return float((predictions == labels).float().mean())


def train_tnar_student(labelled: torch.Tensor, labels: np.ndarray, *, codes: torch.Tensor,
                       vae: ConvVae, num_classes: int, config: TnarConfig,
                       test_images: torch.Tensor, test_labels: np.ndarray, seed: int,
                       soft_images: torch.Tensor | None = None,
                       soft_targets: torch.Tensor | None = None,
                       distillation_weight: float = 0.0,
                       evaluate_every: int = 100, progress: bool = True) -> TnarStudentResult:
    """Train DGD's student (see the module docstring).

    Args:
        labelled: The queried synthetic images ``(Q, 1, h, w)`` on the training device.
        labels: Their released labels ``(Q,)``.
        codes: VAE means ``(U, c)`` of the unlabelled synthetic images (same device).
        vae: The trained VAE (its decoder gives reconstructions and tangent spaces).
        num_classes: Number of classes.
        config: Student and training.
        test_images: Float test images ``(m, 1, h, w)`` on the device (evaluation only).
        test_labels: Their labels.
        seed: Seed (>= 0) of initialisation, mini-batches and probes.
        soft_images: Images ``(U', 1, h, w)`` of a distillation term (not in the paper; DGD's
            sound variant: the unlabelled synthetic images), same device.
        soft_targets: Their target distributions ``(U', classes)`` (the DP baseline's softmax).
        distillation_weight: Weight (>= 0) of :func:`soft_cross_entropy` on a batch of
            ``soft_images`` per step (``unlabelled_batch_size`` of them); 0: no term.
        evaluate_every: Test accuracy every this many steps (for the curve).
        progress: A tqdm bar over steps.
    """
    start = time.perf_counter()
    _validate.check_int("seed", seed, minimum=0)
    _validate.check_nonnegative("distillation_weight", distillation_weight)
    distil = distillation_weight > 0
    if distil and (soft_images is None or soft_targets is None
                   or soft_images.shape[0] != soft_targets.shape[0]
                   or soft_images.shape[0] < 1):
        raise ValueError("distillation_weight > 0 needs soft_images and soft_targets with the "
                         "same number (>= 1) of rows")
    device = labelled.device
    rng = torch.Generator().manual_seed(seed)
    model = build_student(tuple(labelled.shape[2:]), num_classes, config.width,
                          generator=rng).to(device)
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64)).to(device)
    y_test = torch.from_numpy(np.array(test_labels, dtype=np.int64)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: max(0.0, 1.0 - step / config.steps))
    augment = StudentConfig(augment=True)
    sums = TailMeans(steps=config.steps)
    curve: list[tuple[int, float]] = []
    bar = progress_counter(enabled=progress, desc="student (TNAR)", total=config.steps,
                           unit="step")
    model.train()
    for step in range(config.steps):
        index = torch.randint(labelled.shape[0], (config.batch_size,), generator=rng)
        x = labelled[index.to(device)]
        if config.augment:
            x = augment_batch(x, rng, augment)
        # One forward pass over every batch of the step, so BatchNorm normalises (and tracks)
        # labelled, unlabelled and distilled images with the same statistics.
        parts = [x]
        if config.regularized:
            pick = torch.randint(codes.shape[0], (config.unlabelled_batch_size,), generator=rng)
            z = codes[pick.to(device)]
            with torch.no_grad():
                x_u = vae.decode(z)
            parts.append(x_u)
        if distil:
            soft_pick = torch.randint(soft_images.shape[0], (config.unlabelled_batch_size,),
                                      generator=rng).to(device)
            parts.append(soft_images[soft_pick])
        outputs = model(torch.cat(parts)).split([p.shape[0] for p in parts])
        logits = outputs[0]
        logits_u = outputs[1] if config.regularized else None
        terms = {"cross_entropy": F.cross_entropy(logits, y[index.to(device)])}
        loss = terms["cross_entropy"]
        if distil:
            terms["distillation"] = soft_cross_entropy(outputs[-1], soft_targets[soft_pick])
            loss = loss + distillation_weight * terms["distillation"]
        if config.regularized:
            if config.tangent_weight > 0 or config.normal_weight > 0:
                basis = tangent_basis(vae.decode, z)
                if config.tangent_weight > 0:
                    terms["tangent"] = tangent_regularization(
                        model, x_u, logits_u, basis, epsilon=config.tangent_epsilon,
                        xi=config.xi, generator=rng)
                    loss = loss + config.tangent_weight * terms["tangent"]
                if config.normal_weight > 0:
                    terms["normal"] = normal_regularization(
                        model, x_u, logits_u, basis, epsilon=config.normal_epsilon,
                        xi=config.xi, generator=rng)
                    loss = loss + config.normal_weight * terms["normal"]
            if config.entropy_weight > 0:
                terms["entropy"] = entropy_regularization(logits_u)
                loss = loss + config.entropy_weight * terms["entropy"]
        if not torch.isfinite(loss):
            raise FloatingPointError(f"student loss became {float(loss.detach())} at step "
                                     f"{step + 1}; lower learning_rate ({config.learning_rate})")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        sums.add(step, terms)
        if (step + 1) % evaluate_every == 0 or step == config.steps - 1:
            curve.append((step + 1, _accuracy(model, test_images, y_test)))
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", acc=f"{curve[-1][1]:.4f}",
                            refresh=False)
        bar.update(1)
    bar.close()
    model.eval()
    return TnarStudentResult(model=model, test_accuracy=curve[-1][1], loss_terms=sums.means,
                             curve=tuple(curve), seconds=time.perf_counter() - start)
