"""Canaries for auditing training runs: mislabeled records, and gradient canaries for DP-SGD.

Mislabeled record canaries (:class:`RecordCanaries`, black box): ``m`` records of the private
split, each given another label (drawn from the seed); an inserted canary stays in the private
set with its wrong label, a left-out one is removed (add/remove-one of a mislabeled record). The
pipeline then runs on that private set through its normal code path; the auditor scores each
canary on the released student (:mod:`~dpkd_audit.pipelines.common.record_audit`).

Gradient canaries (white box):

Steinke, Nasr and Jagielski, NeurIPS 2023, Section 6 ("white-box"): a *Dirac* gradient canary is
a record whose per-sample gradient is ``C e_j`` - the clipping norm on one coordinate ``j`` of
the parameter vector, zero elsewhere - at every step in which Poisson sampling picks it. Each
of ``m`` canaries has its own coordinate and is inserted (a record added to the private set)
independently with probability 1/2 (:func:`~dpkd_audit.audit.training.canary_inclusion`). An
inserted canary is sampled at each step with the same probability q as every real record, and
its gradient goes through Opacus's clipping and noise like theirs, so the run's DP-SGD
guarantee (add/remove-one) covers it: no test-only branch, the pipeline's training loop adds
its rows to the per-sample gradients before the optimizer step.

The score of canary ``j`` (issue 34) reads its coordinate after *every* step (DP-SGD's guarantee
covers releasing every iterate): the step's noisy gradient sum on that coordinate, in units of
C, is ``y_t = 1 + noise`` when the canary was sampled and ``noise`` otherwise, ``noise ~ N(0,
sigma^2)``, recovered from the weights as ``y_t = -(B /
(lr C)) (v_t - momentum v_{t-1})`` with ``v_t`` the step's update. The score is the
log-likelihood ratio of "sampled with probability q at each step" against "never there",
``sum_t log(1 - q + q exp((y_t - 1/2) / sigma^2))``: the Neyman-Pearson statistic of the
subsampled Gaussian mechanism the accountant composes. The sum of the updates,
``theta_0[j] - theta_T[j]`` (the score before issue 34, :meth:`GradientCanaryInjector.
sum_scores`), averages the few sampled steps' spikes away with the noise of every other step:
on the MNIST sound teacher it separated the inserted canaries by half a noise standard
deviation, 70 of 100 guesses right.

Where the coordinates are (:class:`CanaryPlacement`): by default on a :class:`CanaryTap`, weights
that read an all-zero input, so that ``y_t`` is exactly the canary's row plus DP-SGD's noise.
On coordinates of the model itself (``placement="model"``, the only placement before) real
records' clipped gradients add to ``y_t`` a drift and a variance the score does not model
(benchmarks/dp_sgd_canary_signal.py measures both).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.audit.training import MIN_CANARIES, canary_inclusion
from dpkd_audit.data import Dataset

__all__ = ["CanaryPlacement", "CanaryTap", "GradientCanaries", "GradientCanaryInjector",
           "RecordCanaries"]


class CanaryPlacement(enum.StrEnum):
    """Where the Dirac gradient canaries' coordinates are.

    ``dedicated`` (default): the weights of a :class:`CanaryTap`, a linear map of an input that
    is zero for every real record, so no real record's gradient touches them and each step's
    update there is the canaries' rows plus DP-SGD's noise only. ``model``: uniformly drawn
    coordinates of the model's own parameters (before the fix): real records' clipped gradients
    there add their variance and drift to the noise the score assumes (measured in
    benchmarks/dp_sgd_canary_signal.py).
    """

    DEDICATED = "dedicated"
    MODEL = "model"


class CanaryTap(nn.Module):
    """``model(x) + W z`` with ``z = 0``: parameters for gradient canaries that data never moves.

    ``W`` (``num_classes x ceil(count / num_classes)``, zero-initialised, no bias) reads an
    all-zero input, so the outputs are the model's exactly and every real record's per-sample
    gradient of ``W`` is zero (Opacus computes it as backprops x activations = 0): its clipping
    norm, and so the clipping of its other coordinates, is the model's. DP-SGD still noises
    ``W`` like every parameter, and the canaries' Dirac rows ``C e_j`` land on its entries: the
    white-box view of a canary's coordinate is then exactly ``1{sampled} + N(0, sigma^2)`` per
    step (units of C), the mechanism the accountant composes. The same idea as the zero input
    feature of benchmarks/dp_sgd_many_runs.py (and the unused coordinates of Steinke, Nasr and
    Jagielski 2023's white-box audit).

    Args:
        model: The model being trained.
        count: How many canary coordinates ``W`` must hold (>= 1).
        num_classes: The model's outputs.
    """

    def __init__(self, model: nn.Module, count: int, num_classes: int) -> None:
        super().__init__()
        self.model = model
        self.inputs = -(-_validate.check_int("count", count, minimum=1) // num_classes)
        self.tap = nn.Linear(self.inputs, num_classes, bias=False,
                             device=next(model.parameters()).device)
        with torch.no_grad():
            self.tap.weight.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x) + self.tap(x.new_zeros((x.shape[0], self.inputs)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class _CanarySet:
    """``count`` canaries whose inclusion (and the rest of their draw) comes from ``seed``."""

    count: int
    seed: int = 0

    def __post_init__(self) -> None:
        _validate.check_int("count", self.count, minimum=MIN_CANARIES)
        _validate.check_int("seed", self.seed, minimum=0)

    @property
    def included(self) -> np.ndarray:
        """Boolean ``(count,)``: which canaries are inserted (each with probability 1/2)."""
        return canary_inclusion(self.count, seed=self.seed)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordCanaries(_CanarySet):
    """Mislabeled record canaries of a private split (deterministic from ``seed``).

    Attributes:
        count: m, the number of canaries (>= 2).
        seed: Seed of the records chosen, their wrong labels and their inclusion.
    """

    def choose(self, labels: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
        """``(indices, wrong_labels)``: distinct records of the split and their new labels.

        Raises:
            ValueError: If the split has fewer records than ``2 * count`` (half of it must
                stay real data).
        """
        n = int(np.asarray(labels).shape[0])
        if n < 2 * self.count:
            raise ValueError(f"canaries ({self.count}) must be at most half of the private "
                             f"split's {n} records")
        rng = np.random.default_rng([self.seed, 0xCA4A, 5])
        indices = np.sort(rng.choice(n, size=self.count, replace=False))
        shift = 1 + rng.integers(num_classes - 1, size=self.count)
        return indices, (np.asarray(labels)[indices] + shift) % num_classes

    def insert(self, dataset: Dataset) -> tuple[Dataset, np.ndarray, np.ndarray, np.ndarray]:
        """The private split with the inserted canaries relabelled and the others removed.

        Returns:
            ``(dataset, images, true_labels, wrong_labels)``: the new dataset (test split
            unchanged) and every canary's image and labels (to score them afterwards).
        """
        indices, wrong = self.choose(dataset.train_labels, dataset.num_classes)
        labels = np.array(dataset.train_labels)
        labels[indices] = wrong
        keep = np.ones(labels.shape[0], dtype=bool)
        keep[indices[~self.included]] = False
        changed = dataclasses.replace(dataset, train_images=np.array(dataset.train_images)[keep],
                                      train_labels=labels[keep])
        return (changed, np.array(dataset.train_images[indices]),
                np.array(dataset.train_labels[indices]), wrong)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GradientCanaries(_CanarySet):
    """Which Dirac gradient canaries a DP-SGD run carries (deterministic from ``seed``).

    Attributes:
        count: m, the number of canaries (>= 2).
        seed: Seed of their inclusion, their coordinates and their Poisson sampling.
        placement: Where their coordinates are (:class:`CanaryPlacement`; ``dedicated`` by
            default: a :class:`CanaryTap` that no real record's gradient touches).
    """

    placement: CanaryPlacement = CanaryPlacement.DEDICATED

    def __post_init__(self) -> None:
        super().__post_init__()
        try:
            placement = CanaryPlacement(self.placement)
        except ValueError:
            allowed = ", ".join(p.value for p in CanaryPlacement)
            raise ValueError(f"placement must be one of {allowed}; got "
                             f"{self.placement!r}") from None
        object.__setattr__(self, "placement", placement)

    def coordinates(self, num_parameters: int) -> np.ndarray:
        """Distinct flat parameter indices, one per canary (uniform, from ``seed``).

        Raises:
            ValueError: If the model has fewer parameters than canaries.
        """
        if num_parameters < self.count:
            raise ValueError(f"canaries ({self.count}) must not outnumber the model's "
                             f"{num_parameters} parameters (one coordinate each)")
        rng = np.random.default_rng([self.seed, 0xCA4A, 3])
        return np.sort(rng.choice(num_parameters, size=self.count, replace=False))


class GradientCanaryInjector:
    """Adds the sampled canaries' gradient rows to Opacus's per-sample gradients, each step.

    Args:
        canaries: The canaries.
        params: The optimizer's parameters in order (the flat vector the coordinates index).
        sampling_probability: q, the Poisson rate of every record.
        clip_norm: C; each canary's gradient is ``C e_j``.
        within: The parameter (one of ``params``) whose entries hold the coordinates (a
            :class:`CanaryTap`'s weight); ``None``: all of ``params``.
    """

    def __init__(self, canaries: GradientCanaries, params: Sequence[torch.nn.Parameter], *,
                 sampling_probability: float, clip_norm: float,
                 within: torch.nn.Parameter | None = None) -> None:
        self.canaries = canaries
        self.params = [p for p in params if p.requires_grad]
        sizes = [p.numel() for p in self.params]
        if within is None:
            self.coordinates = canaries.coordinates(int(sum(sizes)))
        else:
            found = [i for i, p in enumerate(self.params) if p is within]
            if not found:
                raise ValueError("within must be one of the optimizer's trainable parameters")
            start = int(sum(sizes[:found[0]]))
            self.coordinates = start + canaries.coordinates(within.numel())
        self.included = canaries.included
        self.q = _validate.check_probability("sampling_probability", sampling_probability,
                                             open_low=True)
        self.clip_norm = _validate.check_positive("clip_norm", clip_norm)
        offsets = np.cumsum([0, *sizes])
        owner = np.searchsorted(offsets, self.coordinates, side="right") - 1
        self._where = [(int(o), int(c - offsets[o])) for o, c in zip(owner, self.coordinates,
                                                                    strict=True)]
        self._rng = np.random.default_rng([canaries.seed, 0xCA4A, 4])
        self._gather = []  # per parameter: (local indices, positions among the canaries)
        for index, p in enumerate(self.params):
            mine = [(r, local) for r, (owner, local) in enumerate(self._where) if owner == index]
            if mine:
                pos, local = zip(*mine, strict=True)
                self._gather.append((index, torch.tensor(local, device=p.device),
                                     np.array(pos)))
        self.initial = self.flat_values()
        self.trajectory: list[np.ndarray] = [self.initial]
        self.samples = 0

    def flat_values(self) -> np.ndarray:
        """The canaries' coordinates of the current parameters (float64)."""
        out = np.empty(len(self._where), dtype=np.float64)
        for index, local, pos in self._gather:
            values = self.params[index].detach().reshape(-1)[local]
            out[pos] = values.to(torch.float64).cpu().numpy()
        return out

    def record_step(self) -> None:
        """Keep the canaries' coordinates after an optimizer step (the white-box iterates)."""
        self.trajectory.append(self.flat_values())

    def add_rows(self) -> int:
        """Poisson-sample the inserted canaries and append their rows; returns how many."""
        picked = np.flatnonzero(self.included & (self._rng.random(self.included.size) < self.q))
        if picked.size == 0:
            return 0
        for index, p in enumerate(self.params):
            rows = torch.zeros((picked.size, *p.shape), dtype=p.dtype, device=p.device)
            flat = rows.view(picked.size, -1)
            for r, j in enumerate(picked):
                owner, local = self._where[j]
                if owner == index:
                    flat[r, local] = self.clip_norm
            existing = getattr(p, "grad_sample", None)
            if isinstance(existing, list):
                existing = torch.cat(existing) if existing else None
            p.grad_sample = rows if existing is None else torch.cat([existing, rows])
        self.samples += int(picked.size)
        return int(picked.size)

    def sum_scores(self) -> np.ndarray:
        """``theta_0[j] - theta_T[j]`` per canary: the sum of the updates (before issue 34)."""
        return self.initial - self.flat_values()

    def scores(self, *, noise_multiplier: float, learning_rate: float, momentum: float,
               batch_size: float) -> np.ndarray:
        """Log-likelihood-ratio score per canary from the recorded iterates (module docstring).

        Args:
            noise_multiplier: sigma (the noise's standard deviation over C).
            learning_rate: The SGD learning rate.
            momentum: The SGD momentum.
            batch_size: The batch size the optimizer divides the noisy sum by (Opacus's
                ``expected_batch_size``).

        Raises:
            ValueError: If no step was recorded (:meth:`record_step`).
        """
        if len(self.trajectory) < 2:
            raise ValueError("no step recorded: call record_step() after each optimizer step")
        sigma = _validate.check_positive("noise_multiplier", noise_multiplier)
        theta = np.stack(self.trajectory)  # (T + 1, m)
        velocity = -np.diff(theta, axis=0) / learning_rate  # v_t = momentum v_{t-1} + g_t
        grads = velocity.copy()
        grads[1:] -= momentum * velocity[:-1]
        y = grads * (batch_size / self.clip_norm)  # 1 + noise when sampled, noise otherwise
        a = (y - 0.5) / (sigma * sigma)
        per_step = np.logaddexp(math.log1p(-self.q), math.log(self.q) + a) if self.q < 1 \
            else a
        return per_step.sum(axis=0)
