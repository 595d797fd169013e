"""A convolutional variational autoencoder for synthetic images (DGD's VAE, latent 32).

DGD (Sec. III-B, last paragraph) trains a VAE {phi_e, phi_d} on the synthetic set, "constructed
with convolutional neural networks like" TNAR (Yu et al. CVPR 2019), and uses it to embed the
unlabelled synthetic images and reconstruct them with and without perturbations along the
tangent and normal directions of the learned manifold (Sec. III-D, Eq. 4); c = 32 latent
dimensions (Sec. IV).

Architecture (image sides multiples of 4): the encoder is two 4x4 stride-2 convolutions (``width``
and ``2 width`` channels, ReLU) and two linear heads for the mean and log-variance of
q(z | x); the decoder mirrors it with a linear layer and two 4x4 stride-2 transposed
convolutions, then a sigmoid (images in [0, 1]). The decoder is smooth almost everywhere and has
no normalisation layer, so its Jacobian at a code (the tangent space of the manifold at the
reconstruction, :mod:`~dpkd_audit.pipelines.common.tnar`) is a function of that code alone.

Loss (Kingma and Welling, ICLR 2014, Eq. 10 with one sample): the Bernoulli reconstruction
cross-entropy summed over pixels plus KL(q(z | x) || N(0, I)), averaged over the batch
(:func:`vae_loss`).

The VAE only ever sees synthetic images: it adds no privacy cost of its own beyond that of the
generator whose samples it reads.
"""

from __future__ import annotations

import dataclasses
import math
import time

import torch
import torch.nn.functional as F  # noqa: N812  (conventional alias)
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.devices import resolve_device
from dpkd_audit.pipelines import limits
from dpkd_audit.pipelines.common.progress import TailMeans, progress_counter

