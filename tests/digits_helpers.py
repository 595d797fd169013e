"""The 8x8 digits split and thread setting shared by the student tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from sklearn.datasets import load_digits


def digits_split() -> dict[str, np.ndarray]:
    """1,000 training and 797 test digits as uint8 images in 0..255 (fixed permutation)."""
    data = load_digits()
    images = np.clip(np.rint(data.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    order = np.random.default_rng(0).permutation(len(images))
    train, test = order[:1000], order[1000:]
    return {"x": images[train], "y": data.target[train].astype(np.int64),
            "xt": images[test], "yt": data.target[test].astype(np.int64)}


@contextmanager
def single_thread() -> Iterator[None]:
    """One torch thread, restored afterwards.

    Tiny 8x8 nets run faster on one thread, and a second OpenMP thread on a busy 2-core
    machine slowed the student tests from about 10 s to minutes.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
