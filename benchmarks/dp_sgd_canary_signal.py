"""Where the white-box gradient-canary signal of the sound DP-SGD audit goes (issue 34, item 1).

Trains the sound pipelines' DP-SGD model (``tanh-cnn``, Opacus, the package's
:func:`~dpkd_audit.pipelines.common.dp_teacher.train_dp_teacher`) with ``m`` Dirac gradient
canaries, recording at every step which canaries were sampled and Opacus's clipped sum before
noise (``p.summed_grad``) on each canary's coordinate, then measures:

(a) presence: every sampled inserted canary adds exactly C to its coordinate's clipped sum (the
    sum on sampled steps minus the data's part is 1 in units of C), and the noise recovered
    from the iterates (``y_t`` minus the clipped sum) has the claimed variance sigma^2;
(b) the per-step variance of ``y_t`` (the noisy sum recovered from the iterates, units of C) of
    the left-out canaries against sigma^2: real records' gradients on a canary's coordinate
    add their own variance (and a drift) to the noise the score assumes;
(c) the fraction of canary coordinates that real records' gradients touch (any nonzero clipped
    sum on a step where the canary was not sampled);
(d) the right guesses (of the 5% + 5% the audit makes) of the ideal score - the log-likelihood
    ratio of ``1{sampled} + N(0, sigma^2)`` on the actual sampling pattern of this run's
    canaries - against the run's score, the same score on the recorded noise alone (what it
    would get if no record touched the coordinates), and the sum of updates.

``--placement model`` puts the canaries on uniformly drawn coordinates of the model (before the
fix); ``dedicated`` (default, the fix) on :class:`~dpkd_audit.training_audit.canaries.
CanaryTap`'s weights, which no real record's gradient touches.

Usage: ``python benchmarks/dp_sgd_canary_signal.py [--dataset mnist --data-dir DIR]
[--train-size N] [--epochs E] [--batch-size B] [--learning-rate LR] [--epsilon EPS]
[--canaries M] [--placement model|dedicated]``. Defaults: MNIST, the first 6,000 training
images, batch 51 (q = 1/118, as the full run's 512 of 60,000), 15 epochs (1,770 steps, as the
full run), learning rate 0.2 (the full run's 2.0 x 51 / 512), DP-SGD target epsilon 8.6, 1,000
canaries.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time

import numpy as np
import torch

from dpkd_audit.accountants.dp_sgd import DpSgdAccountant
from dpkd_audit.audit.training import one_run_bound, one_run_guesses
from dpkd_audit.data import load_dataset
from dpkd_audit.ledger import Ledger
from dpkd_audit.pipelines.common import dp_teacher
from dpkd_audit.pipelines.common.dp_sgd_audit import default_guesses
from dpkd_audit.pipelines.common.teacher import TeacherArchitecture, TeacherConfig
from dpkd_audit.training_audit.canaries import GradientCanaries, GradientCanaryInjector


class _Recording(GradientCanaryInjector):
    """The injector, also keeping each step's sampled canaries and clipped sums (units of C)."""

    last: _Recording | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs, keep_trajectory=True)
        self.picked: list[np.ndarray] = []
        self.clipped: list[np.ndarray] = []
        _Recording.last = self

    def sample(self) -> int:
        state = self._participation._rng.bit_generator.state
        replay = np.random.default_rng()
        replay.bit_generator.state = state
        mask = self.included & (replay.random(self.included.size) < self.q)
        self.picked.append(mask)
        return super().sample()

    def record_step(self) -> None:
        out = np.empty(len(self._where), dtype=np.float64)
        for index, local, pos in self._gather:
            summed = self.params[index].summed_grad.detach().reshape(-1)[local]
            out[pos] = summed.to(torch.float64).cpu().numpy() / self.clip_norm
        self.clipped.append(out)
        super().record_step()


def llr(y: np.ndarray, q: float, sigma: float) -> np.ndarray:
    """The canaries' log-likelihood-ratio scores of per-step sums ``y`` (steps x canaries)."""
    a = (y - 0.5) / (sigma * sigma)
    return np.logaddexp(math.log1p(-q), math.log(q) + a).sum(axis=0)


