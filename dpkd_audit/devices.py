"""Torch device selection with clear errors, and a one-line description for reports."""

from __future__ import annotations

import os

import torch

__all__ = ["describe_device", "resolve_device"]


def resolve_device(name: str | torch.device | None) -> torch.device:
    """The torch device for ``name`` ("cpu", "cuda", "cuda:1", "auto" or None = "cpu").

    "auto" picks CUDA when available, else CPU.

    Raises:
        ValueError: For an unknown device string, or CUDA requested where torch cannot use it.
    """
    if isinstance(name, torch.device):
        name = str(name)
    if name is None:
        name = "cpu"
    if not isinstance(name, str):
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto'; got {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto'; got "
                         f"{name!r}") from None
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N' or 'auto'; got {name!r}")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device={name!r} was requested but torch cannot use CUDA here "
                             f"(torch {torch.__version__}, torch.cuda.is_available() is False); "
                             "use --device cpu")
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"device={name!r}: only {torch.cuda.device_count()} CUDA device(s) "
                             "are visible")
    return device


def describe_device(device: torch.device) -> str:
    """E.g. ``"cuda:0 (NVIDIA H100 80GB HBM3)"`` or ``"cpu (2 threads, 2 cores)"``."""
    if device.type == "cuda":
        index = device.index or 0
        return f"cuda:{index} ({torch.cuda.get_device_name(index)})"
    return f"cpu ({torch.get_num_threads()} threads, {os.cpu_count()} cores)"