__all__ = ["ConvVae", "VaeConfig", "VaeResult", "train_vae", "vae_loss"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class VaeConfig:
    """The VAE and its training.

    Attributes:
        latent_dim: c, the size of a code (>= 1); DGD uses 32.
        width: Channels of the first convolution (>= 1).
        steps: Adam steps (>= 1); DGD uses 500 (batch 128).
        batch_size: Images per step (>= 2).
        learning_rate: Adam's learning rate (> 0), decayed linearly to 0 (DGD: 1e-3).
    """

    latent_dim: int = 32
    width: int = 32
    steps: int = 500
    batch_size: int = 128
    learning_rate: float = 1e-3

    def __post_init__(self) -> None:
        _validate.check_int("latent_dim", self.latent_dim, minimum=1)
        _validate.check_int("width", self.width, minimum=1)
        _validate.check_int("steps", self.steps, minimum=1, maximum=limits.MAX_STEPS)
        _validate.check_int("batch_size", self.batch_size, minimum=2)
        _validate.check_positive("learning_rate", self.learning_rate)


class ConvVae(nn.Module):
    """Encoder ``encode(x) -> (mu, logvar)`` and decoder ``decode(z) -> x`` (see the module doc).

    Args:
        image_shape: ``(h, w)``, both multiples of 4.
        latent_dim: c.
        width: Channels of the first convolution.
        generator: CPU ``torch.Generator`` of the initialisation (no global RNG).
    """

    def __init__(self, *, image_shape: tuple[int, int], latent_dim: int, width: int,
                 generator: torch.Generator) -> None:
        super().__init__()
        if (not isinstance(image_shape, tuple | list) or len(image_shape) != 2
                or any(not isinstance(s, int) or s < 4 or s % 4 for s in image_shape)):
            raise ValueError(f"image_shape must be (h, w) with both sides multiples of 4 and "
                             f">= 4; got {image_shape!r}")
        h, w = image_shape
        self.image_shape = (h, w)
        self.latent_dim = latent_dim
        self.inner = (2 * width, h // 4, w // 4)
        flat = 2 * width * (h // 4) * (w // 4)
        with torch.device("meta"):
            self.encoder = nn.Sequential(
                nn.Conv2d(1, width, 4, stride=2, padding=1), nn.ReLU(),
                nn.Conv2d(width, 2 * width, 4, stride=2, padding=1), nn.ReLU(), nn.Flatten())
            self.mean = nn.Linear(flat, latent_dim)
            self.logvar = nn.Linear(flat, latent_dim)
            self.project = nn.Linear(latent_dim, flat)
            self.decoder = nn.Sequential(
                nn.ReLU(), nn.Unflatten(1, self.inner),
                nn.ConvTranspose2d(2 * width, width, 4, stride=2, padding=1), nn.ReLU(),
                nn.ConvTranspose2d(width, 1, 4, stride=2, padding=1), nn.Sigmoid())
        self.to_empty(device="cpu")
        with torch.no_grad():  # PyTorch's default uniform bounds, drawn from ``generator``
            for module in self.modules():
                if isinstance(module, nn.Conv2d | nn.ConvTranspose2d | nn.Linear):
                    fan_in = module.weight[0].numel() if not isinstance(
                        module, nn.ConvTranspose2d) else module.weight[:, 0].numel()
                    bound = 1.0 / math.sqrt(fan_in)
                    module.weight.uniform_(-bound, bound, generator=generator)
                    module.bias.uniform_(-bound, bound, generator=generator)

    def encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-variance of q(z | x) for images ``(b, 1, h, w)``."""
        features = self.encoder(x)
        return self.mean(features), self.logvar(features).clamp(-12.0, 8.0)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Images ``(b, 1, h, w)`` in [0, 1] from codes ``(b, c)``."""
        return self.decoder(self.project(z))

    def forward(self, x: torch.Tensor, noise: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Reconstruction from ``mu + sigma * noise`` (the reparameterisation), mu, logvar."""
        mu, logvar = self.encode(x)
        z = mu + torch.exp(0.5 * logvar) * noise
        return self.decode(z), mu, logvar


def vae_loss(x: torch.Tensor, reconstruction: torch.Tensor, mu: torch.Tensor,
             logvar: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Negative ELBO per image: Bernoulli cross-entropy (sum over pixels) + KL to N(0, I).

    Kingma and Welling 2014, Eq. 10 and Appendix B: KL = -1/2 sum(1 + logvar - mu^2 - e^logvar).

    Returns:
        The batch mean of the loss and its two terms ``reconstruction`` and ``kl``.
    """
    b = x.shape[0]
    recon = F.binary_cross_entropy(reconstruction.clamp(1e-6, 1 - 1e-6), x,
                                   reduction="sum") / b
    kl = -0.5 * torch.sum(1.0 + logvar - mu.pow(2) - logvar.exp()) / b
    return recon + kl, {"reconstruction": recon, "kl": kl}


@dataclasses.dataclass(frozen=True, kw_only=True)
class VaeResult:
    """A trained VAE (eval mode, on the training device) and its last losses."""

    vae: ConvVae = dataclasses.field(repr=False)
    loss_terms: dict[str, float]
    seconds: float


def train_vae(images: torch.Tensor, *, config: VaeConfig, seed: int,
              device: torch.device | str, progress: bool = True) -> VaeResult:
    """Train a :class:`ConvVae` on ``images`` (float ``(N, 1, h, w)`` in [0, 1]).

    Mini-batches are drawn with replacement; Adam with the learning rate decayed linearly to 0.

    Args:
        images: The synthetic set.
        config: VAE and training.
        seed: Seed (>= 0) of initialisation, mini-batches and the reparameterisation noise.
        device: CPU or CUDA.
        progress: A tqdm bar over steps.

    Raises:
        ValueError: For a bad config, seed or image tensor.
        FloatingPointError: If the loss becomes non-finite.
    """
    start = time.perf_counter()
    if not isinstance(config, VaeConfig):
        raise ValueError(f"config must be a VaeConfig; got {type(config).__name__}")
    _validate.check_int("seed", seed, minimum=0)
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] != 1 \
            or images.shape[0] < 2:
        raise ValueError("images must be a float tensor (N >= 2, 1, h, w); got "
                         f"{getattr(images, 'shape', type(images).__name__)}")
    device = resolve_device(device)
    rng = torch.Generator().manual_seed(seed)
    vae = ConvVae(image_shape=tuple(images.shape[2:]), latent_dim=config.latent_dim,
                  width=config.width, generator=rng).to(device)
    optimizer = torch.optim.Adam(vae.parameters(), lr=config.learning_rate)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: max(0.0, 1.0 - step / config.steps))
    bar = progress_counter(enabled=progress, desc="VAE", total=config.steps, unit="step")
    sums = TailMeans(steps=config.steps)
    vae.train()
    for step in range(config.steps):
        index = torch.randint(images.shape[0], (config.batch_size,), generator=rng)
        x = images[index].to(device)
        noise = torch.randn(config.batch_size, config.latent_dim, generator=rng).to(device)
        loss, terms = vae_loss(x, *vae(x, noise))
        if not torch.isfinite(loss):
            raise FloatingPointError(f"VAE loss became {float(loss.detach())} at step "
                                     f"{step + 1}; lower learning_rate ({config.learning_rate})")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        sums.add(step, terms)
        if step % 20 == 0 or step == config.steps - 1:
            bar.set_postfix(loss=f"{float(loss.detach()):.1f}", refresh=False)
        bar.update(1)
    bar.close()
    vae.eval()
    for p in vae.parameters():
        p.requires_grad_(False)
    return VaeResult(vae=vae, loss_terms=sums.means, seconds=time.perf_counter() - start)
