"""Exact compositions of finite privacy loss distributions, discretised once (no FFT).

Helpers of :mod:`dpkd_audit.accountants.pld`. A *finite* PLD has finitely many atoms (losses
L_i with probabilities p_i) plus a mass at +inf; its hockey-stick curve is
delta(eps) = inf_mass + sum_{L_i > eps} p_i (1 - e^(eps - L_i)) (Sommer-Meiser-Mohammadi 2019,
Thm 1). Three steps here:

1. :func:`finite_pld`: the pessimistic connect-the-dots discretisation (Doroshenko, Ghazi,
   Kamath, Kumar, Manurangsi, PETS 2022, Algorithm 1) of such a curve, evaluated exactly on a
   grid bracketing every atom.
2. :func:`binomial_pld`: the k-fold composition of a two-atom pair (pure or (eps, delta)
   dominating pair) as a binomial (Kairouz-Oh-Viswanath 2015, Thm 3.3).
3. :func:`lattice_pld`: the k-fold composition of any finite PLD whose losses are integer
   multiples of one step L (:class:`LatticeAtoms`, e.g. k-ary randomized response: losses
   +L, -L, 0). Composing multiplies generating polynomials, so the composed losses stay on the
   lattice and the k-fold law is the k-th power of the one-release polynomial. It is computed
   by repeated squaring with direct convolutions (``np.convolve``: sums of non-negative
   products only, so every atom keeps full relative precision, unlike FFT round-off), in
   space linear in the support, and discretised once.

Atoms below ``ATOM_FLOOR`` (1e-30) are dropped pessimistically after every convolution: the
high-loss side goes to +inf, the low-loss side is moved up onto the lowest kept atom. Both
moves make the loss stochastically larger, which can only raise every delta(eps) (the integrand
(1 - e^(eps - L))_+ is non-decreasing in L), and convolution preserves that order, so the result
dominates the exact composition; the moved mass is below 1e-30 per atom.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import numpy as np
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as _pld
from scipy import special, stats

from dpkd_audit._math.powers import combine_power
from dpkd_audit.accountants.binomial import binomial_window

__all__ = [
    "ATOM_FLOOR",
    "LatticeAtoms",
    "binomial_pld",
    "connect_dots",
    "finite_pld",
    "lattice_pld",
    "lattice_power",
    "lattice_width",
]

#: Atoms of an exact composition below this probability are merged (pessimistically).
ATOM_FLOOR = 1e-30
_LOG_ATOM_FLOOR = math.log(ATOM_FLOOR)

#: Same threshold as dp_accounting's sparse/dense switch (pld_pmf._MAX_PMF_SPARSE_SIZE).
_MAX_SPARSE_POINTS = 1000


# =========================================================================== discretisation


def connect_dots(grid: np.ndarray, deltas: np.ndarray, interval: float) -> Any:
    """Pessimistic PLD pmf supported on ``grid * interval`` (and +inf).

    Doroshenko, Ghazi, Kamath, Kumar, Manurangsi, "Connect the Dots", PETS 2022, Algorithm 1:
    with eps_i = grid_i * interval and delta_i the exact hockey-stick divergence at eps_i, put
    y_{i-1} + z_i on eps_i and delta_m on +inf, where y_0 = 1 - delta_1,
    y_i = (delta_{i+1} - delta_i)/(e^(eps_i - eps_{i+1}) - 1) and
    z_i = (delta_{i+1} - delta_i)/(e^(eps_{i+1} - eps_i) - 1) (z_m = 0). Its hockey-stick curve
    interpolates the exact one linearly in e^eps between grid points; the exact curve is convex
    in e^eps (a mean of hinge functions), so the result dominates the original pair (and keeps
    its mean loss: no per-composition drift). Same formula as dp_accounting's
    ``create_pmf_pessimistic_connect_dots``, written with numpy (no dict of the whole range).

    Args:
        grid: Strictly increasing integer grid indices.
        deltas: The exact curve at ``grid * interval``.
        interval: Grid step of the privacy-loss values.

    Returns:
        A dp_accounting ``SparsePLDPmf`` (few or far-apart points) or ``DensePLDPmf``.
    """
    deltas = np.minimum.accumulate(np.clip(deltas, 0.0, 1.0))
    gaps = np.diff(grid) * interval
    steps = np.diff(deltas)
    probs = np.concatenate([[1.0 - deltas[0]], steps / np.expm1(-gaps)])  # y_{i-1}
    with np.errstate(over="ignore"):  # gaps above ~709: e^gap = inf, z_i = 0 (exact limit)
        probs[:-1] += steps / np.expm1(gaps)  # z_i
    probs = np.maximum(probs, 0.0)
    span = int(grid[-1] - grid[0]) + 1
    if grid.size <= _MAX_SPARSE_POINTS or span > 16 * grid.size:
        # few or far-apart atoms (e.g. a composition of large epsilons): keep sparse
        return pld_pmf.SparsePLDPmf(dict(zip(grid.tolist(), probs.tolist(), strict=True)),
                                    interval, float(deltas[-1]), True)
    dense = np.zeros(span)
    dense[grid - grid[0]] = probs
    return pld_pmf.DensePLDPmf(interval, int(grid[0]), dense, float(deltas[-1]), True)


def finite_pld(losses: np.ndarray, probs: np.ndarray, infinity_mass: float,
               interval: float) -> _pld.PrivacyLossDistribution:
    """Pessimistic connect-the-dots PLD of a finite symmetric privacy-loss distribution.

    The grid is the two grid points bracketing every atom, so the discretised curve is exact
    at every grid point and between atoms (where the curve is U - e^eps W, linear in e^eps):
    epsilon at any delta is at most one grid step above the exact one.
    delta(eps) = inf_mass + sum_{L > eps} p (1 - e^(eps-L)) is evaluated for all grid points at
    once from suffix sums (p and p e^-L, the latter in log space so that losses in the
    thousands do not underflow).

    Args:
        losses: Finite privacy losses of the atoms (any order).
        probs: Their probabilities (>= 0).
        infinity_mass: Probability of the loss +inf.
        interval: Grid step of the privacy-loss values.
    """
    order = np.argsort(losses)
    losses = np.asarray(losses, dtype=np.float64)[order]
    probs = np.asarray(probs, dtype=np.float64)[order]
    grid = np.unique(np.concatenate([np.floor(losses / interval),
                                     np.ceil(losses / interval)])).astype(np.int64)
    points = grid * interval
    above = np.searchsorted(losses, points, side="right")  # first atom strictly above
    mass_above = np.concatenate([np.cumsum(probs[::-1])[::-1], [0.0]])
    with np.errstate(divide="ignore"):
        log_terms = np.log(probs) - losses
    log_lower = np.concatenate([np.logaddexp.accumulate(log_terms[::-1])[::-1], [-np.inf]])
    deltas = infinity_mass + mass_above[above] - np.exp(points + log_lower[above])
    return _pld.PrivacyLossDistribution(connect_dots(grid, deltas, interval))


# =========================================================================== two atoms


def _survival(delta: float, count: int) -> tuple[float, float]:
    """(lost, survive): P[some of ``count`` releases hits +inf] = 1 - (1 - delta)^count."""
    lost = delta if count == 1 else -math.expm1(count * math.log1p(-delta))
    return lost, 1.0 - lost


@functools.lru_cache(maxsize=16)
def binomial_pld(epsilon: float, delta: float, count: int,
                 interval: float) -> _pld.PrivacyLossDistribution:
    """``count``-fold composition of the (eps, delta) dominating pair, without FFT.

    One release: +inf w.p. delta, +-eps with (1 - delta) times the binary-RR weights
    (Kairouz-Oh-Viswanath 2015, Thm 2.2). Composed: +inf w.p. 1 - (1 - delta)^count, else loss
    (count - 2j) eps with J ~ Bin(count, 1/(1 + e^eps)) (the exact optimal composition,
    KOV 2015, Thm 3.3). Atoms below 1e-30 are dropped pessimistically: the high-loss side to
    +inf, the low-loss side onto the lowest kept atom. Then discretised once by connect-the-dots.

    Args:
        epsilon: Loss of one release (> 0).
        delta: Mass at +inf of one release, in [0, 1).
        count: Number of releases (>= 1).
        interval: Grid step of the privacy-loss values.
    """
    lo, hi, below, above = (0, count, 0.0, 0.0) if count < 1 << 20 else binomial_window(
        count, epsilon, 1e-32)  # a window of J for large counts, its tails charged below
    j = np.arange(lo, hi + 1)
    log_p = stats.binom.logpmf(j, count, special.expit(-epsilon))  # P[loss -eps] = 1/(1+e^eps)
    keep = np.flatnonzero(log_p >= _LOG_ATOM_FLOOR)
    first, last = int(keep[0]), int(keep[-1])
    probs = np.exp(log_p[first:last + 1])
    # j below the window or below first: largest losses -> +inf
    high_tail = below + float(np.exp(log_p[:first]).sum())
    # j above: smallest losses -> up onto the last kept atom
    probs[-1] += above + float(np.exp(log_p[last + 1:]).sum())
    lost, survive = _survival(delta, count)  # one release keeps delta bit for bit
    losses = (count - 2.0 * j[first:last + 1]) * epsilon  # j, count <= 1e12: exact floats
    infinity = lost + survive * high_tail
    return finite_pld(losses, survive * probs, infinity, interval)


# =========================================================================== lattice


@dataclasses.dataclass(frozen=True)
class LatticeAtoms:
    """One release's finite PLD with every finite loss an integer multiple of ``step``.

    Attributes:
        step: Lattice step L > 0 of the losses.
        offset: Lattice index (loss / L) of ``probs[0]``.
        probs: Probabilities of the indices offset, offset + 1, ... (zeros allowed).
        infinity_mass: Probability of the loss +inf, in [0, 1).
    """

    step: float
    offset: int
    probs: tuple[float, ...]
    infinity_mass: float = 0.0


def _trim(offset: int, probs: np.ndarray) -> tuple[int, np.ndarray, float]:
    """Drop the outer atoms below ``ATOM_FLOOR``, pessimistically (see the module doc).

    Returns:
        (offset, probs, mass moved to +inf). The low-index (low-loss) tail is added to the
        lowest kept atom; interior atoms are kept whatever their size.
    """
    keep = np.flatnonzero(probs >= ATOM_FLOOR)
    if keep.size == 0:  # nothing above the floor (never for a proper distribution)
        keep = np.array([int(np.argmax(probs))])
    first, last = int(keep[0]), int(keep[-1])
    kept = probs[first:last + 1].copy()
    kept[0] += float(probs[:first].sum())
    return offset + first, kept, float(probs[last + 1:].sum())


def _convolve(left: tuple[int, np.ndarray, float],
              right: tuple[int, np.ndarray, float]) -> tuple[int, np.ndarray, float]:
    """Composition of two lattice laws (offset, probs, +inf mass): product of polynomials."""
    offset, probs, to_infinity = _trim(left[0] + right[0], np.convolve(left[1], right[1]))
    # P[+inf] = P[either is +inf] = t1 + t2 - t1 t2, plus the high tail just trimmed
    infinity = left[2] + right[2] - left[2] * right[2] + to_infinity
    return offset, probs, infinity


def lattice_power(atoms: LatticeAtoms, count: int) -> tuple[int, np.ndarray, float]:
    """Law of the sum of ``count`` independent losses distributed as ``atoms``.

    Repeated squaring with direct convolutions (log2(count) squarings; the largest costs
    (support size)^2 products, the support being ~ 25 standard deviations of the composed
    loss once the 1e-30 tails are trimmed). Conditionally on no +inf, the composed law is the
    ``count``-th power of the conditional one-release law; the +inf mass of the releases is
    applied once at the end, 1 - (1 - delta)^count as in :func:`binomial_pld`.

    Args:
        atoms: One release.
        count: Number of releases (>= 1).

    Returns:
        (offset, probs, infinity_mass): the composed loss is (offset + i) * step w.p. probs[i],
        +inf w.p. infinity_mass (which includes the trimmed high tail).
    """
    lost, survive = _survival(atoms.infinity_mass, count)
    conditional = np.asarray(atoms.probs, dtype=np.float64) / (1.0 - atoms.infinity_mass)
    base = _trim(atoms.offset, conditional)
    offset, probs, trimmed = combine_power(base, count, _convolve)
    return offset, survive * probs, lost + survive * trimmed


def lattice_width(atoms: LatticeAtoms, count: int) -> float:
    """Rough number of lattice points of the trimmed ``count``-fold law (for cost estimates).

    At most count * (span of one release) + 1; and, the 1e-30 tails being ~12 standard
    deviations out for sums of many releases (central limit theorem), about
    24 sqrt(count) sd + span, with sd the standard deviation of one release's index.
    """
    probs = np.asarray(atoms.probs, dtype=np.float64)
    index = np.arange(probs.size)
    mass = float(probs.sum())
    mean = float(index @ probs) / mass
    sd = math.sqrt(float(((index - mean) ** 2) @ probs) / mass)
    span = probs.size - 1
    return float(min(count * span + 1, 24.0 * math.sqrt(count) * sd + span + 1))


@functools.lru_cache(maxsize=16)
def lattice_pld(atoms: LatticeAtoms, count: int,
                interval: float) -> _pld.PrivacyLossDistribution:
    """Pessimistic PLD of ``count`` releases of ``atoms``: exact power, discretised once.

    The composed lattice law (:func:`lattice_power`) is discretised once by connect-the-dots
    (:func:`finite_pld`), so epsilon is at most one grid step above the exact one (plus the
    effect of the < 1e-30 atoms moved up), with no FFT round-off.

    Args:
        atoms: One release.
        count: Number of releases (>= 1).
        interval: Grid step of the privacy-loss values.
    """
    offset, probs, infinity = lattice_power(atoms, count)
    index = np.flatnonzero(probs > 0.0)
    losses = (offset + index) * atoms.step
    return finite_pld(losses, probs[index], infinity, interval)
