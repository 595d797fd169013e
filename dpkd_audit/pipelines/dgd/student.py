"""DGD's semi-supervised student: labelled queries + TNAR on the unlabelled synthetic images.

DGD Sec. III-D, Eq. 1, 5 and 6: the student minimises the cross-entropy on the few synthetic
images labelled by the teacher ensemble (E_s) plus, on the many unlabelled synthetic images,
the tangent and normal adversarial regularizers of Yu et al. (CVPR 2019) and the entropy of the
predictions (E_u; the terms are the named functions of
:mod:`~dpkd_audit.pipelines.common.tnar`). Paper: 500 Adam iterations, batch 128, learning
rate 1e-3 decayed linearly to 0.

Where the unlabelled terms act (:class:`UnlabelledInput`):

- ``SYNTHETIC`` (default): as TNAR does (Yu et al. 2019, Sec. 3.2 and Alg. 1; DGD cites it for
  the terms, [65]): on the unlabelled image x itself, with the tangent space of the manifold
  at x taken from the VAE decoder's Jacobian at the code mu(x). The labelled and unlabelled
  images then come from one distribution.
- ``RECONSTRUCTION``: DGD's Eq. 4 read literally: on the reconstruction x' = decoder(mu(x)).
  Measured on MNIST and digits (``benchmarks/dgd_student.py``, ``benchmarks/README.md``): a
  reconstruction loses what makes a synthetic image a class for the baseline, the student can
  tell labelled raw images from reconstructions, and the unlabelled terms are cheapest when
  every reconstruction goes to one class: the student collapses to one class (real test
  images land on the reconstruction side). Kept for the comparison, and used when the paper's
  latent-code perturbation is on (the student then only sees reconstructions from the released
  codes).

Forward passes follow virtual adversarial training's reference code (Miyato et al. 2018): the
labelled batch (with the distillation batch, when there is one) goes through the student in one
pass that updates the BatchNorm running statistics; the unlabelled batch goes through a pass of
its own (batch statistics of the unlabelled batch, running statistics left alone), and its
perturbed copies through passes of their own likewise, so the clean and perturbed predictions
of the TNAR terms are normalised alike.

Everything here is post-processing of the released labels and of synthetic data.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import math
import time

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812  (conventional alias)
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.pipelines.common.config import parse_enum
from dpkd_audit.pipelines.common.frontend import FeatureHead, fixed_frontend, frontend_features
from dpkd_audit.pipelines.common.progress import TailMeans, progress_counter
from dpkd_audit.pipelines.common.student import (
    StudentConfig,
    _predict_tensor,
    augment_batch,
    build_student,
)
from dpkd_audit.pipelines.common.tnar import (
    class_balance_regularization,
    entropy_regularization,
    frozen_batch_statistics,
    normal_regularization,
    random_feature_regularization,
    tangent_basis,
    tangent_regularization,
)
from dpkd_audit.pipelines.common.vae import ConvVae

__all__ = ["LabelledLoss", "StudentInit", "TnarConfig", "TnarStudentResult", "UnlabelledInput",
           "UnlabelledTerms", "generalized_cross_entropy", "soft_cross_entropy",
           "train_tnar_student"]


class StudentInit(enum.StrEnum):
    """Where the student's weights start."""

    #: A fresh student (:func:`~dpkd_audit.pipelines.common.student.build_student`; the paper).
    SCRATCH = "scratch"
    #: A copy of the baseline (its architecture and weights; sound mode, where the baseline is
    #: DP-SGD's output, so that copying it is post-processing).
    BASELINE = "baseline"


class UnlabelledInput(enum.StrEnum):
    """Which image the unlabelled terms act on (see the module docstring)."""

    #: The unlabelled synthetic image itself, tangent space from the decoder at its code (TNAR).
    SYNTHETIC = "synthetic"
    #: Its VAE reconstruction decoder(mu) (DGD's Eq. 4 read literally; collapses, measured).
    RECONSTRUCTION = "reconstruction"


