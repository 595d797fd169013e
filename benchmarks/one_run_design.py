"""What an *ideal* attacker gets from the one-run DP-SGD audit, per design (issue 34).

The sound MNIST DP-SGD audits (``reports/audits/*-mnist-sound-gradient/audit.json``) put ``m``
Dirac gradient canaries on dedicated coordinates (each inserted with probability 1/2); at each of
the ``T`` steps an inserted canary is Poisson-sampled with probability ``q``, and the white-box
view of its coordinate is ``y_t = B_t + N(0, sigma^2)`` (units of the clipping norm; ``B_t ~
Bernoulli(q)`` if inserted, ``B_t = 0`` if left out). The score of
:meth:`~dpkd_audit.training_audit.canaries.GradientCanaryInjector.scores` is
``S = sum_t log(1 - q + q exp((y_t - 1/2) / sigma^2))``, the exact log-likelihood ratio of
"inserted" against "left out" - the Neyman-Pearson statistic, so no other score of this
observation does better, and ``S`` is the privacy-loss variable of the composed subsampled
Gaussian mechanism whose epsilon is the audit's claim.

This script simulates that ideal attacker on the records' exact schedule (q, T, sigma, claim,
delta), numpy only (no training), and feeds the guesses to the project's own analyses:
Steinke-Nasr-Jagielski (``training._one_run_epsilon``, what ``one_run_bound`` reports),
Mahloujifar-Melis-Chaudhuri f-DP (``one_run_fdp.one_run_fdp_epsilon``) and the Gaussian fit
(``one_run_gaussian.one_run_gaussian``), all at 95% confidence.

How the scores are drawn:

- ``direct``: every step's ``y_t`` drawn and scored with the formula above (m = 1,000 only:
  T x m normals per trial);
- ``exact pmf``: the distribution of ``S`` under "left out" and under "inserted" computed once
  (one step's privacy loss discretised on a grid of width ``h`` with mean-preserving linear
  splitting, then the T-fold convolution by FFT, each side separately), and ``m`` scores
  sampled from it per trial by inverse CDF. Its epsilon at the claim's delta reproduces the
  accountant's claim (printed), and at m = 1,000 it reproduces the direct simulation.

Printed:

0. Checks: the pipeline's own ``GradientCanaryInjector.scores`` on a simulated trajectory equals
   the ideal log-likelihood ratio; the pmf's epsilon at delta against the record's claim; where
   the mechanism's delta(epsilon) exceeds that of the Gaussian (mu-GDP) curve meeting the claim
   (the f-DP analysis's hypothesis).
1. (a) the current design (m = 1,000, 50 + 50 guesses): direct and pmf simulations beside the
   committed record.
2. (b) a sweep over m (1,000 / 5,000 / 20,000 / 50,000 / 100,000) and guesses (``k+``
   highest scores guessed in, ``k-`` lowest guessed out): mean right guesses, and median /
   5th percentile of each bound over the trials, plus how many trials exceeded the claim.
3. (c) the large-m limits: accuracy of the top / bottom fraction f of canaries from the exact
   score distributions (m -> inf; logit(accuracy) is Steinke's k -> inf limit without its
   2 m delta term), the Gaussian mu of that (TPR, FPR) point (the f-DP limit), the Gaussian
   fit's plug-in limit, and each analysis's best k per m at the expected counts.

Guess counts are fixed before the run in every design: a design chosen from this table (which
uses only the claimed schedule, never a run's output) may be fixed in advance.

Usage (one process, one thread; about 4 minutes for both schedules at the defaults on a
2-core developer machine)::

    OMP_NUM_THREADS=1 python benchmarks/one_run_design.py [--trials 200] [--direct-trials 200]
        [--schedules dpdfd,dgd] [--canaries 1000,5000,20000,50000,100000] [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import pathlib
import time
from collections.abc import Callable

import numpy as np
from scipy import special

from dpkd_audit.audit.one_run_fdp import gaussian_mu, one_run_fdp_epsilon
from dpkd_audit.audit.one_run_gaussian import gdp_delta, gdp_epsilon, one_run_gaussian
from dpkd_audit.audit.training import _one_run_epsilon, one_run_p_value

ROOT = pathlib.Path(__file__).resolve().parents[1]
RECORDS = {"dpdfd": ROOT / "reports/audits/dpdfd-mnist-sound-gradient/audit.json",
           "dgd": ROOT / "reports/audits/dgd-mnist-sound-gradient/audit.json"}
CONFIDENCE = 0.95
#: Grid of the score's distribution: width, and FFT length (covers S - T log(1 - q) < N h).
GRID_H = 1e-4
GRID_N = 1 << 20


@dataclasses.dataclass(frozen=True)
class Schedule:
    """One audited DP-SGD run's schedule and what its record found."""

    name: str
    q: float
    steps: int
    sigma: float
    claim: float
    delta: float
    canaries: int
    guesses: int  # per side (the record's 50 + 50)
    correct: int
    recorded: dict

    @classmethod
    def load(cls, name: str) -> Schedule:
        rec = json.loads(RECORDS[name].read_text())
        plan = rec["plan"]
        sides = (rec.get("guesses_in", rec["guesses"] // 2),
                 rec.get("guesses_out", rec["guesses"] - rec["guesses"] // 2))
        if sides[0] != sides[1]:
            raise SystemExit(f"{RECORDS[name]}: {sides[0]} in + {sides[1]} out guesses; this "
                             "script compares the record's design as an even split only")
        return cls(name=name, q=float(plan["sampling_probability"]), steps=int(plan["steps"]),
                   sigma=float(plan["noise_multiplier"]), claim=float(rec["epsilon_claimed"]),
                   delta=float(rec["delta"]), canaries=int(rec["canaries"]),
                   guesses=int(rec["guesses"]) // 2, correct=int(rec["correct"]),
                   recorded={"steinke": rec["epsilon_lower"], "fdp": rec["epsilon_lower_fdp"],
                             "gaussian": rec["epsilon_lower_gaussian"]})


def step_llr(y: np.ndarray, q: float, sigma: float) -> np.ndarray:
    """log(1 - q + q exp((y - 1/2) / sigma^2)): one step's log-likelihood ratio (canaries.py)."""
    return np.logaddexp(math.log1p(-q), math.log(q) + (y - 0.5) / (sigma * sigma))


def direct_scores(s: Schedule, included: np.ndarray, rng: np.random.Generator,
                  chunk: int = 200) -> np.ndarray:
    """Every step simulated: ``sum_t step_llr(B_t + N(0, sigma^2))`` per canary."""
    out = np.zeros(included.size)
    for start in range(0, s.steps, chunk):
        t = min(chunk, s.steps - start)
        y = s.sigma * rng.standard_normal((t, included.size))
        y += included & (rng.random((t, included.size)) < s.q)
        out += step_llr(y, s.q, s.sigma).sum(axis=0)
    return out


class ScorePmf:
    """The exact distributions of S for left-out and inserted canaries, on a grid (FFT)."""

    def __init__(self, s: Schedule, h: float = GRID_H, n: int = GRID_N) -> None:
        self.h, self.offset = h, s.steps * math.log1p(-s.q)  # S = offset + j h
        y = np.linspace(-10 * s.sigma, 1 + 10 * s.sigma, 2_000_001)
        shifted = np.logaddexp(0.0, math.log(s.q / (1 - s.q)) + (y - 0.5) / s.sigma ** 2)
        pos = shifted / h  # one step's loss minus log(1 - q), in grid units (>= 0)
        j = np.floor(pos).astype(np.int64)
        frac = pos - j
        if j.max() + 1 >= n:
            raise ValueError("grid too short for one step's privacy loss")
        phi_out = np.exp(-0.5 * (y / s.sigma) ** 2)
        phi_in = (1 - s.q) * phi_out + s.q * np.exp(-0.5 * ((y - 1) / s.sigma) ** 2)
        self.pmf = {}
        for side, w in (("out", phi_out), ("in", phi_in)):
            w = w / w.sum()
            one = (np.bincount(j, w * (1 - frac), minlength=n)
                   + np.bincount(j + 1, w * frac, minlength=n))[:n]
            total = np.fft.irfft(np.fft.rfft(one) ** s.steps, n)
            total = np.clip(total, 0.0, None)
            self.pmf[side] = total / total.sum()
        self.grid = self.offset + h * np.arange(n)
        self.cdf = {k: np.cumsum(v) for k, v in self.pmf.items()}
        # P[S >= grid[i]] per side (the top-tail of each)
        self.tail = {k: np.cumsum(v[::-1])[::-1] for k, v in self.pmf.items()}

    def draw(self, included: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One run's scores: inserted canaries from the "in" law, the rest from "out"."""
        out = np.empty(included.size)
        out[included] = self.sample("in", int(included.sum()), rng)
        out[~included] = self.sample("out", int((~included).sum()), rng)
        return out

    def sample(self, side: str, size: int, rng: np.random.Generator) -> np.ndarray:
        idx = np.searchsorted(self.cdf[side], rng.random(size) * self.cdf[side][-1])
        idx = np.minimum(idx, self.grid.size - 1)
        return self.grid[idx] + self.h * (rng.random(size) - 0.5)  # spread within the bin

    def delta(self, epsilon: float) -> float:
        """delta(epsilon) of the canary's mechanism, add and remove directions (the max)."""
        s, p_in, p_out = self.grid, self.pmf["in"], self.pmf["out"]
        add = np.sum(p_in * -np.expm1(np.minimum(epsilon - s, 0.0)))
        remove = np.sum(p_out * -np.expm1(np.minimum(epsilon + s, 0.0)))
        return float(max(add, remove))

    def epsilon(self, delta: float) -> float:
        lo, hi = 0.0, 50.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.delta(mid) > delta else (lo, mid)
        return hi

    def fraction_accuracy(self, fraction: float, top: bool) -> float:
        """m -> inf: accuracy of guessing the top (bottom) ``fraction`` of all canaries."""
        if top:
            tail_in, tail_out = self.tail["in"], self.tail["out"]
        else:
            tail_in, tail_out = self.cdf["in"], self.cdf["out"]
        share = 0.5 * (tail_in + tail_out)
        i = int(np.argmin(np.abs(share - fraction)))
        right = tail_in[i] if top else tail_out[i]
        return float(right / (tail_in[i] + tail_out[i]))

    def roc_mu(self, alpha: float) -> float:
        """Phi^-1(TPR) - Phi^-1(FPR) of the best test at false-positive rate ``alpha``.

        The mu of the Gaussian trade-off curve through the mechanism's at ``alpha``: above
        the f-DP hypothesis's mu, the mechanism is less private there than that hypothesis.
        """
        i = int(np.argmin(np.abs(np.log(self.tail["out"] + 1e-300) - math.log(alpha))))
        return float(special.ndtri(self.tail["in"][i]) - special.ndtri(self.tail["out"][i]))

    def gaussian_limit(self, delta: float) -> tuple[float, float]:
        """m -> inf: the Gaussian fit's plug-in (mu, epsilon at delta) for these scores."""
        mean = {k: float(np.sum(v * self.grid)) for k, v in self.pmf.items()}
        std = {k: math.sqrt(float(np.sum(v * (self.grid - mean[k]) ** 2)))
               for k, v in self.pmf.items()}
        mu = (mean["in"] - mean["out"]) / max(std.values())
        return mu, gdp_epsilon(mu, delta)


@functools.cache
def steinke(m: int, r: int, v: int, delta: float) -> float:
    return _one_run_epsilon(m, r, v, delta, 1.0 - CONFIDENCE)


@functools.cache
def fdp(m: int, r: int, v: int, delta: float) -> float:
    return one_run_fdp_epsilon(m, r, v, delta=delta, confidence=CONFIDENCE)


def designs_for(m: int) -> list[tuple[int, int]]:
    """(k+, k-): symmetric, "in" guesses only, and one "out"-only design."""
    ks = [k for k in (10, 25, 50, 100, 250, 500, 1000, 2500, 5000) if k <= m // 4]
    return [(k, k) for k in ks] + [(k, 0) for k in ks] + [(0, 50)]


def run_trials(s: Schedule, m: int, trials: int, draw, rng: np.random.Generator,
               designs: list[tuple[int, int]]) -> dict:
    """Per design: right guesses and the three bounds over ``trials`` simulated runs."""
    right = {d: [] for d in designs}
    gauss = []
    for _ in range(trials):
        included = rng.random(m) < 0.5
        scores = draw(included, rng)
        ranked = included[np.argsort(-scores, kind="stable")]  # as one_run_guesses orders
        ins = np.concatenate([[0], np.cumsum(ranked)])  # inserted among the i highest
        outs = np.concatenate([[0], np.cumsum(~ranked[::-1])])  # left out among the i lowest
        for d in designs:
            right[d].append(int(ins[d[0]] + outs[d[1]]))
        gauss.append(one_run_gaussian(scores, included, delta=s.delta,
                                      confidence=CONFIDENCE).epsilon_lower)
    out = {}
    for d in designs:
        v = np.array(right[d])
        r = d[0] + d[1]
        st = np.array([steinke(m, r, int(c), s.delta) for c in v])
        fd = np.array([fdp(m, r, int(c), s.delta) for c in v])
        out[d] = {"right": v, "steinke": st, "fdp": fd}
    out["gaussian"] = np.array(gauss)
    return out


def fmt(values: np.ndarray) -> str:
    return f"{np.median(values):5.2f} {np.percentile(values, 5):5.2f}"


def header() -> None:
    print(f"{'sched':<6}{'m':>6}{'k+':>6}{'k-':>6}{'trials':>7}{'right (mean)':>16}"
          f"{'steinke med p5':>16}{'f-DP med p5':>14}{'gauss med p5':>14}{'>claim':>8}")


def row(s: Schedule, m: int, d: tuple[int, int], res: dict, trials: int,
        with_gauss: bool) -> None:
    x = res[d]
    r = d[0] + d[1]
    g = res["gaussian"]
    over = int(np.sum((x["steinke"] > s.claim) | (x["fdp"] > s.claim)
                      | (with_gauss & (g > s.claim))))
    gtxt = fmt(g) if with_gauss else "    (same)  "
    print(f"{s.name:<6}{m:>6}{d[0]:>6}{d[1]:>6}{trials:>7}"
          f"{np.mean(x['right']):>9.1f}/{r:<6}{fmt(x['steinke']):>16}{fmt(x['fdp']):>14}"
          f"{gtxt:>14}{over:>8}")


def check_pipeline_score(s: Schedule, rng: np.random.Generator) -> float:
    """Max |pipeline score - ideal LLR| on a simulated float32 trajectory (momentum 0.9)."""
    import torch

    from dpkd_audit.training_audit.canaries import (
        CanaryScoring,
        GradientCanaries,
        GradientCanaryInjector,
    )

    m, steps, lr, batch, clip, momentum = 64, 200, 2.0, 512.0, 1.0, 0.9
    canaries = GradientCanaries(count=m, seed=0)  # coordinates 0..m-1: canary j on entry j
    param = torch.nn.Parameter(torch.zeros(m))
    inj = GradientCanaryInjector(canaries, [param], sampling_probability=s.q, clip_norm=clip,
                                 scoring=CanaryScoring(noise_multiplier=s.sigma,
                                                       learning_rate=lr, momentum=momentum,
                                                       batch_size=batch))
    inc = canaries.included
    y = s.sigma * rng.standard_normal((steps, m)) + (inc & (rng.random((steps, m)) < s.q))
    theta = np.zeros(m, dtype=np.float32)
    velocity = np.zeros(m)
    for t in range(steps):  # torch SGD: v = momentum v + g; theta -= lr v; g = y C / B
        velocity = momentum * velocity + y[t] * clip / batch
        theta = (theta - lr * velocity).astype(np.float32)
        with torch.no_grad():
            param.copy_(torch.from_numpy(theta))
        inj.record_step()  # the pipeline's streamed score, as in a run
    got = inj.scores()
    return float(np.max(np.abs(got - step_llr(y, s.q, s.sigma).sum(axis=0))))


def direct_draw(s: Schedule) -> Callable[[np.ndarray, np.random.Generator], np.ndarray]:
    return lambda included, rng: direct_scores(s, included, rng)


def expected_counts(pmf: ScorePmf, m: int, k_in: int, k_out: int) -> int:
    """Right guesses at the m -> inf accuracies of the top k+ / bottom k- fractions."""
    right = k_in * pmf.fraction_accuracy(k_in / m, top=True) if k_in else 0.0
    right += k_out * pmf.fraction_accuracy(k_out / m, top=False) if k_out else 0.0
    return round(right)


def report(name: str, index: int, args: argparse.Namespace) -> None:
    s = Schedule.load(name)
    rng = np.random.default_rng([args.seed, index])
    start = time.perf_counter()
    pmf = ScorePmf(s)
    mu = gaussian_mu(s.claim, s.delta)
    print(f"\n=== {name}: q = {s.q:.6f}, T = {s.steps}, sigma = {s.sigma:.4f}, claim "
          f"{s.claim:.3f} at delta {s.delta:g} (record: {s.correct}/{2 * s.guesses} right, "
          f"Steinke {s.recorded['steinke']:.2f}, f-DP {s.recorded['fdp']:.2f}, Gaussian "
          f"{s.recorded['gaussian']:.2f})")
    print(f"0. checks: pipeline score - ideal LLR: max |diff| "
          f"{check_pipeline_score(s, rng):.2e}; pmf epsilon at delta "
          f"{pmf.epsilon(s.delta):.3f} (claim {s.claim:.3f}); pmf built in "
          f"{time.perf_counter() - start:.1f} s")
    eps_grid = np.arange(0.25, 16.01, 0.25)
    mech = np.array([pmf.delta(e) for e in eps_grid])
    gdp = np.array([gdp_delta(e, mu) for e in eps_grid])
    worse = eps_grid[mech > gdp * (1 + 1e-6)]
    where = "none" if worse.size == 0 else f"[{worse.min():.2f}, {worse.max():.2f}]"
    print(f"   f-DP hypothesis: mu = {mu:.3f}-GDP (meets the claim); the mechanism's "
          f"delta(eps) is above it at eps in {where}; delta_mech / delta_GDP at eps 2, 4, 6, "
          "8, 10, 12: " + ", ".join(f"{pmf.delta(e) / gdp_delta(e, mu):.2g}"
                                    for e in (2, 4, 6, 8, 10, 12)))
    deltas = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7)
    print("   epsilon at delta 1e-3 / 1e-4 / 1e-5 / 1e-6 / 1e-7: mechanism "
          + " / ".join(f"{pmf.epsilon(d):.2f}" for d in deltas) + f"; {mu:.3f}-GDP "
          + " / ".join(f"{gdp_epsilon(mu, d):.2f}" for d in deltas))
    alphas = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7)
    print("   mechanism's trade-off as a GDP mu at FPR 1e-1 .. 1e-7 (Phi^-1(TPR) - "
          "Phi^-1(FPR), best test): " + ", ".join(f"{pmf.roc_mu(a):.2f}" for a in alphas))

    print(f"\n1. (a) current design, m = {s.canaries}, {s.guesses} + {s.guesses} guesses")
    header()
    current = [(s.guesses, s.guesses)]
    direct = run_trials(s, s.canaries, args.direct_trials, direct_draw(s), rng, current)
    print("direct (every step simulated):")
    row(s, s.canaries, current[0], direct, args.direct_trials, True)
    sampled = run_trials(s, s.canaries, args.trials, pmf.draw, rng, current)
    print("exact pmf:")
    row(s, s.canaries, current[0], sampled, args.trials, True)

    print("\n2. (b) designs (exact pmf; the Gaussian figure depends on the scores only: "
          "shown once per m)")
    header()
    for m in args.canaries:
        designs = designs_for(m)
        res = run_trials(s, m, args.trials, pmf.draw, rng, designs)
        for i, d in enumerate(designs):
            row(s, m, d, res, args.trials, i == 0)

    print("\n3. (c) m -> inf")
    g_mu, g_eps = pmf.gaussian_limit(s.delta)
    print(f"   Gaussian fit's plug-in limit: mu {g_mu:.3f}, epsilon {g_eps:.2f} (the "
          "confidence-bounded figure tends to it from below)")
    print(f"{'f':>9}{'acc in':>9}{'acc out':>9}{'logit(in)':>11}{'logit(out)':>11}"
          f"{'GDP mu of (TPR, FPR) in':>25}{' -> f-DP eps':>13}")
    for f in (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1):
        a_in = pmf.fraction_accuracy(f, top=True)
        a_out = pmf.fraction_accuracy(f, top=False)
        tpr, fpr = 2 * f * a_in, 2 * f * (1 - a_in)
        emp = float(special.ndtri(tpr) - special.ndtri(fpr))
        print(f"{f:>9g}{a_in:>9.4f}{a_out:>9.4f}{math.log(a_in / (1 - a_in)):>11.2f}"
              f"{math.log(a_out / (1 - a_out)):>11.2f}{emp:>25.3f}"
              f"{gdp_epsilon(emp, s.delta):>13.2f}")
    print("   bounds at the m -> inf accuracies (counts = expectation, no sampling noise), "
          "best k per m; Steinke / f-DP:")
    for m in (1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000, 1_000_000):
        cells = []
        for label, sym in (("in-only", False), ("symmetric", True)):
            best = (0.0, 0.0, 0, 0.0, 0)
            for k in (10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000):
                if (2 if sym else 1) * k > m // 2 or (m >= 1_000_000 and k < 1000):
                    continue
                r = 2 * k if sym else k
                v = expected_counts(pmf, m, k, k if sym else 0)
                st = steinke(m, r, v, s.delta)
                fd = fdp(m, r, v, s.delta) if m < 1_000_000 or k <= 10_000 else 0.0
                if st > best[0]:
                    best = (st, best[1], k, best[3], best[4])
                if fd > best[3]:
                    best = (best[0], best[1], best[2], fd, k)
            cells.append(f"{label} {best[0]:.2f} (k={best[2]}) / {best[3]:.2f} (k={best[4]})")
        print(f"   m = {m:>8}: " + "; ".join(cells))
    print("   all right (v = r = k), Steinke / f-DP:")
    for k in (50, 100, 250, 500, 1000):
        cells = [f"m={m}: {steinke(m, k, k, s.delta):.2f} / {fdp(m, k, k, s.delta):.2f}"
                 for m in (1000, 20_000, 100_000) if k <= m]
        print(f"   k = {k:>4}: " + "; ".join(cells))
    print(f"   p-value of the recorded counts at the claim: "
          f"{one_run_p_value(s.canaries, 2 * s.guesses, s.correct, s.claim, s.delta):.3g}; "
          f"schedule done in {time.perf_counter() - start:.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--direct-trials", type=int, default=200)
    p.add_argument("--schedules", default="dpdfd,dgd")
    p.add_argument("--canaries", default="1000,5000,20000,50000,100000")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    args.canaries = [int(x) for x in args.canaries.split(",")]
    for index, name in enumerate(args.schedules.split(",")):
        report(name, index, args)


if __name__ == "__main__":
    main()
