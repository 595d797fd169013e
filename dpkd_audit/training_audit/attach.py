"""Audit your own Opacus training in one run: gradient canaries attached to an unchanged loop.

Three lines around a training loop written as Opacus's examples write it::

    audit = OpacusAudit(canaries=100_000, epochs=10, delta=1e-5)
    model, optimizer, train_loader = audit.make_private(   # was privacy_engine.make_private(
        privacy_engine, module=model, optimizer=optimizer, data_loader=train_loader,
        noise_multiplier=1.0, max_grad_norm=1.0)
    ...                                                     # the loop, unchanged
    result = audit.finish()                                 # analyses, claims, record
    result.save("runs/audit")                               # audit.json for `dpkd report`

Before the first step :func:`~dpkd_audit.training_audit.sampler_check.check_sampler` says which
sampler runs and whether the accountant matches it (one warning per mismatch; refused under
``strict=True``). Then ``m`` Dirac gradient canaries (Steinke, Nasr and Jagielski, NeurIPS
2023, white box), each inserted with probability 1/2, join the run as the sampler that runs
would draw records (:mod:`~dpkd_audit.training_audit.participation`): their rows ``C e_j`` are
added to Opacus's clipped gradient sum before Opacus adds its noise, on *dedicated*
coordinates - one tensor of ``m`` entries, registered with the optimizer as one more parameter
group, that no record's gradient touches and the model never reads. Opacus noises and
normalises that tensor like every parameter (its own ``add_noise`` and ``scale_grad``, its own
generator), so each step's reading of a canary's coordinate is exactly ``1{joined} + N(0,
sigma^2)`` in units of C: the mechanism the accountant composes. Per-sample gradients are never
computed for it, so 100,000 canaries cost what 1,000 do (the noise and an O(m) score update per
step).

At :meth:`OpacusAudit.finish` the canaries' log-likelihood-ratio scores give the one-run
analyses side by side - Steinke et al.'s bound, the f-DP bound (Mahloujifar, Melis, Chaudhuri
2025), the Gaussian estimate (Agrawal et al. 2026) - tested against the epsilon Opacus reports
and against the bound of the sampler that actually ran (:mod:`~dpkd_audit.accountants.
dp_sgd_sampling`).
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from typing import Any

import numpy as np
import torch

from dpkd_audit import _validate
from dpkd_audit.accountants.dp_sgd import poisson_epsilon
from dpkd_audit.accountants.dp_sgd_sampling import sampling_epsilon
from dpkd_audit.audit.training import MIN_RUNS, many_run_bound, one_run_bound
from dpkd_audit.training_audit.canaries import (
    CanaryPlacement,
    GradientCanaries,
    locate_coordinates,
)
from dpkd_audit.training_audit.config import AuditConfig
from dpkd_audit.training_audit.participation import (
    AllocationParticipation,
    PoissonParticipation,
    poisson_step_log_ratio_f32,
)
from dpkd_audit.training_audit.result import OpacusAuditResult
from dpkd_audit.training_audit.sampler_check import (
    Mismatch,
    MismatchKind,
    SamplerKind,
    SamplerMismatchError,
    SamplerReport,
    _sampler_of,
    check_sampler,
    schedule_for,
)

__all__ = ["AuditConfig", "OpacusAudit", "SamplerMismatchWarning"]

class SamplerMismatchWarning(UserWarning):
    """The accountant does not match the sampler the code runs (see the message)."""


class OpacusAudit:
    """A one-run audit attached to a user's Opacus training (see the module docstring).

    Args:
        config: The :class:`AuditConfig`; or give its fields as keyword arguments.
    """

    def __init__(self, config: AuditConfig | None = None, **kwargs: Any) -> None:
        if config is not None and kwargs:
            raise ValueError("give either config or its fields as keyword arguments, not both")
        if config is not None and not isinstance(config, AuditConfig):
            raise ValueError(f"config must be an AuditConfig; got {type(config).__name__}")
        self.config = config if config is not None else AuditConfig(**kwargs)
        self.canaries = GradientCanaries(count=self.config.canaries, seed=self.config.seed,
                                         placement=self.config.placement)
        self.report: SamplerReport | None = None
        self._optimizer: Any = None
        self._engine: Any = None
        self._originals: dict[str, Any] = {}
        self._finished = False

    # ------------------------------------------------------------------ entry points

    def make_private(self, privacy_engine: Any, **kwargs: Any) -> Any:
        """``privacy_engine.make_private(**kwargs)``, checked and with the canaries attached.

        Bad input is refused before Opacus runs: a loader Opacus cannot wrap, a ghost-clipping
        mode (no per-sample gradients to add the canaries beside), too few parameters for
        ``placement="model"``. Returns what Opacus returns.
        """
        return self._make_private(privacy_engine, "make_private", kwargs)

    def make_private_with_epsilon(self, privacy_engine: Any, **kwargs: Any) -> Any:
        """``privacy_engine.make_private_with_epsilon(**kwargs)``, as :meth:`make_private`.

        Its ``epochs`` argument also becomes the sampler check's planned epochs.
        """
        return self._make_private(privacy_engine, "make_private_with_epsilon", kwargs)

    def _make_private(self, engine: Any, method: str, kwargs: dict[str, Any]) -> Any:
        self._refuse_reuse()
        loader = kwargs.get("data_loader")
        if loader is None:
            raise ValueError(f"{method} needs data_loader= (the loader to train on)")
        _sampler_of(loader)  # refuses a loader Opacus cannot wrap, naming it
        mode = kwargs.get("grad_sample_mode", "hooks")
        if mode not in ("hooks", "functorch", "ew"):
            raise ValueError(f"grad_sample_mode must be 'hooks', 'functorch' or 'ew' for a "
                             f"canary audit; got {mode!r} (ghost clipping computes no "
                             "per-sample gradients to add the canaries beside)")
        module = kwargs.get("module")
        if self.config.placement is CanaryPlacement.MODEL and module is not None:
            self.canaries.coordinates(sum(p.numel() for p in module.parameters()
                                          if p.requires_grad))
        if method == "make_private_with_epsilon" and self.config.epochs is None:
            self.config = dataclasses.replace(self.config, epochs=int(kwargs.get("epochs", 0))
                                              or None)
        result = getattr(engine, method)(**kwargs)
        self.attach(engine, result[1], result[-1], original_loader=loader)
        return result

    def attach(self, privacy_engine: Any, optimizer: Any, data_loader: Any, *,
               original_loader: Any = None) -> SamplerReport:
        """Check the sampler and attach the canaries to an optimizer ``make_private`` returned.

        Args:
            privacy_engine: The ``PrivacyEngine`` (its accountant gives the claim), or ``None``.
            optimizer: Opacus's ``DPOptimizer``.
            data_loader: The loader the training loop iterates (``make_private``'s).
            original_loader: The loader given to ``make_private``, if known (reveals a
                replaced ``WeightedRandomSampler`` and the batch size behind q).

        Returns:
            The :class:`~dpkd_audit.training_audit.sampler_check.SamplerReport`.

        Raises:
            ValueError: For an optimizer that is not Opacus's plain ``DPOptimizer``, an audit
                attached twice, or too few parameters for ``placement="model"``.
            SamplerMismatchError: Under ``strict``, when the accountant does not match.
        """
        from opacus.optimizers import DPOptimizer

        self._refuse_reuse()
        if type(optimizer) is not DPOptimizer:
            raise ValueError(f"optimizer must be Opacus's DPOptimizer (make_private's); got "
                             f"{type(optimizer).__name__} (per-layer, distributed and ghost-"
                             "clipping optimizers are not supported)")
        if getattr(optimizer, "_dpkd_audit", None) is not None:
            raise ValueError("this optimizer already carries a canary audit")
        report = check_sampler(data_loader, optimizer, privacy_engine,
                               original_loader=original_loader, epochs=self.config.epochs,
                               delta=self.config.delta)
        if not report.ok:
            if self.config.strict:
                raise SamplerMismatchError(report)
            warnings.warn(report.message(), SamplerMismatchWarning, stacklevel=2)
        real = list(optimizer.params)
        if not real:
            raise ValueError("optimizer has no trainable parameters")
        self._install(optimizer, real, report)
        self._engine = privacy_engine
        self.report = report
        return report

    # ------------------------------------------------------------------ the hooks

    def _install(self, optimizer: Any, real: list[torch.nn.Parameter],
                 report: SamplerReport) -> None:
        m = self.canaries.count
        first = real[0]
        self._clip = float(optimizer.max_grad_norm)
        self._sigma = float(optimizer.noise_multiplier)
        self._included = self.canaries.included
        if self.config.placement is CanaryPlacement.DEDICATED:
            self._tap = torch.nn.Parameter(torch.zeros(m, dtype=first.dtype, device=first.device))
            self._rows_buffer = torch.zeros_like(self._tap.detach())
            self._empty_sample = torch.zeros((0, m), dtype=first.dtype, device=first.device)
            self._last_picked: torch.Tensor | None = None
            optimizer.original_optimizer.add_param_group({"params": [self._tap]})
            self._group = optimizer.original_optimizer.param_groups[-1]
            self._where: list[tuple[torch.nn.Parameter, torch.Tensor, np.ndarray]] = [
                (self._tap, torch.arange(m, device=first.device), np.arange(m))]
        else:
            self._tap = None
            self._group = None
            coords = self.canaries.coordinates(int(sum(p.numel() for p in real)))
            _, _, gather = locate_coordinates(coords, real)
            self._where = [(real[index], local, pos) for index, local, pos in gather]
        self._real = real
        self._q = report.sample_rate
        self._t = report.steps_per_epoch
        if report.sampler in (SamplerKind.SHUFFLE, SamplerKind.SEQUENTIAL):
            self._participation: Any = AllocationParticipation(
                self._included, steps_per_epoch=self._t, seed=self.canaries.seed,
                fixed=report.sampler is SamplerKind.SEQUENTIAL, crowd=self.config.crowd,
                noise_multiplier=self._sigma)
        else:
            self._participation = PoissonParticipation(
                self._included, sampling_probability=self._q, seed=self.canaries.seed,
                fast=True)
        self._scores = np.zeros(m)
        self._steps = 0
        self._rows = 0
        self._batch_sizes: list[int] = []
        self._overhead = 0.0
        self._started = time.perf_counter()
        self._initial = self._values()
        self._optimizer = optimizer
        originals = {name: getattr(optimizer, name)
                     for name in ("pre_step", "clip_and_accumulate", "add_noise", "scale_grad")}
        self._originals = originals

        def pre_step(closure: Any = None) -> Any:
            start = time.perf_counter()
            self._mark_grad_sample()
            self._overhead += time.perf_counter() - start
            return originals["pre_step"](closure)

        def clip_and_accumulate() -> None:
            start = time.perf_counter()
            self._observe_batch()
            if self._group is None:
                self._overhead += time.perf_counter() - start
                originals["clip_and_accumulate"]()
                return
            groups = optimizer.original_optimizer.param_groups
            index = next(i for i, g in enumerate(groups) if g is self._group)
            groups.pop(index)  # the canaries' tensor has no per-sample gradients to clip
            self._overhead += time.perf_counter() - start
            try:
                originals["clip_and_accumulate"]()
            finally:
                groups.insert(index, self._group)

        def add_noise() -> None:
            start = time.perf_counter()
            self._add_rows()
            self._overhead += time.perf_counter() - start
            originals["add_noise"]()

        def scale_grad() -> None:
            originals["scale_grad"]()
            start = time.perf_counter()
            self._read(optimizer)
            self._overhead += time.perf_counter() - start

        optimizer.pre_step = pre_step
        optimizer.clip_and_accumulate = clip_and_accumulate
        optimizer.add_noise = add_noise
        optimizer.scale_grad = scale_grad
        optimizer._dpkd_audit = self

    def _mark_grad_sample(self) -> None:
        """Give the canaries' tensor a per-sample-gradient marker of the real ones' type."""
        if self._tap is None:
            return
        reference = self._real[0].grad_sample
        empty = self._empty_sample
        self._tap.grad_sample = ([empty] * len(reference) if isinstance(reference, list)
                                 else empty)

    def _observe_batch(self) -> None:
        sample = self._real[0].grad_sample
        if isinstance(sample, list):
            size = sum(int(s.shape[0]) for s in sample)
        elif sample is None:
            return
        else:
            size = int(sample.shape[0])
        self._batch_sizes.append(size)

    def _add_rows(self) -> None:
        """The step's Dirac rows: ``C x weight`` on each joining canary's coordinate."""
        picked, weights = self._participation.rows()
        self._rows += int(np.count_nonzero(self._included[picked]))
        if self._tap is not None:
            # one buffer for every step: the last step's entries zeroed, this step's written
            # (Opacus reads summed_grad into a new p.grad and marks the tensor processed)
            rows = self._rows_buffer
            if self._last_picked is not None:
                rows[self._last_picked] = 0.0
            self._last_picked = None
            if picked.size:
                index = torch.as_tensor(picked, device=rows.device)
                rows[index] = torch.as_tensor(weights * self._clip, dtype=rows.dtype,
                                              device=rows.device)
                self._last_picked = index
            if hasattr(rows, "_processed"):
                del rows._processed
            self._tap.summed_grad = rows
            return
        weight_of = np.zeros(self.canaries.count)
        weight_of[picked] = weights
        for p, local, pos in self._where:
            w = weight_of[pos]
            if np.any(w):
                p.summed_grad.view(-1)[local] += torch.as_tensor(
                    w * self._clip, dtype=p.summed_grad.dtype, device=p.summed_grad.device)

    def _values(self) -> np.ndarray:
        out = np.empty(self.canaries.count)
        for p, local, pos in self._where:
            out[pos] = p.detach().reshape(-1)[local].double().cpu().numpy()
        return out

    def _read(self, optimizer: Any) -> None:
        """Read the step's ``y`` (units of C): the noisy normalised gradient, un-normalised."""
        factor = 1.0
        if optimizer.loss_reduction == "mean":
            factor = float(optimizer.expected_batch_size) * optimizer.accumulated_iterations
        if self._tap is not None:  # the dedicated tensor: every entry is a canary's
            y = self._tap.grad.detach().float().cpu().numpy()
        else:
            y = np.empty(self.canaries.count, dtype=np.float32)
            for p, local, pos in self._where:
                y[pos] = p.grad.reshape(-1)[local].float().cpu().numpy()
        y = y * np.float32(factor / self._clip)
        if isinstance(self._participation, AllocationParticipation):
            self._participation.score_step(y)
        else:
            self._scores += poisson_step_log_ratio_f32(y, self._q, self._sigma)
        self._steps += 1

    # ------------------------------------------------------------------ the end

    def _refuse_reuse(self) -> None:
        if self._optimizer is not None or self._finished:
            raise ValueError("an OpacusAudit attaches to one training only; make a new one")

    def detach(self) -> None:
        """Take the canaries off the optimizer (its methods and parameter groups as before)."""
        optimizer = self._optimizer
        if optimizer is None:
            return
        for name in self._originals:
            optimizer.__dict__.pop(name, None)
        optimizer._dpkd_audit = None
        if self._group is not None:
            groups = optimizer.original_optimizer.param_groups
            for i, g in enumerate(groups):
                if g is self._group:
                    groups.pop(i)
                    break
            optimizer.original_optimizer.state.pop(self._tap, None)
        self._optimizer = None

    def finish(self, *, test_accuracy: float | None = None,
               seconds_training: float | None = None) -> OpacusAuditResult:
        """Detach, score and bound: the one-run analyses against both claims.

        Args:
            test_accuracy: The trained model's test accuracy, for the record (optional).
            seconds_training: The training's own seconds, where the caller timed it (default:
                the wall-clock time from attaching to finishing, which also counts whatever
                else ran in between).

        Returns:
            The :class:`~dpkd_audit.training_audit.result.OpacusAuditResult`.

        Raises:
            ValueError: Before :meth:`attach`, or when no step was taken.
        """
        if self._optimizer is None or self.report is None:
            raise ValueError("finish() needs an attached audit (make_private or attach first)")
        if self._steps == 0:
            raise ValueError("no optimizer step was taken: train before finish()")
        seconds = (time.perf_counter() - self._started if seconds_training is None
                   else _validate.check_positive("seconds_training", seconds_training))
        final = self._values()
        self.detach()
        self._finished = True
        cfg = self.config
        report = self.report
        scores = (self._participation.scores()
                  if isinstance(self._participation, AllocationParticipation) else self._scores)
        epochs_run = -(-self._steps // self._t)
        claim_opacus = None
        accountant = getattr(self._engine, "accountant", None)
        if accountant is not None and getattr(accountant, "history", None):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    claim_opacus = float(accountant.get_epsilon(cfg.delta))
                except (ArithmeticError, MemoryError, ValueError):
                    # Opacus's accountant fails at extreme noise (e.g. sigma 1e-6: its RDP
                    # orders overflow); the Poisson accounting below is the claim then
                    claim_opacus = None
        bound_run = None
        sampling = report.sampler.sampling
        schedule = schedule_for(report.dataset_size, report.batch_size, self._t)
        if sampling is not None and schedule is not None:
            bound_run = sampling_epsilon(schedule, sampling=sampling,
                                         noise_multiplier=self._sigma, epochs=epochs_run,
                                         delta=cfg.delta)
        # Poisson at the accountant's q for the steps taken (PLD, or RDP where tighter)
        claim_poisson = float(poisson_epsilon(self._q, self._sigma, self._steps, cfg.delta))
        claim = claim_opacus if claim_opacus is not None else claim_poisson
        g_in, g_out = cfg.guess_counts()
        bound = one_run_bound(scores, self._included, epsilon=claim, delta=cfg.delta,
                              guesses_in=g_in, guesses_out=g_out, confidence=cfg.confidence)
        runtime = self._runtime_mismatch(report)
        if runtime is not None:
            warnings.warn(f"[{runtime.kind.value}] {runtime.message}", SamplerMismatchWarning,
                          stacklevel=2)
        sum_scores = self._initial - final
        independent = None
        if self._tap is not None and min(int(self._included.sum()),
                                         int((~self._included).sum())) >= MIN_RUNS:
            independent = many_run_bound(
                scores[self._included], scores[~self._included], epsilon=claim,
                delta=cfg.delta, confidence=cfg.confidence,
                rng=np.random.default_rng([self.canaries.seed, 0xCA4A, 9]))
        return OpacusAuditResult(
            config=cfg, report=report, runtime_mismatches=() if runtime is None else (runtime,),
            bound=bound, scores=scores, included=self._included, steps=self._steps,
            epochs_run=epochs_run, epsilon_opacus=claim_opacus, epsilon_poisson=claim_poisson,
            sampler_bound=bound_run,
            canary_rows=self._rows, batch_sizes=np.asarray(self._batch_sizes),
            seconds=seconds, seconds_audit=self._overhead, test_accuracy=test_accuracy,
            device=_describe(self._where[0][0].device),
            participation=("allocation" if isinstance(self._participation,
                                                      AllocationParticipation) else "poisson"),
            sum_scores=sum_scores, independent=independent)

    def _runtime_mismatch(self, report: SamplerReport) -> Mismatch | None:
        """Fixed-size batches seen under a Poisson loader: the loop iterates another loader."""
        sizes = np.asarray(self._batch_sizes)
        n, q = report.dataset_size, self._q
        if (report.sampler is not SamplerKind.POISSON or sizes.size < 20
                or n * q * (1 - q) < 1 or np.unique(sizes).size != 1):
            return None
        return Mismatch(
            kind=MismatchKind.FIXED_BATCHES_IN_THE_LOOP,
            message=(f"all {sizes.size} batches the optimizer saw had exactly {int(sizes[0])} "
                     f"records, where Poisson sampling at q = {q:.6g} over {n} records varies "
                     f"them (standard deviation {math.sqrt(n * q * (1 - q)):.3g}): the loop "
                     "does not iterate the loader make_private returned (is it iterating the "
                     "one you passed in?), so the Poisson claim does not hold for it."))


def _describe(device: torch.device) -> str:
    from dpkd_audit.devices import describe_device

    return describe_device(device)
