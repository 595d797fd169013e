"""Tangent-normal adversarial regularization (TNAR) through a VAE decoder (DGD's student).

Yu et al., "Tangent-Normal Adversarial Regularization for Semi-supervised Learning" (CVPR 2019),
as used by DGD (Sec. III-D, Eq. 4 and 6): the unlabelled synthetic images are embedded by the
VAE and reconstructed, x = g(z) with g the decoder; the data manifold near x is approximated by
the decoder's image, whose **tangent space** at x is the column space of the decoder's Jacobian
J = dg/dz (Yu et al. Sec. 3.2). Two virtual-adversarial perturbations of x are then built:

- **tangent**: the direction r in col(J) that most changes the student's prediction, by one
  power step of virtual adversarial training (Miyato et al., TPAMI 2018, Eq. 12-13) restricted
  to col(J): r0 random in col(J), g = grad_r KL(p(x) || p(x + xi r0)), r = P_T g / ||P_T g||
  (Yu et al. Eq. 7-9);
- **normal**: the same power step restricted to the orthogonal complement of col(J) (the
  tangent component removed, Yu et al. Eq. 10-12): r = (I - P_T) g / ||(I - P_T) g||.

P_T = Q Q^T with Q an orthonormal basis of col(J) (:func:`tangent_basis`, a QR factorisation of
the Jacobian computed exactly by forward-mode differentiation: ``c`` JVPs for a ``c``-dim code).
Each regulariser is the KL divergence between the student's prediction at x (held fixed) and at
x + epsilon r (:func:`tangent_regularization`, :func:`normal_regularization`); with
:func:`entropy_regularization` (the conditional entropy of the predictions, minimised: "ensures
the student output more determinate predictions"; DGD's Eq. 6 prints sum p log p, the negative
entropy, whose minimisation would do the opposite) they make DGD's unsupervised energy E_u.

BatchNorm layers of the student keep their running statistics during the perturbed passes
(:func:`frozen_batch_statistics`), as in reference VAT implementations.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F  # noqa: N812  (conventional alias)
from torch import nn

from dpkd_audit.pipelines.common.distill import prediction_entropy
from dpkd_audit.pipelines.common.generator import information_entropy_loss

__all__ = [
    "adversarial_direction",
    "class_balance_regularization",
    "decoder_jacobian",
    "entropy_regularization",
    "frozen_batch_statistics",
    "normal_regularization",
    "perturbation_divergence",
    "random_feature_regularization",
    "tangent_basis",
    "tangent_regularization",
]


def decoder_jacobian(decode: Callable[[torch.Tensor], torch.Tensor],
                     z: torch.Tensor) -> torch.Tensor:
    """Jacobians ``(b, D, c)`` of ``decode`` at each code of ``z`` ``(b, c)`` (D = pixels).

    Exact, by forward-mode differentiation (``torch.func.jvp`` along the ``c`` unit vectors,
    vectorised with ``vmap``); ``decode`` must treat the codes of a batch independently (no
    batch statistics).
    """
    b, c = z.shape
    eye = torch.eye(c, dtype=z.dtype, device=z.device)

    def along(direction: torch.Tensor) -> torch.Tensor:
        tangent = direction.expand(b, c)
        _, out = torch.func.jvp(decode, (z,), (tangent,))
        return out.reshape(b, -1)

    return torch.func.vmap(along)(eye).permute(1, 2, 0)   # (c, b, D) -> (b, D, c)


def tangent_basis(decode: Callable[[torch.Tensor], torch.Tensor],
                  z: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis ``(b, D, c)`` of each decoder Jacobian's column space.

    The reduced QR factorisation of :func:`decoder_jacobian`; its columns span col(J) (they
    span more only where J loses rank, which a projection then keeps in the tangent part).
    """
    with torch.no_grad():
        jacobian = decoder_jacobian(decode, z)
    q, _ = torch.linalg.qr(jacobian, mode="reduced")
    return q


