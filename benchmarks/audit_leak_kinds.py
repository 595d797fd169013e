"""The default audit on leaks of the kinds issue 31 lists, with samplers written here.

Each case is a sampler a user could write, with a claim it breaks and its true epsilon
computed exactly where the output space allows (never estimated from the audit itself):

- ``rare leak, discrete Laplace``: an exact discrete Laplace of scale 1 (epsilon 1) that, with
  probability 10^-3, releases ``1000 + x`` instead (an outcome the other input never gives):
  true epsilon infinite, the leak seen ~1,000 times per side at 10^6.
- ``sparse vector, unscaled query noise, strings``: Dwork-Roth's AboveThreshold run for c = 3
  answers (Lyu-Su-Li 2017, Alg. 1) with the query noise Lap(2 / eps2) instead of Lap(2 c /
  eps2), eps1 = eps2 = 1/2, 8 queries, the answers released as a string of ``"T"`` / ``"F"``;
  pair: all queries 0 against (-1, -1, -1, -1, -1, 1, 1, 1) (the worst of the 9 patterns
  "k queries down, the rest up"; with the correct Lap(12) none exceeds 0.57). True epsilon:
  the largest log-ratio over the 128 output strings, each probability a 1-D integral over the
  threshold noise (Simpson's rule on 40,001 points, +-60 scales; they sum to 1 within 1e-12):
  1.448; the best string set reaches 1.386 at 800,000 bounding samples (its Clopper-Pearson
  bound at the expected counts).
- ``answers with values, ragged``: a list of 1-3 ``(index, value)`` tuples (the length drawn
  independently of the data), each value the query's answer plus Lap(1) snapped to 2^-20,
  claimed 1-DP as if only one answer were released; every query moves by 1 between the inputs,
  so a list of three answers has privacy loss up to 3: true epsilon 3.
- ``discrete Gaussian, sigma for the wrong sensitivity``: exact discrete Gaussian calibrated
  to (1, 1e-5) at sensitivity 1, on a pair 2 apart; true epsilon at delta 1e-5 by exact
  enumeration of the pmf (``discrete_gaussian_delta``).
- ``Gaussian d = 10, L2 sensitivity taken as 1``: a Gaussian calibrated to (1, 1e-5) at
  sensitivity 1 (analytic Gaussian, Balle-Wang 2018), on a pair that differs by 1 in each of 10
  coordinates (L2 distance sqrt(10)), snapped to 2^-20 so that no floating-point artefact helps;
  true epsilon at 1e-5 from the analytic Gaussian at sensitivity sqrt(10).
- ``Gaussian noisy max, (index, value)``: report noisy max over 4 queries with Gaussian noise
  calibrated to (1, 1e-5) at sensitivity 1/2 (a factor 2 lost), releasing ``(index, noisy max)``
  as Python tuples (value snapped to 2^-20); pair: every query 0 against every query 1, so the
  index is uniform under both and the output is a location family of the maximum of 4
  Gaussians: true epsilon at 1e-5 from its density on a grid (``noisy_max_true_epsilon``).
- ``float Laplace (textbook)`` and ``ragged lengths``: the two the issue asks to catch at 10^5:
  ``x + rng.laplace(0, 1, n)`` (Mironov 2012: its doubles are not DP), and lists of integer
  answers of data-dependent length (one more answer for input 1 with probability 0.05).

Usage: ``python benchmarks/audit_leak_kinds.py [--samples 100000,1000000] [--seed 0]`` (default
policy: ``audit_sampler`` with no attack). Prints one line per case and size; exit 0.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import time

import numpy as np

from dpkd_audit._math.privacy import (
    analytic_gaussian_delta,
    calibrate_analytic_gaussian,
    calibrate_discrete_gaussian,
    discrete_gaussian_delta,
    smallest_satisfying,
)
from dpkd_audit.audit import audit_sampler
from dpkd_audit.mechanisms.samplers import discrete_gaussian, discrete_laplace

SNAP = 2.0 ** -20


def _snap(values: np.ndarray) -> np.ndarray:
    return np.round(values / SNAP) * SNAP


# ----------------------------------------------------------------------------- samplers

def rare_leak(x: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Discrete Laplace of scale 1 around x; with probability 1e-3, ``1000 + x``."""
    out = x + discrete_laplace(1, 1, n, rng=rng)
    leak = rng.random(n) < 1e-3
    out[leak] = 1000 + x
    return out


SVT_QUERIES = 8
SVT_ANSWERS = 3
SVT_THRESHOLD = 0.0


