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

Issue 33 adds the six kinds an external check found missed at 10^5 per side (a value inside a
string, a rare ``("debug", x)`` marker, two correlated bits among 16, snapping whose clamp follows
the query, report-noisy-max as ``(index, value)`` tuples, a dict release), eleven broken kinds of
our own and twelve correct mechanisms (``CORRECT``: claims that hold), each documented at its
sampler with its exact true epsilon.

Usage: ``python benchmarks/audit_leak_kinds.py [--samples 100000,1000000] [--seed 0 | 0,3 |
0-9] [--cases 9,10] [--correct]`` (default policy: ``audit_sampler`` with no attack; one line per
case, size and seed), and ``--false-alarms RUNS --samples 2000``: the correct mechanisms over
RUNS seeds, counting violations. Exit 0.
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


# ----------------------------------------------------------------------------- more kinds
# (issue 33: the kinds an external check found missed at 10^5, then kinds of our own, then
# correct mechanisms for the false-alarm count). Each true epsilon is computed exactly from
# the mechanism's distribution, never from an audit.

def string_value(x: int, n: int, rng: np.random.Generator) -> list[str]:
    """``f"k:{x + noise:.3f}"``, the noise on the 0.001 grid with P(k) ~ exp(-4.5 |k| / 10^4).

    A query of sensitivity 100 (the pair 0 / 100) with noise of scale 100 / 4.5 for a claim of
    1: the noise is an exact discrete Laplace of scale 10^5 / 4.5 grid steps (a rounded
    continuous Laplace without its floating-point artefacts); the pair is 10^5 steps apart, so
    every outcome at or below 0 has log-ratio exactly 4.5: true epsilon 4.5. A string recurs
    ~0.2 times per 10^4 outputs: as opaque keys they show nothing.
    """
    steps = x * 1000 + discrete_laplace(200000, 9, n, rng=rng)
    return [f"k:{int(s) / 1000:.3f}" for s in steps]


def string_value_correct(x: int, n: int, rng: np.random.Generator) -> list[str]:
    """As :func:`string_value` at scale 10^5 grid steps (scale 100): exactly 1-DP."""
    steps = x * 1000 + discrete_laplace(100000, 1, n, rng=rng)
    return [f"k:{int(s) / 1000:.3f}" for s in steps]


MARKER_RATE = 1e-3


def debug_marker(x: float, n: int, rng: np.random.Generator) -> list:
    """``x + Lap(1)`` on 2^-20; with probability 10^-3 the tuple ``("debug", x)``: inf."""
    values = _snap(x + rng.laplace(0.0, 1.0, n)).tolist()
    for j in np.flatnonzero(rng.random(n) < MARKER_RATE):
        values[j] = ("debug", x)
    return values


def debug_marker_constant(x: float, n: int, rng: np.random.Generator) -> list:
    """As :func:`debug_marker` but the marker carries no data (``("debug", 0)``): 1-DP."""
    values = _snap(x + rng.laplace(0.0, 1.0, n)).tolist()
    for j in np.flatnonzero(rng.random(n) < MARKER_RATE):
        values[j] = ("debug", 0)
    return values


BITS = 16
COPY = 0.8


