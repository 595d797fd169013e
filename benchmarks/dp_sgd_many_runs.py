"""Many-run audit of DP-SGD with a worst-case (Dirac) gradient canary, beside one-run audits.

Issue 34, item 3: a check that the one-run figures are not above what many runs show. R small
DP-SGD models (Opacus's ``GradSampleModule`` and ``DPOptimizer``: per-example clipping,
Gaussian noise, Poisson sampling at q; plain SGD) are trained on a subset of sklearn's embedded
digits (softmax regression on the 64 pixels) with one extra input feature that is 0 for every
record, so that real records never touch its weights, and R more with the same seeds' kind of
randomness plus one Dirac gradient canary on one of those weights: a per-example gradient of
norm exactly C on that coordinate, sampled like a record (probability q per step). The white-box
score of a run is the log-likelihood ratio of the canary coordinate's per-step noisy gradient
sums (recovered from the iterates: g_t = -(w_{t+1} - w_t) / lr), in / out of a Poisson-subsampled
Gaussian: sum_t log(1 - q + q exp((2 g_t / C - 1) / (2 sigma^2))), the Neyman-Pearson statistic
of the canary's whole view, so the audit is the worst case of the claim: the claim (PLD of the
DP-SGD event, add/remove-one) is the canary's true epsilon, up to the accountant's rounding.

- Many runs: :func:`dpkd_audit.audit.training.many_run_bound` (threshold chosen on half the runs
  of each side, exact Clopper-Pearson on the other half; Jagielski-Ullman-Oprea 2020), printed
  with its plug-in estimate and the best bound attainable with that many runs (the privacy-loss
  tails of the DP-SGD event, as :func:`dpkd_audit.audit.attainable_epsilon` computes them), and
  the Gaussian estimate of the same runs' scores (independent runs: a check of the one-run
  estimate's assumption that the canaries of one run behave like independent runs).
- One run, same schedule: m canaries on m such zero features, each inserted with probability
  1/2, scored the same way, analysed by Steinke-Nasr-Jagielski 2023, the f-DP bound of
  Mahloujifar-Melis-Chaudhuri 2025 and the Gaussian estimate of Agrawal et al. 2026
  (:func:`dpkd_audit.audit.training.one_run_bound`; the pipelines' guess count, 5% of m on each
  side), over a few independent one-run trainings.

Usage: ``python benchmarks/dp_sgd_many_runs.py [--runs R] [--canaries M] [--one-runs K]``
(defaults: R = 1,000 per side, M = 1,000, K = 5; about 4 minutes on one core).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import time
import warnings

import numpy as np
import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from sklearn.datasets import load_digits

from dpkd_audit.accountants import NeighboringRelation
from dpkd_audit.accountants.dp_sgd import DpSgdAccountant, DpSgdSchedule, dp_sgd_epsilon
from dpkd_audit.accountants.pld import PLDAccountant
from dpkd_audit.audit import optimal_attainable_bound
from dpkd_audit.audit.one_run_gaussian import one_run_gaussian
from dpkd_audit.audit.training import canary_inclusion, many_run_bound, one_run_bound

PIXELS = 64
CLASSES = 10


def digits_subset(size: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``size`` of sklearn's embedded digits, pixels scaled to [0, 1]."""
    digits = load_digits()
    return digits.data[:size] / 16.0, digits.target[:size]


def attainable_add_remove(event, *, n: int, delta: float, confidence: float) -> float:
    """The best many-run bound with ``n`` counted runs per side, for an add/remove-one event.

    :func:`dpkd_audit.audit.attainable_epsilon` (its privacy-loss tails and
    :func:`~dpkd_audit.audit.optimal_attainable_bound`) with the PLD accountant of DP-SGD's
    relation (the package's default, replace-one, refuses Poisson sampling).
    """
    pld = PLDAccountant(NeighboringRelation.ADD_OR_REMOVE_ONE).event_pld(event)
    best = 0.0
    for pmf in (pld._pmf_remove, pld._pmf_add):  # as dpkd_audit.audit.attainable reads them
        dense = pmf.to_dense_pmf()
        probs = np.asarray(dense._probs, dtype=np.float64)
        losses = (dense._lower_loss + np.arange(probs.size)) * dense._discretization
        order = np.argsort(-losses, kind="stable")
        tail_x = np.clip(np.cumsum(probs[order]) + float(dense._infinity_mass), 0.0, 1.0)
        tail_xp = np.clip(np.cumsum(probs[order] * np.exp(-losses[order])), 0.0, 1.0)
        best = max(best, optimal_attainable_bound(tail_x, tail_xp, n=n, delta=delta,
                                                  confidence=confidence))
    return best


