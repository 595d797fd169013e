"""Building the PLD of one kind of release ("spec") and sizing its grid, for :mod:`.pld`.

A spec is a hashable tuple ("kind", parameters...) describing one release's pair of output
distributions (see :meth:`dpkd_audit.accountants.pld.PLDAccountant._specs` for the mapping from
events). This module turns a spec and a count into a pessimistic dp_accounting PLD (exact
binomial or lattice powers where the PLD is finite, repeated FFT squaring otherwise) and
estimates how many grid points that takes (:func:`_grid_width`), so that the accountant can
coarsen its grid instead of building a PLD of 10^8 points. The module docstring of
:mod:`.pld` states the accuracy and cites the sources.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Any

import numpy as np
from dp_accounting import dp_event as _dp
from dp_accounting.pld import privacy_loss_distribution as _pld
from scipy import special

from dpkd_audit.accountants.pld.exact import (
    LatticeAtoms,
    binomial_pld,
    lattice_pld,
    lattice_width,
)
from dpkd_audit.accountants.pld.fast_gaussian import gaussian_pld

_Spec = tuple  # a hashable description of one PLD: ("kind", parameters...)

# Gaussian PLDs drop noise mass below e^-50 (~2e-22) into the +inf atom (pessimistic).
_LOG_MASS_TRUNCATION = -50.0


def _self_compose(single: _pld.PrivacyLossDistribution,
                  count: int) -> _pld.PrivacyLossDistribution:
    """``count``-fold composition by repeated squaring (log2(count) FFT convolutions).

    dp_accounting's ``compose`` (FFT convolution; its tail truncation moves at most 1e-15 per
    step to +inf or onto the lowest loss, both pessimistic) applied by repeated squaring is one
    to three orders of magnitude more accurate in the tails than its one-shot FFT power
    ``self_compose``, at about twice the cost. Measured on 3000-fold binary RR against the exact
    binomial: +4e-9 against +6e-7 at delta = 1e-6, +4e-5 against +5e-3 at delta = 1e-10.
    """
    result = None
    base = single
    while count:
        if count & 1:
            result = base if result is None else result.compose(base)
        count >>= 1
        if count:
            base = base.compose(base)
    return result


#: Largest dense grid one event's PLD may need (8 bytes a point: 400 MB).
_MAX_GRID_POINTS = 5e7


def _grid_points(spec: _Spec, interval: float) -> float:
    """Rough number of grid points of one event's PLD (losses spanned / interval).

    Laplace with scale b spans [-1/b, 1/b]; the discrete Laplace a * sensitivity on each side;
    a Gaussian mixture N(0, s^2) vs sum_i p_i N(c_i, s^2), truncated by dp_accounting at about
    10 s around its means, about +-(10 c/s + c^2/s^2) with c the largest sensitivity.
    Gaussians are not counted here: a history of Gaussians alone is answered from the exact
    curve, and mixed histories are size-checked when the composed PLD is built. Finite
    (randomized-response-like) PLDs are small by construction.
    """
    kind = spec[0]
    if kind in ("laplace", "poisson-laplace"):
        b = spec[1] if kind == "laplace" else spec[2]
        spread = b * interval  # a subnormal scale underflows this to 0: infinitely many points
        return 2.0 / spread if spread > 0 else math.inf
    if kind == "discrete-laplace":
        return 2.0 * spec[1] * spec[2] / interval
    if kind == "mixture-gaussian":
        ratio = max(spec[2]) / spec[1]
        return 2.0 * (10.0 * ratio + ratio * ratio) / interval
    return 0.0


def _lattice_atoms(spec: _Spec) -> LatticeAtoms | None:
    """One release of ``spec`` as a lattice PLD (every finite loss a multiple of one step).

    - ``binary-rr`` eps / ``approx-dp`` (eps, delta): losses +-eps with the binary-RR weights
      e^eps/(1 + e^eps), 1/(1 + e^eps) (times 1 - delta; +inf w.p. delta), KOV 2015, Thm 2.2.
    - ``randomized-response`` (p, k), REPLACE_ONE: the report equals the record w.p.
      keep = 1 - p + p/k and is any other bucket w.p. p/k. Under x vs x' the loss is
      +L = ln(keep / (p/k)) on report x (w.p. keep), -L on report x' (w.p. p/k) and 0 on the
      k - 2 other buckets (w.p. (k - 2) p/k): step L, indices -1, 0, +1.
    - ``discrete-laplace`` (a, s): step a, indices s - 2x for x = 0..s
      (:func:`_discrete_laplace_atoms`), for s up to 2048.

    Returns:
        The atoms, or None when ``spec`` has no finite lattice PLD.
    """
    kind = spec[0]
    if kind in ("binary-rr", "approx-dp"):
        eps = spec[1]
        delta = spec[2] if kind == "approx-dp" else 0.0
        survive = 1.0 - delta
        return LatticeAtoms(eps, -1, (survive * float(special.expit(-eps)), 0.0,
                                      survive * float(special.expit(eps))), delta)
    if kind == "randomized-response":
        p, k = spec[1], spec[2]
        other = p / k
        keep = 1.0 - p + other
        loss = math.log1p(k * (1.0 - p) / p)  # ln(keep / (p/k))
        return LatticeAtoms(loss, -1, (other, (k - 2) * other, keep))
    if kind == "discrete-laplace" and spec[2] <= _MAX_LATTICE_SENSITIVITY:
        return _discrete_laplace_atoms(spec[1], spec[2])
    return None


#: Discrete Laplace with a larger sensitivity (2 s + 1 atoms per release) is composed by FFT:
#: direct convolutions cost (support size)^2.
_MAX_LATTICE_SENSITIVITY = 2048


def _discrete_laplace_atoms(a: float, sensitivity: int) -> LatticeAtoms:
    """DLap(a) at 0 vs at s = ``sensitivity``: losses a(|x - s| - |x|) on the lattice a Z.

    With pmf e^(-a|x|) tanh(a/2) (normaliser: sum_x e^(-a|x|) = coth(a/2)), x ~ DLap(a) at 0
    has loss +a s for x <= 0 (probability 1/(1 + e^-a)), -a s for x >= s (probability
    e^(-a s)/(1 + e^-a)) and a (s - 2x) for 0 < x < s (probability e^(-a x) tanh(a/2)): index
    s - 2x of step a, for x = 0..s (the same PLD as dp_accounting's
    ``DiscreteLaplacePrivacyLoss``, Canonne-Kamath-Steinke 2020).
    """
    x = np.arange(sensitivity + 1)
    probs = np.exp(-a * x) * math.tanh(a / 2.0)
    probs[0] = float(special.expit(a))
    probs[-1] = float(special.expit(a)) * math.exp(-a * sensitivity)
    if sensitivity == 1:
        probs[-1] = float(special.expit(-a))  # no underflow for large a
    lattice = np.zeros(2 * sensitivity + 1)
    lattice[2 * sensitivity - 2 * x] = probs  # index s - 2x, offset -s
    return LatticeAtoms(a, -sensitivity, tuple(lattice.tolist()))


@functools.lru_cache(maxsize=64)
def _spec_pld(spec: _Spec, interval: float) -> _pld.PrivacyLossDistribution:
    """The PLD of one occurrence of ``spec``, cached (PLD objects are never mutated)."""
    return _build_spec_pld(spec, interval)


def _build_spec_pld(spec: _Spec, interval: float) -> _pld.PrivacyLossDistribution:
    """The PLD of one occurrence of ``spec``."""
    kind = spec[0]
    if kind in ("binary-rr", "approx-dp"):
        return _spec_power(spec, 1, interval)
    atoms = _lattice_atoms(spec)
    if atoms is not None:  # randomized response, discrete Laplace
        return lattice_pld(atoms, 1, interval)
    if kind == "laplace":
        return _pld.from_laplace_mechanism(
            spec[1], sensitivity=1, pessimistic_estimate=True,
            value_discretization_interval=interval, use_connect_dots=True)
    if kind == "gaussian":  # dp_accounting's PLD (q = 1: shift by 1), built vectorised
        # Less noise is less private (mu = 1/sigma GDP), so a huge sigma may be replaced by
        # _MAX_GAUSSIAN_PLD_NOISE: an upper bound whose loss (~1e-12 in epsilon) is far below
        # the grid, where sigma^2 would overflow (1e200) in dp_accounting's construction.
        return gaussian_pld(min(spec[1], _MAX_GAUSSIAN_PLD_NOISE), 1.0, interval,
                            _LOG_MASS_TRUNCATION)
    if kind == "discrete-laplace":  # sensitivity above _MAX_LATTICE_SENSITIVITY
        return _pld.from_discrete_laplace_mechanism(
            spec[1], sensitivity=spec[2], pessimistic_estimate=True,
            value_discretization_interval=interval, use_connect_dots=True)
    if kind == "discrete-gaussian":
        return _pld.from_discrete_gaussian_mechanism(
            spec[1], sensitivity=spec[2], pessimistic_estimate=True,
            value_discretization_interval=interval, use_connect_dots=True)
    if kind == "poisson-laplace":
        return _pld.from_laplace_mechanism(
            spec[2], sensitivity=1, pessimistic_estimate=True,
            value_discretization_interval=interval, sampling_prob=spec[1],
            use_connect_dots=True)
    if kind == "poisson-gaussian":
        return gaussian_pld(spec[2], spec[1], interval, _LOG_MASS_TRUNCATION)
    if kind == "mixture-gaussian":
        return _pld.from_mixture_gaussian_mechanism(
            spec[1], list(spec[2]), list(spec[3]), pessimistic_estimate=True,
            value_discretization_interval=interval,
            log_mass_truncation_bound=_LOG_MASS_TRUNCATION, use_connect_dots=True)
    raise AssertionError(f"unknown PLD spec {spec!r}")  # pragma: no cover - internal


#: Grid points a composed PLD may span before the grid step is enlarged (about 1 s of FFT
#: squaring on a 2-core machine); see :meth:`PLDAccountant.effective_interval`.
_TARGET_BINS = 2.0 ** 20


#: Range of subsampled-Gaussian noise multipliers built as subsampled PLDs (below: refused,
#: the construction takes minutes; above: dominated by the plain Gaussian).
_MIN_SUBSAMPLED_GAUSSIAN_NOISE = 0.01


_MAX_SUBSAMPLED_GAUSSIAN_NOISE = 1e6

#: Largest Gaussian noise multiplier built as a PLD; a larger one is built at this one (less
#: noise: an upper bound, see :func:`_build_spec_pld`).
_MAX_GAUSSIAN_PLD_NOISE = 1e6


#: Smallest merged Gaussian noise multiplier composed with other events (below it
#: dp_accounting's Gaussian PLD takes tens of seconds and gigabytes to build).
_MIN_MIXED_GAUSSIAN_NOISE = 5e-3


def _loss_span(spec: _Spec) -> float:
    """Span (largest minus smallest finite loss) of one occurrence of ``spec``.

    Gaussians: +-10 standard deviations of the loss N(1/(2 s^2), 1/s^2). Poisson-subsampled
    Gaussians: the loss log(1 + q (e^x - 1)) of the Gaussian loss x at its upper end (about
    the same truncation), which is the larger side.
    """
    kind = spec[0]
    if kind in ("binary-rr", "approx-dp", "randomized-response", "laplace",
                "discrete-laplace", "poisson-laplace"):
        return 2.0 * _max_loss(("binary-rr", spec[1]) if kind == "approx-dp" else spec)
    if kind == "gaussian":
        return 20.0 / spec[1]
    if kind == "poisson-gaussian":
        q, s = spec[1], spec[2]
        x = (10.0 * s + 0.5) / (s * s)
        return math.log1p(q * math.expm1(min(x, 700.0))) + max(0.0, x - 700.0) + 10.0 * q / s
    return 0.0


def _loss_std(spec: _Spec) -> float:
    """An upper estimate of the standard deviation of one occurrence's privacy loss.

    Bounded losses: half their span. Gaussian: 1/s. Poisson-subsampled Gaussian: the loss is
    about q (e^x - 1) for small q, whose variance under P is q^2 (e^(1/s^2) - 1) (the
    chi-square divergence of the Gaussian pair), doubled for safety; at most 1/s.
    """
    if spec[0] == "gaussian":
        return 1.0 / spec[1]
    if spec[0] == "poisson-gaussian":
        q, s = spec[1], spec[2]
        chi = q * math.sqrt(math.expm1(1.0 / (s * s))) if s > 0.04 else math.inf
        return min(1.0 / s, 2.0 * chi)
    return 0.5 * _loss_span(spec)


def _grid_width(spec: _Spec, count: int) -> float:
    """Loss range (in loss units) that building ``count`` occurrences of ``spec`` covers.

    The composed loss of n releases lies within n x span and, up to the 1e-15 mass the backend
    truncates at each convolution, within about 16 sqrt(n) standard deviations. dp_accounting's
    connect-the-dots construction of (subsampled) Gaussians costs 2.5-10 s and up to 1 GB per
    10^6 points (more for small noise), so their single-release span counts twice (held to
    ~5e5 points, while noise multipliers above ~0.4 keep the default 1e-4 grid).
    """
    span = _loss_span(spec)
    composed = span if count == 1 else min(count * span,
                                           16.0 * math.sqrt(count) * _loss_std(spec))
    weight = 2.0 if spec[0] in ("gaussian", "poisson-gaussian") else 1.0
    return max(weight * span, composed)


def _max_loss(spec: _Spec) -> float:
    """Largest finite privacy loss of one occurrence of ``spec``; inf if it is not pure DP.

    A k-fold composition of pure releases has delta(eps) = 0 exactly for eps >= the sum of
    their largest losses (and > 0 below it), so this sum is the exact epsilon at delta = 0.
    """
    kind = spec[0]
    if kind == "binary-rr":
        return spec[1]
    if kind == "randomized-response":
        p, k = spec[1], spec[2]
        return math.log1p(k * (1.0 - p) / p)
    if kind == "laplace":
        return 1.0 / spec[1]
    if kind == "discrete-laplace":
        return spec[1] * spec[2]
    if kind == "poisson-laplace":
        q, eps0 = spec[1], 1.0 / spec[2]
        # remove direction log(1 + q(e^eps0 - 1)), add direction -log(1 - q(1 - e^-eps0))
        return max(math.log1p(q * math.expm1(eps0)), -math.log1p(q * math.expm1(-eps0)))
    return math.inf


def _spec_power(spec: _Spec, count: int, interval: float) -> _pld.PrivacyLossDistribution:
    """PLD of ``count`` occurrences of ``spec``.

    Exact compositions discretised once where the PLD is finite: a binomial for the two-atom
    pairs (KOV 2015, Thm 3.3), a lattice power otherwise (randomized response, discrete
    Laplace; see :mod:`dpkd_audit.accountants.pld.exact`). Repeated FFT squaring for the
    other PLDs.
    """
    if spec[0] in ("binary-rr", "approx-dp"):
        return binomial_pld(spec[1], spec[2] if spec[0] == "approx-dp" else 0.0, count,
                            interval)
    atoms = _lattice_atoms(spec)
    if atoms is not None and _lattice_is_cheaper(atoms, count, interval):
        return lattice_pld(atoms, count, interval)
    if spec[0] == "gaussian":  # the merged Gaussian changes with every compose: not cached
        return _build_spec_pld(spec, interval)
    single = _spec_pld(spec, interval)
    return single if count == 1 else _self_compose(single, count)


#: Direct convolutions below this many products (~1 s) are always used.
_CHEAP_DIRECT_PRODUCTS = 2e9


def _lattice_is_cheaper(atoms: LatticeAtoms, count: int, interval: float) -> bool:
    """Whether the exact lattice power beats FFT squaring (rough cost model).

    Direct convolutions cost ~W^2 products (W: :func:`lattice_width`); repeated FFT
    squaring on the loss grid of G = count * (loss span) / interval points costs
    ~G log2(G) log2(count). Measured on a 2-core machine: ~1.5e9 products/s against ~6e8
    G log2 G units/s, i.e. equal times at W^2 = 2.5 G log2(G) log2(count). The exact path is
    kept up to 4 times that (it has no FFT round-off) and always below ~1 s. Example: 300-fold
    discrete Laplace (a = 1e-3, sensitivity 2000) takes 3.9 s by FFT against ~165 s direct.
    """
    products = lattice_width(atoms, count) ** 2
    if products <= _CHEAP_DIRECT_PRODUCTS:
        return True
    grid = count * (len(atoms.probs) - 1) * atoms.step / interval + 2.0
    return products <= 10.0 * grid * math.log2(grid) * math.log2(count + 1.0)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _hashable_mixture(event: _dp.MixtureOfGaussiansDpEvent) -> _dp.MixtureOfGaussiansDpEvent:
    """The same event with tuple fields (left as is if they are not sequences)."""
    try:
        return _dp.MixtureOfGaussiansDpEvent(event.standard_deviation,
                                             tuple(event.sensitivities),
                                             tuple(event.sampling_probs))
    except TypeError:
        return event  # refused with a clear message by _check_leaf