def _svt_run(q: np.ndarray, n: int, rng: np.random.Generator, query_scale: float):
    """AboveThreshold for up to SVT_ANSWERS answers; (answers "T"/"F" per query, noisy values)."""
    rho = rng.laplace(0.0, 2.0, size=(n, 1))  # Lap(1 / eps1), eps1 = 1/2
    noisy = q[None, :] + rng.laplace(0.0, query_scale, size=(n, q.size))
    above = noisy >= SVT_THRESHOLD + rho
    # stop after the SVT_ANSWERS-th "T"
    count = np.cumsum(above, axis=1)
    alive = (count - above) < SVT_ANSWERS
    return above, alive, noisy


def svt_unscaled_strings(q: np.ndarray, n: int, rng: np.random.Generator) -> list[str]:
    """Query noise Lap(2 / eps2) = Lap(4) where c = 3 answers need Lap(2 c / eps2) = Lap(12)."""
    above, alive, _ = _svt_run(q, n, rng, query_scale=4.0)
    chars = np.where(above, "T", "F")
    return ["".join(row[keep]) for row, keep in zip(chars, alive, strict=True)]


def answers_with_values(x: float, n: int, rng: np.random.Generator) -> list[list]:
    """1-3 (index, x + Lap(1)) tuples, the count independent of x: up to 3 units of loss."""
    lengths = rng.integers(1, 4, n)
    values = _snap(x + rng.laplace(0.0, 1.0, size=(n, 3)))
    return [[(i, float(values[j, i])) for i in range(int(k))] for j, k in enumerate(lengths)]


DG_SIGMA = calibrate_discrete_gaussian(1.0, 1e-5, 1)


def discrete_gaussian_wrong_sensitivity(x: int, n: int,
                                        rng: np.random.Generator) -> np.ndarray:
    from fractions import Fraction
    var = Fraction(DG_SIGMA ** 2).limit_denominator(1 << 16)
    return x + discrete_gaussian(var.numerator, var.denominator, n, rng=rng)


G_SIGMA = calibrate_analytic_gaussian(1.0, 1e-5, 1.0)