def train(images: np.ndarray, labels: np.ndarray, inserted: np.ndarray, *, sigma: float,
          batch: int, steps: int, clip: float, lr: float, seed: int) -> np.ndarray:
    """One DP-SGD run with ``inserted.size`` zero features; returns the canaries' scores.

    Canary j lives on the weight (class 0, feature 64 + j); it is a record of the run iff
    ``inserted[j]``, and then adds a Dirac per-example gradient of norm ``clip`` in each step
    that samples it (probability q = batch / n, independently of the records' sampling).
    """
    rng = np.random.default_rng([seed, 0xD95])
    torch.manual_seed(seed)
    n, extra = images.shape[0], inserted.size
    q = batch / n
    x = torch.tensor(np.hstack([images, np.zeros((n, extra))]), dtype=torch.float32)
    y = torch.tensor(labels)
    model = GradSampleModule(torch.nn.Linear(PIXELS + extra, CLASSES), loss_reduction="sum")
    optimizer = DPOptimizer(torch.optim.SGD(model.parameters(), lr=lr), noise_multiplier=sigma,
                            max_grad_norm=clip, expected_batch_size=batch,
                            loss_reduction="sum")
    weight, bias = model._module.weight, model._module.bias
    coords = PIXELS + np.arange(extra)
    previous = weight.detach()[0, coords].numpy().copy()
    # the canary coordinate's noisy gradient sum of each step, in units of the clipping norm
    sums = np.empty((steps, extra))
    for t in range(steps):
        mask = torch.from_numpy(rng.random(n) < q)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x[mask]), y[mask], reduction="sum")
        loss.backward()
        sampled = np.flatnonzero(inserted & (rng.random(extra) < q))
        if sampled.size:
            rows = torch.zeros(sampled.size, CLASSES, PIXELS + extra)
            rows[np.arange(sampled.size), 0, coords[sampled]] = clip
            weight.grad_sample = torch.cat([weight.grad_sample, rows])
            bias.grad_sample = torch.cat([bias.grad_sample, torch.zeros(sampled.size, CLASSES)])
        optimizer.step()
        current = weight.detach()[0, coords].numpy().copy()
        sums[t] = (previous - current) / (lr * clip)
        previous = current
    # log-likelihood ratio of each step's sum: q N(1, sigma^2) + (1 - q) N(0, sigma^2) vs N(0,
    # sigma^2), summed over the steps
    llr = np.logaddexp(np.log1p(-q), np.log(q) + (2.0 * sums - 1.0) / (2.0 * sigma**2))
    return llr.sum(axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs per side (default 1000)")
    parser.add_argument("--canaries", type=int, default=1000,
                        help="canaries of each one-run training (default 1000)")
    parser.add_argument("--one-runs", type=int, default=5,
                        help="independent one-run trainings (default 5)")
    parser.add_argument("--size", type=int, default=1000, help="digits records (default 1000)")
    parser.add_argument("--batch", type=int, default=50, help="expected batch size")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--sigma", type=float, default=1.0, help="noise multiplier")
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)  # Opacus and torch hook notices
    torch.set_num_threads(1)

    images, labels = digits_subset(args.size)
    assert np.all(images.max(axis=0) <= 1.0)
    schedule = DpSgdSchedule(dataset_size=args.size, batch_size=args.batch)
    steps, q = schedule.steps(args.epochs), schedule.sampling_probability
    assert abs(q - args.batch / args.size) < 1e-12, "batch must divide the subset size"
    event = schedule.event(args.sigma, args.epochs)
    claim = float(dp_sgd_epsilon(schedule, noise_multiplier=args.sigma, epochs=args.epochs,
                                 delta=args.delta, accountant=DpSgdAccountant.PLD))
    print(f"# {platform.machine()}, {os.cpu_count()} cores (1 thread), Python "
          f"{platform.python_version()}, torch {torch.__version__}, opacus "
          f"{importlib.metadata.version('opacus')}, seed {args.seed}")
    print(f"DP-SGD on digits[:{args.size}] (softmax regression): q = {q:g}, {steps} steps, "
          f"sigma {args.sigma:g}, clip {args.clip:g}, lr {args.lr:g}")
    print(f"claim (PLD, add/remove-one): epsilon {claim:.3f} at delta {args.delta:g}")

    start = time.perf_counter()
    scores = {}
    for side, present in (("in", True), ("out", False)):
        scores[side] = np.array([
            train(images, labels, np.array([present]), sigma=args.sigma, batch=args.batch,
                  steps=steps, clip=args.clip, lr=args.lr,
                  seed=args.seed * 10_000_019 + 2 * r + int(present))[0]
            for r in range(args.runs)])
    many_seconds = time.perf_counter() - start
    result = many_run_bound(scores["in"], scores["out"], epsilon=claim, delta=args.delta,
                            confidence=args.confidence,
                            rng=np.random.default_rng(args.seed), name="DP-SGD Dirac canary")
    attainable = attainable_add_remove(event, n=result.bound_samples, delta=args.delta,
                                       confidence=args.confidence)
    print(f"many runs ({args.runs} per side, {result.bound_samples} counted, "
          f"{many_seconds:.0f} s): epsilon >= {result.epsilon_lower:.3f} at "
          f"{args.confidence:.0%} (plug-in {result.epsilon_estimate:.3f}; attainable with "
          f"{result.bound_samples} runs: {attainable:.3f}); event {result.event}, counts "
          f"{result.counts}")
    # the same Gaussian estimate on the many runs' scores: independent runs, so it checks the
    # one-run estimate's assumption that canaries of one run behave like independent runs
    fit = one_run_gaussian(np.concatenate([scores["in"], scores["out"]]),
                           np.arange(2 * args.runs) < args.runs, delta=args.delta,
                           confidence=args.confidence)
    print(f"many runs, Gaussian estimate of the same scores: {fit.epsilon_lower:.3f} (plug-in "
          f"{fit.epsilon_estimate:.3f}; IN {fit.mean_in:.2f} +- {fit.std_in:.2f}, OUT "
          f"{fit.mean_out:.2f} +- {fit.std_out:.2f})")

    rows = []
    start = time.perf_counter()
    for k in range(args.one_runs):
        included = canary_inclusion(args.canaries, seed=args.seed * 1_000 + k)
        s = train(images, labels, included, sigma=args.sigma, batch=args.batch, steps=steps,
                  clip=args.clip, lr=args.lr, seed=10**9 + args.seed * 1_000 + k)
        guesses = max(1, args.canaries // 20)
        bound = one_run_bound(s, included, epsilon=claim, delta=args.delta,
                              guesses_in=guesses, guesses_out=guesses,
                              confidence=args.confidence)
        rows.append((bound.epsilon_lower, bound.epsilon_lower_fdp,
                     bound.epsilon_lower_gaussian, bound.gaussian.epsilon_estimate))
        print(f"one run {k}: {bound.correct} of {bound.guesses} right; Steinke "
              f"{bound.epsilon_lower:.3f}, f-DP {bound.epsilon_lower_fdp:.3f}, Gaussian "
              f"{bound.epsilon_lower_gaussian:.3f} (plug-in {bound.gaussian.epsilon_estimate:.3f}"
              f"; IN {bound.gaussian.mean_in:.2f} +- {bound.gaussian.std_in:.2f}, OUT "
              f"{bound.gaussian.mean_out:.2f} +- {bound.gaussian.std_out:.2f})")
    table = np.array(rows)
    print(f"one run ({args.one_runs} trainings x {args.canaries} canaries, "
          f"{time.perf_counter() - start:.0f} s), mean [min, max]:")
    for name, column in zip(("Steinke", "f-DP", "Gaussian", "Gaussian plug-in"), table.T,
                            strict=True):
        print(f"  {name:<16} {column.mean():.3f} [{column.min():.3f}, {column.max():.3f}]")
    top = table[:, :3].max()
    print(f"check: largest one-run figure {top:.3f} vs claim {claim:.3f} and many-run bound "
          f"{result.epsilon_lower:.3f} (plug-in {result.epsilon_estimate:.3f}): "
          f"{'below the claim' if top <= claim else 'ABOVE THE CLAIM'}, "
          f"{'below' if top <= result.epsilon_estimate else 'above'} the many-run plug-in")


if __name__ == "__main__":
    main()