class UnlabelledTerms(enum.StrEnum):
    """The form of the tangent and normal terms."""

    #: TNAR's (Yu et al. 2019, Eq. 9 and 12; DGD cites it): the virtual-adversarial direction
    #: in the tangent space or its complement, KL of the predictions.
    ADVERSARIAL_KL = "adversarial-kl"
    #: DGD's Eq. 6 as printed: a random direction there, squared distance of the backbone
    #: features (:func:`~dpkd_audit.pipelines.common.tnar.random_feature_regularization`).
    #: Unnormalised, it is smallest when the backbone maps every input to one point: measured
    #: on the digits (published, 400 queries, seeds 0-2) at norms 2 / 1 the features' spread
    #: over test images falls from 0.41 to 0.027, the student fits 37% of its own labels and
    #: gets 23.6-30.7% (TNAR's form 60.3-62.7%); at norms 0.57 / 0.29 56.95-60.97% (TNAR's
    #: 61.98-65.49%). On MNIST's 1,300 published queries it was 0.38 points above
    #: TNAR's form over five student seeds (``reports/benchmarks/published-caps-cpu``).
    RANDOM_FEATURE = "random-feature"


class LabelledLoss(enum.StrEnum):
    """The loss on the labelled (queried) images."""

    #: Cross-entropy (DGD Eq. 1, the paper).
    CROSS_ENTROPY = "cross-entropy"
    #: Generalized cross-entropy (:func:`generalized_cross_entropy`; Zhang and Sabuncu,
    #: NeurIPS 2018), meant for the labels the noisy vote gets wrong. Not in DGD; measured on
    #: MNIST's published 1,300 queries (``reports/benchmarks/published-caps-cpu``): 89.80%
    #: against cross-entropy's 91.21%, so no preset uses it.
    GENERALIZED_CROSS_ENTROPY = "generalized-cross-entropy"