def gaussian_d10(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    return _snap(x[None, :] + rng.normal(0.0, G_SIGMA, size=(n, x.size)))


NM_SIGMA = calibrate_analytic_gaussian(1.0, 1e-5, 0.5)
NM_QUERIES = 4


def gaussian_noisy_max_tuples(q: np.ndarray, n: int, rng: np.random.Generator) -> list:
    noisy = q[None, :] + rng.normal(0.0, NM_SIGMA, size=(n, q.size))
    index = np.argmax(noisy, axis=1)
    top = _snap(noisy[np.arange(n), index])
    return list(zip(index.tolist(), top.tolist(), strict=True))


def float_laplace(x: float, n: int, rng: np.random.Generator) -> np.ndarray:
    return x + rng.laplace(0.0, 1.0, size=n)


def ragged_lengths(x: int, n: int, rng: np.random.Generator) -> list[list[int]]:
    lengths = 2 + rng.integers(0, 2, n) + x * (rng.random(n) < 0.05)
    return [rng.integers(0, 3, int(k)).tolist() for k in lengths]


# ----------------------------------------------------------------------------- true epsilons

def _svt_string_probabilities(q: np.ndarray, query_scale: float) -> dict[str, float]:
    """P(answer string) of ``_svt_run`` for every string, by Simpson's rule over rho."""
    grid = np.linspace(-60 * 2.0, 60 * 2.0, 40_001)
    density = np.exp(-np.abs(grid) / 2.0) / 4.0
    weights = np.ones_like(grid)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    weights *= (grid[1] - grid[0]) / 3.0

    def above(i: int) -> np.ndarray:  # P(q_i + nu >= T + rho | rho), nu ~ Lap(query_scale)
        z = (SVT_THRESHOLD + grid - q[i]) / query_scale
        return np.where(z <= 0, 1.0 - 0.5 * np.exp(np.minimum(z, 0)),
                        0.5 * np.exp(-np.maximum(z, 0)))

    ups = [above(i) for i in range(q.size)]
    probabilities = {}
    for length in range(1, q.size + 1):
        for pattern in itertools.product("TF", repeat=length):
            ts = pattern.count("T")
            stopped = ts == SVT_ANSWERS and pattern[-1] == "T"  # the c-th "T" ends a run
            if not (stopped or (length == q.size and ts < SVT_ANSWERS)):
                continue
            inner = np.ones_like(grid)
            for i, c in enumerate(pattern):
                inner = inner * (ups[i] if c == "T" else 1.0 - ups[i])
            probabilities["".join(pattern)] = float(np.sum(weights * density * inner))
    return probabilities


@functools.cache
def svt_true_epsilon(query_scale: float) -> float:
    a, b = svt_pair()
    pa, pb = (_svt_string_probabilities(q, query_scale) for q in (a, b))
    return max(abs(math.log(pa[s] / pb[s])) for s in pa if pa[s] > 0 and pb[s] > 0)


def svt_pair() -> tuple[np.ndarray, np.ndarray]:
    """All queries 0 against (-1, -1, -1, -1, -1, 1, 1, 1): each query's sensitivity 1."""
    return np.zeros(SVT_QUERIES), np.array([-1.0] * 5 + [1.0] * (SVT_QUERIES - 5))


def noisy_max_true_epsilon(delta: float) -> float:
    """Epsilon at ``delta`` of the maximum of NM_QUERIES N(0, NM_SIGMA^2) shifted by 1.

    Density g(v) = k phi(v) Phi(v)^(k-1) on a grid of step 1e-4 over +-40 sigma; delta(eps) =
    max over both directions of sum max(0, g(v) - e^eps g(v - 1)) dv (the index is uniform
    under both inputs and independent of the shift, so it carries nothing).
    """
    from scipy.stats import norm

    step = 1e-4
    v = np.arange(-40 * NM_SIGMA, 40 * NM_SIGMA + 1, step)
    k = NM_QUERIES

    def log_density(u: np.ndarray) -> np.ndarray:
        return (math.log(k) + norm.logpdf(u, scale=NM_SIGMA)
                + (k - 1) * norm.logcdf(u, scale=NM_SIGMA))

    a, b = log_density(v), log_density(v - 1.0)

    def delta_of(eps: float) -> float:
        return max(float(np.sum(np.maximum(0.0, np.exp(p) - np.exp(eps + r))) * step)
                   for p, r in ((a, b), (b, a)))

    return _epsilon_at(delta_of, delta)


def _epsilon_at(delta_of, delta: float) -> float:
    return smallest_satisfying(lambda e: delta_of(e), delta, 0.0, 100.0)


CASES = [
    ("rare leak, discrete Laplace", rare_leak, 0, 1, (1.0, 0.0), lambda: math.inf),
    ("sparse vector, unscaled noise, strings", svt_unscaled_strings, *svt_pair(), (1.0, 0.0),
     lambda: svt_true_epsilon(4.0)),
    ("answers with values, ragged", answers_with_values, 0.0, 1.0, (1.0, 0.0), lambda: 3.0),
    ("discrete Gaussian, wrong sensitivity", discrete_gaussian_wrong_sensitivity, 0, 2,
     (1.0, 1e-5), lambda: _epsilon_at(
         lambda e: discrete_gaussian_delta(e, DG_SIGMA, 2), 1e-5)),
    ("Gaussian d=10, L2 taken as 1", gaussian_d10, np.zeros(10), np.ones(10), (1.0, 1e-5),
     lambda: _epsilon_at(lambda e: analytic_gaussian_delta(e, G_SIGMA, math.sqrt(10)), 1e-5)),
    ("Gaussian noisy max, (index, value)", gaussian_noisy_max_tuples, np.zeros(NM_QUERIES),
     np.ones(NM_QUERIES), (1.0, 1e-5), lambda: noisy_max_true_epsilon(1e-5)),
    ("float Laplace (textbook)", float_laplace, 0.0, 1.0, (1.0, 0.0), lambda: math.inf),
    ("ragged lengths", ragged_lengths, 0, 1, (1.0, 0.0), lambda: math.inf),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="100000,1000000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cases", help="comma-separated case numbers (1-based; default all)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.samples.split(",")]
    chosen = (range(len(CASES)) if args.cases is None
              else [int(c) - 1 for c in args.cases.split(",")])
    print(f"{'case':40} {'claim':>11} {'true':>7} {'n':>8} {'bound':>8} {'verdict':>12} "
          f"{'attack':>10} {'s':>6}", flush=True)
    for i in chosen:
        name, sampler, x, xp, (eps, delta), true = CASES[i]
        true_eps = true()
        claim = f"{eps:g}" if delta == 0 else f"({eps:g}, {delta:g})"
        for n in sizes:
            start = time.perf_counter()
            res = audit_sampler(sampler, x, xp, epsilon=eps, delta=delta, n=n,
                                rng=np.random.default_rng(args.seed))
            print(f"{name:40} {claim:>11} {true_eps:7.3f} {n:8.0e} {res.epsilon_lower:8.4f} "
                  f"{res.verdict.value:>12} {res.attack.value:>10} "
                  f"{time.perf_counter() - start:6.1f}", flush=True)


if __name__ == "__main__":
    main()