def correct(scores: np.ndarray, included: np.ndarray, guesses: int) -> int:
    g = one_run_guesses(scores, guesses_in=guesses, guesses_out=guesses)
    return int(np.count_nonzero(g == np.where(included, 1, -1)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--data-dir", default=os.environ.get("DPKD_MNIST", "/work/shared/data/mnist"))
    p.add_argument("--train-size", type=int, default=6000)
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch-size", type=int, default=51)
    p.add_argument("--learning-rate", type=float, default=0.2)
    p.add_argument("--epsilon", type=float, default=8.6)
    p.add_argument("--canaries", type=int, default=1000)
    p.add_argument("--placement", choices=["model", "dedicated"], default="dedicated")
    p.add_argument("--ideal-draws", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    data = load_dataset(args.dataset, data_dir=args.data_dir if args.dataset != "digits"
                        else None)
    n = min(args.train_size, data.n_train)
    images, labels = data.train_images[:n], data.train_labels[:n]
    config = dp_teacher.DpSgdConfig(epochs=args.epochs, batch_size=args.batch_size,
                                    learning_rate=args.learning_rate)
    plan = dp_teacher.plan_dp_sgd(config, dataset_size=n, target_epsilon=args.epsilon)
    canaries = GradientCanaries(count=args.canaries, seed=args.seed,
                                placement=args.placement)
    dp_teacher.GradientCanaryInjector = _Recording  # record what the run's injector sees
    result = dp_teacher.train_dp_teacher(
        images, labels, num_classes=data.num_classes, test_images=data.test_images[:2000],
        test_labels=data.test_labels[:2000],
        teacher=TeacherConfig(architecture=TeacherArchitecture.TANH_CNN), config=config,
        plan=plan, ledger=Ledger(epsilon=args.epsilon * 1.01, delta=config.delta,
                                                accountant=DpSgdAccountant.PLD.make()),
        seed=args.seed, device="cpu", canaries=canaries)
    inj = _Recording.last
    sigma, q = plan.noise_multiplier, plan.schedule.sampling_probability
    picked = np.stack(inj.picked).astype(np.float64)  # (T, m)
    clipped = np.stack(inj.clipped)  # (T, m), units of C, before noise
    theta = np.stack(inj.trajectory)
    expected_batch = int(n * q)  # Opacus's expected_batch_size, which the update divides by
    y = -np.diff(theta, axis=0) / config.learning_rate * expected_batch / config.max_grad_norm
    data_part = clipped - picked
    noise = y - clipped
    inc = canaries.included
    out = ~inc
    guesses = default_guesses(args.canaries)
    counts = picked[:, inc].sum(axis=0)
    print(f"{args.dataset}[:{n}] tanh-cnn, placement {args.placement}: {plan.steps} steps, "
          f"q {q:.5f}, sigma {sigma:.4f}, lr {config.learning_rate}, batch {args.batch_size}; "
          f"{args.canaries} canaries ({inc.sum()} in), test accuracy "
          f"{result.test_accuracy:.4f}; {time.perf_counter() - start:.0f} s")
    # (a) presence
    on = picked > 0
    print(f"(a) inserted canaries sampled {int(picked.sum())} times (rows added "
          f"{inj.samples}); per inserted canary {counts.mean():.2f} steps (min "
          f"{counts.min():.0f}, max {counts.max():.0f}; expected {q * plan.steps:.2f}); "
          f"clipped sum on sampled steps minus on the others (same canaries): "
          f"{clipped[on].mean() - clipped[:, inc][~on[:, inc]].mean():.4f} (1 = the "
          f"canary's C); recovered noise var {noise.var():.4f} vs sigma^2 {sigma ** 2:.4f}")
    # data part on steps the canary was not sampled (its own sampled steps excluded)
    off = data_part.copy()
    off[on] = np.nan
    var_y_out = np.var(y[:, out], axis=0)
    var_data = np.nanvar(off, axis=0)
    drift = np.nanmean(off, axis=0)
    print(f"(b) left-out canaries: per-step var of y {var_y_out.mean():.4f} (median "
          f"{np.median(var_y_out):.4f}, max {var_y_out.max():.3f}) vs sigma^2 "
          f"{sigma ** 2:.4f}: ratio {var_y_out.mean() / sigma ** 2:.3f}; data part var mean "
          f"{np.nanmean(var_data):.4f} (max {np.nanmax(var_data):.3f}), |mean drift| mean "
          f"{np.nanmean(np.abs(drift)):.4f} (max {np.nanmax(np.abs(drift)):.3f})")
    touched = np.nanmax(np.abs(off), axis=0) > 1e-9
    loud = var_data > 0.1 * sigma ** 2
    print(f"(c) canary coordinates real records touch: {touched.mean():.1%} ({touched.sum()}); "
          f"with data variance > 10% of sigma^2: {loud.mean():.1%}")
    rng = np.random.default_rng(12345)
    ideal = []
    for _ in range(args.ideal_draws):
        y_ideal = picked + sigma * rng.standard_normal(picked.shape)
        ideal.append(correct(llr(y_ideal, q, sigma), inc, guesses))
    run_scores = result.canary_scores
    noise_only = llr(picked + noise, q, sigma)
    print(f"(d) right guesses of {2 * guesses}: ideal score on this run's sampling "
          f"{np.mean(ideal):.1f} (5-95%: {np.percentile(ideal, 5):.0f}-"
          f"{np.percentile(ideal, 95):.0f}, {args.ideal_draws} noise draws); the run's score "
          f"{correct(run_scores, inc, guesses)}; the score on the recorded noise alone "
          f"{correct(noise_only, inc, guesses)}; sum of updates "
          f"{correct(result.canary_sum_scores, inc, guesses)}")
    acc = DpSgdAccountant.PLD.make()
    acc.compose(plan.event)
    claim = float(acc.get_epsilon(config.delta))
    bound = one_run_bound(run_scores, inc, epsilon=claim, delta=config.delta,
                          guesses_in=guesses, guesses_out=guesses)
    print(f"    one-run analyses of the run's score at claim {claim:.3f}: Steinke "
          f"{bound.epsilon_lower:.3f}, f-DP {bound.epsilon_lower_fdp:.3f}, Gaussian "
          f"{bound.epsilon_lower_gaussian:.3f}")
    print(f"machine: {platform.processor() or platform.machine()}, torch "
          f"{torch.__version__}, {torch.get_num_threads()} thread; "
          f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
