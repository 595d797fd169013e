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
its gradient is clipped, summed and noised like theirs, so the run's DP-SGD guarantee
(add/remove-one) covers it: no test-only branch. The pipeline's training loop adds each sampled
canary's row ``C e_j`` - of norm C, so clipping leaves it as it is - to the clipped sum Opacus
forms, before Opacus adds the noise (:class:`GradientCanaryInjector`; a step equals the one with
the rows appended to the per-sample gradients, tested), at the cost of the sampled coordinates
only, so that 100,000 canaries cost what 1,000 did.

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
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from dpkd_audit import _validate
from dpkd_audit.audit.training import MIN_CANARIES, canary_inclusion
from dpkd_audit.data import Dataset
from dpkd_audit.training_audit.participation import PoissonParticipation, poisson_step_log_ratio

__all__ = ["MAX_CANARIES", "CanaryPlacement", "CanaryScoring", "CanaryTap", "GradientCanaries",
           "GradientCanaryInjector", "RecordCanaries", "locate_coordinates"]

#: Most canaries of one audit (the committed audits take 100,000): their inclusion, coordinates
#: and scores are arrays of this length, and a dedicated tap holds one weight per canary. The
#: same as :data:`dpkd_audit.pipelines.limits.MAX_CANARIES` (``dpkd audit-run --canaries``).
MAX_CANARIES = 10_000_000


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
        _validate.check_int("count", self.count, minimum=MIN_CANARIES, maximum=MAX_CANARIES)
        _validate.check_int("seed", self.seed, minimum=0)

    @property
    def included(self) -> np.ndarray:
        """Boolean ``(count,)``: which canaries are inserted (each with probability 1/2)."""
        return canary_inclusion(self.count, seed=self.seed)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RecordCanaries(_CanarySet):
    """Mislabeled record canaries of a private split (deterministic from ``seed``).

    Attributes:
        count: m, the number of canaries (in [2, :data:`MAX_CANARIES`]).
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
        count: m, the number of canaries (in [2, :data:`MAX_CANARIES`]).
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class CanaryScoring:
    """What turns a canary coordinate's iterates back into each step's noisy gradient sum.

    Attributes:
        noise_multiplier: sigma (the noise's standard deviation over C).
        learning_rate: The SGD learning rate.
        momentum: The SGD momentum.
        batch_size: The batch size the optimizer divides the noisy sum by (Opacus's
            ``expected_batch_size``).
    """

    noise_multiplier: float
    learning_rate: float
    momentum: float
    batch_size: float

    def __post_init__(self) -> None:
        _validate.check_positive("noise_multiplier", self.noise_multiplier)
        _validate.check_positive("learning_rate", self.learning_rate)
        _validate.check_probability("momentum", self.momentum, open_high=True)
        _validate.check_positive("batch_size", self.batch_size)


def locate_coordinates(coordinates: np.ndarray, params: Sequence[torch.nn.Parameter]
                       ) -> tuple[np.ndarray, np.ndarray,
                                  list[tuple[int, torch.Tensor, np.ndarray]]]:
    """Where flat coordinates of ``params`` (in order) live.

    Returns:
        ``(owner, local, gather)``: each coordinate's parameter index and index within it, and
        per parameter holding some, ``(parameter index, local indices as a tensor on its
        device, positions among the coordinates)``.
    """
    offsets = np.cumsum([0, *(p.numel() for p in params)])
    owner = np.searchsorted(offsets, coordinates, side="right") - 1
    local = coordinates - offsets[owner]
    gather = []
    for index, p in enumerate(params):
        pos = np.flatnonzero(owner == index)
        if pos.size:
            gather.append((index, torch.as_tensor(local[pos], device=p.device), pos))
    return owner, local, gather


class GradientCanaryInjector:
    """Adds the sampled canaries' clipped gradients to Opacus's clipped sum, each step.

    Each step, :meth:`sample` Poisson-samples the inserted canaries (rate q); the injector,
    attached to the DP optimizer (:meth:`attach`), adds ``C e_j`` for each sampled canary ``j``
    to the clipped per-sample gradient sum that Opacus's ``clip_and_accumulate`` leaves in
    ``summed_grad``, before Opacus adds the noise and scales by the expected batch size. A
    Dirac row has norm exactly C, so clipping leaves it unchanged: this is the sum Opacus
    would form had the rows been appended to the per-sample gradients (the injector before
    issue 34's 100,000-canary audits did that, with dense rows of every parameter: 214 MB a
    step at m = 100,000; Opacus's clip factor ``C / (C + 1e-6)`` scaled them by 1 - 1e-6),
    at the cost of the sampled canaries' coordinates only. The noise, its generator and the
    division by the expected batch size stay Opacus's.

    With ``scoring``, :meth:`record_step` accumulates each canary's log-likelihood-ratio score
    as the run goes (module docstring), so a run of T steps keeps O(m) numbers, not the
    ``(T + 1) x m`` trajectory; ``keep_trajectory`` also keeps the iterates (benchmarks).

    Args:
        canaries: The canaries.
        params: The optimizer's parameters in order (the flat vector the coordinates index).
        sampling_probability: q, the Poisson rate of every record.
        clip_norm: C; each canary's gradient is ``C e_j``.
        within: The parameter (one of ``params``) whose entries hold the coordinates (a
            :class:`CanaryTap`'s weight); ``None``: all of ``params``.
        scoring: How to score the iterates while the run goes (:meth:`scores`); ``None``:
            keep the trajectory and score it afterwards with :meth:`scores_from_trajectory`.
        keep_trajectory: Keep every step's canary coordinates (default: when ``scoring`` is
            ``None``).
    """

    def __init__(self, canaries: GradientCanaries, params: Sequence[torch.nn.Parameter], *,
                 sampling_probability: float, clip_norm: float,
                 within: torch.nn.Parameter | None = None, scoring: CanaryScoring | None = None,
                 keep_trajectory: bool | None = None) -> None:
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
        if scoring is not None and not isinstance(scoring, CanaryScoring):
            raise ValueError(f"scoring must be CanaryScoring or None; got "
                             f"{type(scoring).__name__}")
        self.scoring = scoring
        self._owner, self._local, self._gather = locate_coordinates(self.coordinates,
                                                                    self.params)
        self._participation = PoissonParticipation(self.included, sampling_probability=self.q,
                                                   seed=canaries.seed)
        self._picked = np.empty(0, dtype=np.int64)
        self.initial = self.flat_values()
        self.keep_trajectory = scoring is None if keep_trajectory is None else keep_trajectory
        self.trajectory: list[np.ndarray] = [self.initial] if self.keep_trajectory else []
        self._previous = self.initial
        self._velocity: np.ndarray | None = None
        self._scores = np.zeros(self.initial.size)
        self.steps = 0
        self.samples = 0

    def flat_values(self) -> np.ndarray:
        """The canaries' coordinates of the current parameters (float64)."""
        out = np.empty(self.coordinates.size, dtype=np.float64)
        for index, local, pos in self._gather:
            values = self.params[index].detach().reshape(-1)[local]
            out[pos] = values.to(torch.float64).cpu().numpy()
        return out

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Make ``optimizer`` (Opacus's DP optimizer over ``params``) add the sampled canaries.

        Wraps the optimizer's ``clip_and_accumulate`` so that, after Opacus clips and sums the
        real records' per-sample gradients, the canaries :meth:`sample` picked this step add
        ``C`` on their coordinates of ``summed_grad`` (before the noise).

        Raises:
            ValueError: If the optimizer has no ``clip_and_accumulate`` (not Opacus's).
        """
        clip = getattr(optimizer, "clip_and_accumulate", None)
        if clip is None:
            raise ValueError("optimizer must be Opacus's DPOptimizer (no clip_and_accumulate)")

        def clip_and_accumulate() -> None:
            clip()
            self.add_to_sums()

        optimizer.clip_and_accumulate = clip_and_accumulate

    def sample(self) -> int:
        """Poisson-sample the inserted canaries for the coming step; returns how many.

        On an empty real batch, gives every parameter an empty per-sample gradient, so that
        Opacus's step still adds the canaries and the noise.
        """
        self._picked = self._participation.draw()
        for p in self.params:
            if getattr(p, "grad_sample", None) is None:
                p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype, device=p.device)
        self.samples += int(self._picked.size)
        return int(self._picked.size)

    def add_to_sums(self) -> None:
        """Add ``C`` to each sampled canary's coordinate of ``summed_grad`` (once a step)."""
        picked, self._picked = self._picked, np.empty(0, dtype=np.int64)
        for index in np.unique(self._owner[picked]):
            p = self.params[int(index)]
            local = self._local[picked[self._owner[picked] == index]]
            summed = p.summed_grad.view(-1)
            summed[torch.as_tensor(local, device=p.device)] += self.clip_norm

    def record_step(self) -> None:
        """Read the canaries' coordinates after an optimizer step (the white-box iterates)."""
        theta = self.flat_values()
        self.steps += 1
        if self.keep_trajectory:
            self.trajectory.append(theta)
        if self.scoring is not None:
            s = self.scoring
            velocity = (self._previous - theta) / s.learning_rate  # v_t = mom v_{t-1} + g_t
            grads = velocity if self._velocity is None \
                else velocity - s.momentum * self._velocity
            self._scores += self._step_scores(grads * (s.batch_size / self.clip_norm),
                                              s.noise_multiplier)
            self._velocity = velocity
        self._previous = theta

    def _step_scores(self, y: np.ndarray, sigma: float) -> np.ndarray:
        """One step's log-likelihood ratio (``poisson_step_log_ratio``)."""
        return poisson_step_log_ratio(y, self.q, sigma)

    def sum_scores(self) -> np.ndarray:
        """``theta_0[j] - theta_T[j]`` per canary: the sum of the updates (before issue 34)."""
        return self.initial - self.flat_values()

    def scores(self) -> np.ndarray:
        """Log-likelihood-ratio score per canary, accumulated by :meth:`record_step`.

        Raises:
            ValueError: If the injector has no ``scoring`` or no step was recorded.
        """
        if self.scoring is None:
            raise ValueError("scores() needs the injector's scoring; without it use "
                             "scores_from_trajectory()")
        if self.steps == 0:
            raise ValueError("no step recorded: call record_step() after each optimizer step")
        return self._scores.copy()

    def scores_from_trajectory(self, scoring: CanaryScoring) -> np.ndarray:
        """The same scores from the kept iterates (``keep_trajectory``), for any ``scoring``.

        Raises:
            ValueError: If no trajectory was kept or no step was recorded.
        """
        if len(self.trajectory) < 2:
            raise ValueError("no trajectory: keep_trajectory=True and record_step() after "
                             "each optimizer step")
        theta = np.stack(self.trajectory)  # (T + 1, m)
        velocity = -np.diff(theta, axis=0) / scoring.learning_rate
        grads = velocity.copy()
        grads[1:] -= scoring.momentum * velocity[:-1]
        y = grads * (scoring.batch_size / self.clip_norm)  # 1 + noise when sampled, else noise
        return self._step_scores(y, scoring.noise_multiplier).sum(axis=0)
