"""Models that start with a fixed, parameter-free transform (a "frontend").

A model with a ``frontend`` module (no parameters, reads no data: e.g. the scattering transform
of :mod:`~dpkd_audit.pipelines.common.scattering`) and a ``forward_features`` method computes
``forward(x) == forward_features(frontend(x))``. Training loops whose inputs are a fixed set
of images (no augmentation, no input perturbation) compute the frontend once per image and
train on its output: the same function, the same gradients, a fraction of the time.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["FeatureHead", "fixed_frontend", "frontend_features"]


def fixed_frontend(model: nn.Module) -> nn.Module | None:
    """``model.frontend`` when the model has a parameter-free one and ``forward_features``."""
    if isinstance(model, FeatureHead):
        return None
    frontend = getattr(model, "frontend", None)
    if not isinstance(frontend, nn.Module) or not callable(
            getattr(model, "forward_features", None)):
        return None
    if any(True for _ in frontend.parameters()):
        raise ValueError(f"{type(model).__name__}.frontend must have no parameters (a fixed "
                         "transform); it has some")
    return frontend


def frontend_features(frontend: nn.Module, x: torch.Tensor, *, device: torch.device | None = None,
                      chunk: int = 1024) -> torch.Tensor:
    """``frontend(x)`` in chunks of ``chunk`` rows, without gradients.

    On ``device`` (``x``'s device when ``None``).
    """
    device = x.device if device is None else torch.device(device)
    frontend = frontend.to(device)
    with torch.inference_mode():
        out = [frontend(x[i:i + chunk].to(device)) for i in range(0, x.shape[0], chunk)]
    return torch.cat(out) if out else frontend(x[:0].to(device))


class FeatureHead(nn.Module):
    """A model with a fixed frontend, read from the frontend's precomputed output.

    Its parameters are the wrapped model's (the frontend has none), so training it trains the
    model.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.model.forward_features(features)