def correlated_bits(x: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """16 fair bits; under input 1 bit 11 copies bit 3 with probability 0.8 (else stays fair).

    Every marginal is fair under both inputs; each cell (b3, b11) with b3 != b11 has
    probability 0.2 / 4 = 0.05 under input 1 against 0.25 under input 0, each with b3 = b11
    0.45 against 0.25: true epsilon ln(0.25 / 0.05) = ln 5 (the other cells give ln 1.8).
    """
    bits = rng.integers(0, 2, size=(n, BITS))
    if x:
        copy = rng.random(n) < COPY
        bits[copy, 11] = bits[copy, 3]
    return bits


def correlated_bits_correct(x: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Bit 3: randomized response of x (keep e / (1 + e)); bit 11 copies it w.p. 0.8.

    The copy happens under *both* inputs (post-processing of bit 3 with data-independent
    coins): exactly 1-DP.
    """
    bits = rng.integers(0, 2, size=(n, BITS))
    keep = rng.random(n) < math.e / (1 + math.e)
    bits[:, 3] = np.where(keep, x, 1 - x)
    copy = rng.random(n) < COPY
    bits[copy, 11] = bits[copy, 3]
    return bits


SNAP_EPS = 0.3
SNAP_GRID = 4.0   # Mironov 2012: the smallest power of 2 >= the Laplace scale 1 / 0.3
SNAP_BOUND = 20.0


def snapping_centred(x: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Snapping: x + Lap(1 / 0.3) rounded to multiples of 4, clamped to [x - 20, x + 20].

    The clamp follows the query: ``-20`` (P = P(noise < -18) = e^-5.4 / 2 under input 0) can
    only occur under input 0, and ``21`` only under input 1: true epsilon infinite.
    """
    y = np.round((x + rng.laplace(0.0, 1.0 / SNAP_EPS, n)) / SNAP_GRID) * SNAP_GRID
    return np.clip(y, x - SNAP_BOUND, x + SNAP_BOUND)


def snapping_fixed(x: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Snapping with the clamp fixed at [-20, 20]: post-processing of x + Lap(1 / 0.3)."""
    y = np.round((x + rng.laplace(0.0, 1.0 / SNAP_EPS, n)) / SNAP_GRID) * SNAP_GRID
    return np.clip(y, -SNAP_BOUND, SNAP_BOUND)


RNM_QUERIES = 3
RNM_SCALE = 2.0 / 3.0
RNM_PAIR_ONE = (np.array([1.0, 0.0, 0.0]), np.zeros(3))


def laplace_noisy_max_tuples(q: np.ndarray, n: int, rng: np.random.Generator, *,
                             scale: float = RNM_SCALE) -> list:
    """Report noisy max with Lap(b) over 3 queries, released as ``(index, noisy max)`` tuples.

    On the pair (1, 0, 0) / (0, 0, 0) the density of ``(i, v)`` is ``f(v - q_i) prod_{j != i}
    F(v - q_j)`` (f, F: the Laplace density and distribution): for i = 0 the log-ratio is
    ``ln f(v - 1) - ln f(v)``, in [-1/b, 1/b] and equal to 1/b for every v >= 1; for i != 0 it
    is ``ln F(v - 1) - ln F(v)``, in [-1/b, 0]. True epsilon 1/b exactly: 1.5 at b = 2/3, claimed
    1 (the index alone, with Lap(2), would be). Only joint events (``i = 0 and v > t``) see it.
    """
    noisy = q[None, :] + rng.laplace(0.0, scale, size=(n, q.size))
    index = np.argmax(noisy, axis=1)
    top = _snap(noisy[np.arange(n), index])
    return list(zip(index.tolist(), top.tolist(), strict=True))


HIST_BINS = 6


def sparse_histogram(x: int, n: int, rng: np.random.Generator, *,
                     threshold: float = 3.0) -> list[dict]:
    """Stability-based histogram released as a dict {bin: noisy count}, threshold too low.

    Bins 0-4 hold 20 records each under both inputs; input 1 adds a record in bin 5 (empty under
    input 0). Each non-empty bin gets Lap(1) and is released when its noisy count exceeds the
    threshold. Claimed (1, 1e-5), which needs a threshold of 1 + ln(1 / (2 delta)) = 11.8; at 3
    bin 5 appears with probability e^-2 / 2 = 0.068 > delta under input 1 and never under input
    0: true epsilon infinite at delta = 1e-5.
    """
    counts = np.full((n, HIST_BINS), 20.0)
    counts[:, HIST_BINS - 1] = float(x)
    noisy = _snap(counts + rng.laplace(0.0, 1.0, size=counts.shape))
    released = (counts > 0) & (noisy > threshold)
    return [{int(b): float(noisy[j, b]) for b in np.flatnonzero(released[j])}
            for j in range(n)]


def dense_histogram_dict(x: int, n: int, rng: np.random.Generator) -> list[dict]:
    """{bin: count + Lap(1)} for 6 fixed bins, released when above 3; one bin moves by 1.

    Whether a bin is released is a function of its noisy count: post-processing of the Laplace
    histogram, exactly 1-DP.
    """
    counts = np.full((n, HIST_BINS), 20.0)
    counts[:, 0] = 3.0 + x
    noisy = _snap(counts + rng.laplace(0.0, 1.0, size=counts.shape))
    return [{int(b): float(noisy[j, b]) for b in np.flatnonzero(noisy[j] > 3.0)}
            for j in range(n)]


def rr_sampler(keep: float, k: int):
    """k-ary randomized response keeping the true value w.p. ``keep`` (else uniform over the
    k - 1 others)."""
    def sample(x: int, n: int, rng: np.random.Generator) -> np.ndarray:
        other = (x + rng.integers(1, k, n)) % k
        return np.where(rng.random(n) < keep, x, other).astype(np.int64)
    return sample


def rr_keep(eps: float, k: int) -> float:
    return math.exp(eps) / (math.exp(eps) + k - 1)


def snapped_laplace(x: float, n: int, rng: np.random.Generator, *,
                    scale: float = 1.0) -> np.ndarray:
    return _snap(x + rng.laplace(0.0, scale, n))


def laplace_on_2_10(x: float, n: int, rng: np.random.Generator) -> np.ndarray:
    return np.round((x + rng.laplace(0.0, 1.0, n)) * 1024.0) / 1024.0


def discrete_laplace_1(x: int, n: int, rng: np.random.Generator) -> np.ndarray:
    return x + discrete_laplace(1, 1, n, rng=rng)


EM_UTILITIES = (np.zeros(5), np.array([1.0, 0.0, 0.0, 0.0, -1.0]))


def exponential_mechanism_no_half(u: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Exponential mechanism with weights exp(eps u) for eps = 1 (the 1/2 forgotten)."""
    p = np.exp(u - u.max())
    return rng.choice(u.size, size=n, p=p / p.sum()).astype(np.int64)


def exponential_mechanism_true_epsilon() -> float:
    a, b = (np.exp(u) / np.exp(u).sum() for u in EM_UTILITIES)
    return float(np.max(np.abs(np.log(a / b))))


TRUNC_HI = 10


def truncated_geometric(x: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Discrete Laplace of scale 1 around x kept in [0, 10] by rejection (not by clamping)."""
    out = np.empty(n, dtype=np.int64)
    todo = np.arange(n)
    while todo.size:
        draw = x + discrete_laplace(1, 1, todo.size, rng=rng)
        ok = (draw >= 0) & (draw <= TRUNC_HI)
        out[todo[ok]] = draw[ok]
        todo = todo[~ok]
    return out


def truncated_geometric_true_epsilon() -> float:
    k = np.arange(TRUNC_HI + 1)
    a, b = np.exp(-np.abs(k - 0.0)), np.exp(-np.abs(k - 1.0))
    return float(np.max(np.abs(np.log((a / a.sum()) / (b / b.sum())))))


def vector_laplace_l1(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Laplace(2.5) on 5 coordinates, each moving by 1 (L1 sensitivity 5 taken as 2.5): eps 2."""
    return _snap(x[None, :] + rng.laplace(0.0, 2.5, size=(n, x.size)))


def count_string(x: int, n: int, rng: np.random.Generator) -> list[str]:
    """``"count=<x + discrete Laplace of scale 1/2>"``: true epsilon 2."""
    return [f"count={int(v)}" for v in x + discrete_laplace(1, 2, n, rng=rng)]


DEBUG_FIELD_RATE = 2e-3


def dict_debug_field(x: float, n: int, rng: np.random.Generator) -> list[dict]:
    """{"mean": x + Lap(1)}; w.p. 2e-3 also {"n": x} (a debug field): true epsilon infinite."""
    values = _snap(x + rng.laplace(0.0, 1.0, n))
    extra = rng.random(n) < DEBUG_FIELD_RATE
    return [{"mean": float(v), "n": x} if e else {"mean": float(v)}
            for v, e in zip(values, extra, strict=True)]


RNM_PAIR = (np.array([1.0, 0.0]), np.array([0.0, 1.0]))


def noisy_max_index_halved(q: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Report noisy max (index) over 2 queries with Lap(1/2) where Lap(1) was meant."""
    noisy = q[None, :] + rng.laplace(0.0, 0.5, size=(n, q.size))
    return np.argmax(noisy, axis=1).astype(np.int64)


def noisy_max_index_true_epsilon(scale: float = 0.5) -> float:
    """D = n1 - n0 (iid Lap(b)): P(D > t) = (2b + t) / (4b) e^(-t/b) for t >= 0; index 0 has
    P(D < 1) under (1, 0) and P(D < -1) = P(D > 1) under (0, 1)."""
    tail = (2 * scale + 1.0) / (4 * scale) * math.exp(-1.0 / scale)
    return math.log((1.0 - tail) / tail)


def canary_bit(x: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """16 fair bits but bit 5, randomized response of x keeping w.p. 0.9: epsilon ln 9."""
    bits = rng.integers(0, 2, size=(n, BITS))
    bits[:, 5] = np.where(rng.random(n) < 0.9, x, 1 - x)
    return bits


def clamp_centred_int(x: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """x + discrete Laplace(1) clamped to [x - 4, x + 4]: -4 occurs only under 0: inf."""
    return np.clip(x + discrete_laplace(1, 1, n, rng=rng), x - 4, x + 4)


def label_value(label_scale: float, value_scale: float):
    """(``"high"`` if x + Lap(label_scale) > 1/2 else ``"low"``, x + Lap(value_scale))."""
    def sample(x: float, n: int, rng: np.random.Generator) -> list[tuple]:
        high = x + rng.laplace(0.0, label_scale, n) > 0.5
        values = _snap(x + rng.laplace(0.0, value_scale, n)).tolist()
        return [("high" if h else "low", v) for h, v in zip(high, values, strict=True)]
    return sample


def label_value_true_epsilon(label_scale: float, value_scale: float) -> float:
    """ln of the label's ratio (P(x + L > 1/2) for x = 1 over x = 0) plus 1 / value_scale: both
    suprema are reached together (label "high", value >= 1)."""
    p0 = 0.5 * math.exp(-0.5 / label_scale)
    return math.log((1.0 - p0) / p0) + 1.0 / value_scale


def ragged_answers(x: float, n: int, rng: np.random.Generator) -> list[list[float]]:
    """1-4 answers (length independent of x), each x + Laplace(4) on 2^-16: 1-DP in all."""
    lengths = rng.integers(1, 5, n)
    values = np.round((x + rng.laplace(0.0, 4.0, (n, 4))) * 2**16) / 2**16
    return [values[j, :k].tolist() for j, k in enumerate(lengths)]


def rnm_true_epsilon(scale: float = RNM_SCALE) -> float:
    return 1.0 / scale


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
    # issue 33, the six kinds found by the external check
    ("value inside a string 'k:0.734'", string_value, 0, 100, (1.0, 0.0), lambda: 4.5),
    ("('debug', x) marker w.p. 1e-3", debug_marker, 0.0, 1.0, (1.0, 0.0), lambda: math.inf),
    ("2 of 16 bits correlated", correlated_bits, 0, 1, (1.0, 0.0), lambda: math.log(5.0)),
    ("snapping, clamp centred on query", snapping_centred, 0.0, 1.0, (SNAP_EPS, 0.0),
     lambda: math.inf),
    ("Laplace noisy max, (index, value)", laplace_noisy_max_tuples, *RNM_PAIR_ONE, (1.0, 0.0),
     rnm_true_epsilon),
    ("sparse histogram dict, low threshold", sparse_histogram, 0, 1, (1.0, 1e-5),
     lambda: math.inf),
    # issue 33, kinds of our own
    ("4-ary RR, keep for eps 2", rr_sampler(rr_keep(2.0, 4), 4), 0, 1, (1.0, 0.0),
     lambda: 2.0),
    ("Laplace, pair 2 apart", snapped_laplace, 0.0, 2.0, (1.0, 0.0), lambda: 2.0),
    ("exponential mechanism, 1/2 forgotten", exponential_mechanism_no_half, *EM_UTILITIES,
     (1.0, 0.0), exponential_mechanism_true_epsilon),
    ("geometric truncated by rejection", truncated_geometric, 0, 1, (1.0, 0.0),
     truncated_geometric_true_epsilon),
    ("Laplace d=5, L1 taken as 2.5", vector_laplace_l1, np.zeros(5), np.ones(5), (1.0, 0.0),
     lambda: 2.0),
    ("count inside a string, scale 1/2", count_string, 0, 1, (1.0, 0.0), lambda: 2.0),
    ("dict with a rare debug field", dict_debug_field, 0.0, 1.0, (1.0, 0.0), lambda: math.inf),
    ("noisy max index, noise halved", noisy_max_index_halved, *RNM_PAIR, (1.0, 0.0),
     noisy_max_index_true_epsilon),
    ("canary bit among 16", canary_bit, 0, 1, (1.0, 0.0), lambda: math.log(9.0)),
    ("geometric, clamp centred on query", clamp_centred_int, 0, 1, (1.0, 0.0),
     lambda: math.inf),
    ("(label, value), label under-noised", label_value(0.25, 1.0), 0.0, 1.0, (1.0, 0.0),
     lambda: label_value_true_epsilon(0.25, 1.0)),
    ("sparse histogram dict, rare new bin", functools.partial(sparse_histogram, threshold=6.0),
     0, 1, (1.0, 1e-5), lambda: math.inf),
]

#: Correct mechanisms (claims that hold: claim >= true epsilon, computed exactly).
CORRECT = [
    ("Laplace on 2^-20", snapped_laplace, 0.0, 1.0, (1.0, 0.0), lambda: 1.0),
    ("Laplace on 2^-10", laplace_on_2_10, 0.0, 1.0, (1.0, 0.0), lambda: 1.0),
    ("discrete Laplace", discrete_laplace_1, 0, 1, (1.0, 0.0), lambda: 1.0),
    ("4-ary RR", rr_sampler(rr_keep(1.0, 4), 4), 0, 1, (1.0, 0.0), lambda: 1.0),
    ("value inside a string, eps 1", string_value_correct, 0, 100, (1.0, 0.0), lambda: 1.0),
    ("('debug', 0) marker, data-free", debug_marker_constant, 0.0, 1.0, (1.0, 0.0),
     lambda: 1.0),
    ("16 bits, correlation data-free", correlated_bits_correct, 0, 1, (1.0, 0.0), lambda: 1.0),
    ("snapping, fixed clamp", snapping_fixed, 0.0, 1.0, (SNAP_EPS, 0.0), lambda: SNAP_EPS),
    ("Laplace noisy max tuples, b = 1", functools.partial(laplace_noisy_max_tuples, scale=1.0),
     *RNM_PAIR_ONE, (1.0, 0.0), lambda: rnm_true_epsilon(1.0)),
    ("histogram dict, fixed bins", dense_histogram_dict, 0, 1, (1.0, 0.0), lambda: 1.0),
    ("(label, value), 1/2 + 1/2", label_value(2.0, 2.0), 0.0, 1.0, (1.0, 0.0),
     lambda: label_value_true_epsilon(2.0, 2.0)),
    ("ragged answers", ragged_answers, 0.0, 1.0, (1.0, 0.0), lambda: 1.0),
]


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = (int(t) for t in text.split("-"))
        return list(range(lo, hi + 1))
    return [int(t) for t in text.split(",")]


#: Correct cases audited at more samples in the false-alarm mode: a batch of a data-free marker
#: with no marker in it is plain floats, which the auditor refuses beside a batch with one.
FALSE_ALARM_MIN_N = {"('debug', 0) marker, data-free": 20_000}


def false_alarms(runs: int, n: int, chosen: list[int]) -> None:
    """Audit every correct mechanism ``runs`` times (seeds 7000, 7001, ...) at ``n``."""
    total = total_above = audits = 0
    for i in chosen:
        name, sampler, x, xp, (eps, delta), true = CORRECT[i]
        size = max(n, FALSE_ALARM_MIN_N.get(name, 0))
        start = time.perf_counter()
        results, refused = [], 0
        for r in range(runs):
            try:
                results.append(audit_sampler(sampler, x, xp, epsilon=eps, delta=delta, n=size,
                                             rng=np.random.default_rng(7000 + r)))
            except ValueError:  # outputs of two kinds (see FALSE_ALARM_MIN_N)
                refused += 1
        flagged = sum(r.violation for r in results)
        above = sum(r.epsilon_lower > eps for r in results)  # before any confirmation
        total += flagged
        total_above += above
        audits += len(results)
        worst = max((r.epsilon_lower for r in results), default=float("nan"))
        more = f", {refused} refused" if refused else ""
        print(f"{name:40} claim {eps:g} true {true():.3f} n={size}: false alarms "
              f"{flagged}/{len(results)} (bound > claim {above}){more}, largest bound "
              f"{worst:.4f} "
              f"({time.perf_counter() - start:.1f} s)", flush=True)
    print(f"total false alarms {total}/{audits} (bounds above the claim before confirmation: "
          f"{total_above})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="100000,1000000")
    parser.add_argument("--seed", default="0", help="a seed, a list 0,3,5 or a range 0-9")
    parser.add_argument("--cases", help="comma-separated case numbers (1-based; default all)")
    parser.add_argument("--correct", action="store_true",
                        help="run the correct mechanisms (CORRECT) instead of the broken ones")
    parser.add_argument("--false-alarms", type=int, metavar="RUNS",
                        help="count violations of the correct mechanisms over RUNS seeds at the "
                             "first --samples size (e.g. --false-alarms 200 --samples 2000)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.samples.split(",")]
    table = CORRECT if args.correct or args.false_alarms else CASES
    chosen = (list(range(len(table))) if args.cases is None
              else [int(c) - 1 for c in args.cases.split(",")])
    if args.false_alarms:
        false_alarms(args.false_alarms, sizes[0], chosen)
        return
    print(f"{'#':>2} {'case':40} {'claim':>11} {'true':>7} {'n':>8} {'seed':>4} {'bound':>8} "
          f"{'verdict':>12} {'attack':>10} {'s':>6}", flush=True)
    for i in chosen:
        name, sampler, x, xp, (eps, delta), true = table[i]
        true_eps = true()
        claim = f"{eps:g}" if delta == 0 else f"({eps:g}, {delta:g})"
        for n in sizes:
            for seed in _seeds(args.seed):
                start = time.perf_counter()
                try:
                    res = audit_sampler(sampler, x, xp, epsilon=eps, delta=delta, n=n,
                                        rng=np.random.default_rng(seed))
                except ValueError as exc:  # an output the auditor refuses
                    print(f"{i + 1:2} {name:40} {claim:>11} {true_eps:7.3f} {n:8.0e} "
                          f"{seed:4} refused: {str(exc)[:60]}", flush=True)
                    continue
                print(f"{i + 1:2} {name:40} {claim:>11} {true_eps:7.3f} {n:8.0e} {seed:4} "
                      f"{res.epsilon_lower:8.4f} {res.verdict.value:>12} "
                      f"{res.attack.value:>10} {time.perf_counter() - start:6.1f}", flush=True)


if __name__ == "__main__":
    main()