def _project(basis: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """P_T r = Q Q^T r for each image; ``r`` ``(b, 1, h, w)``."""
    flat = r.reshape(r.shape[0], -1, 1)
    return (basis @ (basis.transpose(1, 2) @ flat)).reshape(r.shape)


def _unit(r: torch.Tensor) -> torch.Tensor:
    norms = r.reshape(r.shape[0], -1).norm(dim=1).clamp_min(1e-12)
    return r / norms.view(-1, *([1] * (r.ndim - 1)))


def _restrict(basis: torch.Tensor, r: torch.Tensor, *, tangent: bool) -> torch.Tensor:
    """The part of ``r`` in col(J) (``tangent``) or in its orthogonal complement."""
    tangent_part = _project(basis, r)
    return tangent_part if tangent else r - tangent_part


def _random_direction(x: torch.Tensor, basis: torch.Tensor, *, tangent: bool,
                      generator: torch.Generator) -> torch.Tensor:
    """A random unit direction (Gaussian, restricted as :func:`_restrict`) per image of ``x``."""
    start = torch.randn(x.shape, generator=generator).to(device=x.device, dtype=x.dtype)
    return _unit(_restrict(basis, start, tangent=tangent))


@contextlib.contextmanager
def frozen_batch_statistics(model: nn.Module) -> Iterator[None]:
    """BatchNorm running statistics left unchanged inside (momentum 0), restored after."""
    saved = [(m, m.momentum) for m in model.modules()
             if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for module, _ in saved:
        module.momentum = 0.0
    try:
        yield
    finally:
        for module, momentum in saved:
            module.momentum = momentum


def perturbation_divergence(model: nn.Module, x: torch.Tensor, clean_logits: torch.Tensor,
                            r: torch.Tensor) -> torch.Tensor:
    """Mean over the batch of KL(softmax(clean_logits) || softmax(model(x + r))).

    ``clean_logits`` are held fixed (no gradient), as in VAT.
    """
    target = F.softmax(clean_logits.detach(), dim=1)
    log_perturbed = F.log_softmax(model(x + r), dim=1)
    return F.kl_div(log_perturbed, target, reduction="batchmean")


def adversarial_direction(model: nn.Module, x: torch.Tensor, clean_logits: torch.Tensor,
                          basis: torch.Tensor, *, tangent: bool, xi: float,
                          generator: torch.Generator, power_iterations: int = 1
                          ) -> torch.Tensor:
    """Unit virtual-adversarial direction in col(J) (``tangent``) or its complement.

    Power iteration of VAT (Miyato et al. 2018, Eq. 12-13) with every iterate projected onto the
    subspace (Yu et al. 2019, Eq. 7-12). Returns ``(b, 1, h, w)`` unit vectors (no gradient).
    """
    d = _random_direction(x, basis, tangent=tangent, generator=generator)
    for _ in range(power_iterations):
        d = d.detach().requires_grad_(True)
        divergence = perturbation_divergence(model, x, clean_logits, xi * d)
        (gradient,) = torch.autograd.grad(divergence, d)
        d = _unit(_restrict(basis, gradient.detach(), tangent=tangent))
    return d.detach()


def tangent_regularization(model: nn.Module, x: torch.Tensor, clean_logits: torch.Tensor,
                           basis: torch.Tensor, *, epsilon: float, xi: float,
                           generator: torch.Generator) -> torch.Tensor:
    """KL between the predictions at x and at x + epsilon r_tangent (Yu et al. Eq. 9)."""
    with frozen_batch_statistics(model):
        direction = adversarial_direction(model, x, clean_logits, basis, tangent=True, xi=xi,
                                          generator=generator)
        return perturbation_divergence(model, x, clean_logits, epsilon * direction)


def normal_regularization(model: nn.Module, x: torch.Tensor, clean_logits: torch.Tensor,
                          basis: torch.Tensor, *, epsilon: float, xi: float,
                          generator: torch.Generator) -> torch.Tensor:
    """KL between the predictions at x and at x + epsilon r_normal (Yu et al. Eq. 12)."""
    with frozen_batch_statistics(model):
        direction = adversarial_direction(model, x, clean_logits, basis, tangent=False, xi=xi,
                                          generator=generator)
        return perturbation_divergence(model, x, clean_logits, epsilon * direction)


def random_feature_regularization(model: nn.Module, x: torch.Tensor, basis: torch.Tensor, *,
                                  tangent: bool, epsilon: float,
                                  generator: torch.Generator) -> torch.Tensor:
    """DGD's Eq. 6 as printed: mean over the batch of ||phi(x) - phi(x + epsilon n)||^2.

    phi is the student's backbone (``model.backbone_features``, the paper's phi(W_s^-; .)) and
    n a *random* unit direction restricted to col(J) (``tangent``) or to its orthogonal
    complement (DGD Sec. III-D: "random perturbation noise along tangent direction or normal
    direction"), where TNAR (:func:`tangent_regularization`, :func:`normal_regularization`)
    takes the virtual-adversarial direction and the KL of the predictions. Both passes are
    differentiated; BatchNorm running statistics are left alone.

    Raises:
        ValueError: If ``model`` has no ``backbone_features`` method.
    """
    backbone = getattr(model, "backbone_features", None)
    if not callable(backbone):
        raise ValueError("random_feature_regularization needs a model with a "
                         "backbone_features(x) method (the student of build_student); got "
                         f"{type(model).__name__}")
    direction = _random_direction(x, basis, tangent=tangent, generator=generator)
    with frozen_batch_statistics(model):
        clean = backbone(x)
        perturbed = backbone(x + epsilon * direction)
    return ((clean - perturbed) ** 2).sum(dim=1).mean()


def entropy_regularization(logits: torch.Tensor) -> torch.Tensor:
    """Mean conditional entropy of the predictions (minimised; Grandvalet and Bengio 2005)."""
    return prediction_entropy(logits)


def class_balance_regularization(logits: torch.Tensor) -> torch.Tensor:
    """Negative entropy (nats) of the batch-mean softmax: sum_c p_c ln p_c, minimised.

    The marginal half of regularized information maximization (Krause, Perona and Gomes,
    NeurIPS 2010, Eq. 4: I(x; y) = H(mean p) - mean H(p)); minimal, -ln k, when the batch's
    predictions are spread evenly over the k classes, 0 when every image goes to one class.
    """
    return information_entropy_loss(logits)