def generalized_cross_entropy(logits: torch.Tensor, labels: torch.Tensor,
                              q: float) -> torch.Tensor:
    """Mean over the batch of (1 - p_y^q) / q, p = softmax(logits) (Zhang and Sabuncu 2018, Eq. 6).

    The negative Box-Cox transform of p_y: it tends to the cross-entropy -ln p_y as q -> 0
    and is the mean absolute error 1 - p_y at q = 1. Its gradient is the cross-entropy's
    times p_y^q, so an image the student finds unlikely under its label (as a wrong label
    makes it) pulls less. ``p_y^q`` is computed as exp(q log_softmax), finite for any logits.
    """
    log_p = F.log_softmax(logits, dim=1).gather(1, labels[:, None]).squeeze(1)
    return ((1.0 - torch.exp(q * log_p)) / q).mean()


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
        unlabelled_input: :class:`UnlabelledInput`, where the unlabelled terms act.
        rampup: Share of the steps, in [0, 1], over which the weights of the unlabelled terms
            rise from about 0 to their values along exp(-5 (1 - t)^2) (the sigmoid ramp-up of
            Laine and Aila, ICLR 2017, Sec. 3.1, used by Mean Teacher); 0: full weights from
            the first step (DGD and TNAR state no ramp-up).
        unlabelled_terms: :class:`UnlabelledTerms`, the form of the tangent and normal terms
            (default TNAR's ``ADVERSARIAL_KL``; ``RANDOM_FEATURE``: DGD's Eq. 6 as printed).
        labelled_loss: :class:`LabelledLoss` on the labelled images (the paper:
            ``CROSS_ENTROPY``).
        gce_q: The exponent q, in (0, 1], of ``GENERALIZED_CROSS_ENTROPY`` (Zhang and Sabuncu
            recommend 0.7); unused otherwise.
        balance_weight: Weight (>= 0) of the class-balance term on the unlabelled batch:
            sum_c p_c ln p_c of its mean softmax p (minimal when the batch's predictions
            spread over the classes). With the entropy term it makes the unlabelled objective
            the mutual information between images and predicted classes (regularized
            information maximization, Krause, Perona and Gomes, NeurIPS 2010, Eq. 4), whose
            marginal-entropy half rules out the collapse in which every unlabelled image goes
            to one class. Not in DGD (0, the paper): a departure where set.
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
    unlabelled_input: UnlabelledInput = UnlabelledInput.SYNTHETIC
    rampup: float = 0.0
    balance_weight: float = 0.0
    labelled_loss: LabelledLoss = LabelledLoss.CROSS_ENTROPY
    gce_q: float = 0.7
    unlabelled_terms: UnlabelledTerms = UnlabelledTerms.ADVERSARIAL_KL

    def __post_init__(self) -> None:
        _validate.check_int("width", self.width, minimum=1)
        _validate.check_int("steps", self.steps, minimum=1)
        _validate.check_int("batch_size", self.batch_size, minimum=1)
        _validate.check_int("unlabelled_batch_size", self.unlabelled_batch_size, minimum=2)
        _validate.check_positive("learning_rate", self.learning_rate)
        for name in ("tangent_weight", "normal_weight", "entropy_weight", "balance_weight"):
            _validate.check_nonnegative(name, getattr(self, name))
        for name in ("tangent_epsilon", "normal_epsilon", "xi"):
            _validate.check_positive(name, getattr(self, name))
        if not isinstance(self.augment, bool):
            raise ValueError(f"augment must be True or False; got {self.augment!r}")
        _validate.check_probability("rampup", self.rampup)
        object.__setattr__(self, "unlabelled_input",
                           parse_enum(UnlabelledInput, "unlabelled_input", self.unlabelled_input))
        object.__setattr__(self, "labelled_loss",
                           parse_enum(LabelledLoss, "labelled_loss", self.labelled_loss))
        object.__setattr__(self, "unlabelled_terms",
                           parse_enum(UnlabelledTerms, "unlabelled_terms",
                                      self.unlabelled_terms))
        _validate.check_probability("gce_q", self.gce_q, open_low=True)

    def unlabelled_scale(self, step: int) -> float:
        """Factor (in (0, 1]) of the unlabelled terms' weights at 0-based ``step``."""
        length = self.rampup * self.steps
        if step >= length:
            return 1.0
        return math.exp(-5.0 * (1.0 - step / length) ** 2)

    @property
    def regularized(self) -> bool:
        """Whether any unlabelled term is used (else the VAE is not read)."""
        return (self.tangent_weight + self.normal_weight + self.entropy_weight
                + self.balance_weight) > 0


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
                       unlabelled: torch.Tensor | None = None,
                       soft_images: torch.Tensor | None = None,
                       soft_targets: torch.Tensor | None = None,
                       distillation_weight: float = 0.0,
                       initial_model: nn.Module | None = None,
                       evaluate_every: int = 100, progress: bool = True) -> TnarStudentResult:
    """Train DGD's student (see the module docstring).

    Args:
        labelled: The queried synthetic images ``(Q, 1, h, w)`` on the training device
            (``Q`` may be 0 when the distillation term is on: no cross-entropy term then).
        labels: Their released labels ``(Q,)``.
        codes: VAE means ``(U, c)`` of the unlabelled synthetic images (same device).
        vae: The trained VAE (its decoder gives reconstructions and tangent spaces).
        num_classes: Number of classes.
        config: Student and training.
        test_images: Float test images ``(m, 1, h, w)`` on the device (evaluation only).
        test_labels: Their labels.
        seed: Seed (>= 0) of initialisation, mini-batches and probes.
        unlabelled: The unlabelled synthetic images ``(U, 1, h, w)`` whose codes are
            ``codes`` (same order and device); needed when the terms act on them
            (``config.unlabelled_input`` is ``SYNTHETIC``).
        soft_images: Images ``(U', 1, h, w)`` of a distillation term (not in the paper; DGD's
            sound variant: the unlabelled synthetic images), same device.
        soft_targets: Their target distributions ``(U', classes)`` (the DP baseline's softmax).
        distillation_weight: Weight (>= 0) of :func:`soft_cross_entropy` on a batch of
            ``soft_images`` per step (``unlabelled_batch_size`` of them); 0: no term.
        initial_model: A classifier whose copy is trained instead of a fresh student
            (:attr:`StudentInit.BASELINE`; ``config.width`` is then unused); it is not changed.
        evaluate_every: Test accuracy every this many steps (for the curve).
        progress: A tqdm bar over steps.

    Raises:
        ValueError: For a bad seed or weight, a distillation term without its images, or
            unlabelled terms on ``SYNTHETIC`` images without ``unlabelled`` (or with another
            count than ``codes``), or an ``initial_model`` that is not a module (or has no
            ``backbone_features`` when the random-feature terms are on).
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
    if initial_model is not None and not isinstance(initial_model, nn.Module):
        raise ValueError("initial_model must be a torch.nn.Module (the classifier whose copy "
                         f"is trained) or None; got {type(initial_model).__name__}")
    if (initial_model is not None
            and config.unlabelled_terms is UnlabelledTerms.RANDOM_FEATURE
            and (config.tangent_weight > 0 or config.normal_weight > 0)
            and not callable(getattr(initial_model, "backbone_features", None))):
        raise ValueError("unlabelled_terms='random-feature' needs a student with a "
                         "backbone_features(x) method (a build_student model); initial_model "
                         f"{type(initial_model).__name__} has none")
    supervised = labelled.shape[0] > 0
    if not supervised and not distil:
        raise ValueError("labelled has no images: the student needs labelled images or a "
                         "distillation term (distillation_weight > 0)")
    if labelled.shape[0] != np.asarray(labels).shape[0]:
        raise ValueError(f"labels must have one entry per labelled image ({labelled.shape[0]})"
                         f"; got {np.asarray(labels).shape[0]}")
    on_synthetic = config.unlabelled_input is UnlabelledInput.SYNTHETIC
    if config.regularized and on_synthetic and (
            unlabelled is None or codes is None or unlabelled.shape[0] != codes.shape[0]):
        raise ValueError("config.unlabelled_input='synthetic' needs the unlabelled images "
                         "(unlabelled) with one VAE code each (codes, same count); got "
                         f"unlabelled {None if unlabelled is None else tuple(unlabelled.shape)}"
                         f", codes {None if codes is None else tuple(codes.shape)}")
    device = labelled.device
    rng = torch.Generator().manual_seed(seed)
    if initial_model is None:
        model = build_student(tuple(labelled.shape[2:]), num_classes, config.width,
                              generator=rng).to(device)
    else:
        model = copy.deepcopy(initial_model).to(device)
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64)).to(device)
    y_test = torch.from_numpy(np.array(test_labels, dtype=np.int64)).to(device)
    net: nn.Module = model
    frontend = fixed_frontend(model)
    if frontend is not None and not config.augment and not (
            config.regularized and (config.tangent_weight > 0 or config.normal_weight > 0)):
        # every input is a fixed image (or a decoded code, mapped as it comes): the fixed
        # frontend is computed once per image and the rest trained on it (same function)
        net = FeatureHead(model)
        labelled = frontend_features(frontend, labelled)
        test_images = frontend_features(frontend, test_images)
        if distil:
            soft_images = frontend_features(frontend, soft_images)
        if config.regularized and on_synthetic:
            unlabelled = frontend_features(frontend, unlabelled)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.learning_rate)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: max(0.0, 1.0 - step / config.steps))
    augment = StudentConfig(augment=True)
    sums = TailMeans(steps=config.steps)
    curve: list[tuple[int, float]] = []
    bar = progress_counter(enabled=progress, desc="student (TNAR)", total=config.steps,
                           unit="step")
    net.train()
    for step in range(config.steps):
        # The labelled batch and the distillation batch share one pass (running statistics
        # updated); the unlabelled batch has passes of its own (module docstring).
        parts = []
        if supervised:
            index = torch.randint(labelled.shape[0], (config.batch_size,),
                                  generator=rng).to(device)
            x = labelled[index]
            if config.augment:
                x = augment_batch(x, rng, augment)
            parts.append(x)
        if distil:
            soft_pick = torch.randint(soft_images.shape[0], (config.unlabelled_batch_size,),
                                      generator=rng).to(device)
            parts.append(soft_images[soft_pick])
        outputs = net(torch.cat(parts)).split([p.shape[0] for p in parts])
        terms: dict[str, torch.Tensor] = {}
        loss = torch.zeros((), device=device)
        if supervised:
            if config.labelled_loss is LabelledLoss.CROSS_ENTROPY:
                name, value = "cross_entropy", F.cross_entropy(outputs[0], y[index])
            else:
                name, value = "generalized_cross_entropy", generalized_cross_entropy(
                    outputs[0], y[index], config.gce_q)
            terms[name] = value
            loss = loss + value
        if distil:
            terms["distillation"] = soft_cross_entropy(outputs[-1], soft_targets[soft_pick])
            loss = loss + distillation_weight * terms["distillation"]
        if config.regularized:
            pick = torch.randint(codes.shape[0], (config.unlabelled_batch_size,),
                                 generator=rng).to(device)
            z = codes[pick]
            ramp = config.unlabelled_scale(step)
            if on_synthetic:
                x_u = unlabelled[pick]
            else:
                with torch.no_grad():
                    x_u = vae.decode(z)
                    if net is not model:
                        x_u = frontend(x_u)
            with frozen_batch_statistics(model):
                logits_u = net(x_u)
            if config.tangent_weight > 0 or config.normal_weight > 0:
                basis = tangent_basis(vae.decode, z)
                adversarial = config.unlabelled_terms is UnlabelledTerms.ADVERSARIAL_KL
                for name, weight, eps, along in (
                        ("tangent", config.tangent_weight, config.tangent_epsilon, True),
                        ("normal", config.normal_weight, config.normal_epsilon, False)):
                    if weight <= 0:
                        continue
                    if adversarial:
                        term = tangent_regularization if along else normal_regularization
                        terms[name] = term(model, x_u, logits_u, basis, epsilon=eps,
                                           xi=config.xi, generator=rng)
                    else:
                        terms[name] = random_feature_regularization(
                            model, x_u, basis, tangent=along, epsilon=eps, generator=rng)
                    loss = loss + ramp * weight * terms[name]
            if config.entropy_weight > 0:
                terms["entropy"] = entropy_regularization(logits_u)
                loss = loss + ramp * config.entropy_weight * terms["entropy"]
            if config.balance_weight > 0:
                terms["balance"] = class_balance_regularization(logits_u)
                loss = loss + ramp * config.balance_weight * terms["balance"]
        if not torch.isfinite(loss):
            raise FloatingPointError(f"student loss became {float(loss.detach())} at step "
                                     f"{step + 1}; lower learning_rate ({config.learning_rate})")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        sums.add(step, terms)
        if (step + 1) % evaluate_every == 0 or step == config.steps - 1:
            curve.append((step + 1, _accuracy(net, test_images, y_test)))
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", acc=f"{curve[-1][1]:.4f}",
                            refresh=False)
        bar.update(1)
    bar.close()
    model.eval()
    return TnarStudentResult(model=model, test_accuracy=curve[-1][1], loss_terms=sums.means,
                             curve=tuple(curve), seconds=time.perf_counter() - start)
